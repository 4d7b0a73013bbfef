//! Workers: claim due events with a lease, run the handler, mark the event done
//! in the handler's own transaction, or schedule a retry.
//!
//! The life of an event: `pending` → (claimed) `running` → `done`, or back to
//! `pending` with a later `due_at` after a failed attempt, or `dead` after the
//! last one. A claim sets a random lease token and a lease deadline; the worker
//! renews the deadline while the handler runs. Every later write about the event
//! — renew, mark done, record a failure — names the token, so a worker whose
//! event was taken over (its lease ran out) changes nothing.
//!
//! Marking done is the first statement of the transaction the handler gets from
//! [`Job::transaction`]: the handler's own writes and the mark commit together or
//! not at all. The transaction is opened only when the handler asks for it, so
//! slow work done before that (HTTP calls, e-mail) holds no transaction and no
//! SQLite write lock. A handler that never opens it gets its mark all the same:
//! such marks are written together, many in one statement, each still naming
//! its token, so a late worker's mark changes nothing there either.
//!
//! Claims take many due events in one statement. An event whose lease ran out
//! is put back in the queue (with its old token void) by a claim within a
//! fifth of a lease.
//!
//! Events of one payment intent are claimed one at a time, in the order of their
//! `created` time and then of arrival: an event is due only when no earlier
//! event of its intent is still waiting and none is running.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use payhook_core::Event;
use sqlx::{Any, Transaction};
use tokio::sync::{mpsc, oneshot, watch, Mutex, OwnedMappedMutexGuard, OwnedMutexGuard, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::backend::Backend;
use crate::clock::{millis, new_token, now_ms, random_u64};
use crate::database::Database;
use crate::error::{describe, payhook_escape, InboxError};
use crate::inner::{Config, Inner};
use crate::metrics as m;
use crate::model::{AttemptOutcome, AttemptRecord, ClaimRequest, Claimed};
use crate::upkeep::{purge_expired, report_depth, PURGE_EVERY};

/// What a handler returns when it fails: any error, boxed. Its text is kept as
/// the event's last error.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// The future a [`Handler`] returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send>>;

/// The user's code for stored events: any `Fn(Job<DB>) -> impl Future<Output =
/// Result<(), HandlerError>>` that is `Send + Sync + 'static`.
pub trait Handler<DB: Backend = Any>: Send + Sync + 'static {
    /// Handles one attempt at one event.
    fn handle(&self, job: Job<DB>) -> HandlerFuture;
}

impl<DB, F, Fut> Handler<DB> for F
where
    DB: Backend,
    F: Fn(Job<DB>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    fn handle(&self, job: Job<DB>) -> HandlerFuture {
        Box::pin(self(job))
    }
}

/// One attempt at one stored event, handed to the [`Handler`]. `DB` is the
/// inbox's database: `Job<sqlx::Postgres>` on an inbox built from a `PgPool`,
/// `Job<sqlx::Sqlite>` from a `SqlitePool`, `Job` (`Job<sqlx::Any>`) from a URL.
pub struct Job<DB: Backend = Any> {
    event: Event,
    attempt: u32,
    claim: Arc<ClaimRef<DB>>,
    slot: Arc<Mutex<Slot<DB>>>,
}

impl<DB: Backend> std::fmt::Debug for Job<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("event_id", &self.event.id())
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// What identifies a claim: the row and the lease token.
struct ClaimRef<DB: Backend> {
    db: Database<DB>,
    arrival: i64,
    token: i64,
    event_id: String,
    /// Set once the transaction is open: the row is then locked by it, and the
    /// lease no longer needs renewing.
    opened: AtomicBool,
}

struct Slot<DB: Backend> {
    tx: Option<Transaction<'static, DB>>,
    lost: bool,
    /// The handler committed through [`Job::commit`]: the event is done.
    committed: bool,
}

impl<DB: Backend> Default for Slot<DB> {
    fn default() -> Self {
        Self {
            tx: None,
            lost: false,
            committed: false,
        }
    }
}

