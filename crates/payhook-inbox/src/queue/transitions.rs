//! The queue: the state changes of an event, each a named method with its
//! statement beside it. Intake stores new events `pending`
//! ([`insert`](crate::intake::insert::Intake::insert)); a worker's [`claim`](Queue::claim) makes due
//! ones `running` under a lease token (first requeuing, or making dead, those
//! whose lease ran out), [`renew`](Queue::renew) extends the lease,
//! [`mark_done_in`](Queue::mark_done_in) makes one `done` in the handler's
//! transaction (the batched start and done marks are in
//! [`progress`](crate::queue::progress)), and
//! [`record_failure`](Queue::record_failure) `pending` again (later) or
//! `dead`; these two count the attempt, with its number and start. Every
//! write after the claim names the lease token, so a worker whose lease was
//! taken over changes nothing. A state is a bound parameter; the one literal
//! is the waiting phase ([`waiting_phase!`](crate::database::dialect::waiting_phase),
//! written from `State::Pending`'s name), which the partial index of waiting
//! events needs a statement to name.
//!
//! # The layout: what a claim writes
//!
//! On PostgreSQL the indexes order events by *phase* ([`State::phase`], a
//! column the database computes), not by state: `pending` and `running` are
//! one phase, and the claims' index (`payhook_inbox_waiting`) holds the
//! waiting events only. A claim and a requeue change `state` and the lease,
//! which no index holds, so they are heap-only (HOT) updates that write no
//! index entry (the fill factor leaves room on each page for the new
//! version); only an event's end (done, dead, retried) moves it between
//! indexes. The price: a claim skips the running events at the head of the
//! waiting index by reading their rows, and the requeue of expired leases
//! reads every waiting event of the namespace, which is why it runs every
//! fifth of a lease rather than with each claim (see the `worker` module).
//! SQLite keeps its indexes on `state` (it has no heap-only update to win,
//! and cannot read its virtual `phase` column from an index alone); the
//! statements name the phase on both, so they read the same.
//!
//! # Suspects
//!
//! Nothing is written between a claim and its handler, so when a claim's
//! lease runs out (its process died or hung), nothing says which of its
//! events ran and which only waited in that process's queue. The claim that
//! finds them gives them back uncounted and marks them suspect
//! (`REQUEUE_UNCOUNTED`: `suspect` 1). A suspect's attempt is counted by a
//! start mark before its handler runs (see the `worker` module), which also
//! makes it `suspect` 2, so when such a suspect's lease runs out its attempt
//! was made: it is recorded as interrupted and the event given back a
//! *repeat* suspect (`REQUEUE_SUSPECTS`), or made dead on its last attempt
//! (`KILL_EXPIRED`); a suspect that only waited stays 1. A failed attempt
//! clears the mark.
//!
//! # Claims on PostgreSQL: a guard per payment intent, none per namespace
//!
//! Events of one payment intent run one at a time, in order: a claim takes a
//! pending event only when no earlier event of its intent is pending and none
//! is running. `FOR UPDATE SKIP LOCKED` keeps two claims off the same row, but
//! not off two rows of one intent: when an earlier event of an intent becomes
//! pending (a late arrival, a replay, a retry of a dead event) while two claims
//! overlap, the first claim's snapshot lacks the earlier event, so it takes the
//! later one, and the second cannot see the first's uncommitted `running`
//! mark, so it takes the earlier one. Both would run at once.
//!
//! One lock for the namespace, taken by every claim, would close that gap but
//! make the claims of all replicas wait in one line, held across several
//! round trips, so that adding replicas would make the inbox slower. The
//! claim instead guards each intent on its own, in two statements of one
//! transaction:
//!
//! 1. *Pick* ([`PICK`]): the candidates (due, pending, nothing earlier of
//!    the intent waiting or running; whether a later event of the intent
//!    runs, which only a late arrival or a retried dead event meets, is left
//!    to the second statement), their rows locked
//!    `FOR UPDATE SKIP LOCKED`, and for each candidate with an intent a
//!    transaction-scoped advisory lock on (namespace, intent) taken with
//!    `pg_try_advisory_xact_lock`: a candidate whose intent another claim is
//!    guarding right now is skipped, never waited for. Events without an
//!    intent need no guard.
//! 2. *Claim* ([`CLAIM`] restricted to the picked rows): the whole rule
//!    checked under a new statement snapshot, taken after the guards were
//!    granted, and the rows marked `running`.
//!
//! Why that is enough: every claim that marks an event of an intent `running`
//! holds that intent's guard until it commits. A second claim of the intent
//! either fails to take the guard (the first has not committed: the candidate
//! is skipped) or takes it after the first committed, and then its second
//! statement's snapshot, newer than that commit, sees the `running` mark and
//! claims nothing of the intent. A late earlier event is likewise seen by the
//! second statement, and the later event is left pending. Nothing waits on a
//! lock: rows and guards are skipped when taken, so claims cannot deadlock,
//! and the guards live as long as one claim transaction (two statements and
//! the commit, well under a millisecond of the database's time).
//!
//! A claim takes as many events as its process will start within a short
//! horizon (the worker's local queue, see the `worker` module), not only as many as
//! it has free handlers, so one claim serves hundreds of events when the
//! handlers are fast, and an idle replica waits at most that horizon for
//! events another replica holds (measured in BENCHMARKS.md, "Claim ahead");
//! the lock wait itself stays zero.
//!
//! # The claim's window
//!
//! Only the first waiting event of each intent may be claimed, so when the
//! intents' first events are running, the events after them are waiting
//! for nothing the claim can change, and a pick that read the whole queue
//! would read each of them (with the rule's check) at every claim. The
//! pick therefore reads the first due waiting events only, four times as
//! many as the claim asks for (at least 64, at most 2 048: [`claim_window`]),
//! and reads the whole queue when that finds fewer events than the handlers
//! free right now would start (`ClaimRequest::needed`). A claim made while
//! every handler is busy only fills the local queue ahead of them, and
//! reads the window alone. Events later in the queue wait for a later claim
//! only while earlier ones keep every free handler busy: the queue's order
//! is kept, and no handler is left idle while an event it could take waits
//! beyond the window (the conformance test
//! `a_free_handler_takes_an_event_from_beyond_the_window`: with the window
//! alone its event waited behind 88 events of two busy intents; reading on
//! only when the window held nothing, behind 33–74 in some runs, while a
//! third handler idled). After a claim that found fewer events than it
//! asked for, the worker's next claim asks for little more than that one
//! found, so its window shrinks with it (see the `worker` module).
//!
//! # Each intent's order, from its unfinished events
//!
//! The rule's check reads an index of each intent's waiting and running
//! events only (`payhook_inbox_intent_waiting`, migration 14): an intent's
//! done history, kept for the retention, is never read. Its first half
//! (nothing earlier unfinished) reads the intent's entries before the
//! candidate, so an event behind another of its intent is answered by one
//! entry and an intent's first waiting event by none; its second half
//! (nothing later running: a late arrival's or a retried dead event's case)
//! reads the intent's unfinished events after the candidate, and only the
//! claim's second statement checks it. The index's key is an
//! expression, the intent of an event in the waiting phase, that the probe
//! names: naming the phase itself would let the planner take the waiting
//! events' index for the probe, which on a freshly filled table it did
//! (BENCHMARKS.md, section 14). SQLite reads each intent's events by the
//! intent index of migration 1 (`due_in_order!`).
//!
//! The requeue of expired leases, in the same transaction, locks its rows
//! `FOR UPDATE SKIP LOCKED` as well and re-checks their state when it locks
//! them, so two replicas never requeue or kill the same event twice.
//!
//! SQLite has one writer: its claim is one statement under the database's
//! write lock, which already serializes claims.

