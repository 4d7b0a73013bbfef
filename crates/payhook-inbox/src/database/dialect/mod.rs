//! What differs between the databases the inbox runs on: the table names the
//! statements are written with, the SQL dialect a pool speaks, every decision
//! that depends on which database it is (a method of [`Dialect`]: the
//! row-locking clause, the per-intent claim guard, the migrations' lock, the
//! query plan's form, the missing-table error), and each database's numbered
//! migrations ([`migrations`]). The rest of the crate asks a `Dialect`; it
//! never matches on one, so a new database adds its arms here.
//!
//! Every other statement is the same text on every database and sits beside
//! the method that runs it (the queue's transitions, the reads).

pub(crate) mod migrations;

use crate::error::InboxError;
use crate::model::State;

/// The inbox table's name, for `concat!` into the statements.
macro_rules! table {
    () => {
        "payhook_inbox"
    };
}
pub(crate) use table;

/// The attempts record's table name, for `concat!`.
macro_rules! attempts_table {
    () => {
        "payhook_inbox_attempts"
    };
}
pub(crate) use attempts_table;

/// The table of each namespace's event counts by phase, kept by the
/// database's triggers (migrations 15 and 16), for `concat!`.
macro_rules! tally_table {
    () => {
        "payhook_inbox_tally"
    };
}
pub(crate) use tally_table;

/// The table of the activity chart's 10-second buckets, kept by the
/// database's triggers (migration 18), for `concat!`.
macro_rules! activity_table {
    () => {
        "payhook_inbox_activity"
    };
}
pub(crate) use activity_table;

/// The length of one of the activity chart's buckets (migration 18), in
/// milliseconds: a chart slot's edges are exact to this.
pub(crate) const ACTIVITY_BUCKET_MS: i64 = 10_000;

/// The bodies' table name (PostgreSQL, migration 20), for `concat!`.
macro_rules! bodies_table {
    () => {
        "payhook_inbox_bodies"
    };
}
pub(crate) use bodies_table;

/// The paused event types' table name, for `concat!`.
macro_rules! paused_table {
    () => {
        "payhook_inbox_paused"
    };
}
pub(crate) use paused_table;

/// How far past its due time a paused type's waiting event is parked, for
/// `concat!` (2^62 ms: any real due time plus it is past every real time,
/// and still fits an `i64`). The claim reads pending events due by now in
/// the waiting events' `(namespace, due_at, arrival)` index order, so a parked event is
/// out of its range: claims never step over a paused type's backlog. The
/// event stays `pending` (per-intent order still counts it as waiting), and
/// resuming subtracts the offset again, so the order it is claimed in is
/// the one it had. [`PARKED`] is the same number.
macro_rules! parked {
    () => {
        "4611686018427387904"
    };
}
pub(crate) use parked;

/// [`parked!`] as a number: due times at or above it are parked.
pub(crate) const PARKED: i64 = 1 << 62;

/// The duplicate deliveries' table name, for `concat!`.
macro_rules! duplicates_table {
    () => {
        "payhook_inbox_duplicates"
    };
}
pub(crate) use duplicates_table;

/// The differing copies' table name, for `concat!`.
macro_rules! differing_table {
    () => {
        "payhook_inbox_differing"
    };
}
pub(crate) use differing_table;

/// The refused events' table name, for `concat!`.
macro_rules! refused_table {
    () => {
        "payhook_inbox_refused"
    };
}
pub(crate) use refused_table;

/// The reconciler's table name, for `concat!`.
macro_rules! reconciler_table {
    () => {
        "payhook_inbox_reconciler"
    };
}
#[cfg(feature = "reconcile")]
pub(crate) use reconciler_table;

/// The table every backend keeps events in.
pub const TABLE: &str = table!();

/// The table recording which numbered migrations have run.
pub const SCHEMA_TABLE: &str = concat!(table!(), "_schema");

/// The table recording each ended attempt of an event (time, duration,
/// outcome, error), at most
/// [`MAX_ATTEMPT_RECORDS`](crate::admin::MAX_ATTEMPT_RECORDS) per event,
/// deleted with its event.
pub const ATTEMPTS_TABLE: &str = attempts_table!();

