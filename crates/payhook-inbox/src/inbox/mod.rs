//! The inbox's handle: ingest a delivery, start the workers, wait until idle.
//!
//! Ingest runs the core's intake ([`Receiver::check_or_reject`]) and only then
//! writes: nothing unsigned or invalid ever becomes a row. Where the parts are:
//!
//! - [`builder`]: [`InboxBuilder`], its settings and their defaults, and the
//!   start of a running inbox (the shared [`Inner`] and
//!   its intake writer);
//! - [`intake`](crate::intake): one verified delivery to a row, handed to the
//!   intake writer, and its reply (`200`, or `503` when the database cannot
//!   store it).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use payhook_core::adapter::Headers;
use payhook_core::defaults::MAX_DURATION;
use payhook_core::{Receiver, Reply};
use sqlx::{Any, Pool};
use tracing::{Instrument, Span};

use crate::backend::Backend;
use crate::error::InboxError;
use crate::inner::Inner;
use crate::worker::{Handler, Workers};

mod builder;

use crate::intake::ingest::{row_of, store};

pub use crate::database::DEFAULT_DATABASE_TIMEOUT;
pub use builder::{
    InboxBuilder, DEFAULT_BACKOFF_BASE, DEFAULT_BACKOFF_CAP, DEFAULT_CONCURRENCY, DEFAULT_LEASE,
    DEFAULT_MAX_ATTEMPTS, DEFAULT_NAMESPACE, DEFAULT_RETENTION, DEFAULT_SQLITE_CACHE_KIB,
};

/// A durable inbox on the database `DB` (sqlx's [`Postgres`](https://docs.rs/sqlx/0.8/sqlx/struct.Postgres.html)
/// or [`Sqlite`](https://docs.rs/sqlx/0.8/sqlx/struct.Sqlite.html) when built from the app's pool with
/// [`Inbox::from_pool`]; [`Any`] when built from a URL with
/// [`Inbox::connect`]): verified events are written to the database and
/// acknowledged, and [`Workers`] hand them to a handler afterwards. Cheap to
/// clone.
pub struct Inbox<DB: Backend = Any> {
    pub(crate) inner: Arc<Inner<DB>>,
    /// The reconciler's settings, when it runs beside the workers (shared:
    /// the handle stays small and cheap to clone).
    #[cfg(feature = "reconcile")]
    reconcile: Option<Arc<crate::reconcile::Reconcile>>,
}

impl<DB: Backend> Clone for Inbox<DB> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            #[cfg(feature = "reconcile")]
            reconcile: self.reconcile.clone(),
        }
    }
}

impl<DB: Backend> fmt::Debug for Inbox<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inbox")
            .field("dialect", &self.inner.db.dialect)
            .field("namespace", &self.inner.config.namespace)
            .field("lease", &self.inner.config.lease)
            .field("retention", &self.inner.config.retention)
            .field("max_attempts", &self.inner.config.max_attempts)
            .field("concurrency", &self.inner.config.concurrency)
            .field("database_timeout", &self.inner.db.timeout)
            .finish_non_exhaustive()
    }
}

impl Inbox<Any> {
    /// Starts a builder around a configured [`Receiver`]. The inbox takes the
    /// receiver's secrets, header, tolerance, body limit and intake (logging
    /// and `payhook_deliveries_total`), and its namespace, lease and retention
    /// unless the builder overrides them. A receiver given its own dedupe
    /// store is refused (see [`InboxBuilder::connect`]): the inbox's table is
    /// its dedupe store.
    pub fn builder(receiver: Receiver) -> InboxBuilder {
        InboxBuilder::new(receiver)
    }

    /// Connects to a URL with the default settings and runs the migrations.
    ///
    /// # Errors
    /// See [`InboxBuilder::connect`].
    pub async fn connect(receiver: Receiver, url: &str) -> Result<Self, InboxError> {
        Self::builder(receiver).connect(url).await
    }
}

impl<DB: Backend> Inbox<DB> {
    /// An inbox on the app's own pool (`sqlx::PgPool`, `sqlx::SqlitePool`),
    /// with the default settings; runs the migrations. Handlers get
    /// [`Job<DB>`](crate::Job), whose transaction is the app's connection type.
    ///
    /// # Errors
    /// See [`InboxBuilder::from_pool`].
    pub async fn from_pool(receiver: Receiver, pool: Pool<DB>) -> Result<Self, InboxError> {
        Inbox::builder(receiver).from_pool(pool).await
    }

