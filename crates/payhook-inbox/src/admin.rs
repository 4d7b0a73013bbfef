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

// ---------------------------------------------------------------------------
// What the dashboard and `payhook inbox stats` read: counts, activity, pages
// of events with a keyset cursor, and the attempts record.
// ---------------------------------------------------------------------------

pub use crate::queue::{Outcome, ATTEMPTS_TABLE, MAX_ATTEMPT_RECORDS};

/// The largest page [`Admin::page`] returns.
pub const MAX_PAGE: u32 = 500;

/// Counts of events by state and the oldest pending one ([`Admin::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Waiting for a worker.
    pub pending: i64,
    /// Held by a worker.
    pub running: i64,
    /// Handled (kept for the retention).
    pub done: i64,
    /// Failed their last attempt.
    pub dead: i64,
    /// When the oldest pending event was received (Unix milliseconds).
    pub oldest_pending_at: Option<i64>,
}

/// Deliveries and attempts in one interval ([`Admin::activity`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActivitySlot {
    /// When the interval starts (Unix milliseconds).
    pub start: i64,
    /// Deliveries acknowledged (stored) in it.
    pub received: i64,
    /// Attempts that ended with the event done.
    pub handled: i64,
    /// Attempts that failed (retried later, or dead).
    pub failed: i64,
}

/// Where a page of events ends: the next page starts after it. Ordered by
/// (received time, arrival), so events received in the same millisecond are
/// neither repeated nor skipped across pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The last event's receive time (Unix milliseconds).
    pub received_at: i64,
    /// The last event's arrival number (its row key).
    pub arrival: i64,
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.received_at, self.arrival)
    }
}

impl std::str::FromStr for Cursor {
    type Err = &'static str;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        const EXPECTED: &str = "a page cursor is two whole numbers joined by a dot";
        let (received_at, arrival) = text.split_once('.').ok_or(EXPECTED)?;
        let number = |part: &str| {
            if part.is_empty() || part.len() > 19 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(EXPECTED);
            }
            part.parse::<i64>().map_err(|_| EXPECTED)
        };
        Ok(Self {
            received_at: number(received_at)?,
            arrival: number(arrival)?,
        })
    }
}

/// One page of events ([`Admin::page`]): `filter` narrows (its `limit` is not
/// used), newest first, after `after`.
#[derive(Debug, Clone)]
pub struct PageQuery {
    /// State, type and age filters.
    pub filter: Filter,
    /// Only the event with this id.
    pub event_id: Option<String>,
    /// Start after this cursor (the previous page's [`Page::next`]).
    pub after: Option<Cursor>,
    /// Events per page, 1 to [`MAX_PAGE`].
    pub limit: u32,
}

impl Default for PageQuery {
    fn default() -> Self {
        Self {
            filter: Filter::default(),
            event_id: None,
            after: None,
            limit: 50,
        }
    }
}

/// A page of events, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The events (bodies not filled).
    pub events: Vec<StoredEvent>,
    /// The cursor of the next page, when there are more events.
    pub next: Option<Cursor>,
}

/// One ended attempt of an event ([`Admin::attempts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Its number (1 for the first).
    pub attempt: i64,
    /// When it started (Unix milliseconds).
    pub started_at: i64,
    /// How long the handler and the done mark took.
    pub duration_ms: i64,
    /// `done`, `failed` (retried later) or `dead` ([`Outcome`]).
    pub outcome: String,
    /// The failure's text.
    pub error: Option<String>,
}

/// Another event of the same payment intent ([`Admin::intent_events`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntentEvent {
    /// The event id.
    pub event_id: String,
    /// The event type.
    pub event_type: String,
    /// Its state.
    pub state: String,
    /// Its `created` (Unix seconds).
    pub created: i64,
}

impl<DB: Backend> Admin<DB> {
    /// Operations on the inbox an [`Inbox`](crate::Inbox) runs on (its pool
    /// and namespace), e.g. for a dashboard served by the same app.
    pub fn of_inbox(inbox: &crate::Inbox<DB>) -> Self {
        Self {
            db: inbox.inner.db.clone(),
            namespace: inbox.inner.config.namespace.clone(),
        }
    }