/// The table of the overview's activity chart: per namespace and 10-second
/// bucket (`received_at / 10000`), the events stored, the duplicate
/// deliveries, and the attempts ended done or failed, added by triggers as
/// the rows are written (sharded by connection on PostgreSQL) and forgotten
/// after the retention ([`Admin::activity`](crate::admin::Admin::activity)).
pub const ACTIVITY_TABLE: &str = activity_table!();

/// The table of the events' bodies on PostgreSQL (`arrival`, `body`):
/// written once when an event is stored, deleted with it (migration 20).
/// The events table's own `body` column is then empty; events stored before
/// version 20 keep their body there. SQLite keeps every body in the events
/// table and has no such table.
pub const BODIES_TABLE: &str = bodies_table!();

/// The table of paused event types (namespace, type, when): their events
/// are stored and acknowledged but not claimed until the type is resumed
/// ([`Admin::pause`](crate::admin::Admin::pause)).
pub const PAUSED_TABLE: &str = paused_table!();

/// The table recording when each duplicate delivery (of an event already
/// stored) was acknowledged, for the overview's count; kept a day.
pub const DUPLICATES_TABLE: &str = duplicates_table!();

/// The table recording duplicate deliveries whose content differed from the
/// stored event: one row per event, with how many, when, and the last such
/// body ([`Admin::differing_copies`](crate::admin::Admin::differing_copies));
/// removed once its event is.
pub const DIFFERING_TABLE: &str = differing_table!();

/// The table recording the events the inbox was offered and could not take
/// (a listed event that does not parse, is longer than a delivery may be,
/// or cannot be stored): one row per event, with its id when one could be
/// read, the reason, how often and when
/// ([`Admin::refused`](crate::admin::Admin::refused)); kept for the
/// retention, and at most
/// [`MAX_REFUSED_KEPT`](crate::admin::MAX_REFUSED_KEPT) rows per namespace.
pub const REFUSED_TABLE: &str = refused_table!();

