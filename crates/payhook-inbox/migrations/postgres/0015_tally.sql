-- The count of each namespace's events by phase, kept by the database as the
-- events change, so that the overview (`Admin::stats`, `payhook inbox
-- stats`) reads a few rows instead of counting every event the inbox keeps
-- for its retention (half a second at a million stored events, and growing).
--
-- Three statement-level triggers, one per kind of write, add what each
-- statement changed, by namespace and phase, to a row of this table; a
-- claim, a renewal or a requeue changes no phase and writes nothing here.
-- The rows are sharded by the writing connection (`pg_backend_pid() % 64`)
-- so that concurrent writers rarely wait for each other's row lock; a
-- statement adds to its rows in key order, so two that share a shard cannot
-- deadlock. A namespace's count of a phase is the sum of its shards. Shard
-- -1 is the base version 16 counts from the events already stored.
CREATE TABLE IF NOT EXISTS payhook_inbox_tally (
    namespace TEXT NOT NULL,
    phase TEXT NOT NULL,
    shard INTEGER NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (namespace, phase, shard)
);
CREATE OR REPLACE FUNCTION payhook_inbox_tally_inserted() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO payhook_inbox_tally AS t (namespace, phase, shard, n) SELECT namespace, phase, pg_backend_pid() % 64, COUNT(*) FROM inserted_events GROUP BY namespace, phase ORDER BY namespace, phase ON CONFLICT (namespace, phase, shard) DO UPDATE SET n = t.n + excluded.n; RETURN NULL; END $$;
CREATE OR REPLACE FUNCTION payhook_inbox_tally_updated() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO payhook_inbox_tally AS t (namespace, phase, shard, n) SELECT namespace, phase, pg_backend_pid() % 64, SUM(n) FROM (SELECT namespace, phase, -1 AS n FROM old_events UNION ALL SELECT namespace, phase, 1 AS n FROM new_events) AS changed GROUP BY namespace, phase HAVING SUM(n) <> 0 ORDER BY namespace, phase ON CONFLICT (namespace, phase, shard) DO UPDATE SET n = t.n + excluded.n; RETURN NULL; END $$;
CREATE OR REPLACE FUNCTION payhook_inbox_tally_deleted() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO payhook_inbox_tally AS t (namespace, phase, shard, n) SELECT namespace, phase, pg_backend_pid() % 64, -COUNT(*) FROM deleted_events GROUP BY namespace, phase ORDER BY namespace, phase ON CONFLICT (namespace, phase, shard) DO UPDATE SET n = t.n + excluded.n; RETURN NULL; END $$;
DROP TRIGGER IF EXISTS payhook_inbox_tally_inserted ON payhook_inbox;
CREATE TRIGGER payhook_inbox_tally_inserted AFTER INSERT ON payhook_inbox REFERENCING NEW TABLE AS inserted_events FOR EACH STATEMENT EXECUTE FUNCTION payhook_inbox_tally_inserted();
DROP TRIGGER IF EXISTS payhook_inbox_tally_updated ON payhook_inbox;
CREATE TRIGGER payhook_inbox_tally_updated AFTER UPDATE ON payhook_inbox REFERENCING OLD TABLE AS old_events NEW TABLE AS new_events FOR EACH STATEMENT EXECUTE FUNCTION payhook_inbox_tally_updated();
DROP TRIGGER IF EXISTS payhook_inbox_tally_deleted ON payhook_inbox;
CREATE TRIGGER payhook_inbox_tally_deleted AFTER DELETE ON payhook_inbox REFERENCING OLD TABLE AS deleted_events FOR EACH STATEMENT EXECUTE FUNCTION payhook_inbox_tally_deleted();
