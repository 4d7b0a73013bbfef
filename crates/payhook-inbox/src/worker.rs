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
//! quarter of a lease.
//!
//! Events of one payment intent are claimed one at a time, in the order of their
//! `created` time and then of arrival: an event is due only when no earlier
//! event of its intent is still waiting and none is running.

use std::collections::HashSet;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use payhook_core::Event;
use sqlx::AnyConnection;
use sqlx::{Any, Row, Transaction};
use tokio::sync::{mpsc, oneshot, watch, Mutex, OwnedMappedMutexGuard, OwnedMutexGuard, Semaphore};
use tokio::task::JoinSet;

use crate::db::{answer_batch, millis, now_ms, random_u64, Backend, Database};
use crate::error::{describe, InboxError};
use crate::inbox::{payhook_escape, Config, Inbox};
use crate::metrics as m;
use crate::schema::PG_CLAIM_LOCK_CLASS;

/// What a handler returns when it fails: any error, boxed. Its text is kept as
/// the event's last error.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// The future a [`Handler`] returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send>>;

/// The user's code for stored events: any `Fn(Job) -> impl Future<Output =
/// Result<(), HandlerError>>` that is `Send + Sync + 'static`.
pub trait Handler: Send + Sync + 'static {
    /// Handles one attempt at one event.
    fn handle(&self, job: Job) -> HandlerFuture;
}

impl<F, Fut> Handler for F
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    fn handle(&self, job: Job) -> HandlerFuture {
        Box::pin(self(job))
    }
}

/// One attempt at one stored event, handed to the [`Handler`].
pub struct Job {
    event: Event,
    attempt: u32,
    claim: Arc<ClaimRef>,
    slot: Arc<Mutex<Slot>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("event_id", &self.event.id())
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// What identifies a claim: the row and the lease token.
struct ClaimRef {
    db: Database,
    arrival: i64,
    token: i64,
    event_id: String,
    /// Set once the transaction is open: the row is then locked by it, and the
    /// lease no longer needs renewing.
    opened: AtomicBool,
}

#[derive(Default)]
struct Slot {
    tx: Option<Transaction<'static, Any>>,
    lost: bool,
    /// The handler committed through [`Job::commit`]: the event is done.
    committed: bool,
}

/// The transaction in which the event is marked done, from
/// [`Job::transaction`]. Use it as a connection (`&mut *tx`) for the handler's
/// own writes; payhook commits it after the handler returns `Ok`, and rolls it
/// back after an error or a panic.
pub struct JobTransaction {
    guard: OwnedMappedMutexGuard<Slot, Transaction<'static, Any>>,
}

impl std::fmt::Debug for JobTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobTransaction")
    }
}

impl std::ops::Deref for JobTransaction {
    type Target = AnyConnection;
    fn deref(&self) -> &AnyConnection {
        &self.guard
    }
}

impl std::ops::DerefMut for JobTransaction {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        &mut self.guard
    }
}

const MARK_DONE: &str = "UPDATE payhook_inbox SET state = 'done', done_at = $1, \
    lease_token = NULL, lease_until = NULL \
    WHERE arrival = $2 AND lease_token = $3 AND state = 'running'";

