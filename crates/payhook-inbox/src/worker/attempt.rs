//! One attempt at one event: the handler run under its lease (renewed while
//! it runs), then the done mark — in the handler's transaction or batched —
//! or the failure recorded with its backoff, and the attempts record.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use payhook_core::Event;
use tokio::sync::{mpsc, oneshot, Mutex, OwnedSemaphorePermit};
use tracing::Instrument;

use super::job::{ClaimRef, Handler, Job, Slot};
use crate::backend::Backend;
use crate::clock::{millis, now_ms, random_u64};
use crate::error::{describe, payhook_escape};
use crate::inner::{Config, Inner};
use crate::metrics as m;
use crate::model::{AttemptOutcome, AttemptRecord, Claimed, ClaimedAttempt, Failure};
use crate::queue::marks::{Mark, Step};

/// Where an attempt's results go: the writers' queues, and the count of
/// handlers finished (the workers' pace).
pub(super) struct Writers {
    pub(super) marks: mpsc::Sender<Mark>,
    pub(super) attempts: mpsc::Sender<AttemptRecord>,
    pub(super) finished: AtomicUsize,
    /// Handlers finished whose done mark is not written yet: their events
    /// still hold their payment intents.
    pub(super) marking: AtomicUsize,
    /// How many suspects run here now, and whether one of them is a repeat
    /// suspect (which runs with no other suspect: see the module docs); the
    /// dispatcher is woken when one ends.
    pub(super) suspects_running: AtomicUsize,
    pub(super) repeat_running: AtomicBool,
    pub(super) suspect_ended: tokio::sync::Notify,
}

