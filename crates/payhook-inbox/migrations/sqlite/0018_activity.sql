-- The overview's activity chart, counted as it happens: per namespace and
-- 10-second bucket (`received_at / 10000`, Unix time in tens of seconds),
-- the events stored, the duplicate deliveries acknowledged, and the
-- attempts that ended done or failed. The chart reads the buckets of the
-- span it draws (360 an hour) instead of every event and attempt of that
-- span, so its cost depends neither on the history kept nor on the
-- traffic. Buckets older than the retention are forgotten by the retention
-- purge. Row triggers add each insert to its bucket (one writer at a time:
-- no shards).
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
CREATE TRIGGER IF NOT EXISTS payhook_inbox_activity_received AFTER INSERT ON payhook_inbox BEGIN INSERT INTO payhook_inbox_activity (namespace, bucket, shard, received) VALUES (NEW.namespace, NEW.received_at / 10000, 0, 1) ON CONFLICT (namespace, bucket, shard) DO UPDATE SET received = received + 1; END;
CREATE TRIGGER IF NOT EXISTS payhook_inbox_activity_duplicates AFTER INSERT ON payhook_inbox_duplicates BEGIN INSERT INTO payhook_inbox_activity (namespace, bucket, shard, duplicates) VALUES (NEW.namespace, NEW.received_at / 10000, 0, 1) ON CONFLICT (namespace, bucket, shard) DO UPDATE SET duplicates = duplicates + 1; END;
CREATE TRIGGER IF NOT EXISTS payhook_inbox_activity_attempts AFTER INSERT ON payhook_inbox_attempts BEGIN INSERT INTO payhook_inbox_activity (namespace, bucket, shard, handled, failed) VALUES (NEW.namespace, NEW.finished_at / 10000, 0, NEW.outcome = {attempt_done}, NEW.outcome <> {attempt_done}) ON CONFLICT (namespace, bucket, shard) DO UPDATE SET handled = handled + excluded.handled, failed = failed + excluded.failed; END;
-- The last hour before the upgrade, counted from the rows themselves (one
-- writer: no write comes between the triggers and this count).
INSERT INTO payhook_inbox_activity (namespace, bucket, shard, received)
SELECT namespace, received_at / 10000, -1, COUNT(*) FROM payhook_inbox
WHERE received_at >= CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - 3600000
GROUP BY namespace, received_at / 10000;
INSERT INTO payhook_inbox_activity (namespace, bucket, shard, duplicates)
SELECT namespace, received_at / 10000, -1, COUNT(*) FROM payhook_inbox_duplicates
WHERE received_at >= CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - 3600000
GROUP BY namespace, received_at / 10000
ON CONFLICT (namespace, bucket, shard) DO UPDATE SET duplicates = duplicates + excluded.duplicates;
INSERT INTO payhook_inbox_activity (namespace, bucket, shard, handled, failed)
SELECT namespace, finished_at / 10000, -1, SUM(outcome = {attempt_done}), SUM(outcome <> {attempt_done})
FROM payhook_inbox_attempts
WHERE finished_at >= CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - 3600000
GROUP BY namespace, finished_at / 10000
ON CONFLICT (namespace, bucket, shard) DO UPDATE SET handled = handled + excluded.handled, failed = failed + excluded.failed;
