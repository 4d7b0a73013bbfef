//! The queue: every statement the inbox runs and every state change an event
//! goes through, in one place.
//!
//! The table's name is written once ([`table!`]); an event's state is always a
//! bound parameter ([`State`]), never a literal in the SQL. The statements are
//! the same text on every backend but for the row-locking clause, and are
//! instantiated once per sqlx database type ([`Backend`]) so that the handler's
//! transaction is the app's own connection type.
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
//! One lock for the namespace, taken by every claim, closed that gap but made
//! the claims of all replicas wait in one line, held across several round
//! trips (about 4 ms of wait per claim at 4 replicas on a 2-core machine:
//! adding replicas made the inbox slower). The claim instead guards each
//! intent on its own, in two statements of one transaction:
//!
//! 1. *Pick* ([`PICK`]): the candidates as before (due, pending, nothing
//!    earlier of the intent waiting, nothing running), their rows locked
//!    `FOR UPDATE SKIP LOCKED`, and for each candidate with an intent a
//!    transaction-scoped advisory lock on (namespace, intent) taken with
//!    `pg_try_advisory_xact_lock`: a candidate whose intent another claim is
//!    guarding right now is skipped, never waited for. Events without an
//!    intent need no guard.
//! 2. *Claim* ([`CLAIM`] restricted to the picked rows): the same conditions
//!    checked again under a new statement snapshot, taken after the guards
//!    were granted, and the rows marked `running`.
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
//! A claim takes at most the handlers free in its own process, never more:
//! an event held by a busy replica would wait while another sits idle. So
//! the claim batch is per replica, and splitting the same handlers over more
//! replicas means smaller batches and more round trips per event (measured in
//! BENCHMARKS.md, "Replicas on one PostgreSQL"); the lock wait itself stays
//! zero.
//!
//! The requeue of expired leases, in the same transaction, locks its rows
//! `FOR UPDATE SKIP LOCKED` as well and re-checks their state when it locks
//! them, so two replicas never requeue or kill the same event twice.
//!
//! SQLite has one writer: its claim is one statement under the database's
//! write lock, which already serializes claims.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::str::FromStr;

use sqlx::{Executor, Pool, Row as _};

use crate::db::{now_ms, Database};
use crate::error::InboxError;

/// The inbox table's name, for `concat!` into the statements below.
macro_rules! table {
    () => {
        "payhook_inbox"
    };
}

/// The table every backend keeps events in.
pub const TABLE: &str = table!();

/// The table recording which numbered migrations have run.
pub const SCHEMA_TABLE: &str = concat!(table!(), "_schema");

/// The longest event id, event type and payment-intent id the inbox stores,
/// in bytes, on every backend (real ids are a few dozen bytes). A delivery with
/// a longer one is refused at intake with `400` naming the field.
pub const MAX_ID_BYTES: usize = 255;

/// Where an event is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Waiting for a worker (new, or a retry after a failed attempt).
    Pending,
    /// A worker holds it (with a lease).
    Running,
    /// Handled; kept for the retention so repeats are recognised.
    Done,
    /// Failed its last attempt; kept, not retried until told to.
    Dead,
}

impl State {
    /// The name stored in the database and shown by the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Done => "done",
            Self::Dead => "dead",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for State {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "pending" => Ok(Self::Pending),
            "running" => Ok(Self::Running),
            "done" => Ok(Self::Done),
            "dead" => Ok(Self::Dead),
            _ => Err("expected pending, running, done or dead".to_owned()),
        }
    }
}

/// Which SQL dialect a database speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

impl Dialect {
    /// The dialect of a `sqlite:` or `postgres:` URL.
    pub(crate) fn of_url(url: &str) -> Result<Self, InboxError> {
        let scheme = url.split_once(':').map_or("", |(scheme, _)| scheme);
        match scheme {
            "sqlite" if cfg!(feature = "sqlite") => Ok(Self::Sqlite),
            "postgres" | "postgresql" if cfg!(feature = "postgres") => Ok(Self::Postgres),
            "sqlite" => Err(InboxError::UnsupportedUrl(
                "sqlite: URLs need payhook-inbox's `sqlite` feature",
            )),
            "postgres" | "postgresql" => Err(InboxError::UnsupportedUrl(
                "postgres: URLs need payhook-inbox's `postgres` feature",
            )),
            _ => Err(InboxError::UnsupportedUrl(
                "expected sqlite://FILE or postgres://USER@HOST/DB",
            )),
        }
    }

    /// The row-locking clause of the claim's and the requeue's inner `SELECT`.
    fn skip_locked(self) -> &'static str {
        match self {
            Self::Sqlite => "",
            Self::Postgres => "FOR UPDATE SKIP LOCKED",
        }
    }
}

/// The advisory lock key the PostgreSQL migrations serialize on ("payhook"
/// in ASCII, so that it is recognisable in `pg_locks`).
const PG_LOCK_KEY: i64 = 0x0070_6179_686f_6f6b;

/// The first half of the two-part advisory lock key that guards a payment
/// intent during a claim ("phi!" in ASCII); the second half is a hash of the
/// namespace and the intent id. (PostgreSQL keeps one-part and two-part keys
/// apart: this never meets [`PG_LOCK_KEY`]. Two intents whose hashes collide
/// only skip each other in a claim that overlaps, never more.)
const PG_INTENT_GUARD_CLASS: i32 = 0x7068_6921;

/// The PostgreSQL notification channel ingest announces new events on.
pub const PG_CHANNEL: &str = table!();

/// The columns ingest writes.
#[derive(Debug)]
pub struct NewRow {
    pub(crate) event_id: String,
    pub(crate) event_type: String,
    pub(crate) intent_id: Option<String>,
    pub(crate) created: i64,
    pub(crate) body: String,
    pub(crate) received_at: i64,
}

/// A claimed row.
#[derive(Debug)]
pub struct Claimed {
    pub(crate) arrival: i64,
    pub(crate) event_id: String,
    pub(crate) body: String,
    pub(crate) attempts: i64,
    pub(crate) token: i64,
}

/// What one claim statement did.
#[derive(Debug, Default)]
pub struct ClaimResult {
    pub(crate) claimed: Vec<Claimed>,
    /// Events whose lease ran out on their last attempt, now dead: (id, attempts).
    pub(crate) died: Vec<(String, i64)>,
}

/// The parameters of one claim.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) now: i64,
    pub(crate) lease_until: i64,
    pub(crate) token: i64,
    pub(crate) limit: i64,
    /// Put events whose lease ran out back in the queue first (or make them
    /// dead when that was their last attempt, out of this many).
    pub(crate) requeue: Option<u32>,
}

/// The numbered migrations: each runs once per database, in order, inside a
/// transaction, and is recorded in [`SCHEMA_TABLE`]. Never edit one that has
/// shipped: add the next.
///
/// 1. The table and its indexes as first released (`IF NOT EXISTS`, so an
///    inbox made before migrations were numbered is taken over as it is).
/// 2. An index for the retention purge, and done events' stale `last_error`
///    cleared (done events no longer keep one).
/// 3. The attempts record ([`ATTEMPTS_TABLE`]) and the indexes of the
///    dashboard's newest-first pages (see the dashboard block at the end).
const MIGRATIONS: [Migration; 3] = [
    Migration {
        version: 1,
        sqlite: &[
            create_table!("INTEGER PRIMARY KEY AUTOINCREMENT"),
            INDEXES[0],
            INDEXES[1],
            INDEXES[2],
        ],
        postgres: &[
            create_table!("BIGSERIAL PRIMARY KEY"),
            INDEXES[0],
            INDEXES[1],
            INDEXES[2],
        ],
        clears_done_errors: false,
    },
    Migration {
        version: 2,
        sqlite: &[concat!(
            "CREATE INDEX IF NOT EXISTS ",
            table!(),
            "_done ON ",
            table!(),
            " (namespace, state, done_at)"
        )],
        postgres: &[concat!(
            "CREATE INDEX IF NOT EXISTS ",
            table!(),
            "_done ON ",
            table!(),
            " (namespace, state, done_at)"
        )],
        clears_done_errors: true,
    },
    Migration {
        version: 3,
        sqlite: &MIGRATION_3_SQLITE,
        postgres: &MIGRATION_3_POSTGRES,
        clears_done_errors: false,
    },
];

struct Migration {
    version: i64,
    sqlite: &'static [&'static str],
    postgres: &'static [&'static str],
    /// Also sets `last_error` of done events to NULL (a bound state, so not
    /// a plain statement above).
    clears_done_errors: bool,
}

