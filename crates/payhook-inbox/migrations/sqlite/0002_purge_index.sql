-- The retention purge finds old done rows through this index. (The migration
-- also clears done events' last_error, with the state bound: see
-- dialect/migrations.rs.)
CREATE INDEX IF NOT EXISTS payhook_inbox_done ON payhook_inbox (namespace, state, done_at);
