-- The overview's activity chart, counted as it happens: per namespace and
-- 10-second bucket (`received_at / 10000`, Unix time in tens of seconds),
-- the events stored, the duplicate deliveries acknowledged, and the
-- attempts that ended done or failed. The chart reads the buckets of the
-- span it draws (360 an hour, a few rows each) instead of every event and
-- attempt of that span, so its cost depends neither on the history kept
-- nor on the traffic. Buckets older than the retention are forgotten by the
-- retention purge.
--
-- Statement-level triggers add what each statement inserted, sharded by the
-- writing connection (`pg_backend_pid() % 8`) so that concurrent writers
-- rarely wait for each other's row lock; each adds to its rows in key
-- order, so two that share a shard cannot deadlock. Each kind has shards of
-- its own (events 0-7, duplicates 8-15, attempts 16-23), so no row is
-- written by two kinds of statement: a delivery's insert takes its bucket
-- and then the tally's row, a done mark takes the tally's row and then its
-- attempt's bucket, and with shared rows the two could wait for each other
-- in a cycle. The last hour before the upgrade is counted by version 19,
-- outside these triggers' lock.
CREATE TABLE IF NOT EXISTS payhook_inbox_activity (
    namespace TEXT NOT NULL,
    bucket BIGINT NOT NULL,
    shard INTEGER NOT NULL,
    received BIGINT NOT NULL DEFAULT 0,
    duplicates BIGINT NOT NULL DEFAULT 0,
    handled BIGINT NOT NULL DEFAULT 0,
    failed BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, bucket, shard)
);
CREATE OR REPLACE FUNCTION payhook_inbox_activity_received() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO payhook_inbox_activity AS a (namespace, bucket, shard, received) SELECT namespace, received_at / 10000, pg_backend_pid() % 8, COUNT(*) FROM inserted_events GROUP BY namespace, received_at / 10000 ORDER BY 1, 2 ON CONFLICT (namespace, bucket, shard) DO UPDATE SET received = a.received + excluded.received; RETURN NULL; END $$;
CREATE OR REPLACE FUNCTION payhook_inbox_activity_duplicates() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO payhook_inbox_activity AS a (namespace, bucket, shard, duplicates) SELECT namespace, received_at / 10000, 8 + pg_backend_pid() % 8, COUNT(*) FROM inserted_duplicates GROUP BY namespace, received_at / 10000 ORDER BY 1, 2 ON CONFLICT (namespace, bucket, shard) DO UPDATE SET duplicates = a.duplicates + excluded.duplicates; RETURN NULL; END $$;
CREATE OR REPLACE FUNCTION payhook_inbox_activity_attempts() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO payhook_inbox_activity AS a (namespace, bucket, shard, handled, failed) SELECT namespace, finished_at / 10000, 16 + pg_backend_pid() % 8, COUNT(*) FILTER (WHERE outcome = {attempt_done}), COUNT(*) FILTER (WHERE outcome <> {attempt_done}) FROM inserted_attempts GROUP BY namespace, finished_at / 10000 ORDER BY 1, 2 ON CONFLICT (namespace, bucket, shard) DO UPDATE SET handled = a.handled + excluded.handled, failed = a.failed + excluded.failed; RETURN NULL; END $$;
DROP TRIGGER IF EXISTS payhook_inbox_activity_received ON payhook_inbox;
CREATE TRIGGER payhook_inbox_activity_received AFTER INSERT ON payhook_inbox REFERENCING NEW TABLE AS inserted_events FOR EACH STATEMENT EXECUTE FUNCTION payhook_inbox_activity_received();
DROP TRIGGER IF EXISTS payhook_inbox_activity_duplicates ON payhook_inbox_duplicates;
CREATE TRIGGER payhook_inbox_activity_duplicates AFTER INSERT ON payhook_inbox_duplicates REFERENCING NEW TABLE AS inserted_duplicates FOR EACH STATEMENT EXECUTE FUNCTION payhook_inbox_activity_duplicates();
DROP TRIGGER IF EXISTS payhook_inbox_activity_attempts ON payhook_inbox_attempts;
CREATE TRIGGER payhook_inbox_activity_attempts AFTER INSERT ON payhook_inbox_attempts REFERENCING NEW TABLE AS inserted_attempts FOR EACH STATEMENT EXECUTE FUNCTION payhook_inbox_activity_attempts();