/// The inbox table's `CREATE` statement with `$arrival` as the type of the
/// `arrival` key: the one column whose spelling differs between the dialects.
macro_rules! create_table {
    ($arrival:literal) => {
        concat!(
            "CREATE TABLE IF NOT EXISTS ",
            table!(),
            " (
        arrival ",
            $arrival,
            ",
        namespace TEXT NOT NULL,
        event_id TEXT NOT NULL,
        event_type TEXT NOT NULL,
        intent_id TEXT,
        created BIGINT NOT NULL,
        body TEXT NOT NULL,
        received_at BIGINT NOT NULL,
        state TEXT NOT NULL,
        attempts BIGINT NOT NULL DEFAULT 0,
        due_at BIGINT NOT NULL,
        lease_token BIGINT,
        lease_until BIGINT,
        last_error TEXT,
        last_attempt_at BIGINT,
        done_at BIGINT,
        UNIQUE (namespace, event_id)
    )"
        )
    };
}
use create_table;

/// The indexes of migration 1, the same text in both dialects.
const INDEXES: [&str; 3] = [
    // Claims read pending rows in (due_at, arrival) order straight from this
    // index and stop at their limit; the depth metric and `list` use its prefix.
    concat!(
        "CREATE INDEX IF NOT EXISTS ",
        table!(),
        "_claim ON ",
        table!(),
        " (namespace, state, due_at, arrival)"
    ),
    // An earlier index: a prefix of the one above, so not needed beside it.
    concat!("DROP INDEX IF EXISTS ", table!(), "_due"),
    concat!(
        "CREATE INDEX IF NOT EXISTS ",
        table!(),
        "_intent ON ",
        table!(),
        " (namespace, intent_id, created, arrival)"
    ),
];

const CREATE_SCHEMA_TABLE: &str = concat!(
    "CREATE TABLE IF NOT EXISTS ",
    table!(),
    "_schema (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)"
);

const RECORD_MIGRATION: &str = concat!(
    "INSERT INTO ",
    table!(),
    "_schema (version, applied_at) VALUES ($1, $2) ON CONFLICT (version) DO NOTHING"
);

const CLEAR_DONE_ERRORS: &str = concat!("UPDATE ", table!(), " SET last_error = NULL WHERE state = $1");

/// One `INSERT … SELECT … FROM (VALUES …)` for `rows` rows: `$1` is the
/// namespace, `$2` the state of new rows, then six parameters per row
/// (`received_at` is also the first `due_at`). Padding rows are all NULL and
/// filtered out; repeats are skipped by `ON CONFLICT`, and the new rows' ids
/// come back.
fn insert_statement(rows: usize) -> String {
    let mut sql = String::with_capacity(rows * 40 + 400);
    sql.push_str(concat!(
        "INSERT INTO ",
        table!(),
        " (namespace, event_id, event_type, intent_id, created, body, received_at, state, attempts, due_at) \
         SELECT $1, column1, column2, column3, column4, column5, column6, $2, 0, column6 \
         FROM (VALUES "
    ));
    for row in 0..rows {
        let first = 3 + row * 6;
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!(
            "(${}, ${}, ${}, ${}, ${}, ${})",
            first,
            first + 1,
            first + 2,
            first + 3,
            first + 4,
            first + 5
        ));
    }
    // The WHERE also tells SQLite's parser that ON CONFLICT is the upsert clause.
    sql.push_str(
        ") AS batch WHERE column1 IS NOT NULL \
         ON CONFLICT (namespace, event_id) DO NOTHING RETURNING event_id",
    );
    sql
}

/// Rows of one batched statement: its batch, padded with empty rows to the
/// next power of two, so that only a few statements exist.
fn padded(rows: usize) -> usize {
    rows.max(1).next_power_of_two()
}

/// `UPDATE … WHERE arrival IN (…) AND lease_token = CASE arrival WHEN … END`
/// for `rows` marks (`$1` done, `$2` running, `$3` the time, then an arrival
/// and its token per mark): each row is found by its key and done only under
/// its own token. Its `last_error` is cleared (`attempts` and
/// `last_attempt_at` keep the history).
fn mark_statement(rows: usize) -> String {
    let mut arrivals = String::with_capacity(rows * 6);
    let mut tokens = String::with_capacity(rows * 18);
    for row in 0..rows {
        let arrival = 4 + row * 2;
        if row > 0 {
            arrivals.push_str(", ");
        }
        arrivals.push_str(&format!("${arrival}"));
        tokens.push_str(&format!(" WHEN ${arrival} THEN ${}", arrival + 1));
    }
    format!(
        concat!(
            "UPDATE ",
            table!(),
            " SET state = $1, done_at = $3, lease_token = NULL, lease_until = NULL, last_error = NULL \
             WHERE arrival IN ({arrivals}) AND state = $2 AND lease_token = CASE arrival{tokens} END \
             RETURNING arrival"
        ),
        arrivals = arrivals,
        tokens = tokens
    )
}

/// The done mark inside the handler's transaction.
const MARK_DONE: &str = concat!(
    "UPDATE ",
    table!(),
    " SET state = $1, done_at = $2, lease_token = NULL, lease_until = NULL, last_error = NULL \
     WHERE arrival = $3 AND lease_token = $4 AND state = $5"
);

/// Events whose lease ran out on their last attempt (the worker died while
/// handling them, more than once if they crash it): dead, so that one such
/// event cannot take the service down in a loop.
const KILL_EXPIRED: &str = concat!(
    "UPDATE ",
    table!(),
    " SET state = $1, lease_token = NULL, lease_until = NULL, \
     last_error = 'the worker stopped while handling it (attempt ' || CAST(attempts AS TEXT) || $2 \
     WHERE arrival IN ( \
       SELECT arrival FROM ",
    table!(),
    " WHERE namespace = $3 AND state = $4 AND lease_until < $5 AND attempts >= $6 {lock}) \
     RETURNING event_id, attempts"
);

/// Gives the other events whose lease ran out (their worker crashed, hung or
/// lost the database) back to the queue, as they were due before. Their old
/// token no longer matches, so the late worker changes nothing. `{lock}` is
/// the PostgreSQL row-locking clause: rows a worker is marking right now are
/// skipped rather than waited for.
const REQUEUE_EXPIRED: &str = concat!(
    "UPDATE ",
    table!(),
    " SET state = $1, lease_token = NULL, lease_until = NULL \
     WHERE arrival IN ( \
       SELECT arrival FROM ",
    table!(),
    " WHERE namespace = $2 AND state = $3 AND lease_until < $4 {lock})"
);

/// The claim: due pending events whose intent has nothing earlier waiting and
/// nothing running, oldest due first. Only `pending` rows are candidates, so
/// the scan follows the `(namespace, state, due_at, arrival)` index in claim
/// order and stops after `LIMIT` rows, however many done rows the table
/// keeps. Attempts are counted here, at the claim, so an attempt that kills
/// the process is counted too. `{lock}` is the PostgreSQL row-locking clause;
/// `{picked}` is empty (SQLite), or on PostgreSQL restricts the claim to the
/// rows [`PICK`] locked and guarded ([`claim_statement`]).
const CLAIM: &str = concat!(
    "UPDATE ",
    table!(),
    " SET state = $6, lease_token = $4, \
     lease_until = $3, attempts = attempts + 1, last_attempt_at = $2 \
     WHERE arrival IN ( \
       SELECT c.arrival FROM ",
    table!(),
    " c \
       WHERE {picked}c.namespace = $1 AND c.state = $7 AND c.due_at <= $2 \
         AND (c.intent_id IS NULL OR NOT EXISTS ( \
           SELECT 1 FROM ",
    table!(),
    " e \
           WHERE e.namespace = c.namespace AND e.intent_id = c.intent_id AND e.arrival <> c.arrival \
             AND (e.state = $6 \
               OR (e.state = $7 \
                   AND (e.created < c.created OR (e.created = c.created AND e.arrival < c.arrival)))))) \
       ORDER BY c.due_at, c.arrival \
       LIMIT $5 {lock}) \
     RETURNING arrival, event_id, body, attempts"
);

