//! The workers' upkeep: between claims, the depth gauges (events waiting,
//! the oldest one's age, the paused types); beside the claims, in tasks of
//! their own, the retention purge in paced batches and the copy of SQLite's
//! WAL back into its file. Each statement is held to the database's deadline; a failure is
//! logged (the purge) or skipped (the gauges, the copy) and the next round
//! tries again.

use std::time::Duration;

use tokio::sync::watch;

use crate::actions::purge::{purge_paced, Pace, PurgeCursor};
use crate::backend::Backend;
use crate::clock::{millis, now_ms};
use crate::database::dialect::ACTIVITY_BUCKET_MS;
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

/// How often the retention purge looks for done events past their
/// retention once it has caught up.
pub(crate) const PURGE_EVERY: Duration = Duration::from_secs(10);

/// The retention purge, in its own task beside the claims until the workers
/// stop: it deletes the done events past their retention in paced batches
/// ([`purge_paced`] at [`Pace::Background`]: a catch-up on a day of
/// history takes about a hundredth of the database, never the claims'
/// turn; each round goes on from where the last one ended, [`PurgeCursor`]), forgets the differing copies of the
/// events no longer stored and the activity chart's buckets past the
/// retention, and looks again [`PURGE_EVERY`]. A failed batch
/// is logged and the next round tries again.
pub(crate) async fn purge_expired<DB: Backend>(
    db: Database<DB>,
    config: Config,
    mut stopped: watch::Receiver<bool>,
) {
    let mut cursor = PurgeCursor::START;
    loop {
        let before = now_ms().saturating_sub(millis(config.retention));
        let purged = purge_paced(
            &db,
            &config.namespace,
            before,
            Pace::Background,
            &mut cursor,
            || *stopped.borrow(),
        )
        .await;
        if let Err(err) = purged {
            let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
            tracing::warn!(target: "payhook", %reason, "could not purge expired inbox events");
        }
        forget_orphaned_differing(&db, &config).await;
        let before = before.div_euclid(ACTIVITY_BUCKET_MS);
        if let Err(err) = db
            .write(DB::forget_activity(&db, &config.namespace, before))
            .await
        {
            let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
            tracing::warn!(target: "payhook", %reason, "could not forget the activity chart's old buckets");
        }
        tokio::select! {
            () = tokio::time::sleep(PURGE_EVERY) => {}
            () = super::stop_requested(&mut stopped) => return,
        }
    }
}

/// Forgets the differing copies of events no longer stored, whichever way
/// they went (retention, by hand, in bulk). The record holds a row only per
/// event that had one, so this reads a few rows at most.
async fn forget_orphaned_differing<DB: Backend>(db: &Database<DB>, config: &Config) {
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
