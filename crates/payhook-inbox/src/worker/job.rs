//! What a handler sees: the [`Handler`] trait, the [`Job`] of one attempt at
//! one event and the [`JobTransaction`] in which the event is marked done.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use payhook_core::Event;
use sqlx::{Any, Transaction};
use tokio::sync::{Mutex, OwnedMappedMutexGuard, OwnedMutexGuard};

use crate::backend::Backend;
use crate::database::Database;
use crate::error::{payhook_escape, InboxError};
use crate::model::{ClaimedAttempt, Source};

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
    pub(super) event: Event,
    pub(super) attempt: u32,
    pub(super) source: Source,
    pub(super) claim: Arc<ClaimRef<DB>>,
    pub(super) slot: Arc<Mutex<Slot<DB>>>,
}

impl<DB: Backend> std::fmt::Debug for Job<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("event_id", &self.event.id())
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// What identifies a claim: the row, the lease token and the attempt.
pub(super) struct ClaimRef<DB: Backend> {
    pub(super) db: Database<DB>,
    pub(super) attempt: ClaimedAttempt,
    pub(super) event_id: String,
    /// Set once the transaction is open: the row is then locked by it, and the
    /// lease no longer needs renewing.
    pub(super) opened: AtomicBool,
}

pub(super) struct Slot<DB: Backend> {
    pub(super) tx: Option<Transaction<'static, DB>>,
    pub(super) lost: bool,
    /// The handler committed through [`Job::commit`]: the event is done.
    pub(super) committed: bool,
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

    /// Whether a delivery stored the event, or the reconciler did because no
    /// delivery of it arrived ([`Source::Reconciled`]). The handler need not
    /// care: the event is the same either way.
    pub fn source(&self) -> Source {
        self.source
    }

    /// Which attempt this is: 1 for the first. Counted attempts only: a run
    /// cut short by a process that died before it ended (uncounted, see the
    /// inbox's crash rules) is run again under the same number.
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
                    let marked = DB::mark_done_in(&mut tx, db.dialect, self.claim.attempt).await?;
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