/// The first statement of a PostgreSQL claim (see the module docs): the
/// candidates of [`CLAIM`], their rows locked, and the guard of each one's
/// intent taken, or the candidate left out when another claim holds it. The
/// candidates are chosen (and limited) inside the subquery before any guard
/// is tried, so only the rows about to be claimed take a guard.
const PICK: &str = concat!(
    "SELECT arrival FROM ( \
       SELECT c.arrival, c.namespace, c.intent_id FROM ",
    table!(),
    " c \
       WHERE c.namespace = $1 AND c.state = $4 AND c.due_at <= $2 \
         AND (c.intent_id IS NULL OR NOT EXISTS ( \
           SELECT 1 FROM ",
    table!(),
    " e \
           WHERE e.namespace = c.namespace AND e.intent_id = c.intent_id AND e.arrival <> c.arrival \
             AND (e.state = $3 \
               OR (e.state = $4 \
                   AND (e.created < c.created OR (e.created = c.created AND e.arrival < c.arrival)))))) \
       ORDER BY c.due_at, c.arrival \
       LIMIT $5 FOR UPDATE SKIP LOCKED) AS picked \
     WHERE intent_id IS NULL \
       OR pg_try_advisory_xact_lock($6, hashtext(namespace || '/' || intent_id))"
);

/// [`CLAIM`] for a dialect: on PostgreSQL restricted to `picked` arrivals
/// (`$8` on, padded with NULLs that match nothing), on SQLite as it is.
fn claim_statement(dialect: Dialect, picked: usize) -> String {
    let mut restriction = String::new();
    if dialect == Dialect::Postgres {
        restriction.push_str("c.arrival IN (");
        for index in 0..picked {
            if index > 0 {
                restriction.push_str(", ");
            }
            restriction.push_str(&format!("${}", 8 + index));
        }
        restriction.push_str(") AND ");
    }
    CLAIM
        .replace("{lock}", dialect.skip_locked())
        .replace("{picked}", &restriction)
}

const RENEW: &str = concat!(
    "UPDATE ",
    table!(),
    " SET lease_until = $1 WHERE arrival = $2 AND lease_token = $3 AND state = $4"
);

const RECORD_FAILURE: &str = concat!(
    "UPDATE ",
    table!(),
    " SET state = $1, due_at = $2, last_error = $3, lease_token = NULL, lease_until = NULL \
     WHERE arrival = $4 AND lease_token = $5 AND state = $6"
);

const DEPTH: &str = concat!(
    "SELECT COUNT(*) AS waiting, MIN(received_at) AS oldest FROM ",
    table!(),
    " WHERE namespace = $1 AND state IN ($2, $3)"
);

/// One bounded purge batch: at most `$3` done rows, found through the
/// `(namespace, state, done_at)` index, so each statement is short.
const PURGE: &str = concat!(
    "DELETE FROM ",
    table!(),
    " WHERE arrival IN ( \
       SELECT arrival FROM ",
    table!(),
    " WHERE namespace = $1 AND state = $4 AND done_at < $2 LIMIT $3)"
);

const NOTIFY: &str = "SELECT 1 FROM pg_notify($1, $2)";

/// The columns an operator's view of an event reads ([`COLUMNS`]), for
/// `concat!` into the statements that add to them.
macro_rules! columns {
    () => {
        "event_id, event_type, intent_id, state, attempts, created, received_at, \
         due_at, lease_until, last_attempt_at, last_error, done_at"
    };
}

const COLUMNS: &str = columns!();

const SHOW: &str = concat!(
    "SELECT ",
    columns!(),
    ", body FROM ",
    table!(),
    " WHERE namespace = $1 AND event_id = $2"
);

const RETRY: &str = concat!(
    "UPDATE ",
    table!(),
    " SET state = $1, due_at = $2 WHERE namespace = $3 AND event_id = $4 AND state IN ($5, $1)"
);

const RETRY_DEAD: &str = concat!(
    "UPDATE ",
    table!(),
    " SET state = $1, due_at = $2 WHERE namespace = $3 AND state = $4"
);

const REPLAY: &str = concat!(
    "UPDATE ",
    table!(),
    " SET state = $1, due_at = $2, done_at = NULL WHERE namespace = $3 AND state = $4 AND received_at >= $5"
);

const HAS_TABLE: &str = concat!("SELECT COUNT(*) AS n FROM ", table!(), " WHERE 1 = 0");

use crate::admin::{Filter, StoredEvent};

/// A database the inbox runs on: sqlx's [`Postgres`](sqlx::Postgres),
/// [`Sqlite`](sqlx::Sqlite) (features `postgres`, `sqlite`), or
/// [`Any`](sqlx::Any) for an inbox built from a URL. Sealed: the inbox's
/// statements are written for these alone.
pub trait Backend: sqlx::Database + Queue + Listen + Insight {}

/// The inbox's operations on one backend. Not nameable outside the crate.
pub trait Queue: sqlx::Database {
    /// The dialect of a pool of this type, when the type alone says it.
    fn fixed_dialect() -> Option<Dialect>;
    /// The path of the main database file (SQLite), if it has one.
    fn main_file(db: &Database<Self>) -> impl Future<Output = Result<Option<String>, sqlx::Error>> + Send;
    /// Runs the numbered migrations that have not run yet.
    fn migrate(db: &Database<Self>) -> impl Future<Output = Result<(), InboxError>> + Send;
    /// Whether the inbox table exists (read-only).
    fn has_table(db: &Database<Self>) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;
    /// Inserts the rows in one statement; for each row, whether it was new.
    fn insert<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        rows: &'a [&'a NewRow],
    ) -> impl Future<Output = Result<Vec<bool>, sqlx::Error>> + Send + 'a;
    /// Announces new events to the workers of every replica (PostgreSQL).
    fn notify<'a>(db: &'a Database<Self>, namespace: &'a str) -> impl Future<Output = ()> + Send + 'a;
    /// Requeues or kills expired claims, then claims due events.
    fn claim<'a>(
        db: &'a Database<Self>,
        request: ClaimRequest<'a>,
    ) -> impl Future<Output = Result<ClaimResult, sqlx::Error>> + Send + 'a;
    /// Marks the event done in the handler's transaction; whether the claim held.
    fn mark_done_in(
        conn: &mut Self::Connection,
        arrival: i64,
        token: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + '_;
    /// Marks the claims `(arrival, token)` (distinct arrivals) done in one
    /// statement; the arrivals marked.
    fn mark_done_batch<'a>(
        db: &'a Database<Self>,
        marks: &'a [(i64, i64)],
    ) -> impl Future<Output = Result<HashSet<i64>, sqlx::Error>> + Send + 'a;
    /// Extends a lease; whether the claim still held.
    fn renew(
        db: &Database<Self>,
        arrival: i64,
        token: i64,
        until: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + '_;
    /// Records a failed attempt: the event is pending again at `due`, or dead.
    fn record_failure<'a>(
        db: &'a Database<Self>,
        arrival: i64,
        token: i64,
        dead: bool,
        due: i64,
        message: &'a str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'a;
    /// Events waiting (pending or running) and when the oldest arrived.
    fn depth<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
    ) -> impl Future<Output = Result<(i64, Option<i64>), sqlx::Error>> + Send + 'a;
    /// Deletes at most `limit` done events marked done before `before`.
    fn purge<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        before: i64,
        limit: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a;
    /// The events that match, newest first.
    fn list<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        filter: &'a Filter,
    ) -> impl Future<Output = Result<Vec<StoredEvent>, sqlx::Error>> + Send + 'a;
    /// One event with its body.
    fn show<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        event_id: &'a str,
    ) -> impl Future<Output = Result<Option<StoredEvent>, sqlx::Error>> + Send + 'a;
    /// Makes a dead or pending event due now; whether there was one.
    fn retry<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        event_id: &'a str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'a;
    /// Makes every dead event due now.
    fn retry_dead<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a;
    /// Makes done events received at or after `since` due again.
    fn replay<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        since: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a;
}

/// Called when another replica stored an event.
pub type Wake = std::sync::Arc<dyn Fn() + Send + Sync>;

/// Wake-ups across replicas: on PostgreSQL, a task that `LISTEN`s on
/// [`PG_CHANNEL`] and wakes this process's workers when any replica stores an
/// event in `namespace` (ingest sends `NOTIFY` after each commit of new rows).
pub trait Listen: sqlx::Database {
    /// Starts the listening task, if this backend has one.
    fn listen(
        db: &Database<Self>,
        url: Option<String>,
        namespace: String,
        wake: Wake,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let _ = (db, url, namespace, wake, stop);
        None
    }
}

#[cfg(feature = "sqlite")]
impl Listen for sqlx::Sqlite {}

