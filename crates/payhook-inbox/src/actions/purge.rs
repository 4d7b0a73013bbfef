//! The purge of done events, paced: the retention purge the workers run
//! beside their claims and [`Admin::purge_done_before`](crate::admin::Admin::purge_done_before)
//! both delete in bounded batches ([`purge_batch`] rows each, through
//! [`Operations::purge`]) and rest after each batch ([`rest_after`]), so a
//! purge that catches up on a day of history takes a share of the database
//! and leaves the rest to deliveries and claims.

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

/// How long a long action rests after a batch, as a multiple of that
/// batch's time: the database (SQLite's one writer, PostgreSQL's share of
/// the CPU) is the action's a fifth of the time at most, and deliveries and
/// workers have it the rest.
const REST_FACTOR: u32 = 4;

/// The shortest rest between two batches: a batch of a few hundred
/// microseconds still leaves the writer free for a delivery's commit or two.
const MIN_REST: Duration = Duration::from_millis(2);

/// The longest rest between two batches: a batch held up by a slow or
/// frozen database (its time includes the wait for SQLite's write turn)
/// does not idle the action for long once the database is back.
const MAX_REST: Duration = Duration::from_millis(300);

/// The rest after a batch that took `took`: [`REST_FACTOR`] times as long,
/// between [`MIN_REST`] and [`MAX_REST`]. Used by the purge and by the bulk
/// actions ([`bulk_run`](crate::actions::bulk_run)).
pub(crate) fn rest_after(took: Duration) -> Duration {
    took.saturating_mul(REST_FACTOR).clamp(MIN_REST, MAX_REST)
}

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
    /// SQLite's write turn; the purge rested four times as long between
    /// them.
    pub busy: Duration,
}

/// Deletes `namespace`'s done events marked done before `before` (Unix ms)
/// in batches of [`purge_batch`] rows, resting [`rest_after`] each batch,
/// until a batch finds fewer rows than it may take or `stop` says so
/// (checked before each batch).
///
/// # Errors
/// The first batch's database error; the batches before it stay deleted.
pub(crate) async fn purge_paced<DB: Operations>(
    db: &Database<DB>,
    namespace: &str,
    before: i64,
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
        tokio::time::sleep(rest_after(took)).await;
    }
    Ok(purged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_followed_by_four_times_its_time_within_the_bounds() {
        assert_eq!(rest_after(Duration::from_millis(10)), Duration::from_millis(40));
        assert_eq!(rest_after(Duration::ZERO), MIN_REST);
        assert_eq!(rest_after(Duration::from_micros(100)), MIN_REST);
        assert_eq!(rest_after(Duration::from_secs(5)), MAX_REST);
        assert_eq!(rest_after(Duration::MAX), MAX_REST);
    }
}
