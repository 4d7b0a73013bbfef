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

use crate::actions::bulk_run::BulkRun;
use crate::actions::operations::park_all;
use crate::actions::purge::{purge_paced, PurgeCursor};
use crate::backend::{database_of, Backend};
use crate::clock::{millis, now_ms};
use crate::database::sqlite_file::FileIdentity;
use crate::database::{Database, UrlOptions};
use crate::error::{payhook_escape, InboxError};
use crate::inbox::DEFAULT_SQLITE_CACHE_KIB;

pub use crate::actions::bulk_run::BULK_BATCH;
pub use crate::actions::purge::{Pace, PurgeReport};
pub use crate::actions::selection::{
    BulkAction, BulkCount, BulkReport, Selection, BULK_COUNT_LIMIT, MAX_BULK_IDS,
};
pub use crate::database::dialect::{
    ACTIVITY_TABLE, ATTEMPTS_TABLE, BODIES_TABLE, DIFFERING_TABLE, DUPLICATES_TABLE, PAUSED_TABLE,
    RECONCILER_TABLE, REFUSED_TABLE,
};
pub use crate::intake::refused::MAX_REFUSED_KEPT;
pub use crate::model::{
    ActivitySlot, Attempt, AttemptOutcome, Cursor, DifferingCopies, Filter, IntentEvent, Page, PageQuery,
    PausedType, Refused, Source, State, Stats, StoredEvent, MAX_PAGE,
};
pub use crate::queue::attempts::MAX_ATTEMPT_RECORDS;