/// One started attempt (`claimed.attempts` its number; a suspect's start
/// mark written): runs the handler, renewing the lease meanwhile, then marks the
/// event done or records the failure. `permit` (the handler's place among
/// the concurrent ones) is given back once the handler and its transaction
/// are over, before a batched done mark is awaited.
pub(super) async fn process<DB: Backend>(
    inbox: &Inner<DB>,
    handler: &dyn Handler<DB>,
    writers: &Writers,
    claimed: Claimed,
    permit: OwnedSemaphorePermit,
) {
    let attempts = &writers.attempts;
    let db = &inbox.db;
    let config = &inbox.config;
    let started = Instant::now();
    let started_at = now_ms();
    let claim = Arc::new(ClaimRef {
        db: db.clone(),
        attempt: claimed_attempt(&claimed, started_at),
        event_id: claimed.event_id.clone(),
        opened: AtomicBool::new(false),
    });
    // The stored id is the event's id: the body's own for the service's format,
    // the `webhook-id` header for a Standard Webhooks delivery.
    let event = match Event::from_slice_with_id(claimed.body.as_bytes(), &claimed.event_id) {
        Ok(event) => event,
        Err(err) => {
            // Only verified, parsed events are stored; this needs a changed parser.
            let message = format!("stored body does not parse: {err}");
            record_failure(inbox, &claimed, &message, started, started_at).await;
            return;
        }
    };
    let event_type = payhook_escape(event.event_type());
    let slot = Arc::new(Mutex::new(Slot::default()));
    let attempt = u32::try_from(claimed.attempts).unwrap_or(u32::MAX);
    // The attempt's span, in the delivery's trace (see trace.rs: a child).
    let span = crate::trace::attempt_span(&config.namespace, &claimed, &event, attempt);
    let job = Job {
        event,
        attempt,
        source: claimed.source,
        claim: Arc::clone(&claim),
        slot: Arc::clone(&slot),
    };
    let outcome = match std::panic::catch_unwind(AssertUnwindSafe(|| span.in_scope(|| handler.handle(job)))) {
        Err(panic) => Err(panic),
        Ok(future) => {
            tokio::select! {
                outcome = AssertUnwindSafe(future).catch_unwind().instrument(span.clone()) => outcome,
                () = renew(&claim, config.lease) => Ok(Err("lease renewal stopped".into())),
            }
        }
    };
    let tx = {
        let mut slot = slot.lock().await;
        if slot.committed {
            Err(true)
        } else if slot.lost {
            Err(false)
        } else {
            Ok(slot.tx.take())
        }
    };
    writers.finished.fetch_add(1, Ordering::Relaxed);
    let mut permit = Some(permit);
    let mut recorded = false;
    let id = payhook_escape(&claimed.event_id);
    let failure = match (outcome, tx) {
        (outcome, Err(true)) => {
            if !matches!(outcome, Ok(Ok(()))) {
                tracing::warn!(target: "payhook", event_id = %id, "handler failed after committing; the event stays done");
            }
            None
        }
        (_, Err(false)) => Some("the lease was lost to another worker".to_owned()),
        (Ok(Ok(())), Ok(Some(tx))) => match db.bounded(tx.commit()).await {
            Ok(()) => None,
            Err(err) => Some(format!("commit failed: {}", describe(&err))),
        },
        (Ok(Ok(())), Ok(None)) => {
            drop(permit.take());
            let (answer, marked) = oneshot::channel();
            let mark = Mark {
                arrival: claimed.arrival,
                token: claimed.token,
                step: Step::Done {
                    attempt: claimed.attempts,
                    started_at,
                },
                answer,
            };
            writers.marking.fetch_add(1, Ordering::AcqRel);
            let answer = if writers.marks.send(mark).await.is_err() {
                None
            } else {
                marked.await.ok()
            };
            writers.marking.fetch_sub(1, Ordering::AcqRel);
            // The next event of its payment intent may be due.
            inbox.arrived.notify_one();
            match answer {
                None => Some("marking done failed: the marker has stopped".to_owned()),
                Some(answer) => match answer {
                    Ok(Some(_)) => {
                        // The done mark wrote this attempt's record.
                        recorded = true;
                        None
                    }
                    Ok(None) => Some("the lease was lost to another worker".to_owned()),
                    Err(message) => Some(format!("marking done failed: {message}")),
                },
            }
        }
        (Ok(Err(err)), _) => Some(err.to_string()),
        (Err(panic), _) => {
            let text = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_owned());
            Some(format!("handler panicked: {text}"))
        }
    };
    drop(permit);
    if let Some(message) = &failure {
        payhook_core::trace::record_error(&span, message);
    }
    // A done mark in the handler's transaction has committed: its record
    // follows. A failure's record is written with the failure, and only
    // while the claim holds (`record_failure`).
    if failure.is_none() && !recorded {
        record_done_attempt(attempts, &claimed, started_at, started).await;
    }
    match failure {
        None => {
            let elapsed = started.elapsed();
            m::processed(config.namespace.clone(), elapsed.as_secs_f64());
            // As the inline path logs a completed delivery: one INFO line
            // per handled event, with its time.
            tracing::info!(
                target: "payhook",
                event_id = %id,
                event_type = %event_type,
                attempt = claimed.attempts,
                elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                source = claimed.source.as_str(),
                "inbox event handled"
            );
        }
        Some(message) => record_failure(inbox, &claimed, &message, started, started_at).await,
    }
}

/// Adds an attempt that ended in a done mark committed with the handler's
/// transaction to the attempts record (what the dashboard and `payhook inbox
/// show` list). It does not wait: the record follows the done mark by a
/// moment.
async fn record_done_attempt(
    attempts: &mpsc::Sender<AttemptRecord>,
    claimed: &Claimed,
    started_at: i64,
    started: Instant,
) {
    let record = AttemptRecord {
        arrival: claimed.arrival,
        attempt: claimed.attempts,
        started_at,
        duration_ms: millis(started.elapsed()),
        outcome: AttemptOutcome::Done,
        error: None,
    };
    let _ = attempts.send(record).await;
}