use std::future::Future;

use sqlx::Row as _;

use crate::clock::now_ms;
use crate::database::dialect::{paused_table, table, waiting_phase, Dialect};
use crate::database::driver::{sql_bounds, Driver};
use crate::database::Database;
use crate::model::{
    AttemptOutcome, AttemptRecord, ClaimRequest, ClaimResult, Claimed, ClaimedAttempt, Failure, Source, State,
};
use crate::queue::attempts::{interrupted_attempt, AttemptsRecord, MAX_ATTEMPT_RECORDS, TRIM_ATTEMPTS};

/// The first half of the two-part advisory lock key that guards a payment
/// intent during a claim ("phi!" in ASCII); the second half is a hash of the
/// namespace and the intent id. (PostgreSQL keeps one-part and two-part keys
/// apart: this never meets the migrations' one-part key. Two intents whose
/// hashes collide only skip each other in a claim that overlaps, never more.)
const PG_INTENT_GUARD_CLASS: i32 = 0x7068_6921;

/// The last error of an event taken back uncounted from a process that died
/// (or hung) holding it.
pub(crate) const UNCOUNTED: &str = "the process holding it stopped or lost its lease before the event was done; \
     not counted as an attempt (it may only have waited in that process's queue): its next attempt is counted before it runs";

/// The queue's state changes on one backend. Not nameable outside the crate.
pub trait Queue: Driver {
    /// Requeues or kills expired claims, then claims due events: `pending` →
    /// `running` under the request's lease token.
    fn claim<'a>(
        db: &'a Database<Self>,
        request: ClaimRequest<'a>,
    ) -> impl Future<Output = Result<ClaimResult, sqlx::Error>> + Send + 'a;
    /// `running` → `done` in the handler's transaction, which then commits
    /// synchronously ([`Dialect::durable_commit`]), the attempt counted;
    /// whether the claim held.
    fn mark_done_in(
        conn: &mut Self::Connection,
        dialect: Dialect,
        attempt: ClaimedAttempt,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + '_;
    /// Extends a lease; whether the claim still held.
    fn renew(
        db: &Database<Self>,
        arrival: i64,
        token: i64,
        until: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + '_;
    /// A failed attempt, counted and recorded in the attempts record in one
    /// transaction: `running` → `pending` again at `due`, no longer a
    /// suspect, or `dead` (then `due` is the time it died: a dead event is
    /// never due, and the bulk actions' count reads when it died there);
    /// whether the claim held (when it did not, nothing is written).
    fn record_failure<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        attempt: ClaimedAttempt,
        failure: Failure<'a>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'a;
}

sql_bounds! {
    impl<DB> Queue {
        async fn claim<'a>(db: &'a Database<Self>, request: ClaimRequest<'a>) -> Result<ClaimResult, sqlx::Error> {
            /// Suspects whose lease ran out on their last attempt (counted by
            /// their start mark: they were running, not waiting, when their
            /// process died or hung, more than once if they crash it): dead,
            /// so that one such event cannot take the service down in a loop.
            /// A dead event's `due_at` is when it died (the bulk actions'
            /// count reads it).
            const KILL_EXPIRED: &str = concat!(
                "UPDATE ",
                table!(),
                " SET state = $1, due_at = $5, lease_token = NULL, lease_until = NULL, \
                 last_error = 'the worker stopped while handling it (attempt ' || CAST(attempts AS TEXT) || $2 \
                 WHERE arrival IN ( \
                   SELECT arrival FROM ",
                table!(),
                " WHERE namespace = $3 AND phase = ",
                waiting_phase!(),
                " AND state = $4 AND lease_until < $5 AND suspect > 1 AND attempts >= $6 {lock}) \
                 RETURNING arrival, event_id, attempts, last_attempt_at"
            );

            /// Gives the other suspects whose lease ran out back to the queue, as
            /// they were due before; the attempt of each one that started
            /// (`suspect` 2), counted by its start mark, was cut short. The old token no longer matches, so the late
            /// worker changes nothing. `{lock}` is the PostgreSQL row-locking
            /// clause: rows a worker is marking right now are skipped rather
            /// than waited for.
            const REQUEUE_SUSPECTS: &str = concat!(
                "UPDATE ",
                table!(),
                " SET state = $1, lease_token = NULL, lease_until = NULL \
                 WHERE arrival IN ( \
                   SELECT arrival FROM ",
                table!(),
                " WHERE namespace = $2 AND phase = ",
                waiting_phase!(),
                " AND state = $3 AND lease_until < $4 AND suspect > 0 {lock}) \
                 RETURNING arrival, attempts, last_attempt_at, suspect"
            );

            /// Gives back the events held without a start mark whose lease ran
            /// out (their process crashed, hung or lost the database): nothing
            /// says whether each one ran or only waited in that process's
            /// queue, so none is charged an attempt; each becomes a suspect.
            const REQUEUE_UNCOUNTED: &str = concat!(
                "UPDATE ",
                table!(),
                " SET state = $1, lease_token = NULL, lease_until = NULL, suspect = 1, last_error = $5 \
                 WHERE arrival IN ( \
                   SELECT arrival FROM ",
                table!(),
                " WHERE namespace = $2 AND phase = ",
                waiting_phase!(),
                " AND state = $3 AND lease_until < $4 AND suspect = 0 {lock})"
            );

            let lock = db.dialect.skip_locked();
            // One transaction: on SQLite one turn of the write lock, on
            // PostgreSQL one commit for the requeue and the claim, which
            // also releases the intents' guards (see the module docs).
            let mut tx = db.begin().await?;
            let mut died = Vec::new();
            if let Some(max_attempts) = request.requeue {
                let killed = sqlx::query(&KILL_EXPIRED.replace("{lock}", lock))
                    .bind(State::Dead.as_str())
                    .bind(format!(" of {max_attempts})"))
                    .bind(request.namespace)
                    .bind(State::Running.as_str())
                    .bind(request.now)
                    .bind(i64::from(max_attempts))
                    .fetch_all(&mut *tx)
                    .await?;
                died = killed
                    .iter()
                    .map(|row| Ok((row.try_get("event_id")?, row.try_get("attempts")?)))
                    .collect::<Result<_, sqlx::Error>>()?;
                let requeued = sqlx::query(&REQUEUE_SUSPECTS.replace("{lock}", lock))
                    .bind(State::Pending.as_str())
                    .bind(request.namespace)
                    .bind(State::Running.as_str())
                    .bind(request.now)
                    .fetch_all(&mut *tx)
                    .await?;
                sqlx::query(&REQUEUE_UNCOUNTED.replace("{lock}", lock))
                    .bind(State::Pending.as_str())
                    .bind(request.namespace)
                    .bind(State::Running.as_str())
                    .bind(request.now)
                    .bind(UNCOUNTED)
                    .execute(&mut *tx)
                    .await?;
                // Exactly the suspects taken back: their attempts were cut
                // short. A suspect claimed ahead and never started had no
                // attempt under that claim: its number is its last attempt's,
                // already recorded (kept by the insert), or 0 when it never ran.
                let started = requeued
                    .iter()
                    .filter(|row| row.try_get::<i64, _>("suspect").is_ok_and(|suspect| suspect > 1));
                let interrupted = killed
                    .iter()
                    .chain(started)
                    .filter_map(|row| interrupted_attempt(row, request.now).transpose())
                    .collect::<Result<Vec<_>, sqlx::Error>>()?;
                DB::record_attempts_in(&mut tx, request.namespace, &interrupted).await?;
            }
            let picked: Vec<i64> = if !db.dialect.guards_intents() {
                Vec::new()
            } else {
                let mut picked: Vec<i64> = Vec::new();
                // The window, then (no cutoff to find) the whole queue.
                for window in [Some(claim_window(request.limit)), None] {
                    picked = sqlx::query(PICK)
                        .bind(request.namespace)
                        .bind(request.now)
                        .bind(State::Pending.as_str())
                        .bind(request.limit)
                        .bind(PG_INTENT_GUARD_CLASS)
                        .bind(window)
                        .fetch_all(&mut *tx)
                        .await?
                        .iter()
                        .map(|row| row.try_get("arrival"))
                        .collect::<Result<_, sqlx::Error>>()?;
                    // Enough for the handlers free now: the queue beyond
                    // the window waits for the next claim. With no handler
                    // free, the claim only fills the local queue ahead of
                    // them, and the window is all it reads.
                    if i64::try_from(picked.len()).unwrap_or(i64::MAX) >= request.needed {
                        break;
                    }
                }
                picked
            };
            if db.dialect.guards_intents() && picked.is_empty() {
                tx.commit().await?;
                return Ok(ClaimResult { claimed: Vec::new(), died });
            }
            let sql = claim_statement(db.dialect);
            let mut query = sqlx::query(&sql)
                .bind(request.namespace)
                .bind(request.now)
                .bind(request.lease_until)
                .bind(request.token)
                .bind(request.limit)
                .bind(State::Running.as_str())
                .bind(State::Pending.as_str());
            if db.dialect.guards_intents() {
                let mut list = String::with_capacity(picked.len() * 8 + 2);
                for arrival in &picked {
                    list.push(if list.is_empty() { '[' } else { ',' });
                    list.push_str(&format!("[{arrival}]"));
                }
                list.push(']');
                query = query.bind(list);
            }
            let rows = query.fetch_all(&mut *tx).await?;
            tx.commit().await?;
            let mut claimed: Vec<Claimed> = rows
                .iter()
                .map(|row| {
                    Ok(Claimed {
                        arrival: row.try_get("arrival")?,
                        event_id: row.try_get("event_id")?,
                        body: row.try_get("body")?,
                        attempts: row.try_get("attempts")?,
                        token: request.token,
                        trace_context: row.try_get("trace_context")?,
                        source: Source::of_column(row.try_get::<Option<String>, _>("source")?.as_deref()),
                        suspect: row.try_get("suspect")?,
                    })
                })
                .collect::<Result<_, sqlx::Error>>()?;
            // Started in arrival order (a statement returns its rows in any).
            claimed.sort_unstable_by_key(|claimed| claimed.arrival);
            Ok(ClaimResult { claimed, died })
        }

        async fn mark_done_in(
            conn: &mut Self::Connection,
            dialect: Dialect,
            attempt: ClaimedAttempt,
        ) -> Result<bool, sqlx::Error> {
            /// The done mark inside the handler's transaction, with the
            /// attempt's number and start; `{durable}` makes that
            /// transaction's commit synchronous.
            const MARK_DONE: &str = concat!(
                "UPDATE ",
                table!(),
                " SET state = $1, done_at = $2, lease_token = NULL, lease_until = NULL, last_error = NULL, \
                 attempts = $6, last_attempt_at = $7 \
                 WHERE arrival = $3 AND lease_token = $4 AND state = $5{durable}"
            );

            let sql = MARK_DONE.replace("{durable}", dialect.durable_commit());
            let marked = sqlx::query(&sql)
                .bind(State::Done.as_str())
                .bind(now_ms())
                .bind(attempt.arrival)
                .bind(attempt.token)
                .bind(State::Running.as_str())
                .bind(attempt.number)
                .bind(attempt.started_at)
                .execute(&mut *conn)
                .await?;
            Ok(DB::rows_affected(&marked) > 0)
        }

        async fn renew(db: &Database<Self>, arrival: i64, token: i64, until: i64) -> Result<bool, sqlx::Error> {
            const RENEW: &str = concat!(
                "UPDATE ",
                table!(),
                " SET lease_until = $1 WHERE arrival = $2 AND lease_token = $3 AND state = $4"
            );

            let renewed = sqlx::query(RENEW)
                .bind(until)
                .bind(arrival)
                .bind(token)
                .bind(State::Running.as_str())
                .execute(&db.pool)
                .await?;
            Ok(DB::rows_affected(&renewed) > 0)
        }

        async fn record_failure<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            attempt: ClaimedAttempt,
            failure: Failure<'a>,
        ) -> Result<bool, sqlx::Error> {
            const RECORD_FAILURE: &str = concat!(
                "UPDATE ",
                table!(),
                " SET state = $1, due_at = $2, last_error = $3, lease_token = NULL, lease_until = NULL, \
                 attempts = $7, last_attempt_at = $8, suspect = 0 \
                 WHERE arrival = $4 AND lease_token = $5 AND state = $6"
            );

            let state = if failure.dead { State::Dead } else { State::Pending };
            let mut tx = db.begin().await?;
            let recorded = sqlx::query(RECORD_FAILURE)
                .bind(state.as_str())
                .bind(failure.due)
                .bind(failure.message)
                .bind(attempt.arrival)
                .bind(attempt.token)
                .bind(State::Running.as_str())
                .bind(attempt.number)
                .bind(attempt.started_at)
                .execute(&mut *tx)
                .await?;
            let held = DB::rows_affected(&recorded) > 0;
            if held {
                let record = AttemptRecord {
                    arrival: attempt.arrival,
                    attempt: attempt.number,
                    started_at: attempt.started_at,
                    duration_ms: failure.ended_at.saturating_sub(attempt.started_at).max(0),
                    outcome: if failure.dead { AttemptOutcome::Dead } else { AttemptOutcome::Failed },
                    error: Some(failure.message.to_owned()),
                };
                DB::record_attempts_in(&mut tx, namespace, std::slice::from_ref(&record)).await?;
                if attempt.number > MAX_ATTEMPT_RECORDS {
                    sqlx::query(TRIM_ATTEMPTS)
                        .bind(attempt.arrival)
                        .bind(attempt.number - MAX_ATTEMPT_RECORDS)
                        .execute(&mut *tx)
                        .await?;
                }
            }
            tx.commit().await?;
            Ok(held)
        }
    }
}