#[cfg(feature = "postgres")]
impl Listen for sqlx::Postgres {
    fn listen(
        db: &Database<Self>,
        _url: Option<String>,
        namespace: String,
        wake: Wake,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let pool = db.pool.clone();
        Some(tokio::spawn(async move {
            let listener = sqlx::postgres::PgListener::connect_with(&pool).await;
            listen_loop(listener, namespace, wake, stop).await;
        }))
    }
}

impl Listen for sqlx::Any {
    #[cfg(feature = "postgres")]
    fn listen(
        db: &Database<Self>,
        url: Option<String>,
        namespace: String,
        wake: Wake,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let url = url.filter(|_| db.dialect == Dialect::Postgres)?;
        Some(tokio::spawn(async move {
            let listener = sqlx::postgres::PgListener::connect(&url).await;
            listen_loop(listener, namespace, wake, stop).await;
        }))
    }
}

/// Wakes the workers on each notification for `namespace`, until stopped. A
/// lost connection is reopened by the listener; polling covers the gap.
#[cfg(feature = "postgres")]
async fn listen_loop(
    listener: Result<sqlx::postgres::PgListener, sqlx::Error>,
    namespace: String,
    wake: Wake,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut listener = match listener {
        Ok(listener) => listener,
        Err(err) => {
            let reason =
                payhook_core::untrusted::Untrusted::message(&crate::error::describe(&err)).to_string();
            tracing::warn!(target: "payhook", %reason, "cannot listen for other replicas' events; polling only");
            return;
        }
    };
    if let Err(err) = listener.listen(PG_CHANNEL).await {
        let reason = payhook_core::untrusted::Untrusted::message(&crate::error::describe(&err)).to_string();
        tracing::warn!(target: "payhook", %reason, "cannot listen for other replicas' events; polling only");
        return;
    }
    loop {
        tokio::select! {
            received = listener.recv() => match received {
                Ok(notification) if notification.payload() == namespace => wake(),
                Ok(_) => {}
                Err(_) => {
                    // The listener reconnects on the next call; poll meanwhile,
                    // and wake once in case a notification was lost.
                    wake();
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            },
            _ = stop.changed() => return,
        }
    }
}

/// The queue's operations for one sqlx database type: the same code for each,
/// compiled against that type's connection and row.
macro_rules! queue {
    ($db:ty, $dialect:expr) => {
        impl Backend for $db {}

        impl Queue for $db {
            fn fixed_dialect() -> Option<Dialect> {
                $dialect
            }

            async fn main_file(db: &Database<Self>) -> Result<Option<String>, sqlx::Error> {
                if db.dialect != Dialect::Sqlite {
                    return Ok(None);
                }
                let rows = sqlx::query("PRAGMA database_list").fetch_all(&db.pool).await?;
                for row in &rows {
                    let name: String = row.try_get(1)?;
                    if name == "main" {
                        let file: Option<String> = row.try_get(2)?;
                        return Ok(file.filter(|file| !file.is_empty()));
                    }
                }
                Ok(None)
            }

            async fn migrate(db: &Database<Self>) -> Result<(), InboxError> {
                let mut conn = db.pool.acquire().await?;
                match db.dialect {
                    Dialect::Postgres => {
                        // "already exists, skipping" notices on every start are noise.
                        (&mut *conn).execute("SET client_min_messages = warning").await?;
                        // `SELECT 1 FROM`: a `void` result cannot be read back through `Any`.
                        sqlx::query("SELECT 1 FROM pg_advisory_lock($1)")
                            .bind(PG_LOCK_KEY)
                            .execute(&mut *conn)
                            .await?;
                        let result = run_migrations(&mut conn, db.dialect).await;
                        sqlx::query("SELECT 1 FROM pg_advisory_unlock($1)")
                            .bind(PG_LOCK_KEY)
                            .execute(&mut *conn)
                            .await?;
                        result
                    }
                    Dialect::Sqlite => {
                        // WAL lets readers (the CLI, metrics) run beside the writer;
                        // the mode is stored in the file, so setting it once is enough.
                        (&mut *conn).execute("PRAGMA journal_mode = WAL").await?;
                        run_migrations(&mut conn, db.dialect).await
                    }
                }
            }

            async fn has_table(db: &Database<Self>) -> Result<bool, sqlx::Error> {
                match sqlx::query(HAS_TABLE).fetch_optional(&db.pool).await {
                    Ok(_) => Ok(true),
                    Err(sqlx::Error::Database(err))
                        if err.message().contains("no such table") || err.code().as_deref() == Some("42P01") =>
                    {
                        Ok(false)
                    }
                    Err(err) => Err(err),
                }
            }

            async fn insert<'a>(
                db: &'a Database<Self>,
                namespace: &'a str,
                rows: &'a [&'a NewRow],
            ) -> Result<Vec<bool>, sqlx::Error> {
                // Insert in id order so two writers holding the same ids in their
                // batches wait for each other instead of deadlocking (PostgreSQL).
                // A repeated id within the batch is written once; its later
                // copies are duplicates.
                let mut order: Vec<usize> = (0..rows.len()).collect();
                order.sort_by(|&a, &b| rows[a].event_id.cmp(&rows[b].event_id));
                order.dedup_by(|&mut later, &mut first| rows[later].event_id == rows[first].event_id);
                let padded = padded(order.len());
                let sql = insert_statement(padded);
                // Statements for up to 16 rows stay prepared on their connection.
                // Larger ones are prepared for each use: kept on every connection
                // of the pool, the 32- to 256-row ones add up to several hundred
                // KiB per connection (SQLite), and their parse is shared by at
                // least 17 rows.
                let mut query = sqlx::query(&sql)
                    .persistent(padded <= 16)
                    .bind(namespace)
                    .bind(State::Pending.as_str());
                for &index in &order {
                    let row = rows[index];
                    query = query
                        .bind(Some(row.event_id.as_str()))
                        .bind(Some(row.event_type.as_str()))
                        .bind(row.intent_id.as_deref())
                        .bind(Some(row.created))
                        .bind(Some(row.body.as_str()))
                        .bind(Some(row.received_at));
                }
                for _ in order.len()..padded {
                    query = query
                        .bind(None::<&str>)
                        .bind(None::<&str>)
                        .bind(None::<&str>)
                        .bind(None::<i64>)
                        .bind(None::<&str>)
                        .bind(None::<i64>);
                }
                let inserted: HashSet<String> = query
                    .fetch_all(&db.pool)
                    .await?
                    .iter()
                    .map(|row| row.try_get("event_id"))
                    .collect::<Result<_, _>>()?;
                // The first row of each id is new when its id came back; every
                // other row is a duplicate.
                let mut new = vec![false; rows.len()];
                for index in order {
                    new[index] = inserted.contains(&rows[index].event_id);
                }
                Ok(new)
            }

            async fn notify<'a>(db: &'a Database<Self>, namespace: &'a str) {
                if db.dialect == Dialect::Postgres {
                    let notified = sqlx::query(NOTIFY)
                        .bind(PG_CHANNEL)
                        .bind(namespace)
                        .execute(&db.pool)
                        .await;
                    if let Err(err) = notified {
                        // Other replicas still find the event at their next poll.
                        tracing::debug!(target: "payhook", reason = %crate::error::describe(&err), "could not notify other replicas of new inbox events");
                    }
                }
            }

            async fn claim<'a>(db: &'a Database<Self>, request: ClaimRequest<'a>) -> Result<ClaimResult, sqlx::Error> {
                let lock = db.dialect.skip_locked();
                // One transaction: on SQLite one turn of the write lock, on
                // PostgreSQL one commit for the requeue and the claim, which
                // also releases the intents' guards (see the module docs).
                let mut tx = db.pool.begin().await?;
                let mut died = Vec::new();
                if let Some(max_attempts) = request.requeue {
                    died = sqlx::query(&KILL_EXPIRED.replace("{lock}", lock))
                        .bind(State::Dead.as_str())
                        .bind(format!(" of {max_attempts})"))
                        .bind(request.namespace)
                        .bind(State::Running.as_str())
                        .bind(request.now)
                        .bind(i64::from(max_attempts))
                        .fetch_all(&mut *tx)
                        .await?
                        .iter()
                        .map(|row| Ok((row.try_get("event_id")?, row.try_get("attempts")?)))
                        .collect::<Result<_, sqlx::Error>>()?;
                    sqlx::query(&REQUEUE_EXPIRED.replace("{lock}", lock))
                        .bind(State::Pending.as_str())
                        .bind(request.namespace)
                        .bind(State::Running.as_str())
                        .bind(request.now)
                        .execute(&mut *tx)
                        .await?;
                }
                let picked: Vec<i64> = match db.dialect {
                    Dialect::Sqlite => Vec::new(),
                    Dialect::Postgres => sqlx::query(PICK)
                        .bind(request.namespace)
                        .bind(request.now)
                        .bind(State::Running.as_str())
                        .bind(State::Pending.as_str())
                        .bind(request.limit)
                        .bind(PG_INTENT_GUARD_CLASS)
                        .fetch_all(&mut *tx)
                        .await?
                        .iter()
                        .map(|row| row.try_get("arrival"))
                        .collect::<Result<_, sqlx::Error>>()?,
                };
                if db.dialect == Dialect::Postgres && picked.is_empty() {
                    tx.commit().await?;
                    return Ok(ClaimResult { claimed: Vec::new(), died });
                }
                let slots = padded(picked.len());
                let sql = claim_statement(db.dialect, if picked.is_empty() { 0 } else { slots });
                let mut query = sqlx::query(&sql)
                    .persistent(slots <= 16)
                    .bind(request.namespace)
                    .bind(request.now)
                    .bind(request.lease_until)
                    .bind(request.token)
                    .bind(request.limit)
                    .bind(State::Running.as_str())
                    .bind(State::Pending.as_str());
                if !picked.is_empty() {
                    for &arrival in &picked {
                        query = query.bind(Some(arrival));
                    }
                    for _ in picked.len()..slots {
                        query = query.bind(None::<i64>);
                    }
                }
                let rows = query.fetch_all(&mut *tx).await?;
                tx.commit().await?;
                let claimed = rows
                    .iter()
                    .map(|row| {
                        Ok(Claimed {
                            arrival: row.try_get("arrival")?,
                            event_id: row.try_get("event_id")?,
                            body: row.try_get("body")?,
                            attempts: row.try_get("attempts")?,
                            token: request.token,
                        })
                    })
                    .collect::<Result<_, sqlx::Error>>()?;
                Ok(ClaimResult { claimed, died })
            }

            async fn mark_done_in(conn: &mut Self::Connection, arrival: i64, token: i64) -> Result<bool, sqlx::Error> {
                let marked = sqlx::query(MARK_DONE)
                    .bind(State::Done.as_str())
                    .bind(now_ms())
                    .bind(arrival)
                    .bind(token)
                    .bind(State::Running.as_str())
                    .execute(&mut *conn)
                    .await?;
                Ok(marked.rows_affected() > 0)
            }

            async fn mark_done_batch<'a>(db: &'a Database<Self>, marks: &'a [(i64, i64)]) -> Result<HashSet<i64>, sqlx::Error> {
                let padded = padded(marks.len());
                let sql = mark_statement(padded);
                // As for ingest: small statements stay prepared, larger ones are
                // prepared per use. Padding marks are NULL and match nothing.
                let mut query = sqlx::query(&sql)
                    .persistent(padded <= 16)
                    .bind(State::Done.as_str())
                    .bind(State::Running.as_str())
                    .bind(now_ms());
                for &(arrival, token) in marks {
                    query = query.bind(Some(arrival)).bind(Some(token));
                }
                for _ in marks.len()..padded {
                    query = query.bind(None::<i64>).bind(None::<i64>);
                }
                query
                    .fetch_all(&db.pool)
                    .await?
                    .iter()
                    .map(|row| row.try_get("arrival"))
                    .collect()
            }

            async fn renew(db: &Database<Self>, arrival: i64, token: i64, until: i64) -> Result<bool, sqlx::Error> {
                let renewed = sqlx::query(RENEW)
                    .bind(until)
                    .bind(arrival)
                    .bind(token)
                    .bind(State::Running.as_str())
                    .execute(&db.pool)
                    .await?;
                Ok(renewed.rows_affected() > 0)
            }

            async fn record_failure<'a>(
                db: &'a Database<Self>,
                arrival: i64,
                token: i64,
                dead: bool,
                due: i64,
                message: &'a str,
            ) -> Result<bool, sqlx::Error> {
                let state = if dead { State::Dead } else { State::Pending };
                let recorded = sqlx::query(RECORD_FAILURE)
                    .bind(state.as_str())
                    .bind(due)
                    .bind(message)
                    .bind(arrival)
                    .bind(token)
                    .bind(State::Running.as_str())
                    .execute(&db.pool)
                    .await?;
                Ok(recorded.rows_affected() > 0)
            }

            async fn depth<'a>(db: &'a Database<Self>, namespace: &'a str) -> Result<(i64, Option<i64>), sqlx::Error> {
                let row = sqlx::query(DEPTH)
                    .bind(namespace)
                    .bind(State::Pending.as_str())
                    .bind(State::Running.as_str())
                    .fetch_one(&db.pool)
                    .await?;
                Ok((row.try_get("waiting")?, row.try_get("oldest")?))
            }

            async fn purge<'a>(db: &'a Database<Self>, namespace: &'a str, before: i64, limit: i64) -> Result<u64, sqlx::Error> {
                let purged = sqlx::query(PURGE)
                    .bind(namespace)
                    .bind(before)
                    .bind(limit)
                    .bind(State::Done.as_str())
                    .execute(&db.pool)
                    .await?;
                Ok(purged.rows_affected())
            }

            async fn list<'a>(db: &'a Database<Self>, namespace: &'a str, filter: &'a Filter) -> Result<Vec<StoredEvent>, sqlx::Error> {
                let now = now_ms();
                let mut sql = format!(concat!("SELECT {} FROM ", table!(), " WHERE namespace = $1"), COLUMNS);
                let mut next = 2;
                let mut add = |sql: &mut String, clause: &str| {
                    sql.push_str(&clause.replace('?', &format!("${next}")));
                    next += 1;
                };
                if filter.state.is_some() {
                    add(&mut sql, " AND state = ?");
                }
                if filter.event_type.is_some() {
                    add(&mut sql, " AND event_type = ?");
                }
                if filter.older_than.is_some() {
                    add(&mut sql, " AND received_at <= ?");
                }
                if filter.newer_than.is_some() {
                    add(&mut sql, " AND received_at >= ?");
                }
                add(&mut sql, " ORDER BY received_at DESC, arrival DESC LIMIT ?");
                let mut query = sqlx::query(&sql).bind(namespace);
                if let Some(state) = filter.state {
                    query = query.bind(state.as_str());
                }
                if let Some(event_type) = &filter.event_type {
                    query = query.bind(event_type.as_str());
                }
                if let Some(age) = filter.older_than {
                    query = query.bind(now.saturating_sub(crate::db::millis(age)));
                }
                if let Some(age) = filter.newer_than {
                    query = query.bind(now.saturating_sub(crate::db::millis(age)));
                }
                query = query.bind(i64::from(filter.limit.unwrap_or(1000)));
                let rows = query.fetch_all(&db.pool).await?;
                rows.iter()
                    .map(|row| {
                        Ok(StoredEvent {
                            event_id: row.try_get("event_id")?,
                            event_type: row.try_get("event_type")?,
                            intent_id: row.try_get("intent_id")?,
                            state: row.try_get("state")?,
                            attempts: row.try_get("attempts")?,
                            created: row.try_get("created")?,
                            received_at: row.try_get("received_at")?,
                            due_at: row.try_get("due_at")?,
                            lease_until: row.try_get("lease_until")?,
                            last_attempt_at: row.try_get("last_attempt_at")?,
                            last_error: row.try_get("last_error")?,
                            done_at: row.try_get("done_at")?,
                            body: None,
                        })
                    })
                    .collect()
            }

            async fn show<'a>(db: &'a Database<Self>, namespace: &'a str, event_id: &'a str) -> Result<Option<StoredEvent>, sqlx::Error> {
                let row = sqlx::query(SHOW).bind(namespace).bind(event_id).fetch_optional(&db.pool).await?;
                row.map(|row| {
                    Ok(StoredEvent {
                        event_id: row.try_get("event_id")?,
                        event_type: row.try_get("event_type")?,
                        intent_id: row.try_get("intent_id")?,
                        state: row.try_get("state")?,
                        attempts: row.try_get("attempts")?,
                        created: row.try_get("created")?,
                        received_at: row.try_get("received_at")?,
                        due_at: row.try_get("due_at")?,
                        lease_until: row.try_get("lease_until")?,
                        last_attempt_at: row.try_get("last_attempt_at")?,
                        last_error: row.try_get("last_error")?,
                        done_at: row.try_get("done_at")?,
                        body: Some(row.try_get("body")?),
                    })
                })
                .transpose()
            }

            async fn retry<'a>(db: &'a Database<Self>, namespace: &'a str, event_id: &'a str) -> Result<bool, sqlx::Error> {
                let updated = sqlx::query(RETRY)
                    .bind(State::Pending.as_str())
                    .bind(now_ms())
                    .bind(namespace)
                    .bind(event_id)
                    .bind(State::Dead.as_str())
                    .execute(&db.pool)
                    .await?;
                Ok(updated.rows_affected() > 0)
            }

            async fn retry_dead<'a>(db: &'a Database<Self>, namespace: &'a str) -> Result<u64, sqlx::Error> {
                let updated = sqlx::query(RETRY_DEAD)
                    .bind(State::Pending.as_str())
                    .bind(now_ms())
                    .bind(namespace)
                    .bind(State::Dead.as_str())
                    .execute(&db.pool)
                    .await?;
                Ok(updated.rows_affected())
            }

            async fn replay<'a>(db: &'a Database<Self>, namespace: &'a str, since: i64) -> Result<u64, sqlx::Error> {
                let updated = sqlx::query(REPLAY)
                    .bind(State::Pending.as_str())
                    .bind(now_ms())
                    .bind(namespace)
                    .bind(State::Done.as_str())
                    .bind(since)
                    .execute(&db.pool)
                    .await?;
                Ok(updated.rows_affected())
            }
        }
    };
}