    /// Runs the numbered migrations that have not run yet on this database
    /// (each recorded in the `payhook_inbox_schema` table). Building the inbox
    /// does this unless [`InboxBuilder::skip_migrations`] was set.
    ///
    /// # Errors
    /// The database could not be reached or refused the statements.
    pub async fn migrate(&self) -> Result<(), InboxError> {
        DB::migrate(&self.inner.db).await
    }

    /// The receiver that verifies and parses deliveries.
    pub fn receiver(&self) -> &Receiver {
        &self.inner.receiver
    }

    /// The namespace events are kept under.
    pub fn namespace(&self) -> &str {
        &self.inner.config.namespace
    }

    /// The database pool, for the app's own queries outside handlers.
    pub fn pool(&self) -> &Pool<DB> {
        &self.inner.db.pool
    }

    /// Verifies, parses and stores one delivery, and returns the reply to send.
    ///
    /// * not signed correctly, or not a valid event → the core's `400`/`413`
    ///   reply, and nothing is written;
    /// * an event the inbox cannot store as it is — an id, type or
    ///   payment-intent id longer than [`MAX_ID_BYTES`](crate::MAX_ID_BYTES),
    ///   or a NUL character in any of them or in the body → `400 Webhook
    ///   Error: …` naming the field, before any database work, the same on
    ///   every backend (counted `verified`, then `rejected` with reason
    ///   `invalid_payload`);
    /// * new or already in the inbox → `200 {"received":true}` once the row is
    ///   committed;
    /// * the database is unreachable, failing, or (SQLite) its file was deleted
    ///   or replaced since the inbox opened it → `503 Webhook Error: inbox
    ///   database unavailable: …` saying which kind of failure (never a table,
    ///   index or server message: those go to the log, escaped). Nothing was
    ///   acknowledged, so the sender delivers again.
    ///
    /// Verification and parsing happen before this returns (the future does not
    /// borrow `headers`); the returned future only waits for the commit.
    pub fn ingest(&self, headers: &dyn Headers, body: Bytes) -> impl Future<Output = Reply> + Send + 'static {
        // The receiver's intake verifies, parses, logs and counts; what the
        // inbox adds is only what it takes to store the event.
        let admitted = self
            .inner
            .receiver
            .check_or_reject(headers, &body)
            .and_then(|event| row_of(&event, &body).map_err(|error| payhook_core::adapter::reject(&error)));
        let inner = Arc::clone(&self.inner);
        let (admitted, span) = match admitted {
            Ok(mut row) => {
                let (span, context) = crate::trace::ingest_trace(&inner.config.namespace, &row);
                row.trace_context = context;
                (Ok(row), span)
            }
            Err(reply) => (Err(reply), Span::none()),
        };
        async move {
            match admitted {
                Ok(row) => store(&inner, row).instrument(span).await,
                Err(reply) => reply,
            }
        }
    }

    /// Starts the workers that hand stored events to `handler`, with the
    /// concurrency, lease and retry settings of the builder. Call it once per
    /// process, beside the server; stop them with [`Workers::shutdown`].
    ///
    /// Must be called inside a tokio runtime.
    pub fn start<H: Handler<DB>>(&self, handler: H) -> Workers {
        let inner = Arc::clone(&self.inner);
        #[cfg(feature = "reconcile")]
        return Workers::start(inner, handler, self.reconcile.as_deref().cloned());
        #[cfg(not(feature = "reconcile"))]
        Workers::start(inner, handler)
    }

    /// Waits until no event of this inbox's namespace is waiting (pending,
    /// retrying or running): every event stored under it is done or dead. For
    /// tests: deliver, then `inbox.wait_idle(timeout)`, then check the effects.
    ///
    /// Only this namespace counts: events of other namespaces in the same
    /// database (a test running at the same time, the app itself) neither keep
    /// it waiting nor are waited for, so each test takes a namespace of its own
    /// ([`InboxBuilder::namespace`]). An event that keeps failing waits until
    /// it is dead, after [`max_attempts`](InboxBuilder::max_attempts) and its
    /// backoff. It reads the database, so it sees the events stored by every
    /// replica, workers or not: without running workers it waits until
    /// `timeout`.
    ///
    /// # Errors
    /// [`InboxError::NotIdle`] with the number still waiting when `timeout`
    /// runs out, or a database error.
    pub async fn wait_idle(&self, timeout: Duration) -> Result<(), InboxError> {
        let deadline = Instant::now() + timeout.min(MAX_DURATION);
        loop {
            let (waiting, _) = DB::depth(&self.inner.db, &self.inner.config.namespace).await?;
            if waiting == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(InboxError::NotIdle(waiting));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
