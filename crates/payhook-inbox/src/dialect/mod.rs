//! What differs between the databases the inbox runs on: the table names the
//! statements are written with, the SQL dialect a pool speaks and the few
//! clauses that differ by dialect, and each database's numbered migrations
//! ([`migrations`]).
//!
//! Every other statement is the same text on every database and sits beside
//! the method that runs it (the queue's transitions, the reads).

pub(crate) mod migrations;

use crate::error::InboxError;

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

/// The table every backend keeps events in.
pub const TABLE: &str = table!();

/// The table recording which numbered migrations have run.
pub const SCHEMA_TABLE: &str = concat!(table!(), "_schema");

/// The table recording each ended attempt of an event (time, duration,
/// outcome, error), at most
/// [`MAX_ATTEMPT_RECORDS`](crate::admin::MAX_ATTEMPT_RECORDS) per event,
/// deleted with its event.
pub const ATTEMPTS_TABLE: &str = attempts_table!();

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

    /// A statement's query plan request.
    pub(crate) fn explain(self, sql: &str) -> String {
        match self {
            Self::Sqlite => format!("EXPLAIN QUERY PLAN {sql}"),
            Self::Postgres => format!("EXPLAIN {sql}"),
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