/// Runs the migrations not yet recorded, each in its own transaction whose
/// first statement records it (so a second process doing the same waits for
/// the first, then finds it done).
macro_rules! run_migrations_for {
    ($name:ident, $db:ty) => {
        async fn $name(
            conn: &mut sqlx::pool::PoolConnection<$db>,
            dialect: Dialect,
        ) -> Result<(), InboxError> {
            use sqlx::Connection as _;
            (&mut **conn).execute(CREATE_SCHEMA_TABLE).await?;
            for migration in &MIGRATIONS {
                let mut tx = (&mut **conn).begin().await?;
                let recorded = sqlx::query(RECORD_MIGRATION)
                    .bind(migration.version)
                    .bind(now_ms())
                    .execute(&mut *tx)
                    .await?;
                if recorded.rows_affected() == 0 {
                    continue; // already applied; the transaction rolls back
                }
                let statements = match dialect {
                    Dialect::Sqlite => migration.sqlite,
                    Dialect::Postgres => migration.postgres,
                };
                for statement in statements {
                    (&mut *tx).execute(*statement).await?;
                }
                if migration.clears_done_errors {
                    sqlx::query(CLEAR_DONE_ERRORS)
                        .bind(State::Done.as_str())
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
            }
            Ok(())
        }
    };
}

/// The migrations on a pool connection of any backend.
trait Migrate: sqlx::Database {
    fn run(
        conn: &mut sqlx::pool::PoolConnection<Self>,
        dialect: Dialect,
    ) -> impl Future<Output = Result<(), InboxError>> + Send;
}

async fn run_migrations<DB: Migrate>(
    conn: &mut sqlx::pool::PoolConnection<DB>,
    dialect: Dialect,
) -> Result<(), InboxError> {
    DB::run(conn, dialect).await
}

macro_rules! migrate_impl {
    ($db:ty, $name:ident) => {
        run_migrations_for!($name, $db);
        impl Migrate for $db {
            fn run(
                conn: &mut sqlx::pool::PoolConnection<Self>,
                dialect: Dialect,
            ) -> impl Future<Output = Result<(), InboxError>> + Send {
                $name(conn, dialect)
            }
        }
    };
}

migrate_impl!(sqlx::Any, migrate_any);
queue!(sqlx::Any, None);

#[cfg(feature = "postgres")]
migrate_impl!(sqlx::Postgres, migrate_postgres);
#[cfg(feature = "postgres")]
queue!(sqlx::Postgres, Some(Dialect::Postgres));

#[cfg(feature = "sqlite")]
migrate_impl!(sqlx::Sqlite, migrate_sqlite);
#[cfg(feature = "sqlite")]
queue!(sqlx::Sqlite, Some(Dialect::Sqlite));

/// The pool a [`Database`] wraps, built from the app's pool.
pub(crate) fn database_of<DB: Backend>(
    pool: Pool<DB>,
    dialect: Option<Dialect>,
) -> Result<Database<DB>, InboxError> {
    let dialect = DB::fixed_dialect().or(dialect).ok_or(InboxError::UnsupportedUrl(
        "an Any pool needs its URL: build it with Inbox::connect",
    ))?;
    Ok(Database { pool, dialect })
}

// ---------------------------------------------------------------------------
// What the dashboard and `payhook inbox stats` read, and the attempts record
// the worker writes: statements, migration 3 and their implementation per
// backend, kept apart from the queue's own statements above.
// ---------------------------------------------------------------------------

/// The attempts record's table name, for `concat!`.
macro_rules! attempts_table {
    () => {
        "payhook_inbox_attempts"
    };
}

/// The table recording each ended attempt of an event (time, duration,
/// outcome, error), at most [`MAX_ATTEMPT_RECORDS`] per event, deleted with
/// its event.
pub const ATTEMPTS_TABLE: &str = attempts_table!();

/// How many attempts the record keeps per event (the latest ones); an event
/// retried by hand again and again does not grow it without bound.
pub const MAX_ATTEMPT_RECORDS: i64 = 50;

/// The attempts table; `$fk` is how `arrival` refers to its event.
macro_rules! create_attempts {
    ($arrival:literal) => {
        concat!(
            "CREATE TABLE IF NOT EXISTS ",
            attempts_table!(),
            " (
        arrival ",
            $arrival,
            ",
        namespace TEXT NOT NULL,
        attempt BIGINT NOT NULL,
        started_at BIGINT NOT NULL,
        finished_at BIGINT NOT NULL,
        duration_ms BIGINT NOT NULL,
        outcome TEXT NOT NULL,
        error TEXT,
        PRIMARY KEY (arrival, attempt)
    )"
        )
    };
}

