//! The workers' upkeep between claims: the depth gauges (events waiting, the
//! oldest one's age, the paused types) and the retention purge in bounded
//! batches; and beside the claims, the copy of SQLite's WAL back into its
//! file. Each statement is held to the database's deadline; a failure is
//! logged (the purge) or skipped (the gauges, the copy) and the next round
//! tries again.

use std::time::Duration;

use crate::actions::operations::purge_batch;
use crate::backend::Backend;
use crate::clock::{millis, now_ms};
use crate::database::Database;
use crate::error::describe;
use crate::inner::Config;
use crate::metrics as m;

/// Sets the depth gauges: events waiting, the oldest one's age, and the
/// paused types.
pub(crate) async fn report_depth<DB: Backend>(db: &Database<DB>, config: &Config) {
    if let Ok((waiting, oldest)) = db.bounded(DB::depth(db, &config.namespace)).await {
        let age = oldest.map_or(0.0, |oldest| {
            Duration::from_millis(u64::try_from(now_ms().saturating_sub(oldest)).unwrap_or(0)).as_secs_f64()
        });
        m::depth(config.namespace.clone(), waiting, age);
    }
    if let Ok(paused) = db.bounded(DB::paused(db, &config.namespace)).await {
        m::paused(config.namespace.clone(), &paused);
    }
}

/// How often the workers purge done events past their retention, when the
/// last round found no more than it could take.
pub(crate) const PURGE_EVERY: Duration = Duration::from_secs(10);

/// Batches per purge round, before the workers go back to claiming.
const PURGE_ROUND: usize = 20;

/// Deletes done events past their retention in bounded batches: up to
/// [`PURGE_ROUND`] batches of [`purge_batch`] rows. Returns whether the
/// round was full (more may be waiting), so that the next comes sooner: the
/// purge then removes up to 200 000 rows a second round, and keeps up with any
/// ingest rate the workers keep up with.
pub(crate) async fn purge_expired<DB: Backend>(db: &Database<DB>, config: &Config) -> bool {
    let before = now_ms().saturating_sub(millis(config.retention));
    let batch = purge_batch(db.dialect);
    for _ in 0..PURGE_ROUND {
        match db.write(DB::purge(db, &config.namespace, before, batch)).await {
            Ok(deleted) if deleted < u64::try_from(batch).unwrap_or(u64::MAX) => return false,
            Ok(_) => {}
            Err(err) => {
                let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
                tracing::warn!(target: "payhook", %reason, "could not purge expired inbox events");
                return false;
            }
        }
        // SQLite: the WAL this batch wrote is copied back now, in this task
        // and without the write lock (`PASSIVE`). A purge fills SQLite's
        // automatic checkpoint's 1 000 pages within a few batches, and the
        // commit that crosses it copies them: an acknowledgement's commit
        // would wait tens of milliseconds for it.
        let _ = db.bounded(DB::checkpoint(db)).await;
        // Let ingest and claims have the write lock between batches.
        tokio::task::yield_now().await;
    }
    true
}

/// Forgets the differing copies of events no longer stored, whichever way
/// they went (retention, by hand, in bulk). The record holds a row only per
/// event that had one, so this reads a few rows at most.
pub(crate) async fn forget_orphaned_differing<DB: Backend>(db: &Database<DB>, config: &Config) {
    if let Err(err) = db
        .write(DB::forget_orphaned_differing(db, &config.namespace))
        .await
    {
        let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
        tracing::warn!(target: "payhook", %reason, "could not forget the differing copies of purged events");
    }
}

/// How often the workers look whether this process wrote to its SQLite file
/// since they last copied the WAL back ([`copy_back_wal`]).
pub(crate) const COPY_BACK_EVERY: Duration = Duration::from_millis(50);

/// Copies SQLite's WAL back into the database file a moment after this
/// process wrote to it (every write of the process's inboxes and admins on
/// the file counts), for as long as the workers run; returns at once on
/// PostgreSQL.
///
/// Without it the copy is made by SQLite's automatic checkpoint, inside
/// whichever commit crosses 1 000 WAL pages: about once a second under a
/// few hundred deliveries a second, and the delivery whose commit it is
/// waits for the copy and its `fsync`. Copied every 50 ms, the WAL never
/// reaches that size while the workers keep up, so no commit makes the copy;
/// this one takes no write lock (`PASSIVE`), so writes go on beside it. A
/// copy that fails (the file locked or frozen) is left to the next round,
/// or to SQLite's own checkpoint, which stays on.
pub(crate) async fn copy_back_wal<DB: Backend>(db: Database<DB>) {
    if db.dialect.wal_checkpoint().is_none() {
        return;
    }
    let mut seen = db.write_turns.taken();
    // Rounds still to copy: a write counted at one round may commit only
    // after that round's copy, so the round after copies again.
    let mut owed = 0u8;
    loop {
        tokio::time::sleep(COPY_BACK_EVERY).await;
        let taken = db.write_turns.taken();
        if taken != seen {
            seen = taken;
            owed = 2;
        }
        if owed > 0 {
            owed -= 1;
            let _ = db.bounded(DB::checkpoint(&db)).await;
        }
    }
}
