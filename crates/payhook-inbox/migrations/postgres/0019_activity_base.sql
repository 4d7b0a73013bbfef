-- The base of the activity chart's buckets (version 18): the last hour's
-- events, duplicate deliveries and attempts written before its triggers
-- existed, counted in a transaction of its own so that the triggers' lock
-- on the tables (version 18, a few milliseconds) is not held while an
-- hour of rows is read; the intake goes on meanwhile. One statement per
-- kind, so one snapshot each: it counts, per whole bucket of the last
-- hour, the rows its snapshot sees and takes away what the triggers added
-- for the same writes (the ones committed before it); a write it does not
-- see adds its own count when it commits.
INSERT INTO payhook_inbox_activity AS a (namespace, bucket, shard, received)
SELECT stored.namespace, stored.bucket, -1, stored.n - COALESCE(counted.n, 0)
FROM (SELECT namespace, received_at / 10000 AS bucket, COUNT(*) AS n FROM payhook_inbox
      WHERE received_at / 10000 >= ((EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT - 3600000) / 10000
      GROUP BY namespace, received_at / 10000) AS stored
LEFT JOIN (SELECT namespace, bucket, SUM(received) AS n FROM payhook_inbox_activity
           WHERE shard <> -1 GROUP BY namespace, bucket) AS counted
  ON counted.namespace = stored.namespace AND counted.bucket = stored.bucket
WHERE stored.n <> COALESCE(counted.n, 0)
ON CONFLICT (namespace, bucket, shard) DO UPDATE SET received = a.received + excluded.received;
INSERT INTO payhook_inbox_activity AS a (namespace, bucket, shard, duplicates)
SELECT stored.namespace, stored.bucket, -1, stored.n - COALESCE(counted.n, 0)
FROM (SELECT namespace, received_at / 10000 AS bucket, COUNT(*) AS n FROM payhook_inbox_duplicates
      WHERE received_at / 10000 >= ((EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT - 3600000) / 10000
      GROUP BY namespace, received_at / 10000) AS stored
LEFT JOIN (SELECT namespace, bucket, SUM(duplicates) AS n FROM payhook_inbox_activity
           WHERE shard <> -1 GROUP BY namespace, bucket) AS counted
  ON counted.namespace = stored.namespace AND counted.bucket = stored.bucket
WHERE stored.n <> COALESCE(counted.n, 0)
ON CONFLICT (namespace, bucket, shard) DO UPDATE SET duplicates = a.duplicates + excluded.duplicates;
INSERT INTO payhook_inbox_activity AS a (namespace, bucket, shard, handled, failed)
SELECT stored.namespace, stored.bucket, -1, stored.handled - COALESCE(counted.handled, 0),
       stored.failed - COALESCE(counted.failed, 0)
FROM (SELECT namespace, finished_at / 10000 AS bucket, COUNT(*) FILTER (WHERE outcome = {attempt_done}) AS handled,
             COUNT(*) FILTER (WHERE outcome <> {attempt_done}) AS failed
      FROM payhook_inbox_attempts
      WHERE finished_at / 10000 >= ((EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT - 3600000) / 10000
      GROUP BY namespace, finished_at / 10000) AS stored
LEFT JOIN (SELECT namespace, bucket, SUM(handled) AS handled, SUM(failed) AS failed FROM payhook_inbox_activity
           WHERE shard <> -1 GROUP BY namespace, bucket) AS counted
  ON counted.namespace = stored.namespace AND counted.bucket = stored.bucket
WHERE stored.handled <> COALESCE(counted.handled, 0) OR stored.failed <> COALESCE(counted.failed, 0)
ON CONFLICT (namespace, bucket, shard) DO UPDATE SET handled = a.handled + excluded.handled, failed = a.failed + excluded.failed;