/// The reconciler's table: per namespace, how far the service's events are
/// known to be in the inbox, which process reconciles now, and how the last
/// passes went.
pub const RECONCILER_TABLE: &str = reconciler_table!();

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

    /// The database's name as operators know it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "SQLite",
            Self::Postgres => "PostgreSQL",
        }
    }

    /// The row-locking clause of the claim's and the requeue's inner `SELECT`:
    /// on PostgreSQL rows another transaction holds are skipped, not waited
    /// for; SQLite has one writer, whose write lock already serializes them.
    pub(crate) fn skip_locked(self) -> &'static str {
        match self {
            Self::Sqlite => "",
            Self::Postgres => "FOR UPDATE SKIP LOCKED",
        }
    }

    /// The row-locking clause of intake's look-up of a paused type: on
    /// PostgreSQL the paused row is share-locked, so a resume deleting it
    /// waits for the intake that saw it to commit, and the resume's unparking
    /// (which starts after) finds the parked event; an intake after the
    /// delete does not park. SQLite's one writer serializes them already.
    pub(crate) fn share_lock(self) -> &'static str {
        match self {
            Self::Sqlite => "",
            Self::Postgres => " FOR SHARE",
        }
    }

    /// A checkpoint of SQLite's WAL that takes no write lock (`PASSIVE`):
    /// the pages written since the last one are copied back into the
    /// database file beside the writes, not inside one. Left to SQLite, the
    /// copy is made by whichever commit crosses the automatic checkpoint's
    /// size, a delivery's among them, and that acknowledgement waits for it
    /// (with it, 300 deliveries a second had an ack p99 of 4.3 ms on a 2-core
    /// machine; 2.1–2.7 ms once copied beside them, BENCHMARKS.md, inbox
    /// section 11).
    /// The workers run it in the background, a bulk action in
    /// its rest between batches. `None` on PostgreSQL, whose server
    /// checkpoints on its own.
    pub(crate) fn wal_checkpoint(self) -> Option<&'static str> {
        match self {
            Self::Sqlite => Some("PRAGMA wal_checkpoint(PASSIVE)"),
            Self::Postgres => None,
        }
    }

    /// Whether a claim picks its rows and takes a guard on each one's payment
    /// intent in a first statement (the queue's `PICK`), then claims only
    /// those: where claims run side by side (PostgreSQL). SQLite's one writer
    /// runs the claim as one statement under its write lock.
    pub(crate) fn guards_intents(self) -> bool {
        match self {
            Self::Sqlite => false,
            Self::Postgres => true,
        }
    }

    /// The statement that begins the inbox's own transactions (a claim, a
    /// failure, a batch of marks), `None` for the driver's plain `BEGIN`. On
    /// PostgreSQL it also turns JIT compilation off for that transaction
    /// (`SET LOCAL`, sent with the `BEGIN` in one round trip): the planner
    /// decides to compile a statement from its estimated cost, and the
    /// estimates of the claim's per-intent probes grow with the rows the
    /// table keeps (each probe is costed as a share of the table), so past a
    /// few hundred thousand stored events a claim that reads a few hundred
    /// index entries was compiled for 60–860 ms each time at the server's
    /// default `jit_above_cost`. None of the inbox's statements reads enough
    /// rows for compiled expressions to pay; the app's own statements, and
    /// the handler's transaction the app writes in, keep the server's
    /// setting. SQLite has no JIT.
    pub(crate) fn begin_own(self) -> Option<&'static str> {
        match self {
            Self::Sqlite => None,
            Self::Postgres => Some("BEGIN; SET LOCAL jit = off"),
        }
    }

    /// The condition that makes the transaction of the statement it ends (an
    /// intake `INSERT`, a done mark) commit synchronously whatever the
    /// server's default: on PostgreSQL `synchronous_commit` set `on` for this
    /// transaction only (`set_config(…, true)`, the `SET LOCAL` of a
    /// statement; evaluated for every row the statement writes, so a
    /// transaction that wrote a row has it). Its acknowledgement (`200`, or
    /// the done mark a handler's effects commit with) is then on disk before
    /// the inbox answers, even on a server running `synchronous_commit = off`,
    /// which may lose the last commits in a crash. Empty on SQLite, whose
    /// level is the connection's `synchronous` pragma.
    pub(crate) fn durable_commit(self) -> &'static str {
        match self {
            Self::Sqlite => "",
            Self::Postgres => " AND set_config('synchronous_commit', 'on', true) = 'on'",
        }
    }

    /// Whether a `WITH` clause may hold an `UPDATE … RETURNING` whose rows
    /// another part of the statement inserts elsewhere (PostgreSQL), so a
    /// done mark and its attempt record are one statement; SQLite runs them
    /// as two in one transaction.
    pub(crate) fn modifies_in_with(self) -> bool {
        match self {
            Self::Sqlite => false,
            Self::Postgres => true,
        }
    }

    /// The body of the event row `alias` names, as a select expression: on
    /// PostgreSQL from [`BODIES_TABLE`] (version 20 on), or from the row's
    /// own column for an event stored before; on SQLite the row's column.
    pub(crate) fn body_of(self, alias: &str) -> String {
        match self {
            Self::Sqlite => format!("{alias}.body"),
            Self::Postgres => format!(
                "COALESCE((SELECT b.body FROM {} b WHERE b.arrival = {alias}.arrival), {alias}.body)",
                bodies_table!()
            ),
        }
    }

    /// A condition on the events table that holds for the rows `from` (a
    /// `FROM … WHERE … LIMIT …` of that table) finds, matched by their
    /// physical address on PostgreSQL (`ctid = ANY(ARRAY(…))`: a TID scan,
    /// with no index probe per row), by key on SQLite (`arrival`, its
    /// rowid). The statement must repeat `from`'s conditions outside it: a
    /// row changed after `from` read it is rechecked by those alone.
    pub(crate) fn rows_among(self, from: &str) -> String {
        match self {
            Self::Sqlite => format!("arrival IN (SELECT arrival {from})"),
            Self::Postgres => format!("ctid = ANY(ARRAY(SELECT ctid {from}))"),
        }
    }

    /// Whether the intake writes each body to [`BODIES_TABLE`] rather than
    /// the events table's row (PostgreSQL).
    pub(crate) fn bodies_apart(self) -> bool {
        match self {
            Self::Sqlite => false,
            Self::Postgres => true,
        }
    }

    /// Whether the database has one writer at a time (SQLite's lock on the
    /// file), so this process's writes take turns before they reach it.
    pub(crate) fn one_writer(self) -> bool {
        match self {
            Self::Sqlite => true,
            Self::Postgres => false,
        }
    }

    /// Whether the database is a file the inbox opened (SQLite), to notice it
    /// deleted or replaced.
    pub(crate) fn is_file(self) -> bool {
        match self {
            Self::Sqlite => true,
            Self::Postgres => false,
        }
    }

    /// The statement that prepares a connection for the migrations: on
    /// PostgreSQL "already exists, skipping" notices on every start are
    /// noise; on SQLite WAL lets readers (the CLI, metrics) run beside the
    /// writer, and the mode is stored in the file, so setting it once is
    /// enough.
    pub(crate) fn before_migrations(self) -> &'static str {
        match self {
            Self::Sqlite => "PRAGMA journal_mode = WAL",
            Self::Postgres => "SET client_min_messages = warning",
        }
    }

    /// The lock and unlock statements (`$1` the key) that serialize the
    /// migrations of several processes, where a transaction alone does not:
    /// PostgreSQL's session advisory lock. (`SELECT 1 FROM`: a `void` result
    /// cannot be read back through `Any`.) SQLite's write lock serializes them.
    pub(crate) fn migration_lock(self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::Sqlite => None,
            Self::Postgres => Some((
                "SELECT 1 FROM pg_advisory_lock($1)",
                "SELECT 1 FROM pg_advisory_unlock($1)",
            )),
        }
    }

    /// The column of a query plan's rows that holds the plan's text: SQLite's
    /// `EXPLAIN QUERY PLAN` names it `detail`; PostgreSQL's `EXPLAIN` has one
    /// column (`None`: the first).
    pub(crate) fn plan_column(self) -> Option<&'static str> {
        match self {
            Self::Sqlite => Some("detail"),
            Self::Postgres => None,
        }
    }

    /// A statement's query plan request.
    pub(crate) fn explain(self, sql: &str) -> String {
        match self {
            Self::Sqlite => format!("EXPLAIN QUERY PLAN {sql}"),
            Self::Postgres => format!("EXPLAIN {sql}"),
        }
    }

    /// The column the overview's counts group by, read from an index alone:
    /// PostgreSQL's `phase` (stored, and its indexes are on it), SQLite's
    /// `state` (its indexes stay on `state`, and an index on its virtual
    /// `phase` column is never read alone). The reader maps each value to
    /// its phase ([`State::phase`]), so both give the same counts.
    pub(crate) fn counted_by(self) -> &'static str {
        match self {
            Self::Sqlite => "state",
            Self::Postgres => "phase",
        }
    }

    /// A text column as a condition must name it when the statement is to
    /// be driven by another condition, never by an index on this column:
    /// SQLite's unary `+`, PostgreSQL's `column || ''`. A statement that
    /// updates a few listed rows then looks each one up by its key; with the
    /// column itself, a planner whose statistics are stale (a queue's state
    /// counts change faster than they are gathered) may instead scan every
    /// row of the namespace in that state.
    pub(crate) fn unindexed(self, column: &str) -> String {
        match self {
            Self::Sqlite => format!("+{column}"),
            Self::Postgres => format!("({column} || '')"),
        }
    }

    /// A row source (for a `FROM`) of the JSON array of arrays of integers
    /// bound at `$param`: one row per inner array, its elements as the
    /// `BIGINT` columns `columns` in order. One parameter for any number of
    /// rows: the statement's text (and its prepared plan) is the same for a
    /// batch of one and of five hundred, and binding costs no more per row.
    pub(crate) fn json_rows(self, param: usize, columns: &[&str]) -> String {
        let mut select = String::new();
        for (index, column) in columns.iter().enumerate() {
            if index > 0 {
                select.push_str(", ");
            }
            match self {
                Self::Sqlite => select.push_str(&format!("value ->> {index} AS {column}")),
                Self::Postgres => select.push_str(&format!("(element ->> {index})::bigint AS {column}")),
            }
        }
        match self {
            Self::Sqlite => format!("(SELECT {select} FROM json_each(${param}))"),
            Self::Postgres => {
                format!("(SELECT {select} FROM jsonb_array_elements(${param}::jsonb) AS element)")
            }
        }
    }

    /// The statement a read-only connection checks a database with: on
    /// SQLite reading the schema reads the file's header.
    pub(crate) fn probe(self) -> &'static str {
        match self {
            Self::Sqlite => "SELECT COUNT(*) FROM sqlite_master",
            Self::Postgres => "SELECT 1",
        }
    }
}