/// The transaction in which the event is marked done, from
/// [`Job::transaction`]. It derefs to the database's connection type
/// (`PgConnection`, `SqliteConnection`, `AnyConnection`), so `&mut tx` goes
/// wherever the app's own code takes `&mut PgConnection`, and `&mut *tx` is an
/// executor for `sqlx::query`/`sqlx::query!`. payhook commits it after the
/// handler returns `Ok`, and rolls it back after an error or a panic.
pub struct JobTransaction<DB: Backend = Any> {
    guard: OwnedMappedMutexGuard<Slot<DB>, Transaction<'static, DB>>,
}

impl<DB: Backend> std::fmt::Debug for JobTransaction<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobTransaction")
    }
}

impl<DB: Backend> std::ops::Deref for JobTransaction<DB> {
    type Target = DB::Connection;
    fn deref(&self) -> &DB::Connection {
        &self.guard
    }
}

impl<DB: Backend> std::ops::DerefMut for JobTransaction<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        &mut self.guard
    }
}

impl<DB: Backend> Job<DB> {
    /// The typed event.
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// Which attempt this is: 1 for the first.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Opens (on the first call) the database transaction in which the event is
    /// marked done, and returns it for the handler's own writes. Do slow
    /// external work before calling this: the transaction holds the event's row
    /// (and, on SQLite, the database's write lock) until the handler returns.
    /// Hold one [`JobTransaction`] at a time.
    ///
    /// # Errors
    /// [`InboxError::LeaseLost`] when another worker has taken the event over
    /// (return the error: nothing this attempt does may commit), or a database
    /// error.
    pub async fn transaction(&self) -> Result<JobTransaction<DB>, InboxError> {
        let mut slot: OwnedMutexGuard<Slot<DB>> = Arc::clone(&self.slot).lock_owned().await;
        if slot.lost {
            return Err(InboxError::LeaseLost(payhook_escape(&self.claim.event_id)));
        }
        if slot.committed {
            return Err(InboxError::Committed(payhook_escape(&self.claim.event_id)));
        }
        if slot.tx.is_none() {
            let db = &self.claim.db;
            let (tx, marked) = db
                .bounded(async {
                    let mut tx = db.pool.begin().await?;
                    let marked =
                        DB::mark_done_in(&mut tx, db.dialect, self.claim.arrival, self.claim.token).await?;
                    Ok((tx, marked))
                })
                .await?;
            if !marked {
                slot.lost = true;
                drop(tx); // rolled back
                return Err(InboxError::LeaseLost(payhook_escape(&self.claim.event_id)));
            }
            self.claim.opened.store(true, Ordering::Release);
            slot.tx = Some(tx);
        }
        OwnedMutexGuard::try_map(slot, |slot| slot.tx.as_mut())
            .map(|guard| JobTransaction { guard })
            .map_err(|_| InboxError::LeaseLost(payhook_escape(&self.claim.event_id)))
    }
}

impl<DB: Backend> Job<DB> {
    /// Commits the transaction now — the handler's writes and the done mark —
    /// instead of after the handler returns, for handlers that act on the
    /// commit (print, notify). Opens the transaction first if the handler has
    /// not. Drop every [`JobTransaction`] before calling this. Once it
    /// returns `Ok` the event is done, whatever the handler returns afterwards.
    ///
    /// # Errors
    /// [`InboxError::LeaseLost`] (nothing was committed), or a database error
    /// (the outcome is then unknown; the event is retried if nothing committed).
    pub async fn commit(&self) -> Result<(), InboxError> {
        drop(self.transaction().await?);
        let mut slot = self.slot.lock().await;
        match slot.tx.take() {
            Some(tx) => {
                self.claim.db.bounded(tx.commit()).await?;
                slot.committed = true;
                Ok(())
            }
            None => Err(InboxError::LeaseLost(payhook_escape(&self.claim.event_id))),
        }
    }
}

/// The running workers of one process. Dropping this handle leaves them
/// running; [`shutdown`](Self::shutdown) stops them gracefully.
#[derive(Debug)]
pub struct Workers {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Workers {
    pub(crate) fn start<DB: Backend, H: Handler<DB>>(inbox: Arc<Inner<DB>>, handler: H) -> Self {
        let (stop, stopped) = watch::channel(false);
        let handler: Arc<dyn Handler<DB>> = Arc::new(handler);
        let task = tokio::spawn(dispatch(inbox, handler, stopped));
        Self { stop, task }
    }

