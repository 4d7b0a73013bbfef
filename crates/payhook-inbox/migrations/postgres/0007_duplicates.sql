-- When each duplicate delivery (an event already stored) was acknowledged,
-- so the overview counts deliveries apart from first deliveries. Written
-- after the reply; kept a day.
CREATE TABLE IF NOT EXISTS payhook_inbox_duplicates (
    namespace TEXT NOT NULL,
    event_id TEXT NOT NULL,
    received_at BIGINT NOT NULL
);

CREATE INDEX IF NOT EXISTS payhook_inbox_duplicates_received ON payhook_inbox_duplicates (namespace, received_at);
