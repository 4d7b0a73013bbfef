//! Workers: claim due events ahead into a local queue, start each one's
//! attempt, run the handler, mark the event done in the handler's own
//! transaction or in a batch, or schedule a retry.
//!
//! The life of an event: `pending` → (claimed) `running` → `done`, or back to
//! `pending` with a later `due_at` after a failed attempt, or `dead` after the
//! last one. A claim sets a random lease token and a lease deadline; every
//! later write about the event — start, renew, mark done, record a failure,
//! hand back — names the token, so a worker whose event was taken over (its
//! lease ran out) changes nothing.
//!
//! # Claiming ahead
//!
//! A claim takes many due events in one statement into the process's local
//! queue: as many as the handlers will start within [`AHEAD`] at the rate
//! they have been finishing events (at least the handlers free now, at most
//! [`MOST_AHEAD`]). With fast handlers one claim serves hundreds of events;
//! with slow ones it takes little more than the free handlers, so an idle
//! replica never waits long for events another replica holds. A claim that
//! found fewer events than it asked for makes the next one ask for little
//! more than it found (twice as many, at least [`SHORT_CLAIM`] and the free
//! handlers): when most waiting events are held back by their payment
//! intent's order, what a claim reads grows with what it asks for, not with
//! what it finds. Events waiting
//! in the local queue keep their lease (renewed together, a statement per
//! renewal for all of them); when the workers stop, the ones never started
//! are handed back to the queue at once.
//!
//! The same horizon decides whom the intake wakes: events this process
//! stores while its workers would take them at their next claim (the
//! target less what they hold) wake only its own workers; for the rest, its
//! `NOTIFY` wakes every replica's. Without that, each batch of a few
//! deliveries woke every replica, and most of their claims found nothing
//! (BENCHMARKS.md, inbox section 10).
//!
//! # Counting attempts: suspects
//!
//! A claim counts no attempt, and nothing is written between the claim and
//! the handler: an attempt is counted with its end, by the done mark (which
//! also writes its record) or the failure. When a process dies (or hangs
//! past its leases), the events it held come back when their lease runs out,
//! uncounted: nothing says which of them ran and which only waited in its
//! queue. Those, and only those, are *suspects*. A suspect's attempt is
//! counted by a start mark committed before its handler runs, as every
//! attempt was before this rule; suspects run side by side, so a process
//! that dies once is recovered from at full speed. A suspect whose counted
//! attempt was cut short again is a *repeat suspect*: a process runs it with
//! no other suspect (events that are not suspects run beside it, uncounted).
//!
//! So an event that crashes the process every time is counted from its
//! second crash on and ends `dead` after max-attempts + 1 crashes; an event
//! that only waited in a dead process's queue is never charged; the events
//! that ran beside it as suspects at its second crash (fewer than the
//! handlers) are charged for that crash alone, and no other crash charges
//! anything but the crashing event; an interrupted suspect's attempt is
//! recorded by the claim that takes its lease over
//! ([`attempts`](crate::queue::attempts)); and a healthy process pays nothing for
//! crash accounting.
//!
//! Start marks and batched done marks go through one writer
//! ([`marks`](crate::queue::marks)), many in one statement; a done mark also writes the attempt's
//! record. Marking done in [`Job::transaction`] is the first statement of the
//! transaction the handler gets: the handler's own writes and the mark
//! commit together or not at all. The transaction is opened only when the
//! handler asks for it, so slow work done before that (HTTP calls, e-mail)
//! holds no transaction and no SQLite write lock.
//!
//! An event whose lease ran out is put back in the queue (with its old token
//! void) by a claim within a fifth of a lease.
//!
//! On SQLite the workers also copy the WAL back into the database file a
//! moment after each write ([`copy_back_wal`]), so that no delivery's commit
//! makes that copy.
//!
//! Events of one payment intent are claimed one at a time, in the order of their
//! `created` time and then of arrival: an event is due only when no earlier
//! event of its intent is still waiting and none is running.
//!
//! Files: this one is the dispatch loop; `attempt.rs` one attempt (the
//! handler under its renewed lease, the done mark or the failure with its
//! backoff); `job.rs` what a handler sees (`Handler`, `Job`,
//! `JobTransaction`); `upkeep.rs` the upkeep (depth gauges between claims;
//! the paced retention purge and SQLite's WAL copy in tasks beside them).

mod attempt;
mod job;
pub(crate) mod upkeep;

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

