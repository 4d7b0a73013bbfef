//! The databases the inbox runs on: [`Backend`] is sqlx's
//! [`Postgres`](https://docs.rs/sqlx/0.8/sqlx/struct.Postgres.html), [`Sqlite`](https://docs.rs/sqlx/0.8/sqlx/struct.Sqlite.html) (features
//! `postgres`, `sqlite`) or [`Any`](sqlx::Any) (an inbox built from a URL),
//! and is every layer's trait at once — the queue's transitions, the
//! operator's state changes, the bulk actions, the reads, the attempts, duplicates and refused events records, the migrations,
//! `NOTIFY` and `LISTEN` — each implemented once for all three types (see
//! [`driver`](crate::database::driver) for how and why).

use crate::database::driver::Driver;
use crate::database::Database;
use crate::error::InboxError;

/// A database the inbox runs on: sqlx's [`Postgres`](https://docs.rs/sqlx/0.8/sqlx/struct.Postgres.html),
/// [`Sqlite`](https://docs.rs/sqlx/0.8/sqlx/struct.Sqlite.html) (features `postgres`, `sqlite`), or
/// [`Any`](sqlx::Any) for an inbox built from a URL. Sealed: the inbox's
/// statements are written for these alone.
pub trait Backend:
    Driver
    + crate::intake::insert::Intake
    + crate::queue::transitions::Queue
    + crate::queue::progress::Progress
    + crate::actions::operations::Operations
    + crate::actions::bulk::Bulk
    + crate::reads::Reads
    + crate::reads::dashboard::Overview
    + crate::queue::attempts::AttemptsRecord
    + crate::intake::duplicates::DuplicatesRecord
    + crate::intake::refused::RefusedRecord
    + Reconciler
    + crate::reads::plans::Plans
    + crate::database::migrate::Migrate
    + crate::database::notify::Notify
    + crate::database::notify::Listen
{
}

impl<DB> Backend for DB where
    DB: Driver
        + crate::intake::insert::Intake
        + crate::queue::transitions::Queue
        + crate::queue::progress::Progress
        + crate::actions::operations::Operations
        + crate::actions::bulk::Bulk
        + crate::reads::Reads
        + crate::reads::dashboard::Overview
        + crate::queue::attempts::AttemptsRecord
        + crate::intake::duplicates::DuplicatesRecord
        + crate::intake::refused::RefusedRecord
        + Reconciler
        + crate::reads::plans::Plans
        + crate::database::migrate::Migrate
        + crate::database::notify::Notify
        + crate::database::notify::Listen
{
}

/// The reconciler's record in the database (`ReconcilerRecord`), a store of
/// the backend only where the reconciler is built (feature `reconcile`).
#[cfg(feature = "reconcile")]
pub use crate::reconcile::record::ReconcilerRecord as Reconciler;

/// Without the reconciler, nothing: every type has it.
#[cfg(not(feature = "reconcile"))]
pub trait Reconciler {}

#[cfg(not(feature = "reconcile"))]
impl<DB> Reconciler for DB {}

/// The [`Database`] of the app's own pool: its dialect from its type (an
/// `Any` pool is refused: its dialect is known from its URL only).
pub(crate) fn database_of<DB: Backend>(pool: sqlx::Pool<DB>) -> Result<Database<DB>, InboxError> {
    let dialect = DB::DIALECT.ok_or(InboxError::UnsupportedUrl(
        "an Any pool needs its URL: build it with Inbox::connect",
    ))?;
    Ok(Database::new(pool, dialect))
}
