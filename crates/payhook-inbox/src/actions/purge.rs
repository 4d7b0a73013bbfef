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
/// index entries, its attempts and its count in the tally (about 50 µs a
/// row with a million stored), so a batch is 100 rows: a few milliseconds
/// of lock. PostgreSQL's deletes hold no lock the intake waits for.
pub(crate) fn purge_batch(dialect: Dialect) -> i64 {
    match dialect {
        Dialect::Sqlite => 100,
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
    /// acknowledgements arriving while it catches up on a day of history are
    /// not measurably slowed (their p99 within a few per cent of idle,
    /// BENCHMARKS.md "Inbox section 16"), and a day at 5 events a second
    /// (430 000 events) still goes in a few minutes.
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
/// frozen database, its time including the wait for SQLite's write turn,
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
    /// PostgreSQL, 100 on SQLite), its own short transaction.
    pub batches: u64,
    /// The time spent in those statements, including each one's wait for
    /// SQLite's write turn; the purge rested between them as its [`Pace`]
    /// says.
    pub busy: Duration,
}

/// Deletes `namespace`'s done events marked done before `before` (Unix ms)
/// in batches of [`purge_batch`] rows, resting after each batch as `pace`
/// says, until a batch finds fewer rows than it may take or `stop` says so
/// (checked before each batch and through each rest).
///
/// # Errors
/// The first batch's database error; the batches before it stay deleted.
pub(crate) async fn purge_paced<DB: Operations>(
    db: &Database<DB>,
    namespace: &str,
    before: i64,
    pace: Pace,
    stop: impl Fn() -> bool,
) -> Result<PurgeReport, sqlx::Error> {
    let batch = purge_batch(db.dialect);
    let full = u64::try_from(batch).unwrap_or(u64::MAX);
    let mut purged = PurgeReport::default();
    while !stop() {
        let started = Instant::now();
        let deleted = db.write(DB::purge(db, namespace, before, batch)).await?;
        let took = started.elapsed();
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
