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

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use sqlx::any::AnyRow;
use sqlx::Row;

use crate::db::{now_ms, Database};
use crate::error::InboxError;
use crate::inbox::DEFAULT_SQLITE_CACHE_KIB;
use crate::schema;

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
    /// When the last attempt started (Unix milliseconds).
    pub last_attempt_at: Option<i64>,
    /// The last failure's text.
    pub last_error: Option<String>,
    /// When it was marked done (Unix milliseconds).
    pub done_at: Option<i64>,
    /// The raw body as received (only filled by [`Admin::show`]).
    pub body: Option<String>,
}

/// A connection to an inbox for operations.
#[derive(Debug, Clone)]
pub struct Admin {
    db: Database,
    namespace: String,
}

const COLUMNS: &str = "event_id, event_type, intent_id, state, attempts, created, received_at, \
    due_at, last_attempt_at, last_error, done_at";

impl Admin {
    /// Connects to the inbox at `url` (`sqlite://FILE` or `postgres://…`) and
    /// creates the table when it is missing.
    ///
    /// # Errors
    /// An unsupported URL or an unreachable database.
    pub async fn connect(url: &str, namespace: &str) -> Result<Self, InboxError> {
        let db = Database::connect(url, 2, Duration::from_secs(5), true, DEFAULT_SQLITE_CACHE_KIB).await?;
        schema::migrate(&db.pool, db.backend).await?;
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
        let now = now_ms();
        let mut sql = format!("SELECT {COLUMNS} FROM payhook_inbox WHERE namespace = $1");
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
        let mut query = sqlx::query(&sql).bind(&self.namespace);
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
        let rows = query.fetch_all(&self.db.pool).await?;
        rows.iter().map(|row| stored(row, false)).collect()
    }

    /// One event with its body.
    ///
    /// # Errors
    /// [`InboxError::NotFound`], or a database error.
    pub async fn show(&self, event_id: &str) -> Result<StoredEvent, InboxError> {
        let sql = format!("SELECT {COLUMNS}, body FROM payhook_inbox WHERE namespace = $1 AND event_id = $2");
        let row = sqlx::query(&sql)
            .bind(&self.namespace)
            .bind(event_id)
            .fetch_optional(&self.db.pool)
            .await?;
        match row {
            Some(row) => stored(&row, true),
            None => Err(InboxError::NotFound(crate::inbox::payhook_escape(event_id))),
        }
    }

    /// Makes a dead or waiting event due now: it gets one more attempt (its
    /// attempt count is kept, so a further failure makes it dead again).
    ///
    /// # Errors
    /// [`InboxError::NotFound`] when no dead or pending event has this id, or a
    /// database error.
    pub async fn retry(&self, event_id: &str) -> Result<(), InboxError> {
        let updated = sqlx::query(
            "UPDATE payhook_inbox SET state = 'pending', due_at = $1 \
             WHERE namespace = $2 AND event_id = $3 AND state IN ('dead', 'pending')",
        )
        .bind(now_ms())
        .bind(&self.namespace)
        .bind(event_id)
        .execute(&self.db.pool)
        .await?;
        if updated.rows_affected() == 0 {
            return Err(InboxError::NotFound(crate::inbox::payhook_escape(event_id)));
        }
        Ok(())
    }

    /// Makes every dead event due now; returns how many.
    ///
    /// # Errors
    /// A database error.
    pub async fn retry_dead(&self) -> Result<u64, InboxError> {
        let updated = sqlx::query(
            "UPDATE payhook_inbox SET state = 'pending', due_at = $1 \
             WHERE namespace = $2 AND state = 'dead'",
        )
        .bind(now_ms())
        .bind(&self.namespace)
        .execute(&self.db.pool)
        .await?;
        Ok(updated.rows_affected())
    }

    /// Makes every done event received at or after `since_ms` (Unix
    /// milliseconds) due again: its handler runs once more. Returns how many.
    ///
    /// # Errors
    /// A database error.
    pub async fn replay_since(&self, since_ms: i64) -> Result<u64, InboxError> {
        let updated = sqlx::query(
            "UPDATE payhook_inbox SET state = 'pending', due_at = $1, done_at = NULL \
             WHERE namespace = $2 AND state = 'done' AND received_at >= $3",
        )
        .bind(now_ms())
        .bind(&self.namespace)
        .bind(since_ms)
        .execute(&self.db.pool)
        .await?;
        Ok(updated.rows_affected())
    }

    /// Deletes done events marked done before `before_ms` (Unix milliseconds);
    /// returns how many. Their ids are then no longer recognised as repeats.
    ///
    /// # Errors
    /// A database error.
    pub async fn purge_done_before(&self, before_ms: i64) -> Result<u64, InboxError> {
        let deleted =
            sqlx::query("DELETE FROM payhook_inbox WHERE namespace = $1 AND state = 'done' AND done_at < $2")
                .bind(&self.namespace)
                .bind(before_ms)
                .execute(&self.db.pool)
                .await?;
        Ok(deleted.rows_affected())
    }
}

fn stored(row: &AnyRow, with_body: bool) -> Result<StoredEvent, InboxError> {
    Ok(StoredEvent {
        event_id: row.try_get("event_id")?,
        event_type: row.try_get("event_type")?,
        intent_id: row.try_get("intent_id")?,
        state: row.try_get("state")?,
        attempts: row.try_get("attempts")?,
        created: row.try_get("created")?,
        received_at: row.try_get("received_at")?,
        due_at: row.try_get("due_at")?,
        last_attempt_at: row.try_get("last_attempt_at")?,
        last_error: row.try_get("last_error")?,
        done_at: row.try_get("done_at")?,
        body: if with_body {
            Some(row.try_get("body")?)
        } else {
            None
        },
    })
}
