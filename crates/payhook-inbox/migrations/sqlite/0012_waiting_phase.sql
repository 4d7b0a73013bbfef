-- The phase: the state with `running` filed under `pending` (both wait for
-- their end; `State::phase` in the code), computed by the database. The
-- indexes that ordered events by state order them by phase instead, and the
-- claim's index holds waiting events only, as on PostgreSQL, where a claim
-- then changes no indexed column. (SQLite updates the entries of an index
-- whose columns a statement changes either way.) `{running}` and
-- `{pending}` are the states' names, written in by the migration runner
-- from `State` (see dialect/migrations.rs).
ALTER TABLE payhook_inbox ADD COLUMN phase TEXT GENERATED ALWAYS AS (CASE WHEN state = {running} THEN {pending} ELSE state END) VIRTUAL;
CREATE INDEX IF NOT EXISTS payhook_inbox_waiting ON payhook_inbox (namespace, due_at, arrival) WHERE phase = {pending};
CREATE INDEX IF NOT EXISTS payhook_inbox_phase_received ON payhook_inbox (namespace, phase, received_at, arrival);
CREATE INDEX IF NOT EXISTS payhook_inbox_phase_done ON payhook_inbox (namespace, phase, done_at);
DROP INDEX IF EXISTS payhook_inbox_claim;
DROP INDEX IF EXISTS payhook_inbox_state_received;
DROP INDEX IF EXISTS payhook_inbox_done;
