//! The workers' two writers, each a task that writes everything waiting in
//! its queue in one statement: the marks (suspects' attempts starting and events done,
//! [`Progress::progress`](crate::queue::progress::Progress)) and the attempts record
//! of attempts done in their handler's transaction (a failure is recorded
//! with its state change: [`Queue::record_failure`](crate::queue::transitions::Queue)).
//!
//! Batching is what the writers are for: every handler that starts or
//! finishes while one statement runs joins the next one, so the statements
//! per event fall as the rate rises, while each row is still written under
//! its own lease token.

use tokio::sync::{mpsc, oneshot};

use crate::clock::now_ms;
use crate::database::Database;
use crate::error::describe;
use crate::model::{AttemptRecord, ClaimedAttempt};
use crate::queue::attempts::AttemptsRecord;
use crate::queue::progress::Progress;

/// Most marks (or attempt records) written by one statement.
pub(crate) const MARK_BATCH: usize = 512;

/// Which mark an event waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// A suspect's attempt starts (counted before the handler runs).
    Start,
    /// Its handler succeeded without opening its transaction: done, the
    /// attempt (this number, started then) counted.
    Done { attempt: i64, started_at: i64 },
}

/// One event's mark, waiting to be written with others.
pub(crate) struct Mark {
    pub(crate) arrival: i64,
    pub(crate) token: i64,
    pub(crate) step: Step,
    /// The event's attempt number once marked, `None` when the row was no
    /// longer this claim's (the lease was lost), or why the batch failed.
    pub(crate) answer: oneshot::Sender<Result<Option<i64>, String>>,
}

/// Writes the marks waiting in `queue`, as many as are there in one
/// statement. Ends when every sender is gone.
pub(crate) async fn write_marks<DB: Progress + AttemptsRecord>(
    db: Database<DB>,
    namespace: String,
    mut queue: mpsc::Receiver<Mark>,
) {
    let mut batch = Vec::with_capacity(MARK_BATCH);
    while queue.recv_many(&mut batch, MARK_BATCH).await > 0 {
        // The marks sent alongside the first one (a dispatcher starting
        // several events, handlers finishing together) are on their way:
        // one turn of the scheduler lets them join this statement rather
        // than wait a whole statement for the next.
        tokio::task::yield_now().await;
        while batch.len() < MARK_BATCH {
            match queue.try_recv() {
                Ok(mark) => batch.push(mark),
                Err(_) => break,
            }
        }
        // Arrival order: repeats of one row (see `mark_all`) sit side by side.
        batch.sort_by_key(|mark: &Mark| mark.arrival);
        match mark_all(&db, &namespace, &batch).await {
            Ok(marked) => {
                for (mark, marked) in batch.drain(..).zip(marked) {
                    let _ = mark.answer.send(Ok(marked));
                }
            }
            Err(err) => {
                let message = describe(&err);
                for mark in batch.drain(..) {
                    let _ = mark.answer.send(Err(message.clone()));
                }
            }
        }
    }
}

/// Writes a batch of marks (sorted by arrival); for each, the attempt number
/// when its row was still its claim's.
pub(crate) async fn mark_all<DB: Progress + AttemptsRecord>(
    db: &Database<DB>,
    namespace: &str,
    batch: &[Mark],
) -> Result<Vec<Option<i64>>, sqlx::Error> {
    let mut marked = vec![None; batch.len()];
    let mut rest: Vec<usize> = (0..batch.len()).collect();
    // One statement per round, each row at most once in it. A row appears
    // twice only when this process claimed it again after its lease ran out
    // (at most one of the two tokens matches): the second waits a round.
    while !rest.is_empty() {
        let mut round: Vec<usize> = Vec::with_capacity(rest.len());
        let mut later = Vec::new();
        for index in rest {
            if round
                .last()
                .is_some_and(|&last| batch[last].arrival == batch[index].arrival)
            {
                later.push(index);
            } else {
                round.push(index);
            }
        }
        let done: Vec<ClaimedAttempt> = round
            .iter()
            .filter_map(|&index| match batch[index].step {
                Step::Done { attempt, started_at } => Some(ClaimedAttempt {
                    arrival: batch[index].arrival,
                    token: batch[index].token,
                    number: attempt,
                    started_at,
                }),
                Step::Start => None,
            })
            .collect();
        let started: Vec<(i64, i64)> = round
            .iter()
            .filter(|&&index| batch[index].step == Step::Start)
            .map(|&index| (batch[index].arrival, batch[index].token))
            .collect();
        let progressed = db
            .write(DB::progress(db, namespace, &done, &started, now_ms()))
            .await?;
        for index in round {
            let arrival = batch[index].arrival;
            marked[index] = match batch[index].step {
                Step::Done { .. } => progressed.done.get(&arrival).copied(),
                Step::Start => progressed.started.get(&arrival).copied(),
            };
        }
        rest = later;
    }
    Ok(marked)
}

/// Writes ended attempts, all that are waiting in one statement; a failure
/// to write them is logged, never fatal. Ends when every sender is gone.
pub(crate) async fn record_attempts<DB: Progress + AttemptsRecord>(
    db: Database<DB>,
    namespace: String,
    mut queue: mpsc::Receiver<AttemptRecord>,
) {
    let mut records = Vec::with_capacity(MARK_BATCH);
    while queue.recv_many(&mut records, MARK_BATCH).await > 0 {
        if let Err(err) = db.write(DB::record_attempts(&db, &namespace, &records)).await {
            let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
            tracing::warn!(target: "payhook", %reason, "could not write to the attempts record");
        }
        records.clear();
    }
}
