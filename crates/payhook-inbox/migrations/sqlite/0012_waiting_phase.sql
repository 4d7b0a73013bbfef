-- The phase: the state with `running` filed under `pending` (both wait for
-- their end; `State::phase` in the code), computed from `state` when read.
-- On PostgreSQL the indexes order events by it, so that a claim changes no
-- indexed column; SQLite has no such updates to save (it rewrites a changed
-- row and the entries of the indexes whose columns changed) and cannot read
-- a virtual column from an index alone, so its indexes stay on `state`, and
-- the column is here so that every statement reads the same on both.
-- `{running}` and `{pending}` are the states' names, written in by the
-- migration runner from `State` (see dialect/migrations.rs).
ALTER TABLE payhook_inbox ADD COLUMN phase TEXT GENERATED ALWAYS AS (CASE WHEN state = {running} THEN {pending} ELSE state END) VIRTUAL;