pub use self::job::{Handler, HandlerError, HandlerFuture, Job, JobTransaction};

use self::attempt::{process, Writers};
use crate::backend::Backend;
use crate::clock::{millis, new_token, now_ms};
use crate::database::Database;
use crate::error::{describe, payhook_escape};
use crate::inner::{Config, Inner};
use crate::metrics as m;
use crate::model::{ClaimRequest, Claimed};
use crate::queue::marks::{record_attempts, write_marks, Mark, Step, MARK_BATCH};
use crate::worker::upkeep::{copy_back_wal, purge_expired, report_depth};

/// How far ahead of its handlers a process claims: the events its handlers
/// finish in this long, at their recent pace.
pub(crate) const AHEAD: Duration = Duration::from_millis(200);

/// The most events one process holds claimed and not started.
pub(crate) const MOST_AHEAD: usize = 512;

/// The least a claim asks for after a claim that found fewer events than
/// it asked for (see `dispatch`).
const SHORT_CLAIM: usize = 16;

/// The running workers of one process. Dropping this handle leaves them
/// running; [`shutdown`](Self::shutdown) stops them gracefully.
#[derive(Debug)]
pub struct Workers {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Workers {
    /// Starts the dispatch loop for `handler` (and, with its settings, the
    /// reconciler beside it).
    pub(crate) fn start<DB: Backend, H: Handler<DB>>(
        inbox: Arc<Inner<DB>>,
        handler: H,
        #[cfg(feature = "reconcile")] reconcile: Option<crate::reconcile::Reconcile>,
    ) -> Self {
        let (stop, stopped) = watch::channel(false);
        let handler: Arc<dyn Handler<DB>> = Arc::new(handler);
        let task = tokio::spawn(dispatch(
            inbox,
            handler,
            stopped,
            #[cfg(feature = "reconcile")]
            reconcile,
        ));
        Self { stop, task }
    }

    /// Stops claiming events, hands the ones claimed but not started back to
    /// the queue, and waits until the running handlers have finished and
    /// their results are recorded.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// The handlers' recent pace, measured over windows of a quarter second:
/// how many events to hold claimed ahead of them.
struct Pace {
    since: Instant,
    finished_then: usize,
    per_second: f64,
}

impl Pace {
    fn new() -> Self {
        Self {
            since: Instant::now(),
            finished_then: 0,
            per_second: 0.0,
        }
    }

