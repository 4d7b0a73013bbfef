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

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use payhook_core::sign;
use payhook_core::untrusted::Untrusted;
use std::collections::VecDeque;

use tokio::sync::{oneshot, Notify};

use crate::model::{DeliveryAttempt, EventRecord, SigningKeys};
use crate::{ids, unix_millis, Shared};

/// The error of an attempt whose reply the `drop_first` fault discarded.
const DROPPED_BY_FAULT: &str =
    "reply discarded by the injected fault drop-first (the receiver got the request and answered)";
/// The most reply-body characters kept in an attempt record.
const RESPONSE_EXCERPT_CHARS: usize = 200;
/// The most reply-body bytes read before the connection is let go.
const RESPONSE_READ_BYTES: usize = 4096;
/// The `user-agent` of every attempt.
const USER_AGENT: &str = concat!("payhook-emulator/", env!("CARGO_PKG_VERSION"));

/// The pooled HTTP/1 client every attempt goes through: connections to a
/// receiver are kept and reused, as the service's would be.
pub(crate) type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// The client for deliveries: plain HTTP (endpoints are `http://` only),
/// connections made within `connect_timeout`, no redirects followed, no proxy
/// from the environment (hyper's client does neither).
pub(crate) fn http_client(connect_timeout: Duration) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(connect_timeout));
    // Small requests and replies: do not let Nagle hold them back.
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .build(connector)
}

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

/// Kinds of seeded decision, so each one draws its own number.
#[derive(Clone, Copy)]
#[repr(u64)]
enum Draw {
    Duplicate = 1,
    Concurrent = 2,
    Jitter = 3,
}

/// SplitMix64: a well-mixed 64-bit value from any input.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A number in `[0, 2^32)` fixed by the seed and what is being decided: the
/// same seed and the same sequence of API calls give the same faults,
/// whatever order the deliveries happen to run in.
fn draw(seed: u64, draw: Draw, job: &Job, attempt: u32) -> u64 {
    let parts = [
        draw as u64,
        job.event_seq,
        job.endpoint_seq,
        u64::from(job.copy),
        u64::from(attempt),
    ];
    let drawn = parts.iter().fold(mix(seed), |acc, part| mix(acc ^ part));
    // A resend draws its own numbers; the event's own deliveries keep the
    // pattern they had before resends existed.
    let drawn = if job.resend == 0 {
        drawn
    } else {
        mix(drawn ^ job.resend)
    };
    drawn >> 32
}

fn happens(probability: f64, drawn: u64) -> bool {
    // `drawn` < 2^32, exact in f64.
    (drawn as f64) < probability * 4_294_967_296.0
}

/// Queues `event` for every endpoint that wants it.
/// `resend` is 0 for the event's own deliveries, or the resend's number.
pub(crate) fn enqueue(
    shared: &Arc<Shared>,
    event: Arc<EventRecord>,
    endpoints: Vec<(String, u64)>,
    resend: u64,
) {
    let faults = &shared.config.faults;
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
    let delay = shared.config.faults.delay;
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
        () = tokio::time::sleep(shared.config.faults.reorder_window) => {}
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
    let outcome = attempt_once(shared, uri, &keys, &event.body).await;
    let dropped = config.faults.drop_first && attempt == 1;
    // A 2xx whose reply did not finish within the timeout (or broke off) is
    // no acknowledgement: the receiver may still be stuck in its handler.
    let acknowledged =
        outcome.status.is_some_and(|s| (200..300).contains(&s)) && outcome.error.is_none() && !dropped;
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

fn log_attempt(record: &DeliveryAttempt, next: Option<Duration>) {
    // Formatting costs more than the check: skip it when nobody listens.
    if !tracing::enabled!(target: "payhook_emulator::delivery", tracing::Level::INFO) {
        return;
    }
    tracing::info!(
        target: "payhook_emulator::delivery",
        "{} {} -> {} {} attempt {}{}: {} in {} ms{}",
        record.event,
        record.event_type,
        record.webhook_endpoint,
        record.url,
        record.attempt,
        CopyNote(record.copy, record.resend),
        AttemptResult(record),
        record.duration_ms,
        NextNote(record.succeeded, next),
    );
}

/// ` (resend N)` for a delivery an API resend asked for, ` (duplicate copy
/// N)` for a copy the `duplicates` fault added. The log line's parts are
/// written straight into it, not built as strings first.
struct CopyNote(u32, u64);

impl std::fmt::Display for CopyNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.1 > 0 {
            write!(f, " (resend {})", self.1)?;
        }
        if self.0 > 0 {
            write!(f, " (duplicate copy {})", self.0)?;
        }
        Ok(())
    }
}

/// The status, the error, or both.
struct AttemptResult<'a>(&'a DeliveryAttempt);

impl std::fmt::Display for AttemptResult<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.0.status, &self.0.error) {
            (Some(status), None) => write!(f, "{status}"),
            (Some(status), Some(error)) => write!(f, "{status}, {error}"),
            (None, Some(error)) => f.write_str(error),
            (None, None) => f.write_str("no reply"),
        }
    }
}