/// A waiting event `c`'s type is not paused: a primary-key probe of the
/// paused types' table. The first condition of every claim's rule.
macro_rules! type_not_paused {
    () => {
        concat!(
            " AND NOT EXISTS (SELECT 1 FROM ",
            paused_table!(),
            " p WHERE p.namespace = c.namespace AND p.event_type = c.event_type)"
        )
    };
}

/// The key of `payhook_inbox_intent_waiting` (migration 14) for an event
/// `e`: its intent while it waits or runs, NULL once it ended. The probes
/// must name this expression as the index does, and never the phase on its
/// own (see the module docs, "Each intent's order").
macro_rules! intent_if_unfinished {
    () => {
        concat!(
            "(CASE WHEN e.phase = ",
            waiting_phase!(),
            " THEN e.intent_id END)"
        )
    };
}

/// The opening of a PostgreSQL probe: `c` has no intent, or there is no
/// event `e` of its intent, waiting or running, that also meets the
/// condition the caller appends (and closes with `))`).
macro_rules! an_unfinished_event_of_its_intent {
    () => {
        concat!(
            " AND (c.intent_id IS NULL OR NOT EXISTS (SELECT 1 FROM ",
            table!(),
            " e WHERE e.namespace = c.namespace AND ",
            intent_if_unfinished!(),
            " = c.intent_id"
        )
    };
}