/// The overview's activity chart reads attempts by the time they ended.
const ATTEMPTS_FINISHED_INDEX: &str = concat!(
    "CREATE INDEX IF NOT EXISTS ",
    attempts_table!(),
    "_finished ON ",
    attempts_table!(),
    " (namespace, finished_at)"
);

/// The events page, newest first without a state filter (and the chart's
/// deliveries received per interval).
const RECEIVED_INDEX: &str = concat!(
    "CREATE INDEX IF NOT EXISTS ",
    table!(),
    "_received ON ",
    table!(),
    " (namespace, received_at, arrival)"
);

/// The events page filtered by state, newest first, and the oldest pending
/// event of the overview (the first entry of its range).
const STATE_RECEIVED_INDEX: &str = concat!(
    "CREATE INDEX IF NOT EXISTS ",
    table!(),
    "_state_received ON ",
    table!(),
    " (namespace, state, received_at, arrival)"
);

/// Migration 3 on SQLite: its foreign keys are off unless each connection
/// turns them on, so a trigger deletes an event's attempts with it.
const MIGRATION_3_SQLITE: [&str; 5] = [
    create_attempts!("INTEGER NOT NULL"),
    ATTEMPTS_FINISHED_INDEX,
    concat!(
        "CREATE TRIGGER IF NOT EXISTS ",
        attempts_table!(),
        "_gc AFTER DELETE ON ",
        table!(),
        " BEGIN DELETE FROM ",
        attempts_table!(),
        " WHERE arrival = OLD.arrival; END"
    ),
    RECEIVED_INDEX,
    STATE_RECEIVED_INDEX,
];

/// Migration 3 on PostgreSQL: the foreign key deletes an event's attempts
/// with it.
const MIGRATION_3_POSTGRES: [&str; 4] = [
    create_attempts!("BIGINT NOT NULL REFERENCES payhook_inbox (arrival) ON DELETE CASCADE"),
    ATTEMPTS_FINISHED_INDEX,
    RECEIVED_INDEX,
    STATE_RECEIVED_INDEX,
];

/// One `INSERT` of `rows` attempts: `$1` the namespace, then seven
/// parameters per attempt. A repeat (an attempt already recorded) is skipped.
fn record_attempts_statement(rows: usize) -> String {
    let mut sql = String::with_capacity(rows * 48 + 200);
    sql.push_str(concat!(
        "INSERT INTO ",
        attempts_table!(),
        " (arrival, namespace, attempt, started_at, finished_at, duration_ms, outcome, error) VALUES "
    ));
    for row in 0..rows {
        let p = 2 + row * 7;
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!(
            "(${}, $1, ${}, ${}, ${}, ${}, ${}, ${})",
            p,
            p + 1,
            p + 2,
            p + 3,
            p + 4,
            p + 5,
            p + 6
        ));
    }
    sql.push_str(" ON CONFLICT (arrival, attempt) DO NOTHING");
    sql
}

