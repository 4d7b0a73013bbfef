//! The inside of a running inbox, shared by the intake and the workers: the
//! receiver, the database, the settings, the ingest queue and the wake-up.
//! Both `inbox` (ingest, the builder) and `worker` use this module; neither
//! uses the other's internals.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use payhook_core::Receiver;
use tokio::sync::{mpsc, oneshot, Notify};

use crate::database::sqlite_file::FileIdentity;
use crate::database::Database;
use crate::model::NewRow;

pub(crate) struct Inner<DB: sqlx::Database> {
    pub(crate) receiver: Receiver,
    pub(crate) db: Database<DB>,
    pub(crate) config: Config,
    pub(crate) ingest: mpsc::Sender<Pending>,
    /// Woken after each ingest commit so idle workers look at once.
    pub(crate) arrived: Notify,
    /// How many more events this process's workers would take at their next
    /// claim: their claim-ahead target (the `worker` module's "Claiming
    /// ahead") less the events they hold waiting; 0 while no workers run.
    /// The intake wakes other replicas only for the events this room does
    /// not cover (`writers::intake`).
    pub(crate) room: Arc<AtomicUsize>,
    /// The SQLite file as opened, to notice it deleted or replaced.
    pub(crate) file: Option<FileIdentity>,
}

/// The worker-side settings.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) namespace: String,
    pub(crate) lease: Duration,
    pub(crate) retention: Duration,
    pub(crate) backoff_base: Duration,
    pub(crate) backoff_cap: Duration,
    pub(crate) max_attempts: u32,
    pub(crate) concurrency: usize,
    pub(crate) poll_interval: Duration,
    /// The URL of a PostgreSQL inbox built from one (for its listener).
    pub(crate) listen_url: Option<String>,
    /// The deadline of each piece of database work (the database's own copy
    /// is what the work is held to).
    pub(crate) database_timeout: Duration,
}

/// One delivery waiting for its ingest commit.
pub(crate) struct Pending {
    pub(crate) row: NewRow,
    /// When the delivery stops waiting and answers `503`.
    pub(crate) deadline: tokio::time::Instant,
    pub(crate) done: oneshot::Sender<Result<bool, &'static str>>,
}