/// The rule that makes a waiting event `c` claimable, written once for every
/// claim statement (`$running`, `$pending`: the parameters holding those
/// states): its type is not paused, and it is the first waiting event of
/// its payment intent (by `created`, then arrival) with none of the
/// intent's events running.
macro_rules! due_in_order {
    ($running:literal, $pending:literal) => {
        concat!(
            type_not_paused!(),
            " AND (c.intent_id IS NULL OR NOT EXISTS ( \
               SELECT 1 FROM ",
            table!(),
            " e \
               WHERE e.namespace = c.namespace AND e.intent_id = c.intent_id AND e.arrival <> c.arrival \
                 AND (e.state = ",
            $running,
            " OR (e.state = ",
            $pending,
            " AND (e.created < c.created OR (e.created = c.created AND e.arrival < c.arrival))))))"
        )
    };
}

/// The first half of the rule on PostgreSQL, all a claim's pick checks: a
/// type not paused, and nothing earlier of the intent waiting or running,
/// read from the index of each intent's waiting and running events only
/// (`payhook_inbox_intent_waiting`, migration 14, keyed by the expression
/// this names), up to the candidate: an intent's done history is never
/// read, and an event behind another of its intent is answered by one
/// entry. The second half, whether a later event of the intent runs, is
/// left to the claim's second statement (`due_in_order_indexed!`): the
/// pick only chooses candidates.
macro_rules! first_of_its_intent {
    () => {
        concat!(
            type_not_paused!(),
            an_unfinished_event_of_its_intent!(),
            " AND (e.created, e.arrival) < (c.created, c.arrival)))"
        )
    };
}