const TRIM_ATTEMPTS: &str = concat!(
    "DELETE FROM ",
    attempts_table!(),
    " WHERE arrival = $1 AND attempt <= $2"
);

/// Counts by state: read from the `(namespace, state, …)` index alone.
const COUNT_BY_STATE: &str = concat!(
    "SELECT state, COUNT(*) AS n FROM ",
    table!(),
    " WHERE namespace = $1 GROUP BY state"
);

/// The oldest pending event: the first entry of the state's range in the
/// `(namespace, state, received_at, arrival)` index.
const OLDEST_PENDING: &str = concat!(
    "SELECT MIN(received_at) AS oldest FROM ",
    table!(),
    " WHERE namespace = $1 AND state = $2"
);

/// Deliveries received per interval since `$2` (`$3` milliseconds each).
const RECEIVED_PER_INTERVAL: &str = concat!(
    "SELECT (received_at - $2) / $3 AS slot, COUNT(*) AS n FROM ",
    table!(),
    " WHERE namespace = $1 AND received_at >= $2 GROUP BY slot"
);

/// Attempts ended per interval and outcome since `$2`.
const ATTEMPTS_PER_INTERVAL: &str = concat!(
    "SELECT (finished_at - $2) / $3 AS slot, outcome, COUNT(*) AS n FROM ",
    attempts_table!(),
    " WHERE namespace = $1 AND finished_at >= $2 GROUP BY slot, outcome"
);

const ATTEMPTS_OF_EVENT: &str = concat!(
    "SELECT a.attempt, a.started_at, a.duration_ms, a.outcome, a.error FROM ",
    attempts_table!(),
    " a JOIN ",
    table!(),
    " e ON e.arrival = a.arrival WHERE e.namespace = $1 AND e.event_id = $2 ORDER BY a.attempt DESC"
);

const EVENTS_OF_INTENT: &str = concat!(
    "SELECT event_id, event_type, state, created FROM ",
    table!(),
    " WHERE namespace = $1 AND intent_id = $2 ORDER BY created, arrival LIMIT $3"
);

/// How one attempt ended, as the attempts record stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The handler succeeded and the event is done.
    Done,
    /// It failed; another attempt is scheduled.
    Failed,
    /// It failed its last attempt; the event is dead.
    Dead,
}

impl Outcome {
    /// The name stored in the attempts record.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Dead => "dead",
        }
    }
}

/// One ended attempt, as the worker records it.
#[derive(Debug)]
pub struct AttemptRecord {
    pub(crate) arrival: i64,
    pub(crate) attempt: i64,
    pub(crate) started_at: i64,
    pub(crate) duration_ms: i64,
    pub(crate) outcome: Outcome,
    pub(crate) error: Option<String>,
}

/// The dashboard's reads and the attempts record, per backend. Not nameable
/// outside the crate.
pub trait Insight: sqlx::Database {
    /// Records ended attempts (one statement) and drops each event's oldest
    /// beyond the bound.
    fn record_attempts<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        records: &'a [AttemptRecord],
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
    /// Counts by state and the oldest pending event's arrival.
    fn stats<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
    ) -> impl Future<Output = Result<crate::admin::Stats, sqlx::Error>> + Send + 'a;
    /// Received deliveries and ended attempts per interval.
    fn activity<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        since: i64,
        interval: i64,
        slots: usize,
    ) -> impl Future<Output = Result<Vec<crate::admin::ActivitySlot>, sqlx::Error>> + Send + 'a;
    /// One page of events, newest first, after the cursor.
    fn page<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        query: &'a crate::admin::PageQuery,
        now: i64,
    ) -> impl Future<Output = Result<crate::admin::Page, sqlx::Error>> + Send + 'a;
    /// The recorded attempts of one event, latest first.
    fn attempts<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        event_id: &'a str,
    ) -> impl Future<Output = Result<Vec<crate::admin::Attempt>, sqlx::Error>> + Send + 'a;
    /// The events of one payment intent, in `created` order.
    fn intent_events<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        intent_id: &'a str,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<crate::admin::IntentEvent>, sqlx::Error>> + Send + 'a;
}

/// The events page's statement for the filters that are set: `$1` the
/// namespace, then one parameter per clause, the keyset cursor last before
/// the limit. No `OFFSET` and no count: each page is one index range read.
fn page_statement(query: &crate::admin::PageQuery) -> String {
    let mut sql = format!(
        concat!("SELECT arrival, {} FROM ", table!(), " WHERE namespace = $1"),
        COLUMNS
    );
    let mut next = 2;
    let mut add = |sql: &mut String, clause: &str| {
        let mut text = clause.to_owned();
        while let Some(at) = text.find('?') {
            text.replace_range(at..=at, &format!("${next}"));
            next += 1;
        }
        sql.push_str(&text);
    };
    let filter = &query.filter;
    if filter.state.is_some() {
        add(&mut sql, " AND state = ?");
    }
    if filter.event_type.is_some() {
        add(&mut sql, " AND event_type = ?");
    }
    if query.event_id.is_some() {
        add(&mut sql, " AND event_id = ?");
    }
    if filter.older_than.is_some() {
        add(&mut sql, " AND received_at <= ?");
    }
    if filter.newer_than.is_some() {
        add(&mut sql, " AND received_at >= ?");
    }
    if query.after.is_some() {
        // The first term is the index range; the second only skips the rows
        // of the cursor's own millisecond already shown.
        add(
            &mut sql,
            " AND received_at <= ? AND (received_at < ? OR arrival < ?)",
        );
    }
    add(&mut sql, " ORDER BY received_at DESC, arrival DESC LIMIT ?");
    sql
}