    /// Stops claiming events and waits until the running handlers have
    /// finished and their results are recorded.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

async fn dispatch<DB: Backend>(
    inbox: Arc<Inner<DB>>,
    handler: Arc<dyn Handler<DB>>,
    mut stopped: watch::Receiver<bool>,
) {
    let config = inbox.config.clone();
    let db = inbox.db.clone();
    let permits = Arc::new(Semaphore::new(config.concurrency));
    let (marks, queue) = mpsc::channel(MARK_BATCH);
    let marker = tokio::spawn(mark_batches(db.clone(), queue));
    let (attempts, attempt_queue) = mpsc::channel(MARK_BATCH);
    let recorder = tokio::spawn(record_attempts(
        db.clone(),
        config.namespace.clone(),
        attempt_queue,
    ));
    // Other replicas' new events wake this one (PostgreSQL); polling stays
    // the fallback when a notification is lost.
    let listener = {
        let inbox = Arc::clone(&inbox);
        let wake = Arc::new(move || inbox.arrived.notify_one());
        DB::listen(
            &db,
            config.listen_url.clone(),
            config.namespace.clone(),
            wake,
            stopped.clone(),
        )
    };
    let mut running = JoinSet::new();
    let mut next_depth = Instant::now();
    let mut next_purge = Instant::now();
    let mut next_requeue = Instant::now();
    loop {
        if *stopped.borrow() {
            break;
        }
        while running.try_join_next().is_some() {}
        let now = Instant::now();
        if now >= next_depth {
            report_depth(&db, &config).await;
            next_depth = now + Duration::from_secs(5);
        }
        if now >= next_purge {
            let purged = purge_expired(&db, &config).await;
            // A full round means more is waiting: come back soon, so the
            // purge keeps up with any sustained rate of new events.
            next_purge = now + if purged { PURGE_EVERY / 10 } else { PURGE_EVERY };
        }
        let free = permits.available_permits();
        // Claim in batches: wait until half the handlers are free (or none
        // runs) rather than claiming one event per finished handler.
        if free == 0 || (free < config.concurrency.div_ceil(2) && !running.is_empty()) {
            // The depth is reported while every handler is busy too: that is
            // when the backlog grows.
            tokio::select! {
                _ = running.join_next() => {}
                _ = stopped.changed() => {}
                () = tokio::time::sleep_until(next_depth.into()) => {}
            }
            continue;
        }
        // Expired leases are looked for a few times per lease, not at every
        // claim: an event whose worker died is taken up within 1.2 leases.
        let requeue = now >= next_requeue;
        if requeue {
            next_requeue = now + config.lease / 5;
        }
        match claim(&db, &config, free, requeue).await {
            Ok(claimed) if !claimed.is_empty() => {
                for claimed in claimed {
                    let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                        break;
                    };
                    let inbox = Arc::clone(&inbox);
                    let handler = Arc::clone(&handler);
                    let marks = marks.clone();
                    let attempts = attempts.clone();
                    running.spawn(async move {
                        process(&inbox, handler.as_ref(), &marks, &attempts, claimed).await;
                        drop(permit);
                    });
                }
                continue;
            }
            Ok(_) => {}
            Err(err) => {
                let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
                m::database_error(config.namespace.clone(), m::CLAIM);
                tracing::warn!(target: "payhook", %reason, "could not claim inbox events; retrying");
            }
        }
        tokio::select! {
            () = inbox.arrived.notified() => {}
            () = tokio::time::sleep(config.poll_interval) => {}
            _ = stopped.changed() => {}
        }
    }
    while running.join_next().await.is_some() {}
    if let Some(listener) = listener {
        listener.abort();
    }
    // Every handler has its answer: the marker ends once its queue is closed.
    drop(marks);
    let _ = marker.await;
    drop(attempts);
    let _ = recorder.await;
}

/// Most done marks taken from the queue at once.
const MARK_BATCH: usize = 256;

/// A handler that never opened its transaction finished: its done mark waits
/// here to be written together with others.
struct MarkDone {
    arrival: i64,
    token: i64,
    /// Whether the row was still this claim's (false: the lease was lost), or
    /// why the batch failed.
    answer: oneshot::Sender<Result<bool, String>>,
}

/// Writes the done marks of handlers that did not open their transaction, all
/// that are waiting in one statement, each still checked against its lease
/// token: one commit (and on SQLite one turn of the write lock) for many
/// events instead of one each. Ends when every sender is gone.
async fn mark_batches<DB: Backend>(db: Database<DB>, mut queue: mpsc::Receiver<MarkDone>) {
    let mut batch = Vec::with_capacity(MARK_BATCH);
    while queue.recv_many(&mut batch, MARK_BATCH).await > 0 {
        // Arrival order: repeats of one row (see `mark_all`) sit side by side.
        batch.sort_by_key(|mark: &MarkDone| mark.arrival);
        match mark_all(&db, &batch).await {
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

/// Marks a batch (sorted by arrival) done; for each mark, whether its row was
/// still its claim's.
async fn mark_all<DB: Backend>(db: &Database<DB>, batch: &[MarkDone]) -> Result<Vec<bool>, sqlx::Error> {
    let mut marked = vec![false; batch.len()];
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
        let marks: Vec<(i64, i64)> = round
            .iter()
            .map(|&index| (batch[index].arrival, batch[index].token))
            .collect();
        let done = db.bounded(DB::mark_done_batch(db, &marks)).await?;
        for index in round {
            marked[index] = done.contains(&batch[index].arrival);
        }
        rest = later;
    }
    Ok(marked)
}

/// Claims up to `limit` due events; first, with `requeue`, puts expired ones
/// back in the queue, or makes them dead when their lease ran out on their
/// last attempt.
async fn claim<DB: Backend>(
    db: &Database<DB>,
    config: &Config,
    limit: usize,
    requeue: bool,
) -> Result<Vec<Claimed>, sqlx::Error> {
    let now = now_ms();
    let request = ClaimRequest {
        namespace: &config.namespace,
        now,
        lease_until: now.saturating_add(millis(config.lease)),
        token: new_token(),
        limit: i64::try_from(limit.min(256)).unwrap_or(256),
        requeue: requeue.then_some(config.max_attempts),
    };
    let result = db.bounded(DB::claim(db, request)).await?;
    m::claim(config.namespace.clone(), result.claimed.len());
    for (event_id, attempts) in &result.died {
        m::failed(config.namespace.clone(), 0.0, true);
        tracing::error!(
            target: "payhook",
            event_id = %payhook_escape(event_id),
            attempts,
            "inbox event is dead: the worker stopped while handling its last attempt"
        );
    }
    Ok(result.claimed)
}

async fn process<DB: Backend>(
    inbox: &Inner<DB>,
    handler: &dyn Handler<DB>,
    marks: &mpsc::Sender<MarkDone>,
    attempts: &mpsc::Sender<AttemptEnded>,
    claimed: Claimed,
) {
    let db = &inbox.db;
    let config = &inbox.config;
    let started = Instant::now();
    let started_at = now_ms();
    let claim = Arc::new(ClaimRef {
        db: db.clone(),
        arrival: claimed.arrival,
        token: claimed.token,
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
            record_attempt(
                attempts,
                &claimed,
                config.max_attempts,
                started_at,
                started,
                Some(&message),
            )
            .await;
            record_failure(inbox, &claimed, &message, started).await;
            return;
        }
    };
    let slot = Arc::new(Mutex::new(Slot::default()));
    let attempt = u32::try_from(claimed.attempts).unwrap_or(u32::MAX);
    // The attempt's span, in the delivery's trace (see trace.rs: a child).
    let span = crate::trace::attempt_span(&config.namespace, &claimed, &event, attempt);
    let job = Job {
        event,
        attempt,
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
            let (answer, marked) = oneshot::channel();
            let mark = MarkDone {
                arrival: claimed.arrival,
                token: claimed.token,
                answer,
            };
            if marks.send(mark).await.is_err() {
                Some("marking done failed: the marker has stopped".to_owned())
            } else {
                match marked.await {
                    Ok(Ok(true)) => None,
                    Ok(Ok(false)) => Some("the lease was lost to another worker".to_owned()),
                    Ok(Err(message)) => Some(format!("marking done failed: {message}")),
                    Err(_) => Some("marking done failed: the marker has stopped".to_owned()),
                }
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
    record_attempt(
        attempts,
        &claimed,
        config.max_attempts,
        started_at,
        started,
        failure.as_deref(),
    )
    .await;
    if let Some(message) = &failure {
        payhook_core::trace::record_error(&span, message);
    }
    match failure {
        None => {
            m::processed(config.namespace.clone(), started.elapsed().as_secs_f64());
            tracing::debug!(target: "payhook", event_id = %id, "inbox event processed");
        }
        Some(message) => record_failure(inbox, &claimed, &message, started).await,
    }
}

/// An ended attempt on its way to the attempts record, and who waits for it
/// to be written (a failed attempt is recorded before the event's new state).
type AttemptEnded = (AttemptRecord, Option<oneshot::Sender<()>>);

/// Adds the ended attempt to the attempts record (what the dashboard and
/// `payhook inbox show` list). A failure waits until it is written, so the
/// record is complete when the event is seen pending or dead again; a success
/// does not wait (its record follows the done mark by a moment).
async fn record_attempt(
    attempts: &mpsc::Sender<AttemptEnded>,
    claimed: &Claimed,
    max_attempts: u32,
    started_at: i64,
    started: Instant,
    failure: Option<&str>,
) {
    let dead = u32::try_from(claimed.attempts).unwrap_or(u32::MAX) >= max_attempts;
    let outcome = match failure {
        None => AttemptOutcome::Done,
        Some(_) if dead => AttemptOutcome::Dead,
        Some(_) => AttemptOutcome::Failed,
    };
    let record = AttemptRecord {
        arrival: claimed.arrival,
        attempt: claimed.attempts,
        started_at,
        duration_ms: millis(started.elapsed()),
        outcome,
        error: failure.map(|message| message.chars().take(2000).collect()),
    };
    if failure.is_some() {
        let (written, wait) = oneshot::channel();
        if attempts.send((record, Some(written))).await.is_ok() {
            let _ = wait.await;
        }
    } else {
        let _ = attempts.send((record, None)).await;
    }
}

/// Writes ended attempts, all that are waiting in one statement; a failure
/// to write them is logged, never fatal. Ends when every sender is gone.
async fn record_attempts<DB: Backend>(
    db: Database<DB>,
    namespace: String,
    mut queue: mpsc::Receiver<AttemptEnded>,
) {
    let mut batch = Vec::with_capacity(MARK_BATCH);
    while queue.recv_many(&mut batch, MARK_BATCH).await > 0 {
        let (records, waiting): (Vec<AttemptRecord>, Vec<Option<oneshot::Sender<()>>>) =
            batch.drain(..).unzip();
        if let Err(err) = db.bounded(DB::record_attempts(&db, &namespace, &records)).await {
            let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
            tracing::warn!(target: "payhook", %reason, "could not write to the attempts record");
        }
        for written in waiting.into_iter().flatten() {
            let _ = written.send(());
        }
    }
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
            .bounded(DB::renew(&claim.db, claim.arrival, claim.token, until))
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

async fn record_failure<DB: Backend>(inbox: &Inner<DB>, claimed: &Claimed, message: &str, started: Instant) {
    let config = &inbox.config;
    let attempts = u32::try_from(claimed.attempts).unwrap_or(u32::MAX);
    let dead = attempts >= config.max_attempts;
    let due = now_ms().saturating_add(millis(backoff(config, attempts)));
    let message: String = message.chars().take(2000).collect();
    let recorded = inbox
        .db
        .bounded(DB::record_failure(
            &inbox.db,
            claimed.arrival,
            claimed.token,
            dead,
            due,
            &message,
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

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Row as _;

    fn config(base_ms: u64, cap_ms: u64) -> Config {
        Config {
            namespace: "t".into(),
            lease: Duration::from_secs(1),
            retention: Duration::from_secs(1),
            backoff_base: Duration::from_millis(base_ms),
            backoff_cap: Duration::from_millis(cap_ms),
            max_attempts: 3,
            concurrency: 1,
            poll_interval: Duration::from_millis(10),
            listen_url: None,
            database_timeout: Duration::from_secs(3),
        }
    }

    #[test]
    fn backoff_doubles_jitters_and_caps() {
        let config = config(1000, 5000);
        for _ in 0..50 {
            let first = backoff(&config, 1);
            assert!(first >= Duration::from_millis(500) && first <= Duration::from_millis(1000));
            let third = backoff(&config, 3);
            assert!(third >= Duration::from_millis(2000) && third <= Duration::from_millis(4000));
            let late = backoff(&config, u32::MAX);
            assert!(late >= Duration::from_millis(2500) && late <= Duration::from_millis(5000));
        }
    }

    /// A row claimed twice by this process (its first lease ran out) has two
    /// marks in one batch; only the current token's mark counts, whichever
    /// order they arrive in, and the other rows of the batch are marked too.
    #[tokio::test]
    async fn a_row_twice_in_one_mark_batch_is_marked_under_its_current_token() {
        let dir = std::env::temp_dir().join(format!(
            "payhook-inbox-mark-{}-{}",
            std::process::id(),
            random_u64()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("inbox.db").display());
        let db = Database::connect(
            &url,
            crate::database::UrlOptions {
                max_connections: 2,
                acquire_timeout: Duration::from_secs(5),
                sqlite_full_sync: false,
                sqlite_cache_kib: 256,
                sqlite_busy_timeout: Duration::from_secs(10),
                create: true,
            },
        )
        .await
        .unwrap();
        <Any as crate::migrate::Migrate>::migrate(&db).await.unwrap();
        // (event id, the token its row is leased under now)
        let rows = [("evt_twice_late", 22), ("evt_twice_early", 44), ("evt_once", 66)];
        let mut arrivals = Vec::new();
        for (id, token) in rows {
            let arrival: i64 = sqlx::query_scalar(
                "INSERT INTO payhook_inbox (namespace, event_id, event_type, created, body, received_at, \
                 state, attempts, due_at, lease_token, lease_until) \
                 VALUES ('t', $1, 'x', 1, '{}', 1, 'running', 2, 1, $2, $3) RETURNING arrival",
            )
            .bind(id)
            .bind(token)
            .bind(now_ms() + 60_000)
            .fetch_one(&db.pool)
            .await
            .unwrap();
            arrivals.push(arrival);
        }
        let mut answers = Vec::new();
        let mut mark = |arrival: i64, token: i64| {
            let (answer, answered) = oneshot::channel();
            answers.push(answered);
            MarkDone {
                arrival,
                token,
                answer,
            }
        };
        // Sorted by arrival as mark_batches does; within one arrival the stale
        // token comes second for the first row and first for the second.
        let batch = vec![
            mark(arrivals[0], 22),
            mark(arrivals[0], 11),
            mark(arrivals[1], 33),
            mark(arrivals[1], 44),
            mark(arrivals[2], 66),
        ];
        let marked = mark_all(&db, &batch).await.unwrap();
        assert_eq!(marked, [true, false, false, true, true]);
        let states: Vec<(String, Option<i64>)> =
            sqlx::query("SELECT state, lease_token FROM payhook_inbox ORDER BY arrival")
                .fetch_all(&db.pool)
                .await
                .unwrap()
                .iter()
                .map(|row| (row.get("state"), row.get("lease_token")))
                .collect();
        assert_eq!(states, vec![("done".to_owned(), None); 3]);
        drop(answers);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn backoff_of_the_longest_durations_does_not_overflow() {
        let mut config = config(1000, 0);
        config.backoff_base = Duration::MAX;
        config.backoff_cap = Duration::MAX;
        for failed in [1, 2, 31, u32::MAX] {
            let delay = backoff(&config, failed);
            assert!(delay >= Duration::MAX / 2, "{delay:?}");
        }
    }
}