    /// The namespace this admin reads.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The database's kind: `"SQLite"` or `"PostgreSQL"`.
    pub fn backend(&self) -> &'static str {
        match self.db.dialect {
            crate::queue::Dialect::Sqlite => "SQLite",
            crate::queue::Dialect::Postgres => "PostgreSQL",
        }
    }

    /// Counts of events by state, and when the oldest pending one arrived.
    ///
    /// # Errors
    /// A database error.
    pub async fn stats(&self) -> Result<Stats, InboxError> {
        Ok(DB::stats(&self.db, &self.namespace).await?)
    }

    /// Deliveries received and attempts ended (handled, failed) in `slots`
    /// intervals of `interval` each, the last ending now, oldest first.
    ///
    /// # Errors
    /// A database error.
    pub async fn activity(&self, interval: Duration, slots: usize) -> Result<Vec<ActivitySlot>, InboxError> {
        let slots = slots.min(1000);
        let interval = crate::db::millis(interval).max(1);
        let span = interval.saturating_mul(i64::try_from(slots).unwrap_or(i64::MAX));
        let since = crate::db::now_ms().saturating_sub(span);
        Ok(DB::activity(&self.db, &self.namespace, since, interval, slots).await?)
    }

    /// One page of events, newest first; [`Page::next`] continues it.
    ///
    /// # Errors
    /// A database error.
    pub async fn page(&self, query: &PageQuery) -> Result<Page, InboxError> {
        Ok(DB::page(&self.db, &self.namespace, query, crate::db::now_ms()).await?)
    }

    /// The recorded attempts of one event, latest first (at most
    /// [`MAX_ATTEMPT_RECORDS`]). An attempt is recorded when it ends; one
    /// whose worker died shows in the event's `last_error` instead.
    ///
    /// # Errors
    /// A database error (an unknown id has no attempts).
    pub async fn attempts(&self, event_id: &str) -> Result<Vec<Attempt>, InboxError> {
        Ok(DB::attempts(&self.db, &self.namespace, event_id).await?)
    }

    /// The events of one payment intent, in `created` order (at most `limit`).
    ///
    /// # Errors
    /// A database error.
    pub async fn intent_events(&self, intent_id: &str, limit: u32) -> Result<Vec<IntentEvent>, InboxError> {
        Ok(DB::intent_events(&self.db, &self.namespace, intent_id, i64::from(limit)).await?)
    }
}

impl<DB: Backend> Admin<DB>
where
    for<'c> &'c Pool<DB>: sqlx::Executor<'c, Database = DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    String: for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
    for<'n> &'n str: sqlx::ColumnIndex<DB::Row>,
{
    /// The query plans of the overview's and the events page's statements
    /// (`EXPLAIN QUERY PLAN` on SQLite, `EXPLAIN` on PostgreSQL), to check
    /// they read indexes: (what, plan lines).
    ///
    /// # Errors
    /// A database error.
    pub async fn query_plans(&self) -> Result<Vec<(&'static str, Vec<String>)>, InboxError> {
        Ok(crate::queue::query_plans(&self.db, &self.namespace).await?)
    }
}

/// An age as the operator's tools take it (`payhook inbox purge --older-than`,
/// the dashboard's filters): a whole number of at most 9 ASCII digits and a
/// unit, `s`, `m`, `h` or `d` (`90s`, `15m`, `2h`, `7d`). `None` for anything
/// else, a sign included; each tool words its own error.
///
/// ```
/// use std::time::Duration;
/// use payhook::inbox::admin::parse_age;
///
/// assert_eq!(parse_age("2h"), Some(Duration::from_secs(7200)));
/// assert_eq!(parse_age("+2h"), None);
/// ```
pub fn parse_age(text: &str) -> Option<Duration> {
    payhook_core::time::parse_age(text)
}

#[cfg(test)]
mod tests {
    use super::parse_age;
    use std::time::Duration;

    #[test]
    fn ages_have_one_form() {
        assert_eq!(parse_age("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_age("15m"), Some(Duration::from_secs(900)));
        assert_eq!(parse_age("0h"), Some(Duration::ZERO));
        assert_eq!(
            parse_age("999999999d"),
            Some(Duration::from_secs(999_999_999 * 86_400))
        );
        for wrong in [
            "",
            "h",
            "5",
            "5w",
            "+5h",
            "-1h",
            " 5h",
            "5 h",
            "1234567890s",
            "5é",
            "٣h",
            "5hh",
        ] {
            assert_eq!(parse_age(wrong), None, "{wrong:?}");
        }
    }
}