macro_rules! insight {
    ($db:ty) => {
        impl Insight for $db {
            async fn record_attempts<'a>(
                db: &'a Database<Self>,
                namespace: &'a str,
                records: &'a [AttemptRecord],
            ) -> Result<(), sqlx::Error> {
                if records.is_empty() {
                    return Ok(());
                }
                let sql = record_attempts_statement(records.len());
                // Batches of up to 16 stay prepared; larger ones are rarer.
                let mut query = sqlx::query(&sql)
                    .persistent(records.len() <= 16)
                    .bind(namespace);
                for record in records {
                    query = query
                        .bind(record.arrival)
                        .bind(record.attempt)
                        .bind(record.started_at)
                        .bind(record.started_at.saturating_add(record.duration_ms))
                        .bind(record.duration_ms)
                        .bind(record.outcome.as_str())
                        .bind(record.error.as_deref());
                }
                query.execute(&db.pool).await?;
                for record in records
                    .iter()
                    .filter(|record| record.attempt > MAX_ATTEMPT_RECORDS)
                {
                    sqlx::query(TRIM_ATTEMPTS)
                        .bind(record.arrival)
                        .bind(record.attempt - MAX_ATTEMPT_RECORDS)
                        .execute(&db.pool)
                        .await?;
                }
                Ok(())
            }

            async fn stats<'a>(
                db: &'a Database<Self>,
                namespace: &'a str,
            ) -> Result<crate::admin::Stats, sqlx::Error> {
                let mut stats = crate::admin::Stats::default();
                for row in sqlx::query(COUNT_BY_STATE)
                    .bind(namespace)
                    .fetch_all(&db.pool)
                    .await?
                {
                    let state: String = row.try_get("state")?;
                    let count: i64 = row.try_get("n")?;
                    match state.parse::<State>() {
                        Ok(State::Pending) => stats.pending = count,
                        Ok(State::Running) => stats.running = count,
                        Ok(State::Done) => stats.done = count,
                        Ok(State::Dead) => stats.dead = count,
                        Err(_) => {}
                    }
                }
                let row = sqlx::query(OLDEST_PENDING)
                    .bind(namespace)
                    .bind(State::Pending.as_str())
                    .fetch_one(&db.pool)
                    .await?;
                stats.oldest_pending_at = row.try_get("oldest")?;
                Ok(stats)
            }

            async fn activity<'a>(
                db: &'a Database<Self>,
                namespace: &'a str,
                since: i64,
                interval: i64,
                slots: usize,
            ) -> Result<Vec<crate::admin::ActivitySlot>, sqlx::Error> {
                let interval = interval.max(1);
                let mut out: Vec<crate::admin::ActivitySlot> = (0..slots)
                    .map(|slot| crate::admin::ActivitySlot {
                        start: since
                            .saturating_add(interval.saturating_mul(i64::try_from(slot).unwrap_or(i64::MAX))),
                        ..Default::default()
                    })
                    .collect();
                let index = |slot: i64| usize::try_from(slot).ok().filter(|&slot| slot < slots);
                let received = sqlx::query(RECEIVED_PER_INTERVAL)
                    .bind(namespace)
                    .bind(since)
                    .bind(interval)
                    .fetch_all(&db.pool)
                    .await?;
                for row in received {
                    if let Some(slot) = index(row.try_get("slot")?) {
                        out[slot].received = row.try_get("n")?;
                    }
                }
                let attempts = sqlx::query(ATTEMPTS_PER_INTERVAL)
                    .bind(namespace)
                    .bind(since)
                    .bind(interval)
                    .fetch_all(&db.pool)
                    .await?;
                for row in attempts {
                    if let Some(slot) = index(row.try_get("slot")?) {
                        let outcome: String = row.try_get("outcome")?;
                        let count: i64 = row.try_get("n")?;
                        if outcome == Outcome::Done.as_str() {
                            out[slot].handled += count;
                        } else {
                            out[slot].failed += count;
                        }
                    }
                }
                Ok(out)
            }

            async fn page<'a>(
                db: &'a Database<Self>,
                namespace: &'a str,
                query: &'a crate::admin::PageQuery,
                now: i64,
            ) -> Result<crate::admin::Page, sqlx::Error> {
                let sql = page_statement(query);
                let limit = i64::from(query.limit.clamp(1, crate::admin::MAX_PAGE));
                let filter = &query.filter;
                let mut statement = sqlx::query(&sql).bind(namespace);
                if let Some(state) = filter.state {
                    statement = statement.bind(state.as_str());
                }
                if let Some(event_type) = &filter.event_type {
                    statement = statement.bind(event_type.as_str());
                }
                if let Some(event_id) = &query.event_id {
                    statement = statement.bind(event_id.as_str());
                }
                if let Some(age) = filter.older_than {
                    statement = statement.bind(now.saturating_sub(crate::db::millis(age)));
                }
                if let Some(age) = filter.newer_than {
                    statement = statement.bind(now.saturating_sub(crate::db::millis(age)));
                }
                if let Some(after) = query.after {
                    statement = statement
                        .bind(after.received_at)
                        .bind(after.received_at)
                        .bind(after.arrival);
                }
                // One row more than the page: whether there is a next page.
                statement = statement.bind(limit + 1);
                let rows = statement.fetch_all(&db.pool).await?;
                let mut events = Vec::with_capacity(rows.len());
                let mut next = None;
                for row in &rows {
                    if i64::try_from(events.len()).unwrap_or(i64::MAX) == limit {
                        break;
                    }
                    let event = StoredEvent {
                        event_id: row.try_get("event_id")?,
                        event_type: row.try_get("event_type")?,
                        intent_id: row.try_get("intent_id")?,
                        state: row.try_get("state")?,
                        attempts: row.try_get("attempts")?,
                        created: row.try_get("created")?,
                        received_at: row.try_get("received_at")?,
                        due_at: row.try_get("due_at")?,
                        lease_until: row.try_get("lease_until")?,
                        last_attempt_at: row.try_get("last_attempt_at")?,
                        last_error: row.try_get("last_error")?,
                        done_at: row.try_get("done_at")?,
                        body: None,
                    };
                    next = Some(crate::admin::Cursor {
                        received_at: event.received_at,
                        arrival: row.try_get("arrival")?,
                    });
                    events.push(event);
                }
                if i64::try_from(rows.len()).unwrap_or(i64::MAX) <= limit {
                    next = None;
                }
                Ok(crate::admin::Page { events, next })
            }

            async fn attempts<'a>(
                db: &'a Database<Self>,
                namespace: &'a str,
                event_id: &'a str,
            ) -> Result<Vec<crate::admin::Attempt>, sqlx::Error> {
                sqlx::query(ATTEMPTS_OF_EVENT)
                    .bind(namespace)
                    .bind(event_id)
                    .fetch_all(&db.pool)
                    .await?
                    .iter()
                    .map(|row| {
                        Ok(crate::admin::Attempt {
                            attempt: row.try_get("attempt")?,
                            started_at: row.try_get("started_at")?,
                            duration_ms: row.try_get("duration_ms")?,
                            outcome: row.try_get("outcome")?,
                            error: row.try_get("error")?,
                        })
                    })
                    .collect()
            }

            async fn intent_events<'a>(
                db: &'a Database<Self>,
                namespace: &'a str,
                intent_id: &'a str,
                limit: i64,
            ) -> Result<Vec<crate::admin::IntentEvent>, sqlx::Error> {
                sqlx::query(EVENTS_OF_INTENT)
                    .bind(namespace)
                    .bind(intent_id)
                    .bind(limit)
                    .fetch_all(&db.pool)
                    .await?
                    .iter()
                    .map(|row| {
                        Ok(crate::admin::IntentEvent {
                            event_id: row.try_get("event_id")?,
                            event_type: row.try_get("event_type")?,
                            state: row.try_get("state")?,
                            created: row.try_get("created")?,
                        })
                    })
                    .collect()
            }
        }
    };
}

insight!(sqlx::Any);
#[cfg(feature = "postgres")]
insight!(sqlx::Postgres);
#[cfg(feature = "sqlite")]
insight!(sqlx::Sqlite);

/// The statements behind the overview and the events page with example
/// parameters, for their query plans: (what, SQL, text parameters, number
/// parameters), the text ones bound first.
fn dashboard_statements() -> Vec<(&'static str, String, Vec<&'static str>, Vec<i64>)> {
    let by_state = crate::admin::PageQuery {
        filter: Filter {
            state: Some(State::Dead),
            ..Filter::default()
        },
        after: Some(crate::admin::Cursor {
            received_at: 1_700_000_000_000,
            arrival: 1,
        }),
        ..crate::admin::PageQuery::default()
    };
    let hour_ago = now_ms() - 3_600_000;
    vec![
        ("counts by state", COUNT_BY_STATE.to_owned(), vec![], vec![]),
        (
            "oldest pending",
            OLDEST_PENDING.to_owned(),
            vec![State::Pending.as_str()],
            vec![],
        ),
        (
            "received per interval",
            RECEIVED_PER_INTERVAL.to_owned(),
            vec![],
            vec![hour_ago, 300_000],
        ),
        (
            "attempts per interval",
            ATTEMPTS_PER_INTERVAL.to_owned(),
            vec![],
            vec![hour_ago, 300_000],
        ),
        (
            "events page",
            page_statement(&crate::admin::PageQuery::default()),
            vec![],
            vec![51],
        ),
        (
            "events page, by state, after a cursor",
            page_statement(&by_state),
            vec![State::Dead.as_str()],
            vec![1_700_000_000_000, 1_700_000_000_000, 1, 51],
        ),
    ]
}

/// The query plans of the dashboard's statements (`EXPLAIN QUERY PLAN` on
/// SQLite, `EXPLAIN` on PostgreSQL): (what, plan lines).
pub(crate) async fn query_plans<DB: Backend>(
    db: &Database<DB>,
    namespace: &str,
) -> Result<Vec<(&'static str, Vec<String>)>, sqlx::Error>
where
    for<'c> &'c Pool<DB>: Executor<'c, Database = DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    String: for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
    for<'n> &'n str: sqlx::ColumnIndex<DB::Row>,
{
    let mut plans = Vec::new();
    for (what, sql, texts, numbers) in dashboard_statements() {
        let explain = match db.dialect {
            Dialect::Sqlite => format!("EXPLAIN QUERY PLAN {sql}"),
            Dialect::Postgres => format!("EXPLAIN {sql}"),
        };
        let mut query = sqlx::query::<DB>(&explain).bind(namespace);
        for text in texts {
            query = query.bind(text);
        }
        for number in numbers {
            query = query.bind(number);
        }
        let rows = query.fetch_all(&db.pool).await?;
        let mut lines = Vec::new();
        for row in &rows {
            let line: String = match db.dialect {
                Dialect::Sqlite => row.try_get("detail")?,
                Dialect::Postgres => row.try_get(0usize)?,
            };
            lines.push(line);
        }
        plans.push((what, lines));
    }
    Ok(plans)
}
