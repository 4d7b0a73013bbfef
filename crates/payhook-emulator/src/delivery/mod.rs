//! Signed delivery of events to webhook endpoints: at least once per endpoint,
//! signed afresh at each attempt, retried with exponential backoff and jitter,
//! `Retry-After` honoured, with the faults of [`Faults`](crate::Faults) on request.
//!
//! Attempts are made by a pool of worker tasks, at most
//! `max_concurrent_attempts` of them, started as deliveries come and each
//! taking the next attempt due from one queue: a delivery waiting for its
//! first attempt or its next one is a queue entry (or a timer), not a task of
//! its own waiting for a place on the wire.
//!
//! Memory stays bounded whatever the receivers do: at most
//! [`Limits::pending_deliveries`](crate::Limits::pending_deliveries) deliveries
//! wait or run at once (more are dropped, counted in
//! [`DeliveryStats::dropped`](crate::DeliveryStats::dropped) and logged), and the
//! attempt log keeps the newest [`Limits::attempts`](crate::Limits::attempts) records.

mod faults;
mod log;
mod send;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{oneshot, Notify};

use crate::model::{DeliveryAttempt, EventRecord};
use crate::{ids, unix_millis, Shared};
use faults::{draw, happens, Draw};
use log::log_attempt;
use send::{attempt_once, AttemptOutcome};
pub(crate) use send::{http_client, HttpClient};

/// The error of an attempt whose reply the `drop_first` fault discarded.
const DROPPED_BY_FAULT: &str =
    "reply discarded by the injected fault drop-first (the receiver got the request and answered)";

/// The error of every attempt of an event the `undeliverable` fault picked.
const UNDELIVERABLE_BY_FAULT: &str =
    "not sent: the injected fault undeliverable fails every attempt of this event (the receiver got no request)";

/// The delivery machinery and its counters.
pub(crate) struct Deliveries {
    pub client: HttpClient,
    /// Attempts due now, oldest first; the workers take them in turn.
    due: Mutex<VecDeque<Due>>,
    /// Woken (one worker at a time) when an attempt is queued.
    queued: Notify,
    /// How many workers there may be: the attempts on the wire at once.
    max_workers: usize,
    /// Workers started (they run until the emulator stops).
    workers: AtomicUsize,
    /// Workers waiting for an attempt to make.
    idle_workers: AtomicUsize,
    /// Deliveries waiting or running (each holds a [`Slot`]).
    pub pending: AtomicUsize,
    /// Woken when `pending` drops to zero.
    pub idle: Notify,
    pub dropped: AtomicU64,
    pub attempts: AtomicU64,
    pub acknowledged: AtomicU64,
    pub gave_up: AtomicU64,
    /// Deliveries abandoned because their event was evicted.
    pub abandoned: AtomicU64,
    reorder_buffer: Mutex<Vec<Queued>>,
}

impl Deliveries {
    pub fn new(client: HttpClient, max_concurrent_attempts: usize) -> Self {
        Self {
            client,
            due: Mutex::new(VecDeque::new()),
            queued: Notify::new(),
            max_workers: max_concurrent_attempts.max(1),
            workers: AtomicUsize::new(0),
            idle_workers: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            idle: Notify::new(),
            dropped: AtomicU64::new(0),
            attempts: AtomicU64::new(0),
            acknowledged: AtomicU64::new(0),
            gave_up: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            reorder_buffer: Mutex::new(Vec::new()),
        }
    }
}

/// One delivery: an event to one endpoint (`copy` > 0 for a duplicate the fault added).
#[derive(Debug, Clone)]
struct Job {
    /// The kept event. Not owned: a delivery whose event was evicted (to stay
    /// within [`Limits`](crate::Limits)) is abandoned, so waiting deliveries
    /// never hold bodies beyond the events' byte budget.
    event: Weak<EventRecord>,
    /// The event's id and creation order, known without the event.
    event_id: String,
    event_seq: u64,
    endpoint_id: String,
    endpoint_seq: u64,
    copy: u32,
    /// 0, or the number of the resend this delivery is part of.
    resend: u64,
}

/// Holds one of the bounded delivery slots; frees it when the delivery ends
/// however it ends.
struct Slot(Arc<Shared>);

