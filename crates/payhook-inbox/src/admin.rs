//! Operations on a stored inbox, without a receiver or workers: what the
//! `payhook inbox` command runs.
//!
//! ```no_run
//! use payhook::inbox::admin::{Admin, Filter, State};
//!
//! # async fn run() -> Result<(), payhook::inbox::InboxError> {
//! let admin = Admin::connect("sqlite://payhook-inbox.db", "payhook").await?;
//! for event in admin.list(&Filter { state: Some(State::Dead), ..Filter::default() }).await? {
//!     println!("{} {} {:?}", event.event_id, event.attempts, event.last_error);
//! }
//! admin.retry_dead().await?; // give every dead event another attempt
//! # Ok(()) }
//! ```

use std::time::Duration;

use sqlx::{Any, Pool};

use crate::db::{Database, UrlOptions};
use crate::error::InboxError;
use crate::inbox::DEFAULT_SQLITE_CACHE_KIB;
use crate::queue::{database_of, Backend};

pub use crate::queue::State;

/// Which events [`Admin::list`] returns; every field narrows.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only events in this state.
    pub state: Option<State>,
    /// Only events of this type.
    pub event_type: Option<String>,
    /// Only events received at least this long ago.
    pub older_than: Option<Duration>,
    /// Only events received at most this long ago.
    pub newer_than: Option<Duration>,
    /// At most this many (newest first); `None` means 1000.
    pub limit: Option<u32>,
}

/// One stored event, as [`Admin::list`] and [`Admin::show`] report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// The event id.
    pub event_id: String,
    /// The event type.
    pub event_type: String,
    /// The payment intent it is about, if any.
    pub intent_id: Option<String>,
    /// Its state.
    pub state: String,
    /// Attempts so far.
    pub attempts: i64,
    /// The event's `created` (Unix seconds), or its arrival when it had none.
    pub created: i64,
    /// When it was received (Unix milliseconds).
    pub received_at: i64,
    /// When it is due (Unix milliseconds), for pending events.
    pub due_at: i64,
    /// When the lease of a running event runs out (Unix milliseconds): if its
    /// worker stopped, the event is taken up again (or, after its last
    /// attempt, made dead) soon after.
    pub lease_until: Option<i64>,
    /// When the last attempt started (Unix milliseconds).
    pub last_attempt_at: Option<i64>,
    /// The last failure's text.
    pub last_error: Option<String>,
    /// When it was marked done (Unix milliseconds).
    pub done_at: Option<i64>,
    /// The raw body as received (only filled by [`Admin::show`]).
    pub body: Option<String>,
}

/// A connection to an inbox for operations. Never creates, migrates or
/// changes a database's schema: pointed at a missing file or a database
/// without the inbox table, it refuses ([`InboxError::NoInbox`]).
#[derive(Debug, Clone)]
pub struct Admin<DB: Backend = Any> {
    db: Database<DB>,
    namespace: String,
}

impl Admin<Any> {
    /// Connects to the inbox at `url` (`sqlite://FILE` or `postgres://…`).
    ///
    /// # Errors
    /// An unsupported URL, an unreachable database, a file that is not a
    /// SQLite database, or no inbox there ([`InboxError::NoInbox`]).
    pub async fn connect(url: &str, namespace: &str) -> Result<Self, InboxError> {
        let db = Database::connect(
            url,
            UrlOptions {
                max_connections: 2,
                acquire_timeout: Duration::from_secs(5),
                sqlite_full_sync: true,
                sqlite_cache_kib: DEFAULT_SQLITE_CACHE_KIB,
                create: false,
            },
        )
        .await?;
        Self::over(db, namespace).await
    }
}

impl<DB: Backend> Admin<DB> {
    /// Operations on the inbox in the app's own pool (`sqlx::PgPool`,
    /// `sqlx::SqlitePool`).
    ///
    /// # Errors
    /// An unreachable database, or no inbox there ([`InboxError::NoInbox`]).
    pub async fn from_pool(pool: Pool<DB>, namespace: &str) -> Result<Self, InboxError> {
        Self::over(database_of(pool, None)?, namespace).await
    }

    async fn over(db: Database<DB>, namespace: &str) -> Result<Self, InboxError> {
        if !DB::has_table(&db).await? {
            return Err(InboxError::NoInbox("the database has no payhook_inbox table"));
        }
        Ok(Self {
            db,
            namespace: namespace.to_owned(),
        })
    }

    /// The events that match, newest first.
    ///
    /// # Errors
    /// A database error.
    pub async fn list(&self, filter: &Filter) -> Result<Vec<StoredEvent>, InboxError> {
        Ok(DB::list(&self.db, &self.namespace, filter).await?)
    }

    /// One event with its body.
    ///
    /// # Errors
    /// [`InboxError::NotFound`], or a database error.
    pub async fn show(&self, event_id: &str) -> Result<StoredEvent, InboxError> {
        DB::show(&self.db, &self.namespace, event_id)
            .await?
            .ok_or_else(|| InboxError::NotFound(crate::inbox::payhook_escape(event_id)))
    }

    /// Makes a dead or waiting event due now: it gets one more attempt (its
    /// attempt count is kept, so a further failure makes it dead again).
    ///
    /// # Errors
    /// [`InboxError::NotFound`] when no dead or pending event has this id, or a
    /// database error.
    pub async fn retry(&self, event_id: &str) -> Result<(), InboxError> {
        if DB::retry(&self.db, &self.namespace, event_id).await? {
            Ok(())
        } else {
            Err(InboxError::NotFound(crate::inbox::payhook_escape(event_id)))
        }
    }

    /// Makes every dead event due now; returns how many.
    ///
    /// # Errors
    /// A database error.
    pub async fn retry_dead(&self) -> Result<u64, InboxError> {
        Ok(DB::retry_dead(&self.db, &self.namespace).await?)
    }

    /// Makes every done event received at or after `since_ms` (Unix
    /// milliseconds) due again: its handler runs once more. Returns how many.
    ///
    /// # Errors
    /// A database error.
    pub async fn replay_since(&self, since_ms: i64) -> Result<u64, InboxError> {
        Ok(DB::replay(&self.db, &self.namespace, since_ms).await?)
    }

    /// Deletes done events marked done before `before_ms` (Unix milliseconds),
    /// in bounded batches (no long lock); returns how many. Their ids are then
    /// no longer recognised as repeats.
    ///
    /// # Errors
    /// A database error.
    pub async fn purge_done_before(&self, before_ms: i64) -> Result<u64, InboxError> {
        let mut total = 0;
        loop {
            let deleted = DB::purge(&self.db, &self.namespace, before_ms, crate::worker::PURGE_BATCH).await?;
            total += deleted;
            if deleted < u64::try_from(crate::worker::PURGE_BATCH).unwrap_or(u64::MAX) {
                return Ok(total);
            }
        }
    }
}