/// A connection to an inbox for operations. Never creates, migrates or
/// changes a database's schema: pointed at a missing file or a database
/// without the inbox table, it refuses ([`InboxError::NoInbox`]).
///
/// What `payhook inbox` and the dashboard run, an app can run from its own
/// code, on the inbox it runs ([`Admin::of_inbox`]) or on its own pool
/// ([`Admin::from_pool`]): no CLI to build during an incident. Pausing a
/// type, resuming it, and a bulk retry counted first:
///
/// ```
/// use payhook::inbox::admin::{BulkAction, Selection, State};
/// use payhook::inbox::{Admin, Inbox, InboxError};
/// use payhook::Receiver;
///
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// # let dir = std::env::temp_dir().join(format!("payhook-admin-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// # let url = format!("sqlite://{}", dir.join("inbox.db").display());
/// let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
/// let inbox = Inbox::connect(receiver, &url).await?; // e.g. "sqlite://inbox.db"
/// let admin = Admin::of_inbox(&inbox); // the inbox's own pool and namespace
///
/// // Stop handling a type: its deliveries are still verified, stored and
/// // acknowledged, and no worker of any replica takes them…
/// admin.pause("payment_intent.payment_failed").await?;
/// assert_eq!(admin.paused().await?[0].event_type, "payment_intent.payment_failed");
/// // …until it is resumed: its waiting events run, oldest first.
/// admin.resume("payment_intent.payment_failed").await?;
///
/// // Another attempt for the dead events of one type: count, then act on
/// // what was counted (never more; the report says what changed meanwhile).
/// let dead = Selection {
///     state: Some(State::Dead),
///     event_type: Some("payment_intent.succeeded".to_owned()),
///     ..Selection::default()
/// };
/// let count = admin.bulk_count(BulkAction::Retry, &dead, None).await?;
/// let report = admin.bulk_run(BulkAction::Retry, &dead, &count).await?;
/// println!(
///     "selected {}, retried {}, {} no longer qualified",
///     report.selected, report.events, report.no_longer_qualified
/// );
/// # Ok::<(), InboxError>(())
/// # }).unwrap();
/// ```
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
                sqlite_busy_timeout: Duration::from_secs(10),
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
        Self::over(database_of(pool)?, namespace).await
    }

    async fn over(mut db: Database<DB>, namespace: &str) -> Result<Self, InboxError> {
        if !DB::has_table(&db).await? {
            return Err(InboxError::NoInbox("the database has no payhook_inbox table"));
        }
        // An inbox of this process on the same file writes in the same turns.
        let main_file = DB::main_file(&db).await.ok().flatten();
        if let Some(file) = main_file.and_then(|path| FileIdentity::of_path(&path)) {
            let (path, identity) = file.key();
            db.write_turns = crate::database::WriteTurns::of_file(path, identity);
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
            .ok_or_else(|| InboxError::NotFound(payhook_escape(event_id)))
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
            Err(InboxError::NotFound(payhook_escape(event_id)))
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
    /// in bounded batches (no long lock); says how many, in how many batches
    /// and how long its statements took ([`PurgeReport`]). Their ids are then
    /// no longer recognised as repeats.
    ///
    /// At the operator's pace ([`Pace::Operator`]): after each batch it
    /// rests four times as long as the batch took (2 to 300 milliseconds),
    /// so deliveries and workers keep most of the database while it runs,
    /// though an acknowledgement that meets a batch is slowed. Each batch
    /// takes its turn among this process's writes on SQLite, so the
    /// deliveries stored meanwhile wait for one batch at most, never for the
    /// database's busy handler. [`purge_done_before_paced`](Self::purge_done_before_paced)
    /// purges at the retention purge's gentler pace.
    ///
    /// # Errors
    /// A database error.
    pub async fn purge_done_before(&self, before_ms: i64) -> Result<PurgeReport, InboxError> {
        self.purge_done_before_paced(before_ms, Pace::Operator).await
    }

    /// [`purge_done_before`](Self::purge_done_before) at `pace`:
    /// [`Pace::Background`] is the retention purge's, which leaves the
    /// acknowledgements' latency as it was, and takes 25 times as long.
    ///
    /// # Errors
    /// A database error.
    pub async fn purge_done_before_paced(
        &self,
        before_ms: i64,
        pace: Pace,
    ) -> Result<PurgeReport, InboxError> {
        let mut cursor = PurgeCursor::START;
        Ok(purge_paced(&self.db, &self.namespace, before_ms, pace, &mut cursor, || false).await?)
    }
}

impl<DB: Backend> Admin<DB> {
    /// Pauses an event type: its deliveries are still verified, stored and
    /// acknowledged, but no worker of any replica claims its events until it
    /// is [resumed](Self::resume). Events already running finish; a pending
    /// paused event still holds back the later events of its payment intent
    /// (per-intent order is kept). The pause is a row in the database
    /// ([`PAUSED_TABLE`]): it survives restarts. The type's waiting events
    /// are parked out of the claims' way (in bounded batches; they stay
    /// `pending` with their due times), and so are those stored while it is
    /// paused. Returns `false` when the type was already paused.
    ///
    /// # Errors
    /// [`InboxError::InvalidSetting`] for an empty type or one longer than
    /// [`MAX_ID_BYTES`](crate::model::MAX_ID_BYTES), or a database error.
    pub async fn pause(&self, event_type: &str) -> Result<bool, InboxError> {
        check_event_type(event_type)?;
        let paused = DB::pause(&self.db, &self.namespace, event_type).await?;
        park_all(&self.db, &self.namespace, event_type, true).await?;
        Ok(paused)
    }

    /// Resumes a paused event type: its waiting events are unparked (in
    /// bounded batches, earliest due first) and claimed again, oldest first,
    /// as if they had never been held back. Returns `false` when the type
    /// was not paused.
    ///
    /// # Errors
    /// [`InboxError::InvalidSetting`] for an empty or too long type, or a
    /// database error.
    pub async fn resume(&self, event_type: &str) -> Result<bool, InboxError> {
        check_event_type(event_type)?;
        let resumed = DB::resume(&self.db, &self.namespace, event_type).await?;
        park_all(&self.db, &self.namespace, event_type, false).await?;
        Ok(resumed)
    }

    /// The paused event types, by name, each with its events waiting.
    ///
    /// # Errors
    /// A database error.
    pub async fn paused(&self) -> Result<Vec<PausedType>, InboxError> {
        Ok(DB::paused(&self.db, &self.namespace).await?)
    }
}

impl<DB: Backend> Admin<DB> {
    /// Whether the database has seen this admin's namespace: an event is
    /// stored in it (in any state) or a type is paused in it. An operator's
    /// tool pointed at a namespace it has not seen is most likely pointed at
    /// the wrong one (`payhook inbox` and a dashboard built with
    /// `Dashboard::new` refuse to act on it, naming [`namespaces`](Self::namespaces)).
    ///
    /// # Errors
    /// A database error.
    pub async fn namespace_seen(&self) -> Result<bool, InboxError> {
        Ok(DB::namespace_seen(&self.db, &self.namespace).await?)
    }

    /// The namespaces the database holds an event or a paused type of, in
    /// order, at most `limit` (each found by the index, however many events
    /// there are).
    ///
    /// # Errors
    /// A database error.
    pub async fn namespaces(&self, limit: u32) -> Result<Vec<String>, InboxError> {
        Ok(DB::namespaces(&self.db, i64::from(limit)).await?)
    }
}

/// An event type an operator names: 1 to [`MAX_ID_BYTES`](crate::model::MAX_ID_BYTES)
/// bytes, as the intake stores them.
fn check_event_type(event_type: &str) -> Result<(), InboxError> {
    if event_type.is_empty() || event_type.len() > crate::model::MAX_ID_BYTES {
        return Err(InboxError::InvalidSetting("an event type is 1 to 255 bytes long"));
    }
    Ok(())
}

impl<DB: Backend> Admin<DB> {
    /// Operations on the inbox an [`Inbox`](crate::Inbox) runs on (its pool
    /// and namespace), e.g. for a dashboard served by the same app.
    pub fn of_inbox(inbox: &crate::inbox::Inbox<DB>) -> Self {
        Self {
            db: inbox.inner.db.clone(),
            namespace: inbox.inner.config.namespace.clone(),
        }
    }

    /// The same inbox through a small pool of its own — at most
    /// `connections`, each read given up after `deadline` (its checkout
    /// included), each statement also stopped by PostgreSQL then — so that what this admin reads
    /// (a dashboard's pages) never takes a connection the inbox's deliveries
    /// and workers need. On an in-memory SQLite database, which a second pool
    /// would not reach, it stays on the inbox's pool.
    #[must_use]
    pub fn with_own_pool(&self, connections: u32, deadline: Duration) -> Self {
        let pool = DB::separate_pool(&self.db.pool, connections, deadline);
        Self {
            db: Database {
                pool: pool.unwrap_or_else(|| self.db.pool.clone()),
                dialect: self.db.dialect,
                timeout: deadline,
                write_turns: self.db.write_turns.clone(),
            },
            namespace: self.namespace.clone(),
        }
    }

    /// The namespace this admin reads.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The database's kind: `"SQLite"` or `"PostgreSQL"`.
    pub fn backend(&self) -> &'static str {
        self.db.dialect.name()
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
        let interval = millis(interval).max(1);
        let span = interval.saturating_mul(i64::try_from(slots).unwrap_or(i64::MAX));
        // The slots cover (now - span, now]: a delivery of this very
        // millisecond is in the last one, not past it.
        let since = now_ms().saturating_sub(span).saturating_add(1);
        Ok(DB::activity(&self.db, &self.namespace, since, interval, slots).await?)
    }

    /// One page of events, newest first; [`Page::next`] continues it.
    ///
    /// # Errors
    /// A database error.
    pub async fn page(&self, query: &PageQuery) -> Result<Page, InboxError> {
        Ok(DB::page(&self.db, &self.namespace, query, now_ms()).await?)
    }

    /// The recorded attempts of one event, latest first (at most
    /// [`MAX_ATTEMPT_RECORDS`]). An attempt is recorded when it ends; one
    /// whose process died or lost the lease is recorded `interrupted` when a
    /// claim finds its lease run out and takes the event back.
    ///
    /// # Errors
    /// A database error (an unknown id has no attempts).
    pub async fn attempts(&self, event_id: &str) -> Result<Vec<Attempt>, InboxError> {
        Ok(DB::attempts(&self.db, &self.namespace, event_id).await?)
    }

    /// The duplicate deliveries of one event whose content differed from the
    /// stored event (another `type` or `data` under the same id), or `None`
    /// when every copy said the same. The first body stays the event's.
    ///
    /// # Errors
    /// A database error, or an inbox whose schema predates the record (the
    /// app adds it when it next starts).
    pub async fn differing_copies(&self, event_id: &str) -> Result<Option<DifferingCopies>, InboxError> {
        Ok(DB::differing_copies(&self.db, &self.namespace, event_id).await?)
    }

    /// The events the inbox was offered and could not take, last refused
    /// first (at most `limit`): listed events of the service's events list
    /// that do not parse, are longer than a delivery's body may be, or
    /// cannot be stored. The rest of each one's page was stored.
    ///
    /// # Errors
    /// A database error, or an inbox whose schema predates the record (the
    /// app adds it when it next starts).
    pub async fn refused(&self, limit: u32) -> Result<Vec<Refused>, InboxError> {
        Ok(DB::refused(&self.db, &self.namespace, i64::from(limit)).await?)
    }

    /// The events of one payment intent, in `created` order (at most `limit`).
    ///
    /// # Errors
    /// A database error.
    pub async fn intent_events(&self, intent_id: &str, limit: u32) -> Result<Vec<IntentEvent>, InboxError> {
        Ok(DB::intent_events(&self.db, &self.namespace, intent_id, i64::from(limit)).await?)
    }
}

