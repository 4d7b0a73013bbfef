-- When a delivery arrived for an event the reconciler had stored from the
-- service's events list (`source` not NULL): NULL until then, and for every
-- delivered event. Written once, by the intake's duplicate path; read by the
-- operator's tools ("reconciled at T, delivered at T2") and the overview's
-- count of recovered events (reconciled and never delivered).
ALTER TABLE payhook_inbox ADD COLUMN delivered_at BIGINT;

-- Events the inbox was offered and could not take: a listed event that does
-- not parse as a delivery's body must, or is longer than a delivery may be,
-- or cannot be stored (too long an id, a NUL). One row per event (its id, or
-- when none can be read, its reason), counted each time it is seen again;
-- rows older than the retention are forgotten when the next is recorded, and
-- at most a bounded number are kept per namespace, so a list of bad events
-- cannot fill the database.
CREATE TABLE IF NOT EXISTS payhook_inbox_refused (
    namespace TEXT NOT NULL,
    refused_key TEXT NOT NULL,
    event_id TEXT,
    source TEXT NOT NULL,
    reason TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    first_at BIGINT NOT NULL,
    last_at BIGINT NOT NULL,
    times BIGINT NOT NULL,
    PRIMARY KEY (namespace, refused_key)
);

CREATE INDEX IF NOT EXISTS payhook_inbox_refused_last ON payhook_inbox_refused (namespace, last_at);