/// Renews the lease every third of it until the transaction is open; never
/// returns unless the lease is gone.
async fn renew<DB: Backend>(claim: &ClaimRef<DB>, lease: Duration) {
    let mut every = tokio::time::interval(lease / 3);
    every.tick().await;
    loop {
        every.tick().await;
        if claim.opened.load(Ordering::Acquire) {
            continue;
        }
        let until = now_ms().saturating_add(millis(lease));
        match claim
            .db
            .write(DB::renew(
                &claim.db,
                claim.attempt.arrival,
                claim.attempt.token,
                until,
            ))
            .await
        {
            Ok(false) if !claim.opened.load(Ordering::Acquire) => {
                tracing::warn!(target: "payhook", event_id = %payhook_escape(&claim.event_id), "lease lost to another worker while the handler ran");
                // Let the handler finish: it cannot commit, and stopping it
                // half-way could leave its external work in an unknown state.
                std::future::pending::<()>().await;
            }
            Ok(_) => {}
            Err(err) => {
                let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
                tracing::warn!(target: "payhook", %reason, "could not renew a lease; trying again");
            }
        }
    }
}

/// The delay before attempt `failed + 1`: `base · 2^(failed-1)`, capped, then
/// jittered to between half and all of it so retries of many events spread out.
pub(crate) fn backoff(config: &Config, failed: u32) -> Duration {
    let exponent = failed.saturating_sub(1).min(30);
    let delay = config
        .backoff_base
        .saturating_mul(1u32 << exponent)
        .min(config.backoff_cap);
    let half = delay / 2;
    let spread = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
    let jitter = if spread == 0 {
        0
    } else {
        random_u64() % spread.saturating_add(1)
    };
    half.saturating_add(Duration::from_millis(jitter))
}

/// The attempt `claimed` is at (its number in `claimed.attempts`), started
/// at `started_at`.
fn claimed_attempt(claimed: &Claimed, started_at: i64) -> ClaimedAttempt {
    ClaimedAttempt {
        arrival: claimed.arrival,
        token: claimed.token,
        number: claimed.attempts,
        started_at,
    }
}

/// A failed attempt, counted and recorded in one transaction, while the
/// claim holds: a retry after its backoff, or dead after the last one. When
/// the claim was taken over, nothing is written: the attempt was not this
/// claim's to count (the worker that took the event over counts it, or
/// records it as interrupted when it was a suspect's).
pub(super) async fn record_failure<DB: Backend>(
    inbox: &Inner<DB>,
    claimed: &Claimed,
    message: &str,
    started: Instant,
    started_at: i64,
) {
    let config = &inbox.config;
    let attempts = u32::try_from(claimed.attempts).unwrap_or(u32::MAX);
    let dead = attempts >= config.max_attempts;
    // A dead event is never due: its `due_at` keeps when it died.
    let now = now_ms();
    let due = if dead {
        now
    } else {
        now.saturating_add(millis(backoff(config, attempts)))
    };
    let message: String = message.chars().take(2000).collect();
    let recorded = inbox
        .db
        .write(DB::record_failure(
            &inbox.db,
            &config.namespace,
            claimed_attempt(claimed, started_at),
            Failure {
                dead,
                due,
                ended_at: now,
                message: &message,
            },
        ))
        .await;
    let id = payhook_escape(&claimed.event_id);
    m::failed(config.namespace.clone(), started.elapsed().as_secs_f64(), dead);
    let message = payhook_core::untrusted::Untrusted::message(&message).to_string();
    match recorded {
        Ok(true) if dead => {
            tracing::error!(target: "payhook", event_id = %id, attempts, reason = %message, "inbox event is dead after its last attempt");
        }
        Ok(true) => {
            tracing::warn!(target: "payhook", event_id = %id, attempts, reason = %message, "inbox handler failed; retry scheduled");
        }
        Ok(false) => {
            tracing::warn!(target: "payhook", event_id = %id, reason = %message, "attempt ended after its lease was lost; another worker has the event");
        }
        Err(err) => {
            let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
            tracing::error!(target: "payhook", event_id = %id, %reason, "could not record a failed attempt; the event is retried after its lease");
        }
    }
}