/// What happens next: another attempt, nothing more, or nothing (acknowledged).
struct NextNote(bool, Option<Duration>);

impl std::fmt::Display for NextNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.1 {
            Some(delay) => write!(f, "; next attempt in {:.1} s", delay.as_secs_f64()),
            None if self.0 => Ok(()),
            None => f.write_str("; no more attempts"),
        }
    }
}

/// What one HTTP attempt gave.
struct Outcome {
    started_at_ms: u64,
    signed_at: u64,
    signatures: u32,
    duration_ms: u64,
    status: Option<u16>,
    error: Option<String>,
    retry_after: Option<Duration>,
    /// The reply body's first bytes, as they arrive.
    response_bytes: Option<Vec<u8>>,
    response_body: Option<String>,
}

/// The signature header for `body` at `t`: one `v1` per secret in use now.
pub(crate) fn signature_header(body: &[u8], keys: &SigningKeys, t: u64, now: u64) -> (String, u32) {
    let mut header = sign(body, &keys.current, t);
    let mut count = 1;
    if let Some((previous, until)) = &keys.previous {
        if now < *until {
            let other = sign(body, previous, t);
            if let Some((_, hex)) = other.split_once(",v1=") {
                header.push_str(",v1=");
                header.push_str(hex);
                count = 2;
            }
        }
    }
    (header, count)
}

async fn attempt_once(shared: &Shared, uri: http::Uri, keys: &SigningKeys, body: &Bytes) -> Outcome {
    let started_at_ms = unix_millis();
    let now = started_at_ms / 1000;
    let skew = shared.config.faults.skew_secs;
    let signed_at = if skew >= 0 {
        now.saturating_add(skew.unsigned_abs())
    } else {
        now.saturating_sub(skew.unsigned_abs())
    };
    let (header, signatures) = signature_header(body, keys, signed_at, now);
    let started = Instant::now();
    let mut outcome = Outcome {
        started_at_ms,
        signed_at,
        signatures,
        duration_ms: 0,
        status: None,
        error: None,
        retry_after: None,
        response_bytes: None,
        response_body: None,
    };
    let request = http::Request::post(uri)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::USER_AGENT, USER_AGENT)
        .header(shared.config.signature_header.clone(), header)
        .body(Full::new(body.clone()));
    match request {
        Ok(request) => {
            let timeout = shared.config.attempt_timeout;
            // One deadline for the whole exchange, the reply's body included: a
            // receiver that sends its headers and then stalls is as silent as one
            // that sends nothing.
            let exchanged = tokio::time::timeout(
                timeout,
                exchange(&shared.deliveries.client, request, &mut outcome),
            )
            .await;
            if exchanged.is_err() {
                let doing = if outcome.status.is_some() {
                    "reading the reply"
                } else {
                    "sending"
                };
                outcome.error = Some(format!(
                    "no reply within {:.1} s (timed out {doing})",
                    timeout.as_secs_f64()
                ));
            }
        }
        // Every part is checked before: the URL at registration, the header
        // name at start, the signature is ASCII.
        Err(err) => outcome.error = Some(format!("the request could not be built: {err}")),
    }
    outcome.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    outcome.response_body = outcome.response_bytes.take().map(|bytes| excerpt_of(&bytes));
    outcome
}

/// Sends `request` and reads the reply into `outcome` as it comes, so a
/// timeout part-way leaves what had arrived.
async fn exchange(client: &HttpClient, request: http::Request<Full<Bytes>>, outcome: &mut Outcome) {
    let response = match client.request(request).await {
        Ok(response) => response,
        Err(err) => {
            outcome.error = Some(describe(&err, "sending"));
            return;
        }
    };
    outcome.status = Some(response.status().as_u16());
    outcome.retry_after = response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| retry_after(v, outcome.started_at_ms));
    let mut body = response.into_body();
    let excerpt = outcome.response_bytes.insert(Vec::new());
    while excerpt.len() < RESPONSE_READ_BYTES {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(chunk) = frame.into_data() {
                    let room = RESPONSE_READ_BYTES.saturating_sub(excerpt.len());
                    excerpt.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
            }
            None => break,
            Some(Err(err)) => {
                outcome.error = Some(describe(&err, "reading the reply"));
                break;
            }
        }
    }
}

/// A `Retry-After` value as a wait: delay-seconds, or an HTTP-date (the
/// IMF-fixdate form every sender must use) less the time now. Anything else is
/// ignored and the schedule's own backoff applies.
fn retry_after(value: &str, now_ms: u64) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = http_date_unix_seconds(value)?;
    Some(Duration::from_millis(
        at.saturating_mul(1000).saturating_sub(now_ms),
    ))
}