/// Whether a database error says the table does not exist: SQLite says "no
/// such table", PostgreSQL answers SQLSTATE `42P01`.
pub(crate) fn is_missing_table(err: &dyn sqlx::error::DatabaseError) -> bool {
    err.message().contains("no such table") || err.code().as_deref() == Some("42P01")
}

/// Whether a database error says a column does not exist: SQLite says "no
/// such column", PostgreSQL answers SQLSTATE `42703`.
pub(crate) fn is_missing_column(err: &dyn sqlx::error::DatabaseError) -> bool {
    err.message().contains("no such column") || err.code().as_deref() == Some("42703")
}

/// The phase of every waiting event ([`State::phase`] of `pending` and
/// `running`) as an SQL literal, for `concat!` into the statements that must
/// read the partial index of waiting events (`payhook_inbox_waiting`, `WHERE
/// phase = 'pending'`): a planner reads a partial index only for a statement
/// whose condition names its predicate's value, never a bound parameter.
/// Written from [`State::Pending`]'s name (a test checks), never from input.
macro_rules! waiting_phase {
    () => {
        "'pending'"
    };
}
pub(crate) use waiting_phase;

/// The phases of a group of states ([`State::phase`]) as a condition on the
/// `phase` column, `phase IN ('…', …)`, its values literals written from
/// [`State`]'s names (never input), so that a statement reading a group
/// finds its rows through the indexes on `phase` (the `state` column is in
/// no index). `column` is the column as the statement names it.
pub(crate) fn phase_in(column: &str, group: fn(State) -> bool) -> String {
    let mut phases: Vec<&'static str> = Vec::new();
    for state in State::members(group) {
        let phase = state.phase().as_str();
        if !phases.contains(&phase) {
            phases.push(phase);
        }
    }
    if phases.is_empty() {
        return "1 = 0".to_owned();
    }
    let list: Vec<String> = phases.iter().map(|phase| format!("'{phase}'")).collect();
    format!("{column} IN ({})", list.join(", "))
}

