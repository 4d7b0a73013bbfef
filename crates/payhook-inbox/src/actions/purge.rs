//! The purge of done events, paced: the retention purge the workers run
//! beside their claims and [`Admin::purge_done_before`](crate::admin::Admin::purge_done_before)
//! both delete in bounded batches ([`purge_batch`] rows each, through
//! [`Operations::purge`]) and rest after each batch as their [`Pace`] says,
//! so a purge that catches up on a day of history takes a share of the
//! database and leaves the rest to deliveries and claims: the retention
//! purge a hundredth, an operator's purge a fifth.

use std::time::{Duration, Instant};

use crate::actions::operations::Operations;
use crate::database::dialect::Dialect;
use crate::database::Database;

/// Rows deleted per purge statement on `dialect`: each statement is short
/// whatever the backlog. On SQLite a statement holds the file's one write
/// lock, which the intake waits for, and deleting a row also deletes its
/// index entries (a page written for each index keyed by a random value:
/// the event id's, the payment intent's), its attempts and its count in
/// the tally: about 30 µs a row with a million stored, whatever the batch's
/// size. So a batch is 25 rows, under a millisecond of lock, which an
/// acknowledgement that meets it hardly notices. PostgreSQL's deletes hold
/// no lock the intake waits for.
pub(crate) fn purge_batch(dialect: Dialect) -> i64 {
    match dialect {
        Dialect::Sqlite => 25,
        Dialect::Postgres => 1000,
    }
}

/// How much of the database a paced action takes: after each batch it
/// rests a multiple of the time that batch took, so deliveries and workers
/// have the database the rest of the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pace {
    /// About a hundredth of the time: a rest of 99 times each batch's time,
    /// between 2 milliseconds and 2 seconds. The retention purge's pace:
    /// few acknowledgements arriving while it catches up on a day of
    /// history meet one of its batches (their p99 1.0 to 1.3 times idle on
    /// PostgreSQL, 1.2 on SQLite, BENCHMARKS.md "Inbox section 16"), and a
    /// day at 5 events a second (430 000 events) still goes in about ten
    /// minutes (half an hour on SQLite, whose rows cost more each to delete).
    Background,
    /// About a fifth of the time: a rest of four times each batch's time,
    /// between 2 and 300 milliseconds. The pace of
    /// [`Admin::purge_done_before`](crate::admin::Admin::purge_done_before)
    /// and of the bulk actions, which an operator waits for: 25 times
    /// faster than [`Background`](Self::Background), but the
    /// acknowledgements that meet a batch are slowed (their p99 two to three
    /// times idle while a day is purged).
    Operator,
}

impl Pace {
    /// The rest after a batch that took `took`.
    pub(crate) fn rest_after(self, took: Duration) -> Duration {
        let (factor, longest) = match self {
            Self::Background => (99, Duration::from_secs(2)),
            Self::Operator => (4, Duration::from_millis(300)),
        };
        took.saturating_mul(factor).clamp(MIN_REST, longest)
    }
}

/// The shortest rest between two batches: a batch of a few hundred
/// microseconds still leaves the writer free for a delivery's commit or
/// two. (The longest, a pace's bound, keeps a batch held up by a slow or
/// frozen database, its time including a wait for another process's lock,
/// from idling the action long once the database is back.)
const MIN_REST: Duration = Duration::from_millis(2);

/// How often a rest checks whether its action was asked to stop, so that
/// the workers stop within this of being asked even in a 2-second rest.
const STOP_CHECK: Duration = Duration::from_millis(50);

/// What a purge did ([`Admin::purge_done_before`](crate::admin::Admin::purge_done_before)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PurgeReport {
    /// Events deleted.
    pub events: u64,
    /// Statements run: each deletes at most a batch (1 000 rows on
    /// PostgreSQL, 25 on SQLite), its own short transaction.
    pub batches: u64,
    /// The time spent in those statements, each from when it had this
    /// process's turn to write on SQLite (the wait for that turn, behind the
    /// deliveries, is not counted; a wait for another process's lock is);
    /// the purge rested between them as its [`Pace`] says.
    pub busy: Duration,
}