/// Unix seconds of an IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`.
fn http_date_unix_seconds(date: &str) -> Option<u64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let field = |range: std::ops::Range<usize>| date.get(range);
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = field(range)?;
        digits
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| digits.parse().ok())?
    };
    let layout_ok = date.len() == 29
        && field(3..5) == Some(", ")
        && [7, 11, 16].iter().all(|&i| field(i..i + 1) == Some(" "))
        && field(19..20) == Some(":")
        && field(22..23) == Some(":")
        && field(25..29) == Some(" GMT");
    if !layout_ok {
        return None;
    }
    let month = MONTHS.iter().position(|m| Some(*m) == field(8..11))?;
    let (day, year) = (number(5..7)?, number(12..16)?);
    let (hour, minute, second) = (number(17..19)?, number(20..22)?, number(23..25)?);
    if !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let month = i64::try_from(month).ok()? + 1;
    let days = payhook_core::time::days_from_civil(year, month, day);
    u64::try_from(days * 86_400 + hour * 3600 + minute * 60 + second).ok()
}

fn excerpt_of(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == RESPONSE_EXCERPT_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// An HTTP failure in words: "could not connect" or what went wrong, with
/// every cause, escaped (the causes may quote the receiver's bytes).
fn describe(err: &(dyn std::error::Error + 'static), doing: &str) -> String {
    let connect = err
        .downcast_ref::<hyper_util::client::legacy::Error>()
        .is_some_and(hyper_util::client::legacy::Error::is_connect);
    if connect {
        return "could not connect".to_owned();
    }
    let mut text = format!("failed {doing}: {err}");
    let mut source = err.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    // A message, not one value: each quoted run is capped, the wording stays whole.
    Untrusted::message(&text).to_string()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_depend_on_seed_and_subject_only() {
        let job = Job {
            event: Weak::new(),
            event_id: "evt_x".into(),
            event_seq: 3,
            endpoint_id: "we_x".into(),
            endpoint_seq: 1,
            copy: 0,
            resend: 0,
        };
        assert_eq!(
            draw(7, Draw::Duplicate, &job, 0),
            draw(7, Draw::Duplicate, &job, 0)
        );
        assert_ne!(
            draw(7, Draw::Duplicate, &job, 0),
            draw(8, Draw::Duplicate, &job, 0)
        );
        assert_ne!(draw(7, Draw::Duplicate, &job, 0), draw(7, Draw::Jitter, &job, 0));
        assert!(happens(1.0, (1 << 32) - 1));
        assert!(!happens(0.0, 0));
    }

    #[test]
    fn a_failure_is_described_whole_with_its_causes_escaped() {
        let cause = std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "error reading a body from connection: unexpected end of file\nFORGED",
        );
        let described = describe(&cause, "reading the reply");
        assert_eq!(
            described,
            r"failed reading the reply: error reading a body from connection: unexpected end of file\nFORGED"
        );
        let long = std::io::Error::other(format!("junk {}", "x".repeat(10_000)));
        let described = describe(&long, "sending");
        assert!(described.starts_with("failed sending: junk xxx"), "{described}");
        assert!(described.chars().count() < 300, "{described}");
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        let now_ms = 784_111_777_000; // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(retry_after(" 120 ", now_ms), Some(Duration::from_secs(120)));
        assert_eq!(
            http_date_unix_seconds("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(
            http_date_unix_seconds("Thu, 29 Feb 2024 00:00:00 GMT"),
            Some(1_709_164_800)
        );
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:51:37 GMT", now_ms),
            Some(Duration::from_secs(120))
        );
        // A date already past: retry now.
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now_ms),
            Some(Duration::ZERO)
        );
        assert!(retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now_ms).is_some());
        for ignored in [
            "-5",
            "1.5",
            "",
            "soon",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, +6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMTé",
            "Sün, 06 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(retry_after(ignored, now_ms), None, "{ignored:?}");
        }
    }

    #[test]
    fn the_log_line_parts_say_what_happened() {
        let mut record = DeliveryAttempt {
            duration_ms: 3,
            ..DeliveryAttempt::example("da_x")
        };
        assert_eq!(AttemptResult(&record).to_string(), "200");
        record.error = Some("no reply within 1.0 s (timed out reading the reply)".into());
        assert_eq!(
            AttemptResult(&record).to_string(),
            "200, no reply within 1.0 s (timed out reading the reply)"
        );
        record.status = None;
        record.error = Some("could not connect".into());
        assert_eq!(AttemptResult(&record).to_string(), "could not connect");
        record.error = None;
        assert_eq!(AttemptResult(&record).to_string(), "no reply");
        assert_eq!(CopyNote(0, 0).to_string(), "");
        assert_eq!(CopyNote(1, 0).to_string(), " (duplicate copy 1)");
        assert_eq!(CopyNote(0, 2).to_string(), " (resend 2)");
        assert_eq!(NextNote(true, None).to_string(), "");
        assert_eq!(NextNote(false, None).to_string(), "; no more attempts");
        assert_eq!(
            NextNote(false, Some(Duration::from_millis(1500))).to_string(),
            "; next attempt in 1.5 s"
        );
    }
}