/// A group of states as statement text: `$first, $first+1, …`, one
/// parameter for each state of `group` ([`State`]'s group methods), and the
/// names to bind to them in order. A group with no state binds one name no
/// row holds (`IN ()` is no SQL), so the statement selects nothing.
pub(crate) fn states_in(first: usize, group: fn(State) -> bool) -> (String, Vec<&'static str>) {
    let mut names: Vec<&'static str> = State::members(group).into_iter().map(State::as_str).collect();
    if names.is_empty() {
        names.push("");
    }
    let marks = (first..first + names.len())
        .map(|n| format!("${n}"))
        .collect::<Vec<_>>()
        .join(", ");
    (marks, names)
}

#[cfg(test)]
mod tests {
    use crate::model::State;

    #[test]
    fn the_waiting_phase_is_pendings_name() {
        assert_eq!(waiting_phase!(), format!("'{}'", State::Pending.as_str()));
        assert_eq!(waiting_phase!(), format!("'{}'", State::Running.phase().as_str()));
        assert_eq!(
            super::phase_in("phase", State::is_waiting),
            "phase IN ('pending')"
        );
        assert_eq!(
            super::phase_in("e.phase", State::is_purgeable),
            "e.phase IN ('dead', 'done')"
        );
        assert_eq!(super::phase_in("phase", |_| false), "1 = 0");
    }

    #[test]
    fn the_parked_offset_is_one_number_in_statements_and_code() {
        assert_eq!(parked!().parse::<i64>(), Ok(super::PARKED));
        // A due time a thousand years out stays an i64 when parked.
        let far = 1000 * 365 * 24 * 3_600_000_i64;
        assert!(far.checked_add(super::PARKED).is_some());
    }
}