/// The whole rule on PostgreSQL, checked by the claim's second statement:
/// `first_of_its_intent!`, and none of the intent's later events running
/// (a late arrival's case, or a dead event's retried while a later one
/// ran), read from the same index: the intent's unfinished events after
/// the candidate. `$running` is the parameter holding that state.
macro_rules! due_in_order_indexed {
    ($running:literal) => {
        concat!(
            first_of_its_intent!(),
            an_unfinished_event_of_its_intent!(),
            " AND (e.created, e.arrival) > (c.created, c.arrival) AND e.state = ",
            $running,
            "))"
        )
    };
}

/// The claim: due pending events by `due_in_order!` (a type not paused:
/// a primary-key probe of the paused types' table, per namespace; nothing
/// earlier of the intent waiting, nothing of it running), oldest due first. A paused event
/// stays `pending`, so it still holds back the later events of its intent
/// (per-intent order is kept), and resuming its type needs no write to it. Only waiting rows are in
/// the partial `(namespace, due_at, arrival)` index the scan follows in claim
/// order (skipping the running ones), and it stops after `LIMIT` rows,
/// however many done rows the table keeps. No attempt is counted here: a claimed event may wait in the
/// worker's local queue; its attempt is counted with its end, or for a
/// suspect when it starts ([`progress`](crate::queue::progress)), so a wait in a
/// dead process's queue is never counted. This is SQLite's claim, under its one writer; PostgreSQL's is
/// [`PICK`] then [`CLAIM_PICKED`].
const CLAIM: &str = concat!(
    "UPDATE ",
    table!(),
    " SET state = $6, lease_token = $4, lease_until = $3 \
     WHERE arrival IN ( \
       SELECT c.arrival FROM ",
    table!(),
    " c \
       WHERE c.namespace = $1 AND c.phase = ",
    waiting_phase!(),
    " AND c.state = $7 AND c.due_at <= $2",
    due_in_order!("$6", "$7"),
    " ORDER BY c.due_at, c.arrival \
       LIMIT $5) \
     RETURNING arrival, event_id, body, attempts, trace_context, source, suspect"
);