impl<DB: Backend> Admin<DB> {
    /// The query plans of the overview's and the events page's statements
    /// (`EXPLAIN QUERY PLAN` on SQLite, `EXPLAIN` on PostgreSQL), to check
    /// they read indexes: (what, plan lines).
    ///
    /// # Errors
    /// A database error.
    pub async fn query_plans(&self) -> Result<Vec<(&'static str, Vec<String>)>, InboxError> {
        Ok(DB::query_plans(&self.db, &self.namespace).await?)
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

impl<DB: Backend> Admin<DB> {
    /// How many events `action` would touch in `selection` now, and the most
    /// common types among them: what the CLI and the dashboard show before
    /// anything changes. Pass the count on to [`bulk_run`](Self::bulk_run).
    ///
    /// With `as_of` (an earlier count's [`BulkCount::as_of`]) it counts the
    /// events that were selected then and have not changed since: what a run
    /// given that time would act on.
    ///
    /// # Errors
    /// [`InvalidSetting`](InboxError::InvalidSetting) for a selection the
    /// action cannot act on (a state it does not change, more than
    /// [`MAX_BULK_IDS`] ids, an id or type longer than
    /// [`MAX_ID_BYTES`](crate::model::MAX_ID_BYTES)), an `as_of` in the future, or
    /// a database error.
    pub async fn bulk_count(
        &self,
        action: BulkAction,
        selection: &Selection,
        as_of: Option<i64>,
    ) -> Result<BulkCount, InboxError> {
        self.bulk().count(action, selection, as_of).await
    }

    /// Runs `action` over what `count` (from [`bulk_count`](Self::bulk_count)
    /// with the same action and selection) selected: the events that match
    /// and whose last change of state came before [`BulkCount::as_of`]. It
    /// acts on those events or fewer, never more: an event that died,
    /// finished, was retried, replayed or handled after the count, or arrived
    /// after it, is left alone, and the run stops once it has acted on
    /// [`BulkCount::events`]. The report says how many were selected, acted
    /// on, and no longer qualified ([`BulkReport`]).
    ///
    /// It goes in batches of at most [`BULK_BATCH`] rows, each its own short
    /// statement, resting between batches four times as long as the last one
    /// took (2 ms at least), so that deliveries and workers keep their pace
    /// (on SQLite the rest also checkpoints the WAL the batches wrote). Run
    /// again with the same count after an interruption, it changes only what
    /// the first run did not. [`BulkAction::Pause`] pauses the event types
    /// the count showed (at most 20) that still have a selected event.
    ///
    /// The times compared are each writer's clock: keep the hosts' clocks in
    /// step (NTP), as the lease already needs.
    ///
    /// # Errors
    /// As [`bulk_count`](Self::bulk_count) (the batches before a database
    /// error stay done).
    pub async fn bulk_run(
        &self,
        action: BulkAction,
        selection: &Selection,
        count: &BulkCount,
    ) -> Result<BulkReport, InboxError> {
        self.bulk().run(action, selection, count).await
    }

    fn bulk(&self) -> BulkRun<'_, DB> {
        BulkRun {
            db: &self.db,
            namespace: &self.namespace,
        }
    }
}

/// Reconciling by hand: what `payhook reconcile` runs. The reconciler the
/// workers run ([`crate::reconcile`]) does the same every interval, with its
/// mark and its turn; these take a window the operator chose.
#[cfg(feature = "reconcile")]
impl<DB: Backend> Admin<DB> {
    /// Of `events` (a page of the service's events list,
    /// [`EventsApi::page`](crate::reconcile::EventsApi::page)), the ones this
    /// namespace does not hold: the deliveries that were missed.
    ///
    /// # Errors
    /// A database error.
    pub async fn missing<'e>(
        &self,
        events: &'e [crate::reconcile::ListedEvent],
    ) -> Result<Vec<&'e crate::reconcile::ListedEvent>, InboxError> {
        Ok(crate::reconcile::store::missing(&self.db, &self.namespace, events).await?)
    }

    /// Stores `events` as [`Source::Reconciled`],
    /// in one statement: they are handled when a worker of the app runs. How
    /// many were new (a delivery may have stored one meanwhile; it then
    /// stands). Every event is checked first: when one cannot be stored (an
    /// id over [`MAX_ID_BYTES`](crate::model::MAX_ID_BYTES), a NUL), none is;
    /// [`split_storable`](crate::reconcile::split_storable) sets those apart
    /// beforehand, so that one holds back none.
    ///
    /// Store only events younger than the inbox's retention: an older one may
    /// have been handled and purged already, and would run again.
    ///
    /// # Errors
    /// [`InboxError::InvalidEvent`] naming the event that cannot be stored,
    /// or a database error.
    pub async fn store_reconciled(
        &self,
        events: &[&crate::reconcile::ListedEvent],
    ) -> Result<u64, InboxError> {
        match crate::reconcile::store::store(&self.db, &self.namespace, events).await {
            Ok(stored) => Ok(stored.iter().filter(|(_, new)| *new).count() as u64),
            Err(crate::reconcile::store::StoreError::Unstorable(reason)) => {
                Err(InboxError::InvalidEvent(reason))
            }
            Err(crate::reconcile::store::StoreError::Database(err)) => Err(err.into()),
        }
    }

    /// Records listed events the service's events list sent that could not
    /// be taken (they do not parse, or are longer than a delivery's body
    /// may be: [`EventsPage::refused`](crate::reconcile::EventsPage::refused))
    /// in the refused record, as the reconciler does: they show on the
    /// dashboard and in `payhook inbox refused` with their id and reason,
    /// each logged at `WARN`. Rows older than `retention` are forgotten
    /// meanwhile, as are all but the latest [`MAX_REFUSED_KEPT`]. How many
    /// were recorded.
    ///
    /// # Errors
    /// A database error, or an inbox whose schema predates the record.
    pub async fn record_refused(
        &self,
        events: &[crate::reconcile::RefusedEvent],
        retention: std::time::Duration,
    ) -> Result<u64, InboxError> {
        if events.is_empty() {
            return Ok(0);
        }
        let rows: Vec<crate::model::RefusedRow> = events
            .iter()
            .map(|refused| {
                crate::model::RefusedRow::new(refused.id.as_deref(), &refused.reason, refused.bytes)
            })
            .collect();
        let now = now_ms();
        self.db
            .write(DB::record_refused(
                &self.db,
                &self.namespace,
                &rows,
                Source::Reconciled,
                now,
                now.saturating_sub(millis(retention)),
            ))
            .await?;
        for row in &rows {
            tracing::warn!(
                target: "payhook",
                namespace = %payhook_escape(&self.namespace),
                event_id = %payhook_escape(row.event_id.as_deref().unwrap_or("-")),
                reason = %payhook_core::untrusted::Untrusted::message(&row.reason),
                "a listed event of the service's events list was refused and recorded"
            );
        }
        Ok(rows.len() as u64)
    }
}
