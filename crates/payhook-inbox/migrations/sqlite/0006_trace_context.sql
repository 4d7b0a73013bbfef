-- The W3C traceparent of the delivery that stored the event (feature `otel`),
-- so that each attempt's span joins the delivery's trace; NULL without it.
ALTER TABLE payhook_inbox ADD COLUMN trace_context TEXT;