/// The first statement of a PostgreSQL claim (see the module docs): the
/// candidates among the first `$6` due waiting events, running ones not
/// counted (and the next one, with any due at its time: the window,
/// [`claim_window`]; a window past the queue's end reads it whole, and a
/// NULL `$6` reads it whole without looking for the window's end), each
/// the first unfinished event of its intent (`first_of_its_intent!`),
/// their rows locked, and the guard of each one's intent taken, or the
/// candidate left out when another claim holds it. The candidates are
/// chosen (and limited to `$4`) inside the subquery before any guard is
/// tried, so only the rows about to be claimed take a guard.
const PICK: &str = concat!(
    "SELECT arrival FROM ( \
       SELECT c.arrival, c.namespace, c.intent_id FROM ",
    table!(),
    " c \
       WHERE c.namespace = $1 AND c.phase = ",
    waiting_phase!(),
    " AND c.state = $3 AND c.due_at <= CASE WHEN $6::BIGINT IS NULL THEN $2 ELSE LEAST($2, COALESCE(( \
         SELECT w.due_at FROM ",
    table!(),
    " w WHERE w.namespace = $1 AND w.phase = ",
    waiting_phase!(),
    " AND w.state = $3 AND w.due_at <= $2 \
         ORDER BY w.due_at, w.arrival OFFSET $6 LIMIT 1), $2)) END",
    first_of_its_intent!(),
    " ORDER BY c.due_at, c.arrival \
       LIMIT $4 FOR UPDATE SKIP LOCKED) AS picked \
     WHERE intent_id IS NULL \
       OR pg_try_advisory_xact_lock($5, hashtext(namespace || '/' || intent_id))"
);

