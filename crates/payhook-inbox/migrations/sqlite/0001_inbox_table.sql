-- The inbox table and its indexes as first released. IF NOT EXISTS: an inbox
-- made before migrations were numbered is taken over as it is.
CREATE TABLE IF NOT EXISTS payhook_inbox (
    arrival INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace TEXT NOT NULL,
    event_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    intent_id TEXT,
    created BIGINT NOT NULL,
    body TEXT NOT NULL,
    received_at BIGINT NOT NULL,
    state TEXT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    due_at BIGINT NOT NULL,
    lease_token BIGINT,
    lease_until BIGINT,
    last_error TEXT,
    last_attempt_at BIGINT,
    done_at BIGINT,
    UNIQUE (namespace, event_id)
);

-- Claims read pending rows in (due_at, arrival) order straight from this
-- index and stop at their limit; the depth metric and `list` use its prefix.
CREATE INDEX IF NOT EXISTS payhook_inbox_claim ON payhook_inbox (namespace, state, due_at, arrival);

-- A prefix of the index above, so not needed beside it.
DROP INDEX IF EXISTS payhook_inbox_due;

CREATE INDEX IF NOT EXISTS payhook_inbox_intent ON payhook_inbox (namespace, intent_id, created, arrival);