impl Job {
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
    pub async fn transaction(&self) -> Result<JobTransaction, InboxError> {
        let mut slot: OwnedMutexGuard<Slot> = Arc::clone(&self.slot).lock_owned().await;
        if slot.lost {
            return Err(InboxError::LeaseLost(payhook_escape(&self.claim.event_id)));
        }
        if slot.committed {
            return Err(InboxError::Committed(payhook_escape(&self.claim.event_id)));
        }
        if slot.tx.is_none() {
            let mut tx = self.claim.db.pool.begin().await?;
            let marked = sqlx::query(MARK_DONE)
                .bind(now_ms())
                .bind(self.claim.arrival)
                .bind(self.claim.token)
                .execute(&mut *tx)
                .await?;
            if marked.rows_affected() == 0 {
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

impl Job {
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
                tx.commit().await?;
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
    pub(crate) fn start<H: Handler>(inbox: Inbox, handler: H) -> Self {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(dispatch(inbox, Arc::new(handler), stopped));
        Self { stop, task }
    }

    /// Stops claiming events and waits until the running handlers have
    /// finished and their results are recorded.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// A claimed row.
struct Claimed {
    arrival: i64,
    event_id: String,
    body: String,
    attempts: i64,
    token: i64,
}

async fn dispatch(inbox: Inbox, handler: Arc<dyn Handler>, mut stopped: watch::Receiver<bool>) {
    let config = inbox.inner.config.clone();
    let permits = Arc::new(Semaphore::new(config.concurrency));
    let (marks, queue) = mpsc::channel(MARK_BATCH);
    let marker = tokio::spawn(mark_batches(inbox.inner.db.clone(), queue));
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
            report_depth(&inbox.inner.db, &config).await;
            next_depth = now + Duration::from_secs(5);
        }
        if now >= next_purge {
            purge_expired(&inbox.inner.db, &config).await;
            next_purge = now + Duration::from_secs(60);
        }
        let free = permits.available_permits();
        // Claim in batches: wait until half the handlers are free (or none
        // runs) rather than claiming one event per finished handler.
        if free == 0 || (free < config.concurrency.div_ceil(2) && !running.is_empty()) {
            tokio::select! {
                _ = running.join_next() => {}
                _ = stopped.changed() => {}
            }
            continue;
        }
        // Expired leases are looked for a few times per lease, not at every
        // claim: an event whose worker died is taken up within 1¼ leases.
        let requeue = now >= next_requeue;
        if requeue {
            next_requeue = now + config.lease / 4;
        }
        match claim(&inbox.inner.db, &config, free, requeue).await {
            Ok(claimed) if !claimed.is_empty() => {
                for claimed in claimed {
                    let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                        break;
                    };
                    let inbox = inbox.clone();
                    let handler = Arc::clone(&handler);
                    let marks = marks.clone();
                    running.spawn(async move {
                        process(&inbox, handler.as_ref(), &marks, claimed).await;
                        drop(permit);
                    });
                }
                continue;
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(target: "payhook", reason = %describe(&err), "could not claim inbox events; retrying");
            }
        }
        tokio::select! {
            () = inbox.inner.arrived.notified() => {}
            () = tokio::time::sleep(config.poll_interval) => {}
            _ = stopped.changed() => {}
        }
    }
    while running.join_next().await.is_some() {}
    // Every handler has its answer: the marker ends once its queue is closed.
    drop(marks);
    let _ = marker.await;
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
async fn mark_batches(db: Database, mut queue: mpsc::Receiver<MarkDone>) {
    let mut batch = Vec::with_capacity(MARK_BATCH);
    while queue.recv_many(&mut batch, MARK_BATCH).await > 0 {
        // Arrival order: repeats of one row (see `mark_all`) sit side by side.
        batch.sort_by_key(|mark: &MarkDone| mark.arrival);
        let marked = mark_all(&db, &batch).await;
        answer_batch(batch.drain(..).map(|mark| mark.answer), marked);
    }
}

/// Marks a batch (sorted by arrival) done; for each mark, whether its row was
/// still its claim's.
async fn mark_all(db: &Database, batch: &[MarkDone]) -> Result<Vec<bool>, sqlx::Error> {
    let now = now_ms();
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
        let done = mark_round(db, batch, &round, now).await?;
        for index in round {
            marked[index] = done.contains(&batch[index].arrival);
        }
        rest = later;
    }
    Ok(marked)
}

/// `UPDATE … WHERE arrival IN (…) AND lease_token = CASE arrival WHEN … END`
/// for `rows` marks (`$1` is the time, then an arrival and its token per
/// mark): each row is found by its key and done only under its own token.
fn mark_statement(rows: usize) -> String {
    let mut arrivals = String::with_capacity(rows * 6);
    let mut tokens = String::with_capacity(rows * 18);
    for row in 0..rows {
        let arrival = 2 + row * 2;
        if row > 0 {
            arrivals.push_str(", ");
        }
        arrivals.push_str(&format!("${arrival}"));
        tokens.push_str(&format!(" WHEN ${arrival} THEN ${}", arrival + 1));
    }
    format!(
        "UPDATE payhook_inbox SET state = 'done', done_at = $1, lease_token = NULL, lease_until = NULL \
         WHERE arrival IN ({arrivals}) AND state = 'running' AND lease_token = CASE arrival{tokens} END \
         RETURNING arrival"
    )
}

/// Marks rows `round` of `batch` (distinct arrivals) in one statement, padded
/// with NULL marks (which match nothing) to the next power of two so that few
/// statements exist; the arrivals marked.
async fn mark_round(
    db: &Database,
    batch: &[MarkDone],
    round: &[usize],
    now: i64,
) -> Result<HashSet<i64>, sqlx::Error> {
    let padded = round.len().max(1).next_power_of_two();
    let sql = mark_statement(padded);
    // As for ingest: small statements stay prepared, larger ones are prepared per use.
    let mut query = sqlx::query(&sql).persistent(padded <= 16).bind(now);
    for &index in round {
        query = query
            .bind(Some(batch[index].arrival))
            .bind(Some(batch[index].token));
    }
    for _ in round.len()..padded {
        query = query.bind(None::<i64>).bind(None::<i64>);
    }
    query
        .fetch_all(&db.pool)
        .await?
        .iter()
        .map(|row| row.try_get("arrival"))
        .collect()
}

/// Gives events whose lease ran out (their worker crashed, hung or lost the
/// database) back to the queue, as they were due before. Their old token no
/// longer matches, so the late worker changes nothing. `{lock}` is the
/// PostgreSQL row-locking clause: rows a worker is marking right now are
/// skipped rather than waited for.
const REQUEUE_EXPIRED: &str = "UPDATE payhook_inbox SET state = 'pending', \
    lease_token = NULL, lease_until = NULL \
    WHERE arrival IN ( \
      SELECT arrival FROM payhook_inbox \
      WHERE namespace = $1 AND state = 'running' AND lease_until < $2 {lock})";

/// The claim: due pending events whose intent has nothing earlier waiting and
/// nothing running, oldest due first. Only `pending` rows are candidates, so
/// the scan follows the `(namespace, state, due_at, arrival)` index in claim order and
/// stops after `LIMIT` rows, however many done rows the table keeps.
/// `{lock}` is the PostgreSQL row-locking clause.
const CLAIM: &str = "UPDATE payhook_inbox SET state = 'running', lease_token = $4, \
    lease_until = $3, attempts = attempts + 1, last_attempt_at = $2 \
    WHERE arrival IN ( \
      SELECT c.arrival FROM payhook_inbox c \
      WHERE c.namespace = $1 AND c.state = 'pending' AND c.due_at <= $2 \
        AND (c.intent_id IS NULL OR NOT EXISTS ( \
          SELECT 1 FROM payhook_inbox e \
          WHERE e.namespace = c.namespace AND e.intent_id = c.intent_id AND e.arrival <> c.arrival \
            AND (e.state = 'running' \
              OR (e.state = 'pending' \
                  AND (e.created < c.created OR (e.created = c.created AND e.arrival < c.arrival)))))) \
      ORDER BY c.due_at, c.arrival \
      LIMIT $5 {lock}) \
    RETURNING arrival, event_id, body, attempts";

/// Claims up to `limit` due events; first, with `requeue`, puts expired ones
/// back in the queue.
async fn claim(
    db: &Database,
    config: &Config,
    limit: usize,
    requeue: bool,
) -> Result<Vec<Claimed>, sqlx::Error> {
    let now = now_ms();
    let token = crate::db::new_token();
    let limit = i64::try_from(limit.min(256)).unwrap_or(256);
    let lease_until = now.saturating_add(millis(config.lease));
    let lock = match db.backend {
        Backend::Sqlite => "",
        Backend::Postgres => "FOR UPDATE SKIP LOCKED",
    };
    // One transaction: on SQLite one turn of the write lock, on PostgreSQL one
    // commit for the requeue and the claim.
    let mut tx = db.pool.begin().await?;
    if db.backend == Backend::Postgres {
        // Claims in one namespace are serialized (one short transaction each,
        // many events per claim) so that two workers never pick two events of
        // one intent from snapshots that cannot see each other's claim.
        sqlx::query("SELECT 1 FROM pg_advisory_xact_lock($1, hashtext($2))")
            .bind(PG_CLAIM_LOCK_CLASS)
            .bind(&config.namespace)
            .execute(&mut *tx)
            .await?;
    }
    if requeue {
        sqlx::query(&REQUEUE_EXPIRED.replace("{lock}", lock))
            .bind(&config.namespace)
            .bind(now)
            .execute(&mut *tx)
            .await?;
    }
    let rows = sqlx::query(&CLAIM.replace("{lock}", lock))
        .bind(&config.namespace)
        .bind(now)
        .bind(lease_until)
        .bind(token)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    rows.into_iter()
        .map(|row| {
            Ok(Claimed {
                arrival: row.try_get("arrival")?,
                event_id: row.try_get("event_id")?,
                body: row.try_get("body")?,
                attempts: row.try_get("attempts")?,
                token,
            })
        })
        .collect()
}

async fn process(inbox: &Inbox, handler: &dyn Handler, marks: &mpsc::Sender<MarkDone>, claimed: Claimed) {
    let db = &inbox.inner.db;
    let config = &inbox.inner.config;
    let started = Instant::now();
    let claim = Arc::new(ClaimRef {
        db: db.clone(),
        arrival: claimed.arrival,
        token: claimed.token,
        event_id: claimed.event_id.clone(),
        opened: AtomicBool::new(false),
    });
    let event = match Event::from_slice(claimed.body.as_bytes()) {
        Ok(event) => event,
        Err(err) => {
            // Only verified, parsed events are stored; this needs a changed parser.
            let message = format!("stored body does not parse: {err}");
            record_failure(inbox, &claimed, &message, started).await;
            return;
        }
    };
    let slot = Arc::new(Mutex::new(Slot::default()));
    let job = Job {
        event,
        attempt: u32::try_from(claimed.attempts).unwrap_or(u32::MAX),
        claim: Arc::clone(&claim),
        slot: Arc::clone(&slot),
    };
    let outcome = match std::panic::catch_unwind(AssertUnwindSafe(|| handler.handle(job))) {
        Err(panic) => Err(panic),
        Ok(future) => {
            tokio::select! {
                outcome = AssertUnwindSafe(future).catch_unwind() => outcome,
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
        (Ok(Ok(())), Ok(Some(tx))) => match tx.commit().await {
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
    match failure {
        None => {
            m::processed(config.namespace.clone(), started.elapsed().as_secs_f64());
            tracing::debug!(target: "payhook", event_id = %id, "inbox event processed");
        }
        Some(message) => record_failure(inbox, &claimed, &message, started).await,
    }
}

/// Renews the lease every third of it until the transaction is open; never
/// returns unless the lease is gone.
async fn renew(claim: &ClaimRef, lease: Duration) {
    let mut every = tokio::time::interval(lease / 3);
    every.tick().await;
    loop {
        every.tick().await;
        if claim.opened.load(Ordering::Acquire) {
            continue;
        }
        let renewed = sqlx::query(
            "UPDATE payhook_inbox SET lease_until = $1 \
             WHERE arrival = $2 AND lease_token = $3 AND state = 'running'",
        )
        .bind(now_ms().saturating_add(millis(lease)))
        .bind(claim.arrival)
        .bind(claim.token)
        .execute(&claim.db.pool)
        .await;
        match renewed {
            Ok(done) if done.rows_affected() == 0 && !claim.opened.load(Ordering::Acquire) => {
                tracing::warn!(target: "payhook", event_id = %payhook_escape(&claim.event_id), "lease lost to another worker while the handler ran");
                // Let the handler finish: it cannot commit, and stopping it
                // half-way could leave its external work in an unknown state.
                std::future::pending::<()>().await;
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(target: "payhook", reason = %describe(&err), "could not renew a lease; trying again");
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

async fn record_failure(inbox: &Inbox, claimed: &Claimed, message: &str, started: Instant) {
    let config = &inbox.inner.config;
    let attempts = u32::try_from(claimed.attempts).unwrap_or(u32::MAX);
    let dead = attempts >= config.max_attempts;
    let due = now_ms().saturating_add(millis(backoff(config, attempts)));
    let message: String = message.chars().take(2000).collect();
    let recorded = sqlx::query(
        "UPDATE payhook_inbox SET state = $1, due_at = $2, last_error = $3, \
         lease_token = NULL, lease_until = NULL \
         WHERE arrival = $4 AND lease_token = $5 AND state = 'running'",
    )
    .bind(if dead { "dead" } else { "pending" })
    .bind(due)
    .bind(&message)
    .bind(claimed.arrival)
    .bind(claimed.token)
    .execute(&inbox.inner.db.pool)
    .await;
    let id = payhook_escape(&claimed.event_id);
    m::failed(config.namespace.clone(), started.elapsed().as_secs_f64(), dead);
    let message = payhook_core::untrusted::Untrusted::message(&message).to_string();
    match recorded {
        Ok(done) if done.rows_affected() > 0 && dead => {
            tracing::error!(target: "payhook", event_id = %id, attempts, reason = %message, "inbox event is dead after its last attempt");
        }
        Ok(done) if done.rows_affected() > 0 => {
            tracing::warn!(target: "payhook", event_id = %id, attempts, reason = %message, "inbox handler failed; retry scheduled");
        }
        Ok(_) => {
            tracing::warn!(target: "payhook", event_id = %id, reason = %message, "attempt ended after its lease was lost; another worker has the event");
        }
        Err(err) => {
            tracing::error!(target: "payhook", event_id = %id, reason = %describe(&err), "could not record a failed attempt; the event is retried after its lease");
        }
    }
}

async fn report_depth(db: &Database, config: &Config) {
    let row = sqlx::query(
        "SELECT COUNT(*) AS waiting, MIN(received_at) AS oldest FROM payhook_inbox \
         WHERE namespace = $1 AND state IN ('pending', 'running')",
    )
    .bind(&config.namespace)
    .fetch_one(&db.pool)
    .await;
    if let Ok(row) = row {
        let waiting: i64 = row.try_get("waiting").unwrap_or(0);
        let oldest: Option<i64> = row.try_get("oldest").unwrap_or(None);
        let age = oldest.map_or(0.0, |oldest| {
            Duration::from_millis(u64::try_from(now_ms().saturating_sub(oldest)).unwrap_or(0)).as_secs_f64()
        });
        m::depth(config.namespace.clone(), waiting, age);
    }
}

async fn purge_expired(db: &Database, config: &Config) {
    let before = now_ms().saturating_sub(millis(config.retention));
    let purged = sqlx::query(
        "DELETE FROM payhook_inbox WHERE arrival IN ( \
           SELECT arrival FROM payhook_inbox \
           WHERE namespace = $1 AND state = 'done' AND done_at < $2 LIMIT 5000)",
    )
    .bind(&config.namespace)
    .bind(before)
    .execute(&db.pool)
    .await;
    if let Err(err) = purged {
        tracing::warn!(target: "payhook", reason = %describe(&err), "could not purge expired inbox events");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let db = Database::connect(&url, 2, Duration::from_secs(5), false, 256)
            .await
            .unwrap();
        crate::schema::migrate(&db.pool, db.backend).await.unwrap();
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