/// How many of the first due waiting events a PostgreSQL claim of `limit`
/// events reads before the rest of the queue (see the module docs, "The
/// claim's window").
fn claim_window(limit: i64) -> i64 {
    limit.saturating_mul(4).clamp(64, 2048)
}

/// The second statement of a PostgreSQL claim: claims the rows [`PICK`]
/// locked and guarded (`$8`, a JSON array of `[arrival]`), each looked up by
/// its key, checking again under this statement's snapshot that it is still
/// the first waiting event of its intent with none running (a claim that
/// committed after `PICK`'s snapshot may have started one, and `PICK`
/// leaves a later running event of the intent to this check). `$5` is the
/// claim's limit (`PICK` applied it). `{namespace}` and `{state}` are the
/// columns kept from driving the statement ([`Dialect::unindexed`]);
/// `{body}` reads the body where it is kept ([`Dialect::body_of`]).
const CLAIM_PICKED: &str = concat!(
    "UPDATE ",
    table!(),
    " AS c SET state = $6, lease_token = $4, lease_until = $3 \
     FROM {picked} AS picked \
     WHERE c.arrival = picked.arrival AND {namespace} = $1 AND {state} = $7 AND c.due_at <= $2 \
       AND $5 > 0",
    due_in_order_indexed!("$6"),
    " RETURNING c.arrival, c.event_id, {body} AS body, c.attempts, c.trace_context, c.source, c.suspect"
);

/// The claim statement of a dialect: on PostgreSQL [`CLAIM_PICKED`], on
/// SQLite [`CLAIM`] (its one writer needs no `PICK`).
fn claim_statement(dialect: Dialect) -> String {
    if dialect.guards_intents() {
        CLAIM_PICKED
            .replace("{picked}", &dialect.json_rows(8, &["arrival"]))
            .replace("{namespace}", &dialect.unindexed("c.namespace"))
            .replace("{state}", &dialect.unindexed("c.state"))
            .replace("{body}", &dialect.body_of("c"))
    } else {
        CLAIM.to_owned()
    }
}

#[cfg(test)]
#[path = "transitions_tests.rs"]
mod tests;
