-- Each event's body in a table of its own, written once when the event is
-- stored and deleted with it. The events table's rows are updated two or
-- three times each (claimed, done, sometimes retried) and keep half of each
-- page free so that a claim rewrites its row in place (migration 13); a
-- ~1.5 KB body in that row put two rows on a page, and PostgreSQL moves no
-- value under 2 KB out of its row. Without the body a row is about 250
-- bytes: the half-empty pages cost little, and each update copies a small
-- row. The bodies table is only inserted into and deleted from, its pages
-- filled whole.
--
-- No row is moved: events stored before keep their body in their row (the
-- inbox reads the body from this table when it has one, else from the row)
-- until they are purged. Creating the table and its trigger takes the
-- events table's lock only for the trigger's creation, not for any rewrite.
CREATE TABLE IF NOT EXISTS payhook_inbox_bodies (
    arrival BIGINT PRIMARY KEY,
    body TEXT NOT NULL
);

-- A body goes with its event: one statement per statement deleting events
-- (the purge, bulk purges), over the rows it deleted.
CREATE OR REPLACE FUNCTION payhook_inbox_forget_bodies() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN DELETE FROM payhook_inbox_bodies b USING deleted_events d WHERE b.arrival = d.arrival; RETURN NULL; END $$;
DROP TRIGGER IF EXISTS payhook_inbox_forget_bodies ON payhook_inbox;
CREATE TRIGGER payhook_inbox_forget_bodies AFTER DELETE ON payhook_inbox REFERENCING OLD TABLE AS deleted_events FOR EACH STATEMENT EXECUTE FUNCTION payhook_inbox_forget_bodies();
