-- The attempts record (each ended attempt of an event, at most 50 per event)
-- and the indexes of the dashboard's newest-first pages.
CREATE TABLE IF NOT EXISTS payhook_inbox_attempts (
    arrival INTEGER NOT NULL,
    namespace TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    finished_at BIGINT NOT NULL,
    duration_ms BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    error TEXT,
    PRIMARY KEY (arrival, attempt)
);

-- The overview's activity chart reads attempts by the time they ended.
CREATE INDEX IF NOT EXISTS payhook_inbox_attempts_finished ON payhook_inbox_attempts (namespace, finished_at);

-- SQLite's foreign keys are off unless each connection turns them on, so a
-- trigger deletes an event's attempts with it.
CREATE TRIGGER IF NOT EXISTS payhook_inbox_attempts_gc AFTER DELETE ON payhook_inbox BEGIN DELETE FROM payhook_inbox_attempts WHERE arrival = OLD.arrival; END;

-- The events page, newest first without a state filter (and the chart's
-- deliveries received per interval).
CREATE INDEX IF NOT EXISTS payhook_inbox_received ON payhook_inbox (namespace, received_at, arrival);

-- The events page filtered by state, newest first, and the oldest pending
-- event of the overview (the first entry of its range).
CREATE INDEX IF NOT EXISTS payhook_inbox_state_received ON payhook_inbox (namespace, state, received_at, arrival);