/// Where a purge goes on from: the `done_at` its last batch reached. Each
/// batch takes the oldest done events from there, so none steps again over
/// the index entries of the events purged before it, which stay in the
/// index, dead, until vacuum runs (at a tenth of a large table, millions).
/// A fresh cursor starts at the namespace's oldest done event; each call of
/// [`purge_paced`] starts [`MARGIN_MS`] before where the last one ended, so
/// an event marked done with a slightly older time than the ones purged
/// already (a replica whose clock is behind) is purged all the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PurgeCursor {
    from: i64,
}

impl PurgeCursor {
    /// From the namespace's oldest done event.
    pub(crate) const START: Self = Self { from: i64::MIN };
}

/// How far before where the last purge ended the next one starts, in
/// milliseconds of `done_at`: an hour, far beyond any clock difference
/// between replicas; it steps over an hour of purged events' dead entries
/// (18 000 at 5 events a second), not the retention's.
pub(crate) const MARGIN_MS: i64 = 3_600_000;

/// Deletes `namespace`'s done events marked done before `before` (Unix ms)
/// in batches of [`purge_batch`] rows, the oldest first from `cursor` on
/// (which it moves along), resting after each batch as `pace` says, until a
/// batch finds fewer rows than it may take or `stop` says so (checked
/// before each batch and through each rest).
///
/// # Errors
/// The first batch's database error; the batches before it stay deleted.
pub(crate) async fn purge_paced<DB: Operations>(
    db: &Database<DB>,
    namespace: &str,
    before: i64,
    pace: Pace,
    cursor: &mut PurgeCursor,
    stop: impl Fn() -> bool,
) -> Result<PurgeReport, sqlx::Error> {
    let batch = purge_batch(db.dialect);
    let full = u64::try_from(batch).unwrap_or(u64::MAX);
    let mut purged = PurgeReport::default();
    // Each batch goes on from the latest `done_at` of the one before (they
    // take the oldest first); the first from a margin before the cursor.
    let mut from = cursor.from.saturating_sub(MARGIN_MS);
    while !stop() {
        // Timed from when the statement has this process's write turn
        // (SQLite): the wait for it, behind deliveries, is no database work.
        let (deleted, reached, took) = db
            .write(async {
                let started = Instant::now();
                let (deleted, reached) = DB::purge(db, namespace, from, before, batch).await?;
                Ok((deleted, reached, started.elapsed()))
            })
            .await?;
        if let Some(reached) = reached {
            from = reached;
            cursor.from = cursor.from.max(reached);
        }
        purged.events += deleted;
        purged.busy += took;
        purged.batches += 1;
        if deleted < full {
            break;
        }
        // SQLite: the WAL this batch wrote is copied back now, in this task
        // and without the write lock (`PASSIVE`). A purge fills SQLite's
        // automatic checkpoint's 1 000 pages within a few batches, and the
        // commit that crosses it copies them: an acknowledgement's commit
        // would wait tens of milliseconds for it.
        let _ = db.bounded(DB::checkpoint(db)).await;
        let rest_until = tokio::time::Instant::now() + pace.rest_after(took);
        while !stop() && tokio::time::Instant::now() < rest_until {
            tokio::time::sleep_until(rest_until.min(tokio::time::Instant::now() + STOP_CHECK)).await;
        }
    }
    Ok(purged)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A purge goes on from where the last one ended, less an hour: an event
    /// marked done half an hour before the latest purged one is purged by
    /// the next call, one marked two hours before is left to a fresh cursor
    /// (the index entries of the purged events are not stepped over again).
    #[tokio::test]
    async fn postgres_a_purge_goes_on_from_where_the_last_one_ended() {
        use payhook_test_support::{postgres_url, unique};
        let receiver = payhook_core::Receiver::builder()
            .secret("whsec_cursor")
            .build()
            .unwrap();
        let inbox = crate::Inbox::builder(receiver)
            .namespace(unique("purge_cursor"))
            .connect(&postgres_url())
            .await
            .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"));
        let db = inbox.inner.db.clone();
        let namespace = inbox.namespace().to_owned();
        let start = 1_700_000_000_000_i64;
        let insert = |ids: std::ops::Range<i64>, done_at: i64, step: i64| {
            let db = db.clone();
            let namespace = namespace.clone();
            async move {
                sqlx::query(
                    "INSERT INTO payhook_inbox (namespace, event_id, event_type, created, body, received_at, \
                     state, attempts, due_at, done_at) \
                     SELECT $1, 'evt_' || g, 'payment_intent.succeeded', 1, '{}', $2, 'done', 1, $2, $2 + (g - $3) * $4 \
                     FROM generate_series($3, $5) AS g",
                )
                .bind(&namespace)
                .bind(done_at)
                .bind(ids.start)
                .bind(step)
                .bind(ids.end - 1)
                .execute(&db.pool)
                .await
                .unwrap();
            }
        };
        let left = || async {
            let ids: Vec<String> = sqlx::query_scalar(
                "SELECT event_id FROM payhook_inbox WHERE namespace = $1 ORDER BY event_id",
            )
            .bind(&namespace)
            .fetch_all(&db.pool)
            .await
            .unwrap();
            ids
        };
        // 2 500 events done a second apart: three batches.
        insert(0..2500, start, 1000).await;
        let mut cursor = PurgeCursor::START;
        let before = start + 10_000_000;
        let report = purge_paced(&db, &namespace, before, Pace::Operator, &mut cursor, || false)
            .await
            .unwrap();
        assert_eq!((report.events, report.batches), (2500, 3));
        assert!(left().await.is_empty());
        assert_eq!(
            cursor.from,
            start + 2499 * 1000,
            "the cursor is the latest done_at purged"
        );
        let latest = cursor.from;
        insert(5000..5001, latest - 1_800_000, 0).await;
        insert(6000..6001, latest - 7_200_000, 0).await;
        let report = purge_paced(&db, &namespace, before, Pace::Operator, &mut cursor, || false)
            .await
            .unwrap();
        assert_eq!(report.events, 1);
        assert_eq!(
            left().await,
            ["evt_6000"],
            "the next purge went back more or less than an hour"
        );
        assert_eq!(cursor.from, latest, "the cursor went back");
        let mut fresh = PurgeCursor::START;
        let report = purge_paced(&db, &namespace, before, Pace::Operator, &mut fresh, || false)
            .await
            .unwrap();
        assert_eq!(report.events, 1);
        assert!(left().await.is_empty());
    }

    #[test]
    fn each_pace_rests_its_multiple_of_the_batch_within_its_bounds() {
        let operator = Pace::Operator;
        assert_eq!(
            operator.rest_after(Duration::from_millis(10)),
            Duration::from_millis(40)
        );
        assert_eq!(operator.rest_after(Duration::ZERO), MIN_REST);
        assert_eq!(operator.rest_after(Duration::from_micros(100)), MIN_REST);
        assert_eq!(
            operator.rest_after(Duration::from_secs(5)),
            Duration::from_millis(300)
        );
        assert_eq!(operator.rest_after(Duration::MAX), Duration::from_millis(300));
        let background = Pace::Background;
        assert_eq!(
            background.rest_after(Duration::from_millis(10)),
            Duration::from_millis(990)
        );
        assert_eq!(background.rest_after(Duration::ZERO), MIN_REST);
        assert_eq!(
            background.rest_after(Duration::from_millis(30)),
            Duration::from_secs(2)
        );
        assert_eq!(background.rest_after(Duration::MAX), Duration::from_secs(2));
    }
}
