-- The event types an operator paused, per namespace: their events are stored
-- and acknowledged but not claimed until the type is resumed. A table, not a
-- setting, so that a pause survives restarts and every replica's claim sees
-- it. The claim looks a type up by this primary key.
CREATE TABLE IF NOT EXISTS payhook_inbox_paused (
    namespace TEXT NOT NULL,
    event_type TEXT NOT NULL,
    paused_at BIGINT NOT NULL,
    PRIMARY KEY (namespace, event_type)
);
