//! The intake writer: one task per inbox that writes every delivery waiting
//! in one multi-row `INSERT`, so many deliveries share one statement and one
//! commit (and, on SQLite, one turn of the single write lock); every delivery
//! still gets its reply only after the commit that holds it. When such a
//! statement fails, its rows are written one by one, so a row the database
//! refuses fails its own delivery alone. After the replies, it wakes the
//! other replicas for what this process's workers will not take, records
//! the duplicates and compares each with its stored event.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::clock::now_ms;
use crate::database::notify::Notify;
use crate::database::Database;
use crate::error::{describe, is_busy, kind, payhook_escape};
use crate::inner::Pending;
use crate::intake::compare::{compare, LaterCopy};
use crate::intake::duplicates::DuplicatesRecord;
use crate::intake::insert::Intake;
use crate::model::{NewRow, Source};

/// Most deliveries written in one ingest transaction.
pub(crate) const INGEST_BATCH: usize = 256;

/// What a delivery past its deadline is told.
pub(crate) const TIMED_OUT: &str = "the database did not answer in time";

/// One ingest writer: takes every delivery waiting, writes them in one
/// statement, answers each after the commit. Ends when the inbox is dropped.
///
/// The batch's work ends by the latest deadline of its deliveries (each
/// delivery answers `503` by its own): a database that does not answer holds
/// the writer no longer than that, and deliveries that gave up while waiting
/// for it are not written.
pub(crate) async fn write_batches<DB: Intake + DuplicatesRecord + Notify>(
    db: Database<DB>,
    namespace: String,
    mut queue: mpsc::Receiver<Pending>,
    room: Arc<AtomicUsize>,
) {
    let mut batch = Vec::with_capacity(INGEST_BATCH);
    loop {
        if queue.recv_many(&mut batch, INGEST_BATCH).await == 0 {
            return;
        }
        batch.retain(|pending: &Pending| !pending.done.is_closed());
        let Some(deadline) = batch.iter().map(|pending| pending.deadline).max() else {
            continue;
        };
        let written = async {
            let _turn = db.write_turns.wait().await;
            insert_batch(&db, &namespace, &batch).await
        };
        let answers = match tokio::time::timeout_at(deadline, written).await {
            Ok(answers) => answers,
            Err(_) => {
                tracing::error!(target: "payhook", rows = batch.len(), "could not store deliveries in the inbox: the database did not answer in time");
                vec![Err(TIMED_OUT); batch.len()]
            }
        };
        let stored = answers.iter().filter(|answer| matches!(answer, Ok(true))).count();
        let duplicates: Vec<NewRow> = batch
            .iter()
            .zip(&answers)
            .filter(|(_, answer)| matches!(answer, Ok(false)))
            .map(|(pending, _)| pending.row.clone())
            .collect();
        for (pending, answer) in batch.drain(..).zip(answers) {
            // A waiter that went away (its request was dropped) is skipped.
            let _ = pending.done.send(answer);
        }
        // Events this process's workers will take at their next claim
        // (`Inner::room`; the intake wakes them itself) need no other
        // replica: they take that room, and other replicas are woken only
        // when the batch does not fit, so that every replica's claims do
        // not race for each small batch.
        let taken_here = stored > 0
            && room
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |free| {
                    free.checked_sub(stored)
                })
                .is_ok();
        if stored > 0 && !taken_here {
            // After the replies, and beside the next batch: a NOTIFY that
            // stalls delays neither these deliveries nor the ones after.
            let (db, namespace) = (db.clone(), namespace.clone());
            tokio::spawn(async move {
                let _ = tokio::time::timeout(db.timeout, DB::notify(&db, &namespace)).await;
            });
        }
        if !duplicates.is_empty() {
            tokio::spawn(record_duplicates(db.clone(), namespace.clone(), duplicates));
        }
    }
}

/// Adds acknowledged duplicates to the duplicates record, then compares each
/// with its stored event ([`compare`]: a differing content recorded, a
/// delivery of a reconciled event marked); after
/// their replies and beside the next batch. A failure to is logged, never
/// fatal.
async fn record_duplicates<DB: Intake + DuplicatesRecord + Notify>(
    db: Database<DB>,
    namespace: String,
    duplicates: Vec<NewRow>,
) {
    let rows: Vec<(&str, i64)> = duplicates
        .iter()
        .map(|row| (row.event_id.as_str(), row.received_at))
        .collect();
    let recorded = db
        .write(DB::record_duplicates(&db, &namespace, &rows, now_ms()))
        .await;
    if let Err(err) = recorded {
        let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
        tracing::warn!(target: "payhook", %reason, "could not write to the duplicates record");
    }
    let ids: Vec<&str> = duplicates.iter().map(|row| row.event_id.as_str()).collect();
    let stored = match db.bounded(DB::stored_copies(&db, &namespace, &ids)).await {
        Ok(stored) => stored,
        Err(err) => {
            let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
            tracing::warn!(target: "payhook", %reason, "could not compare duplicate deliveries with their stored events");
            return;
        }
    };
    for row in &duplicates {
        // Gone (purged since): nothing to compare with.
        let Some(stored) = stored.get(&row.event_id) else {
            continue;
        };
        let copy = LaterCopy {
            event_id: &row.event_id,
            body: &row.body,
            at: row.received_at,
            source: Source::Delivered,
        };
        if let Err(err) = compare(&db, &namespace, &copy, stored).await {
            let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
            tracing::warn!(target: "payhook", event_id = %payhook_escape(&row.event_id), %reason, "could not compare a duplicate delivery with its stored event");
        }
    }
}

/// Writes a batch in one statement; when that statement fails, each row
/// alone, so that one row the database refuses never fails another delivery.
async fn insert_batch<DB: Intake + DuplicatesRecord + Notify>(
    db: &Database<DB>,
    namespace: &str,
    batch: &[Pending],
) -> Vec<Result<bool, &'static str>> {
    let rows: Vec<&NewRow> = batch.iter().map(|pending| &pending.row).collect();
    let err = match DB::insert(db, namespace, &rows, Source::Delivered).await {
        Ok(new) => return new.into_iter().map(Ok).collect(),
        Err(err) => err,
    };
    if rows.len() == 1 || !matches!(err, sqlx::Error::Database(_)) || is_busy(&err) {
        // Unreachable, timed out or locked: every row would fail alike.
        log_store_failure(&err, rows.len());
        return vec![Err(kind(&err)); rows.len()];
    }
    let mut answers = Vec::with_capacity(rows.len());
    for row in &rows {
        answers.push(
            match DB::insert(db, namespace, std::slice::from_ref(row), Source::Delivered).await {
                Ok(new) => Ok(new.first().copied().unwrap_or(false)),
                Err(err) => {
                    log_store_failure(&err, 1);
                    Err(kind(&err))
                }
            },
        );
    }
    answers
}

fn log_store_failure(err: &sqlx::Error, rows: usize) {
    let reason = payhook_core::untrusted::Untrusted::message(&describe(err)).to_string();
    tracing::error!(target: "payhook", rows, %reason, "could not store deliveries in the inbox");
}
