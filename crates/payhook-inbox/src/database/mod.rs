//! The database layer: everything the inbox knows about the database it runs
//! on, and nothing about events, workers or the service.
//!
//! - [`pool`] — [`Database`]: the pool at run time, the dialect it speaks, the
//!   deadline each piece of work is held to, and on SQLite the write turns.
//! - [`driver`] — what only the concrete sqlx type knows (`Driver`) and the
//!   bounds every store's blanket implementation states (`sql_bounds!`).
//! - [`dialect`] — the table names and the SQL that differs per database,
//!   with the numbered migrations beside it.
//! - [`migrate`] — running the migrations under the database's own lock.
//! - [`notify`] — `NOTIFY` and `LISTEN`: waking the replicas on PostgreSQL.
//! - [`sqlite_file`] — noticing a SQLite file deleted or replaced.
//!
//! The features' stores (the queue's, the intake's, the reads…) sit above
//! this layer and use it; it uses none of them.

pub(crate) mod dialect;
pub(crate) mod driver;
pub(crate) mod migrate;
pub(crate) mod notify;
mod pool;
pub(crate) mod sqlite_file;

#[cfg(test)]
pub(crate) use pool::timed_out;
pub use pool::DEFAULT_DATABASE_TIMEOUT;
pub(crate) use pool::{Database, UrlOptions, WriteTurns};
