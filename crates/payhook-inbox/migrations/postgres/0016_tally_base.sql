-- The base of the tally (version 15): the events stored before its
-- triggers existed, counted in a transaction of its own so that the
-- triggers' lock on the table (version 15, a few milliseconds) is not held
-- while every stored event is read (about half a second a million events;
-- the intake goes on meanwhile). One statement, so one snapshot: it counts
-- the events its snapshot sees and takes away what the triggers added for
-- the same writes (the ones committed before it); a write it does not see
-- adds its own change when it commits.
INSERT INTO payhook_inbox_tally AS t (namespace, phase, shard, n)
SELECT COALESCE(stored.namespace, tallied.namespace), COALESCE(stored.phase, tallied.phase), -1,
       COALESCE(stored.n, 0) - COALESCE(tallied.n, 0)
FROM (SELECT namespace, phase, COUNT(*) AS n FROM payhook_inbox GROUP BY namespace, phase) AS stored
FULL JOIN (SELECT namespace, phase, SUM(n) AS n FROM payhook_inbox_tally GROUP BY namespace, phase) AS tallied
  ON tallied.namespace = stored.namespace AND tallied.phase = stored.phase
ON CONFLICT (namespace, phase, shard) DO UPDATE SET n = t.n + excluded.n;