impl Slot {
    fn reserve(shared: &Arc<Shared>) -> Option<Self> {
        let limit = shared.config.limits.pending_deliveries;
        shared
            .deliveries
            .pending
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()
            .map(|_| Self(Arc::clone(shared)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let deliveries = &self.0.deliveries;
        if deliveries.pending.fetch_sub(1, Ordering::SeqCst) == 1 {
            deliveries.idle.notify_waiters();
        }
    }
}

/// Queues `event` for every endpoint that wants it.
/// `resend` is 0 for the event's own deliveries, or the resend's number.
pub(crate) fn enqueue(
    shared: &Arc<Shared>,
    event: Arc<EventRecord>,
    endpoints: Vec<(String, u64)>,
    resend: u64,
) {
    let faults = shared.config.faults();
    let mut ready = Vec::new();
    for (endpoint_id, endpoint_seq) in endpoints {
        let job = Job {
            event: Arc::downgrade(&event),
            event_id: event.id.clone(),
            event_seq: event.seq,
            endpoint_id,
            endpoint_seq,
            copy: 0,
            resend,
        };
        let Some(slot) = admit(shared, &job) else {
            continue;
        };
        let duplicated = faults.duplicates > 0.0
            && happens(faults.duplicates, draw(shared.seed, Draw::Duplicate, &job, 0));
        let mut follow = Follow::Nothing;
        if duplicated {
            let copy_job = Job {
                copy: 1,
                ..job.clone()
            };
            if let Some(copy_slot) = admit(shared, &copy_job) {
                follow = if happens(0.5, draw(shared.seed, Draw::Concurrent, &job, 0)) {
                    Follow::Concurrent(copy_job, copy_slot)
                } else {
                    Follow::AfterFirstAttempt(copy_job, copy_slot)
                };
            }
        }
        ready.push((job, slot, follow));
    }
    if ready.is_empty() {
        return;
    }
    if faults.reorder {
        let mut buffer = shared
            .deliveries
            .reorder_buffer
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let start_flush = buffer.is_empty();
        buffer.extend(ready);
        if start_flush {
            tokio::spawn(flush_reordered(Arc::clone(shared)));
        }
    } else {
        for (job, slot, follow) in ready {
            start(shared, job, slot, None, follow);
        }
    }
}

fn admit(shared: &Arc<Shared>, job: &Job) -> Option<Slot> {
    let slot = Slot::reserve(shared);
    if slot.is_none() {
        shared.deliveries.dropped.fetch_add(1, Ordering::SeqCst);
        tracing::warn!(
            target: "payhook_emulator::delivery",
            "delivery queue full ({} pending): dropped {} -> {} copy {}",
            shared.config.limits.pending_deliveries,
            job.event_id,
            job.endpoint_id,
            job.copy
        );
    }
    slot
}

/// What follows a delivery when the `duplicates` fault copies it.
enum Follow {
    Nothing,
    /// The copy goes out at the same moment as the original.
    Concurrent(Job, Slot),
    /// The copy goes out once the original's first attempt is over.
    AfterFirstAttempt(Job, Slot),
}

type Queued = (Job, Slot, Follow);

/// One attempt due: the delivery, which attempt it is, and what waits on its first.
struct Due {
    job: Job,
    slot: Slot,
    attempt: u32,
    /// Told when the first attempt is over (the `reorder` fault waits on it).
    first_done: Option<oneshot::Sender<()>>,
    /// A sequential duplicate copy, started once the first attempt is over.
    copy: Option<(Job, Slot)>,
}

/// Starts a delivery (and a concurrent copy of it at once).
fn start(
    shared: &Arc<Shared>,
    job: Job,
    slot: Slot,
    first_done: Option<oneshot::Sender<()>>,
    follow: Follow,
) {
    let copy = match follow {
        Follow::Nothing => None,
        Follow::Concurrent(copy, copy_slot) => {
            start_copy(shared, copy, copy_slot);
            None
        }
        Follow::AfterFirstAttempt(copy, copy_slot) => Some((copy, copy_slot)),
    };
    first_attempt(
        shared,
        Due {
            job,
            slot,
            attempt: 1,
            first_done,
            copy,
        },
    );
}

/// Starts a duplicate copy on its own (no copy of its own follows it).
fn start_copy(shared: &Arc<Shared>, job: Job, slot: Slot) {
    first_attempt(
        shared,
        Due {
            job,
            slot,
            attempt: 1,
            first_done: None,
            copy: None,
        },
    );
}

/// Queues a delivery's first attempt, after the `delay` fault if one is set.
fn first_attempt(shared: &Arc<Shared>, due: Due) {
    let delay = shared.config.faults().delay;
    if delay.is_zero() {
        queue(shared, due);
    } else {
        queue_after(shared, delay, due);
    }
}

/// Queues `due` once `delay` is over (abandoned if the emulator stops meanwhile).
fn queue_after(shared: &Arc<Shared>, delay: Duration, due: Due) {
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        if pause(&shared, delay).await {
            queue(&shared, due);
        }
    });
}

