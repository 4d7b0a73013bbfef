-- The count of each namespace's events by phase, kept by the database as the
-- events change, so that the overview (`Admin::stats`, `payhook inbox
-- stats`) reads a few rows instead of counting every event the inbox keeps
-- for its retention. Counted here from the events already stored, then kept
-- by row triggers; the one writer needs no shards (`shard` is 0; PostgreSQL
-- shards by connection, see 0015 under postgres/). A claim, a renewal or a
-- requeue changes no phase and writes nothing here. The count runs under
-- the file's write lock: about half a second a million events.
CREATE TABLE IF NOT EXISTS payhook_inbox_tally (
    namespace TEXT NOT NULL,
    phase TEXT NOT NULL,
    shard INTEGER NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (namespace, phase, shard)
);
INSERT INTO payhook_inbox_tally (namespace, phase, shard, n) SELECT namespace, phase, 0, COUNT(*) FROM payhook_inbox GROUP BY namespace, phase;
CREATE TRIGGER IF NOT EXISTS payhook_inbox_tally_inserted AFTER INSERT ON payhook_inbox BEGIN INSERT INTO payhook_inbox_tally (namespace, phase, shard, n) VALUES (NEW.namespace, NEW.phase, 0, 1) ON CONFLICT (namespace, phase, shard) DO UPDATE SET n = n + 1; END;
CREATE TRIGGER IF NOT EXISTS payhook_inbox_tally_updated AFTER UPDATE OF state ON payhook_inbox WHEN OLD.phase IS NOT NEW.phase BEGIN INSERT INTO payhook_inbox_tally (namespace, phase, shard, n) VALUES (OLD.namespace, OLD.phase, 0, -1) ON CONFLICT (namespace, phase, shard) DO UPDATE SET n = n - 1; INSERT INTO payhook_inbox_tally (namespace, phase, shard, n) VALUES (NEW.namespace, NEW.phase, 0, 1) ON CONFLICT (namespace, phase, shard) DO UPDATE SET n = n + 1; END;
CREATE TRIGGER IF NOT EXISTS payhook_inbox_tally_deleted AFTER DELETE ON payhook_inbox BEGIN INSERT INTO payhook_inbox_tally (namespace, phase, shard, n) VALUES (OLD.namespace, OLD.phase, 0, -1) ON CONFLICT (namespace, phase, shard) DO UPDATE SET n = n - 1; END;
