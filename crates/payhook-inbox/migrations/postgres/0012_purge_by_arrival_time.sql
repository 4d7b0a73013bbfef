-- The retention purge no longer needs an index of its own: a done event was
-- received before it was done, so the purge looks for old done events
-- through `payhook_inbox_state_received` (`received_at` before the cutoff,
-- then `done_at` checked on each). Every claim and done mark wrote a new
-- entry into the dropped index.
DROP INDEX IF EXISTS payhook_inbox_done;