/// Queues an attempt due now and makes sure a worker will take it: an idle
/// one is woken, or a new one started while there are fewer than the most
/// attempts allowed on the wire.
fn queue(shared: &Arc<Shared>, due: Due) {
    let deliveries = &shared.deliveries;
    deliveries
        .due
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push_back(due);
    if deliveries.idle_workers.load(Ordering::SeqCst) == 0 {
        let started = deliveries
            .workers
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < deliveries.max_workers).then_some(n + 1)
            })
            .is_ok();
        if started {
            tokio::spawn(work(Arc::clone(shared)));
            return;
        }
    }
    // An idle worker takes it, or a busy one when it is done (a permit is kept
    // if no worker is waiting yet, so the wake-up is never lost).
    deliveries.queued.notify_one();
}

/// A worker: makes the attempts due, one at a time, until the emulator stops
/// and nothing is left in the queue (attempts queued before the stop are
/// still made, as they were due; retries not yet due are abandoned).
async fn work(shared: Arc<Shared>) {
    let deliveries = &shared.deliveries;
    let mut shutdown = shared.shutdown.clone();
    loop {
        let next = deliveries
            .due
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        match next {
            // Boxed: the attempt's future (the HTTP client's inside) is large.
            Some(due) => Box::pin(attempt(&shared, due)).await,
            None => {
                if *shutdown.borrow() {
                    deliveries.workers.fetch_sub(1, Ordering::SeqCst);
                    // An attempt queued while this worker was leaving, with every
                    // place taken, would otherwise wait for ever: take it.
                    let stranded = !deliveries
                        .due
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .is_empty();
                    let stays = stranded
                        && deliveries
                            .workers
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                                (n < deliveries.max_workers).then_some(n + 1)
                            })
                            .is_ok();
                    if stays {
                        continue;
                    }
                    return;
                }
                deliveries.idle_workers.fetch_add(1, Ordering::SeqCst);
                tokio::select! {
                    () = deliveries.queued.notified() => {}
                    _ = shutdown.wait_for(|stop| *stop) => {}
                }
                deliveries.idle_workers.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// The `reorder` fault: deliveries queued within one window go out newest
/// first, each first attempt finishing before the next one starts.
async fn flush_reordered(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.clone();
    tokio::select! {
        () = tokio::time::sleep(shared.config.faults().reorder_window) => {}
        _ = shutdown.wait_for(|stop| *stop) => {}
    }
    let batch: Vec<Queued> = std::mem::take(
        &mut *shared
            .deliveries
            .reorder_buffer
            .lock()
            .unwrap_or_else(|e| e.into_inner()),
    );
    for (job, slot, follow) in batch.into_iter().rev() {
        let (first_done, first_attempt_over) = oneshot::channel();
        start(&shared, job, slot, Some(first_done), follow);
        // Resolves when the first attempt is over or the delivery ended early.
        let _ = first_attempt_over.await;
    }
}

/// Sleeps for `duration`; `false` if the emulator shut down meanwhile.
async fn pause(shared: &Shared, duration: Duration) -> bool {
    if duration.is_zero() {
        return !*shared.shutdown.borrow();
    }
    let mut shutdown = shared.shutdown.clone();
    tokio::select! {
        () = tokio::time::sleep(duration) => !*shared.shutdown.borrow(),
        _ = shutdown.wait_for(|stop| *stop) => false,
    }
}

/// Makes one attempt of a delivery; queues the next one after its backoff
/// unless this one was acknowledged or the last.
async fn attempt(shared: &Arc<Shared>, due: Due) {
    let Due {
        job,
        slot,
        attempt,
        mut first_done,
        mut copy,
    } = due;
    let config = &shared.config;
    // Read when the attempt starts (a worker is free), so a secret rolled or
    // an endpoint deleted while the attempt waited is seen.
    let endpoint = {
        let state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        state.endpoints.get(&job.endpoint_id).map(|endpoint| {
            (
                endpoint.uri.clone(),
                endpoint.url.as_str().to_owned(),
                Arc::clone(&endpoint.keys),
            )
        })
    };
    let Some((uri, url, keys)) = endpoint else {
        tracing::info!(
            target: "payhook_emulator::delivery",
            "{} -> {}: endpoint deleted, delivery abandoned",
            job.event_id, job.endpoint_id
        );
        return;
    };
    let Some(event) = job.event.upgrade() else {
        tracing::warn!(
            target: "payhook_emulator::delivery",
            "{} -> {}: event evicted to stay within the emulator's limits, delivery abandoned",
            job.event_id, job.endpoint_id
        );
        shared.deliveries.abandoned.fetch_add(1, Ordering::SeqCst);
        return;
    };
    // A resend stands for the endpoint being back: the fault spares it.
    let outcome = if job.resend == 0
        && faults::undeliverable(shared.seed, config.faults().undeliverable, job.event_seq)
    {
        AttemptOutcome::not_sent(UNDELIVERABLE_BY_FAULT)
    } else {
        attempt_once(shared, uri, &keys, &job.event_id, &event.body).await
    };
    let dropped = config.faults().drop_first && attempt == 1;
    // A 2xx whose reply did not finish within the timeout (or broke off) is
    // no acknowledgement: the receiver may still be stuck in its handler.
    let acknowledged =
        outcome.status.is_some_and(|s| (200..300).contains(&s)) && outcome.error.is_none() && !dropped;
    if acknowledged {
        event.acknowledged.store(true, Ordering::SeqCst);
    }
    let next = if acknowledged || attempt >= config.retry.max_attempts {
        None
    } else {
        Some(retry_delay(shared, &job, attempt, outcome.retry_after))
    };
    // An injected fault is named as one, and only when it did something: an
    // attempt that failed on its own (the receiver down, a timeout) keeps its
    // real cause, so a log reader never blames the fault for a real failure
    // or the receiver for the fault.
    let error = match (&outcome.error, dropped) {
        (Some(error), _) => Some(error.clone()),
        (None, true) => Some(DROPPED_BY_FAULT.to_owned()),
        (None, false) => None,
    };
    let now_ms = unix_millis();
    let record = DeliveryAttempt {
        id: ids::new_id("da_"),
        object: "delivery_attempt",
        event: event.id.clone(),
        event_type: event.event_type.clone(),
        webhook_endpoint: job.endpoint_id.clone(),
        url,
        copy: job.copy,
        resend: job.resend,
        attempt,
        started_at_ms: outcome.started_at_ms,
        signed_at: outcome.signed_at,
        signatures: outcome.signatures,
        duration_ms: outcome.duration_ms,
        status: outcome.status,
        error,
        succeeded: acknowledged,
        response_body: outcome.response_body,
        next_attempt_at_ms: next
            .map(|d| now_ms.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))),
    };
    log_attempt(&record, next);
    shared.deliveries.attempts.fetch_add(1, Ordering::SeqCst);
    {
        let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        state.attempts.push(record);
    }
    if attempt == 1 {
        if let Some(done) = first_done.take() {
            let _ = done.send(());
        }
        if let Some((copy_job, copy_slot)) = copy.take() {
            start_copy(shared, copy_job, copy_slot);
        }
    }
    if acknowledged {
        shared.deliveries.acknowledged.fetch_add(1, Ordering::SeqCst);
        return;
    }
    let Some(delay) = next else {
        shared.deliveries.gave_up.fetch_add(1, Ordering::SeqCst);
        tracing::warn!(
            target: "payhook_emulator::delivery",
            "{} {} -> {}: gave up after {attempt} attempts",
            event.id, event.event_type, job.endpoint_id
        );
        return;
    };
    drop(event);
    queue_after(
        shared,
        delay,
        Due {
            job,
            slot,
            attempt: attempt.saturating_add(1),
            first_done: None,
            copy: None,
        },
    );
}