    /// The events to hold ahead: those the handlers finish in [`AHEAD`] at
    /// their pace, capped at [`MOST_AHEAD`]; `finished` is the running count.
    fn ahead(&mut self, finished: usize, now: Instant) -> usize {
        let elapsed = now.saturating_duration_since(self.since);
        if elapsed >= Duration::from_millis(250) {
            let count = finished.saturating_sub(self.finished_then);
            #[allow(clippy::cast_precision_loss)]
            let rate = count as f64 / elapsed.as_secs_f64();
            self.per_second = rate;
            self.since = now;
            self.finished_then = finished;
        }
        let ahead = (self.per_second * AHEAD.as_secs_f64()).ceil();
        if ahead >= MOST_AHEAD as f64 {
            MOST_AHEAD
        } else {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let ahead = ahead.max(0.0) as usize;
            ahead
        }
    }
}

async fn dispatch<DB: Backend>(
    inbox: Arc<Inner<DB>>,
    handler: Arc<dyn Handler<DB>>,
    mut stopped: watch::Receiver<bool>,
    #[cfg(feature = "reconcile")] reconcile: Option<crate::reconcile::Reconcile>,
) {
    let config = inbox.config.clone();
    let db = inbox.db.clone();
    let permits = Arc::new(Semaphore::new(config.concurrency));
    let (marks, mark_queue) = mpsc::channel(MARK_BATCH);
    let marker = tokio::spawn(write_marks(db.clone(), config.namespace.clone(), mark_queue));
    let (attempts, attempt_queue) = mpsc::channel(MARK_BATCH);
    let recorder = tokio::spawn(record_attempts(
        db.clone(),
        config.namespace.clone(),
        attempt_queue,
    ));
    // SQLite's WAL copied back beside the writes, not in a delivery's commit.
    let copier = tokio::spawn(copy_back_wal(db.clone()));
    // The retention purge beside the claims: a catch-up on a day of history
    // never holds a claim back.
    let purger = tokio::spawn(purge_expired(db.clone(), config.clone(), stopped.clone()));
    let writers = Arc::new(Writers {
        marks,
        attempts,
        finished: std::sync::atomic::AtomicUsize::new(0),
        marking: std::sync::atomic::AtomicUsize::new(0),
        suspects_running: std::sync::atomic::AtomicUsize::new(0),
        repeat_running: std::sync::atomic::AtomicBool::new(false),
        suspect_ended: tokio::sync::Notify::new(),
    });
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
    // The reconciler, beside the workers and stopped with them.
    #[cfg(feature = "reconcile")]
    let reconciler = reconcile.map(|settings| {
        tokio::spawn(crate::reconcile::run(
            Arc::clone(&inbox),
            settings,
            stopped.clone(),
        ))
    });
    let mut running = JoinSet::new();
    let mut local: VecDeque<Claimed> = VecDeque::new();
    let mut pace = Pace::new();
    // The last claim: how many it took, whether it took all it asked for,
    // and how many events started since (the next claim waits for half of
    // them, so a short supply is not claimed again at every start).
    let mut last_claimed = 0;
    let mut last_full = true;
    let mut started_since = 0;
    let mut next_depth = Instant::now();
    let mut next_requeue = Instant::now();
    let mut next_renew = Instant::now() + config.lease / 4;
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
        if now >= next_renew {
            renew_waiting(&db, &config, &local).await;
            next_renew = now + config.lease / 4;
        }
        // A handler whose done mark is on its way still holds its event's
        // payment intent: claiming for it now could only find other intents'
        // events, out of their arrival order.
        let free = permits
            .available_permits()
            .saturating_sub(writers.marking.load(Ordering::Acquire));
        let target = pace
            .ahead(writers.finished.load(Ordering::Relaxed), now)
            .max(free);
        let settled = last_full
            || started_since
                >= (last_claimed / 2).max(if last_claimed == 0 { config.concurrency } else { 1 });
        // Nothing is claimed that no handler could start soon: with no
        // handler free and no pace yet, the next claim waits for a handler.
        if target > local.len() && (local.is_empty() || (local.len() * 2 <= target && settled)) {
            // Expired leases are looked for a few times per lease, not at every
            // claim: an event whose worker died is taken up within 1.2 leases.
            let requeue = now >= next_requeue;
            if requeue {
                next_requeue = now + config.lease / 5;
            }
            // After a claim that found fewer than it asked for, the next
            // asks for little more than that claim found (and the free
            // handlers): when the queue's events are held back by their
            // intents' order, a claim reads past many to find a few, and
            // what it reads grows with what it asks for.
            let mut limit = target - local.len();
            if !last_full {
                limit = limit.min((last_claimed * 2).max(free).max(SHORT_CLAIM));
            }
            match claim(&db, &config, limit, free.min(limit), requeue).await {
                Ok(claimed) => {
                    if local.is_empty() {
                        next_renew = Instant::now() + config.lease / 4;
                    }
                    last_claimed = claimed.len();
                    last_full = claimed.len() >= limit;
                    started_since = 0;
                    local.extend(claimed);
                }
                Err(err) => {
                    last_claimed = 0;
                    last_full = false;
                    started_since = 0;
                    let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
                    m::database_error(config.namespace.clone(), m::CLAIM);
                    tracing::warn!(target: "payhook", %reason, "could not claim inbox events; retrying");
                }
            }
        }
        // What the intake may leave to this process alone (`Inner::room`).
        inbox
            .room
            .store(target.saturating_sub(local.len()), Ordering::Release);
        if local.is_empty() && target == 0 {
            // Every handler is busy (or marking its event done): wait for
            // one to finish.
            tokio::select! {
                permit = permits.acquire(), if permits.available_permits() == 0 => drop(permit),
                () = inbox.arrived.notified() => {}
                () = stop_requested(&mut stopped) => {}
                () = tokio::time::sleep_until(next_depth.into()) => {}
            }
            continue;
        }
        if local.is_empty() {
            tokio::select! {
                () = inbox.arrived.notified() => {}
                () = tokio::time::sleep(config.poll_interval) => {}
                () = stop_requested(&mut stopped) => {}
            }
            continue;
        }
        // Suspects wait for a repeat suspect, and a repeat suspect for every
        // other suspect (see the module docs).
        let startable = local.iter().any(|claimed| may_start(claimed, &writers));
        let suspects_running = writers.suspects_running.load(Ordering::Acquire) > 0;
        tokio::select! {
            biased;
            () = stop_requested(&mut stopped) => {}
            permit = Arc::clone(&permits).acquire_owned(), if startable => {
                let Ok(mut permit) = permit else { break };
                while let Some(claimed) = next_to_start(&mut local, &writers) {
                    started_since += 1;
                    start(&inbox, &handler, &writers, &mut running, claimed, permit).await;
                    match Arc::clone(&permits).try_acquire_owned() {
                        Ok(next) => permit = next,
                        Err(_) => break,
                    }
                }
            }
            () = writers.suspect_ended.notified(), if suspects_running => {}
            () = tokio::time::sleep_until(next_renew.into()) => {}
            // The depth is reported while every handler is busy too: that is
            // when the backlog grows.
            () = tokio::time::sleep_until(next_depth.into()) => {}
            () = inbox.arrived.notified(), if !last_full => {
                last_full = true;
            }
        }
    }
    inbox.room.store(0, Ordering::Release);
    // Handed back at once, so another replica (or this one's successor)
    // takes them up without waiting for their lease.
    hand_back(&db, &mut local).await;
    while running.join_next().await.is_some() {}
    if let Some(listener) = listener {
        listener.abort();
    }
    copier.abort();
    // It stops before its next batch: one batch at most to wait for.
    let _ = purger.await;
    // It gives its turn up as it stops, so another replica takes over at once.
    #[cfg(feature = "reconcile")]
    if let Some(reconciler) = reconciler {
        let _ = reconciler.await;
    }
    // Every handler has its answer: the writers end once their queues close.
    drop(writers);
    let _ = marker.await;
    let _ = recorder.await;
}

/// Returns once the workers are asked to stop; never when the [`Workers`]
/// handle was dropped instead (the workers then run as long as the runtime).
async fn stop_requested(stopped: &mut watch::Receiver<bool>) {
    if stopped.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The `suspect` mark of a suspect whose counted attempt started: taken back
/// again, it is a repeat suspect.
const REPEAT_SUSPECT: i64 = 2;

/// Whether `claimed` may start now: any event that is not a suspect; a
/// suspect while no repeat suspect runs here; a repeat suspect while no
/// other suspect runs here. So a crash while a repeat suspect runs charges
/// it alone (the events beside it are not suspects, and go uncounted).
fn may_start(claimed: &Claimed, writers: &Writers) -> bool {
    match claimed.suspect {
        0 => true,
        level if level < REPEAT_SUSPECT => !writers.repeat_running.load(Ordering::Acquire),
        _ => writers.suspects_running.load(Ordering::Acquire) == 0,
    }
}

/// The first event of the local queue that [may start](may_start).
fn next_to_start(local: &mut VecDeque<Claimed>, writers: &Writers) -> Option<Claimed> {
    let index = local.iter().position(|claimed| may_start(claimed, writers))?;
    local.remove(index)
}

/// Starts one claimed event. Its handler runs at once, the attempt counted
/// with its end; a suspect's attempt is counted first, by a start mark in
/// the writer's next batch, and its handler runs once that is written.
async fn start<DB: Backend>(
    inbox: &Arc<Inner<DB>>,
    handler: &Arc<dyn Handler<DB>>,
    writers: &Arc<Writers>,
    running: &mut JoinSet<()>,
    mut claimed: Claimed,
    permit: OwnedSemaphorePermit,
) {
    let inbox = Arc::clone(inbox);
    let handler = Arc::clone(handler);
    let writers = Arc::clone(writers);
    if claimed.suspect == 0 {
        claimed.attempts += 1;
        running.spawn(async move {
            process(&inbox, handler.as_ref(), &writers, claimed, permit).await;
        });
        return;
    }
    let running_suspect = RunningSuspect::new(&writers, claimed.suspect >= REPEAT_SUSPECT);
    let (answer, marked) = oneshot::channel();
    let mark = Mark {
        arrival: claimed.arrival,
        token: claimed.token,
        step: Step::Start,
        answer,
    };
    if writers.marks.send(mark).await.is_err() {
        return;
    }
    running.spawn(async move {
        let id = payhook_escape(&claimed.event_id);
        match marked.await {
            Ok(Ok(Some(attempt))) => {
                claimed.attempts = attempt;
                process(&inbox, handler.as_ref(), &writers, claimed, permit).await;
            }
            Ok(Ok(None)) => {
                tracing::warn!(target: "payhook", event_id = %id, "claimed event not started: its lease ran out while it waited and another worker has it");
            }
            outcome => {
                let reason = match outcome {
                    Ok(Err(message)) => payhook_core::untrusted::Untrusted::message(&message).to_string(),
                    _ => "the marker has stopped".to_owned(),
                };
                tracing::warn!(target: "payhook", event_id = %id, %reason, "could not start a claimed event; it is taken up again after its lease");
            }
        }
        drop(running_suspect);
    });
}

/// A suspect running here, counted in [`Writers`] from its start until this
/// is dropped (however its task ends): then the suspects waiting for it may
/// start.
struct RunningSuspect {
    writers: Arc<Writers>,
    repeat: bool,
}

impl RunningSuspect {
    fn new(writers: &Arc<Writers>, repeat: bool) -> Self {
        writers.suspects_running.fetch_add(1, Ordering::AcqRel);
        if repeat {
            writers.repeat_running.store(true, Ordering::Release);
        }
        Self {
            writers: Arc::clone(writers),
            repeat,
        }
    }
}

impl Drop for RunningSuspect {
    fn drop(&mut self) {
        if self.repeat {
            self.writers.repeat_running.store(false, Ordering::Release);
        }
        self.writers.suspects_running.fetch_sub(1, Ordering::AcqRel);
        self.writers.suspect_ended.notify_one();
    }
}

/// Claims up to `limit` due events, `needed` of them for the handlers free
/// now ([`ClaimRequest`]); first, with `requeue`, puts expired ones back in
/// the queue, or makes them dead when their lease ran out on their last
/// attempt.
async fn claim<DB: Backend>(
    db: &Database<DB>,
    config: &Config,
    limit: usize,
    needed: usize,
    requeue: bool,
) -> Result<Vec<Claimed>, sqlx::Error> {
    let now = now_ms();
    let request = ClaimRequest {
        namespace: &config.namespace,
        now,
        lease_until: now.saturating_add(millis(config.lease)),
        token: new_token(),
        limit: i64::try_from(limit.min(MOST_AHEAD)).unwrap_or(1),
        needed: i64::try_from(needed.min(MOST_AHEAD)).unwrap_or(1),
        requeue: requeue.then_some(config.max_attempts),
    };
    let result = db.write(DB::claim(db, request)).await?;
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

/// Extends the lease of the events waiting in the local queue, one
/// statement for all of them.
async fn renew_waiting<DB: Backend>(db: &Database<DB>, config: &Config, local: &VecDeque<Claimed>) {
    let leases: Vec<(i64, i64)> = local
        .iter()
        .map(|claimed| (claimed.arrival, claimed.token))
        .collect();
    if leases.is_empty() {
        return;
    }
    let until = now_ms().saturating_add(millis(config.lease));
    if let Err(err) = db
        .write(DB::renew_claims(db, &config.namespace, &leases, until))
        .await
    {
        let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
        tracing::warn!(target: "payhook", %reason, "could not renew the leases of claimed events; trying again");
    }
}

/// Gives the events claimed and never started back to the queue.
async fn hand_back<DB: Backend>(db: &Database<DB>, local: &mut VecDeque<Claimed>) {
    // One arrival may be there twice (claimed again after its first lease
    // ran out): only the later claim can still hold it.
    let mut seen = std::collections::HashSet::new();
    let leases: Vec<(i64, i64)> = local
        .drain(..)
        .rev()
        .filter(|claimed| seen.insert(claimed.arrival))
        .map(|claimed| (claimed.arrival, claimed.token))
        .collect();
    for chunk in leases.chunks(MOST_AHEAD) {
        if let Err(err) = db.write(DB::hand_back(db, chunk)).await {
            let reason = payhook_core::untrusted::Untrusted::message(&describe(&err)).to_string();
            tracing::warn!(target: "payhook", %reason, "could not hand claimed events back; they are taken up again after their lease");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::attempt::backoff;
    use super::*;
    use crate::clock::random_u64;
    use crate::queue::marks::mark_all;
    use sqlx::Any;
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
        <Any as crate::database::migrate::Migrate>::migrate(&db)
            .await
            .unwrap();
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
            Mark {
                arrival,
                token,
                step: Step::Done {
                    attempt: 3,
                    started_at: 1,
                },
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
        let marked = mark_all(&db, "t", &batch).await.unwrap();
        let marked: Vec<bool> = marked.iter().map(Option::is_some).collect();
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
