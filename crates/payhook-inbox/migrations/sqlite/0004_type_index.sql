-- The events page (and `payhook inbox list`) filtered by type, newest first:
-- without it the filter reads every event of the namespace.
CREATE INDEX IF NOT EXISTS payhook_inbox_type_received ON payhook_inbox (namespace, event_type, received_at, arrival);