/// The wait before attempt `attempt + 1`: `Retry-After` when the receiver sent
/// one (capped at the schedule's cap), otherwise `base × 2^(attempt−1)` capped,
/// less up to 20 % jitter.
fn retry_delay(shared: &Shared, job: &Job, attempt: u32, retry_after: Option<Duration>) -> Duration {
    let schedule = &shared.config.retry;
    if let Some(wait) = retry_after {
        return wait.min(schedule.cap);
    }
    let factor = 2u32.checked_pow(attempt.saturating_sub(1)).unwrap_or(u32::MAX);
    let capped = schedule.base.saturating_mul(factor).min(schedule.cap);
    if !schedule.jitter {
        return capped;
    }
    let drawn = u128::from(draw(shared.seed, Draw::Jitter, job, attempt));
    let nanos = capped.as_nanos();
    // `drawn` < 2^32 and a Duration's nanoseconds < 2^94: no overflow.
    let less = (nanos / 5).saturating_mul(drawn) >> 32;
    let total = nanos.saturating_sub(less);
    let secs = u64::try_from(total / 1_000_000_000).unwrap_or(u64::MAX);
    // `total % 1e9` < 1e9 fits in u32.
    let sub = u32::try_from(total % 1_000_000_000).unwrap_or(0);
    Duration::new(secs, sub)
}
