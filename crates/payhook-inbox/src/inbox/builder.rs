//! [`InboxBuilder`]: the inbox's settings, their defaults and checks, and the
//! start of a running inbox.

use std::sync::Arc;
use std::time::Duration;

use payhook_core::defaults::{MAX_DURATION, MIN_LEASE};
use payhook_core::Receiver;
use sqlx::{Any, Pool};
use tokio::sync::{mpsc, Notify};

use super::Inbox;
use crate::backend::{database_of, Backend};
use crate::database::dialect::Dialect;
use crate::database::sqlite_file::FileIdentity;
use crate::database::{Database, UrlOptions, WriteTurns, DEFAULT_DATABASE_TIMEOUT};
use crate::error::InboxError;
use crate::inner::{Config, Inner};
use crate::intake::writer::{write_batches, INGEST_BATCH};
use crate::metrics as m;

/// The namespace unless configured otherwise: the core receiver's.
pub const DEFAULT_NAMESPACE: &str = payhook_core::defaults::DEFAULT_NAMESPACE;
/// How long a done event is kept (the dedupe window) unless configured
/// otherwise: the core receiver's, 7 days.
pub const DEFAULT_RETENTION: Duration = payhook_core::defaults::DEFAULT_RETENTION;
/// How long a claim lasts before it must be renewed, unless configured
/// otherwise: the core receiver's, 5 seconds.
pub const DEFAULT_LEASE: Duration = payhook_core::defaults::DEFAULT_LEASE;
/// The first retry delay unless configured otherwise: 1 second.
pub const DEFAULT_BACKOFF_BASE: Duration = Duration::from_secs(1);
/// The longest retry delay unless configured otherwise: 1 hour.
pub const DEFAULT_BACKOFF_CAP: Duration = Duration::from_secs(3600);
/// How many times an event is tried before it is dead, unless configured otherwise.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;
/// How many handlers run at once unless configured otherwise.
pub const DEFAULT_CONCURRENCY: usize = 8;
/// The most each SQLite connection keeps in its page cache, in KiB, unless
/// configured otherwise (SQLite's own default is 2 000 KiB).
pub const DEFAULT_SQLITE_CACHE_KIB: u32 = 256;

/// The most handlers [`InboxBuilder::concurrency`] accepts.
const MOST_HANDLERS: usize = 65_536;

/// Builder for [`Inbox`].
#[derive(Debug)]
pub struct InboxBuilder {
    receiver: Receiver,
    namespace: Option<String>,
    lease: Option<Duration>,
    retention: Option<Duration>,
    backoff_base: Duration,
    backoff_cap: Duration,
    max_attempts: u32,
    concurrency: usize,
    poll_interval: Duration,
    migrate: bool,
    acquire_timeout: Option<Duration>,
    sqlite_full_sync: Option<bool>,
    sqlite_cache_kib: Option<u32>,
    database_timeout: Duration,
    #[cfg(feature = "reconcile")]
    reconcile: Option<crate::reconcile::Reconcile>,
}

impl InboxBuilder {
    /// A builder of the default settings ([`Inbox::builder`]).
    pub(super) fn new(receiver: Receiver) -> Self {
        Self {
            receiver,
            namespace: None,
            lease: None,
            retention: None,
            backoff_base: DEFAULT_BACKOFF_BASE,
            backoff_cap: DEFAULT_BACKOFF_CAP,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            concurrency: DEFAULT_CONCURRENCY,
            poll_interval: Duration::from_millis(200),
            migrate: true,
            acquire_timeout: None,
            sqlite_full_sync: None,
            sqlite_cache_kib: None,
            database_timeout: DEFAULT_DATABASE_TIMEOUT,
            #[cfg(feature = "reconcile")]
            reconcile: None,
        }
    }

    /// Overrides the receiver's namespace ([`Receiver::namespace`], default
    /// `payhook`): the namespace events are kept under. Endpoints that share
    /// one database each need their own.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Overrides the receiver's lease ([`Receiver::lease`], default
    /// [`DEFAULT_LEASE`], 5 seconds): how long a claim on an event lasts. It is
    /// renewed every third of it while the handler runs (one small write per
    /// running event), so a live handler keeps its event however long it runs,
    /// and the lease only runs out when the worker stopped (killed, crashed,
    /// paused, cut off from the database): any worker — on SQLite the
    /// restarted process, on PostgreSQL any replica — takes the event up again
    /// within 1.2 leases (expired leases are looked for every fifth of one).
    ///
    /// The trade-off: a process that stalls for longer than the lease (a
    /// paused VM, a stop of the world, a database that does not answer its
    /// renewals) may find its events taken over by another worker while its
    /// own handlers still run. Every write after a claim names its lease
    /// token, so the stalled worker cannot mark the event done nor commit its
    /// [`Job::transaction`](crate::Job::transaction): the effects that commit
    /// with the done mark happen exactly once; work a handler does outside
    /// that transaction (an HTTP call) may then run twice. A longer lease
    /// makes that rarer and a crash's recovery slower. From the core's
    /// `MIN_LEASE` (1 s) to `MAX_DURATION` (100 years), as on the receiver.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Overrides the receiver's retention ([`Receiver::retention`], default
    /// [`DEFAULT_RETENTION`], 7 days): how long done events are kept, and so
    /// how long a repeated delivery is recognised. From 1 second to 100 years,
    /// as on the receiver. Workers purge done events whose `done_at` is older
    /// than this, in bounded batches, as fast as they are added; events in any
    /// other state are never purged.
    ///
    /// A delivery of an event whose row was purged is not recognised: it is
    /// stored as a new event and handled again. Keep the retention longer than
    /// the longest time the sender may still redeliver an event (its retries,
    /// and replays you trigger from its dashboard).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = Some(retention);
        self
    }

    /// Retry delays: the first failure waits about `base`, each further one twice
    /// as long, never more than `cap`; each delay is jittered between half and
    /// all of its value (defaults 1 s and 1 h; `base` above zero and not above
    /// `cap`, `cap` at most 100 years).
    pub fn backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.backoff_base = base;
        self.backoff_cap = cap;
        self
    }

    /// How many attempts an event gets before it is dead (default 10; at least
    /// 1). Attempts are counted when an event is claimed: an event whose
    /// worker stops (the process crashes) during its last attempt is dead too.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// How many handlers run at once in this process (default 8; 1 to 65 536).
    /// An inbox on the app's pool needs that many connections in it, plus a
    /// few for ingest and claims.
    ///
    /// Sizing: the workers of all replicas together must finish events faster
    /// than they arrive, or the backlog grows (the purge only removes done
    /// events). Watch [`metrics::PENDING`](crate::metrics::PENDING) and
    /// [`metrics::OLDEST_PENDING_AGE`](crate::metrics::OLDEST_PENDING_AGE):
    /// when they climb under a steady load, add handlers or replicas. Each
    /// claim takes at most the handlers free at that moment, so a replica with
    /// few handlers claims in small batches (see
    /// [`metrics::CLAIMED`](crate::metrics::CLAIMED)).
    pub fn concurrency(mut self, handlers: usize) -> Self {
        self.concurrency = handlers;
        self
    }

    /// How often idle workers look for due events (default 200 ms). Events
    /// ingested by this process wake them at once, and on PostgreSQL so do
    /// those ingested by other replicas that those replicas' own workers
    /// will not take (`LISTEN`/`NOTIFY`); this bounds the delay for retries
    /// and when notifications are lost. Above zero, at most 100 years.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// For an inbox built from a URL: how long the pool waits for a database
    /// connection (default 5 s; above zero, at most 100 years). A delivery
    /// and each worker step wait no longer than their
    /// [`database_timeout`](Self::database_timeout) whatever this is. On the
    /// app's own pool, set it on the pool's options
    /// ([`from_pool`](Self::from_pool) refuses it).
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = Some(timeout);
        self
    }

    /// How long the database may take over one piece of work before it is
    /// given up (default [`DEFAULT_DATABASE_TIMEOUT`], 3 s; above zero, at
    /// most 100 years). It bounds, on the inbox's side of the connection:
    ///
    /// * **a delivery**, as one deadline for all of it (the wait for a
    ///   connection and for the writer, the batch's statement, its row-by-row
    ///   retry, the commit): past it the delivery gets `503 Webhook Error:
    ///   inbox database unavailable: the database did not answer in time` with
    ///   `Retry-After`. Nothing was acknowledged; the row is either stored
    ///   whole (the statement had already reached the database, which
    ///   finishes it; the sender's redelivery is then a duplicate, `200`) or
    ///   not at all. Keep it well under the sender's reply timeout (10 s);
    /// * **each step of a worker**: a claim, a lease renewal, opening the
    ///   handler's transaction and its commit, a done mark, a failure record,
    ///   the attempts record, each purge batch and the depth gauge. A step
    ///   past its deadline is logged and tried again later: the workers
    ///   recover by themselves when the database answers again;
    /// * on SQLite built from a URL, how long a statement waits for the write
    ///   lock (`busy_timeout`; on the app's own pool, set the pool's
    ///   `busy_timeout` to about this).
    ///
    /// The deadline is kept on this side because a database that is frozen
    /// (its processes stopped, its host paused) never answers, so a limit the
    /// server enforces (`statement_timeout`) would never fire.
    pub fn database_timeout(mut self, timeout: Duration) -> Self {
        self.database_timeout = timeout;
        self
    }

    /// For a SQLite inbox built from a URL: sync the write-ahead log to disk at
    /// every commit (`synchronous = FULL`), so acknowledged events also survive
    /// a power loss or an operating-system crash. By default (`NORMAL`) a
    /// commit survives a crash or kill of the process, and the log is synced
    /// at checkpoints: many times the commit rate on ordinary disks. On the
    /// app's own pool, set it on the pool's options.
    pub fn sqlite_full_sync(mut self) -> Self {
        self.sqlite_full_sync = Some(true);
        self
    }

    /// For a SQLite inbox built from a URL: the most each pooled connection
    /// keeps in its page cache, in KiB (default [`DEFAULT_SQLITE_CACHE_KIB`],
    /// 256). Each connection fills its cache as the file grows, so resident
    /// memory grows by up to this much per connection (the pool holds up to
    /// [`concurrency`](Self::concurrency) + 6) before it levels off. In WAL
    /// mode a connection drops its cache whenever another one has written
    /// since its last read, which in a busy inbox is almost always, so a large
    /// cache buys little here. At most `i32::MAX` KiB (SQLite's limit);
    /// [`connect`](Self::connect) refuses more.
    pub fn sqlite_page_cache(mut self, kib: u32) -> Self {
        self.sqlite_cache_kib = Some(kib);
        self
    }

    /// Reconciles with the service's events list (feature `reconcile`): the
    /// workers also store every event the service created that no delivery
    /// brought, so each is handled once. See [`crate::reconcile`] for the
    /// window, the look-back bound, what is trusted and what several replicas
    /// do.
    #[cfg(feature = "reconcile")]
    pub fn reconcile(mut self, settings: crate::reconcile::Reconcile) -> Self {
        self.reconcile = Some(settings);
        self
    }

    /// Does not run the migrations when the inbox is built; call
    /// [`Inbox::migrate`] instead.
    pub fn skip_migrations(mut self) -> Self {
        self.migrate = false;
        self
    }

    /// The settings every inbox has, checked, with the receiver's as defaults.
    fn config(&self) -> Result<Config, InboxError> {
        let config = Config {
            namespace: self
                .namespace
                .clone()
                .unwrap_or_else(|| self.receiver.namespace().to_owned()),
            lease: self.lease.unwrap_or_else(|| self.receiver.lease()),
            retention: self.retention.unwrap_or_else(|| self.receiver.retention()),
            backoff_base: self.backoff_base,
            backoff_cap: self.backoff_cap,
            max_attempts: self.max_attempts,
            concurrency: self.concurrency,
            poll_interval: self.poll_interval,
            listen_url: None,
            database_timeout: self.database_timeout,
        };
        if config.namespace.is_empty() {
            return Err(InboxError::InvalidSetting("namespace must not be empty"));
        }
        if config.lease < MIN_LEASE {
            return Err(InboxError::InvalidSetting("lease must be at least 1 s"));
        }
        // The receiver's range: the same setting, the same bounds.
        if config.retention < Duration::from_secs(1) {
            return Err(InboxError::InvalidSetting("retention must be at least 1 second"));
        }
        if config.max_attempts == 0 {
            return Err(InboxError::InvalidSetting("max_attempts must be at least 1"));
        }
        if config.concurrency == 0 {
            return Err(InboxError::InvalidSetting("concurrency must be at least 1"));
        }
        // The workers' semaphore panics beyond its own limit (usize::MAX >> 3),
        // and each handler may want a pooled connection: far below both.
        if config.concurrency > MOST_HANDLERS {
            return Err(InboxError::InvalidSetting("concurrency must be at most 65536"));
        }
        if config.backoff_base.is_zero() || config.backoff_cap < config.backoff_base {
            return Err(InboxError::InvalidSetting(
                "backoff base must be above zero and not above the cap",
            ));
        }
        if config.database_timeout.is_zero() {
            return Err(InboxError::InvalidSetting("database timeout must be above zero"));
        }
        if config.poll_interval.is_zero() {
            return Err(InboxError::InvalidSetting("poll interval must be above zero"));
        }
        #[cfg(feature = "reconcile")]
        if let Some(reconcile) = &self.reconcile {
            reconcile.check(config.retention)?;
        }
        // Deadlines are `Instant::now() + setting` (std and sqlx add without
        // saturating), so an unbounded Duration would panic a worker or the
        // pool later instead of failing here. The cap is the core's.
        for (setting, refusal) in [
            (config.lease, "lease must be at most 100 years"),
            (config.retention, "retention must be at most 100 years"),
            (config.backoff_cap, "backoff cap must be at most 100 years"),
            (config.poll_interval, "poll interval must be at most 100 years"),
            (
                config.database_timeout,
                "database timeout must be at most 100 years",
            ),
        ] {
            if setting > MAX_DURATION {
                return Err(InboxError::InvalidSetting(refusal));
            }
        }
        if !self.receiver.has_own_store() {
            return Err(InboxError::InvalidSetting(
                "the receiver has its own dedupe store, which the inbox would not use: \
                 the inbox's table is its dedupe store; build the receiver without store(...)",
            ));
        }
        Ok(config)
    }

    /// Connects to `sqlite://FILE` (created when missing) or `postgres://…` and,
    /// unless told otherwise, runs the migrations. Handlers get [`Job`](crate::Job)
    /// (`Job<sqlx::Any>`). Must be called inside a tokio runtime: it starts the
    /// ingest writer.
    ///
    /// # Errors
    /// An unsupported URL, a setting out of range, a receiver with its own
    /// dedupe store, or (when migrating) a database that cannot be reached.
    pub async fn connect(self, url: &str) -> Result<Inbox<Any>, InboxError> {
        let mut config = self.config()?;
        let acquire_timeout = self.acquire_timeout.unwrap_or(Duration::from_secs(5));
        // Zero would time out every acquire: each delivery a 503 blaming the database.
        if acquire_timeout.is_zero() {
            return Err(InboxError::InvalidSetting("acquire timeout must be above zero"));
        }
        if acquire_timeout > MAX_DURATION {
            return Err(InboxError::InvalidSetting(
                "acquire timeout must be at most 100 years",
            ));
        }
        let sqlite_cache_kib = self.sqlite_cache_kib.unwrap_or(DEFAULT_SQLITE_CACHE_KIB);
        // SQLite reads a larger cache_size as 0 (almost no cache) without a word.
        if i32::try_from(sqlite_cache_kib).is_err() {
            return Err(InboxError::InvalidSetting(
                "sqlite page cache must be at most 2147483647 KiB",
            ));
        }
        let connections = u32::try_from(config.concurrency)
            .unwrap_or(u32::MAX)
            .saturating_add(6);
        let db = Database::connect(
            url,
            UrlOptions {
                max_connections: connections,
                acquire_timeout,
                sqlite_full_sync: self.sqlite_full_sync.unwrap_or(false),
                sqlite_cache_kib,
                sqlite_busy_timeout: config.database_timeout,
                create: true,
            },
        )
        .await?;
        if db.dialect == Dialect::Postgres {
            config.listen_url = Some(url.to_owned());
        }
        start(self, db, config).await
    }

    /// Builds the inbox on the app's own pool (`sqlx::PgPool`,
    /// `sqlx::SqlitePool`) and, unless told otherwise, runs the migrations
    /// (on SQLite they also switch the file to WAL mode). Handlers get
    /// [`Job<DB>`](crate::Job), whose [`transaction`](crate::Job::transaction)
    /// derefs to the app's `PgConnection` / `SqliteConnection`. The pool needs
    /// [`concurrency`](Self::concurrency) connections for handlers plus a few
    /// for ingest and claims; on SQLite give it a busy timeout (sqlx's default
    /// is 5 s). Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// A setting out of range, a setting that only applies to a URL
    /// ([`acquire_timeout`](Self::acquire_timeout),
    /// [`sqlite_full_sync`](Self::sqlite_full_sync),
    /// [`sqlite_page_cache`](Self::sqlite_page_cache): set those on the pool),
    /// a receiver with its own dedupe store, an `Any` pool (use
    /// [`connect`](Self::connect)), or (when migrating) a database that
    /// cannot be reached.
    pub async fn from_pool<DB: Backend>(self, pool: Pool<DB>) -> Result<Inbox<DB>, InboxError> {
        let config = self.config()?;
        if self.acquire_timeout.is_some()
            || self.sqlite_full_sync.is_some()
            || self.sqlite_cache_kib.is_some()
        {
            return Err(InboxError::InvalidSetting(
                "acquire_timeout, sqlite_full_sync and sqlite_page_cache apply to an inbox built from a URL; \
                 set them on the pool's options",
            ));
        }
        let db = database_of(pool)?;
        start(self, db, config).await
    }
}

/// A running inbox from the builder's settings (checked into `config`) on
/// `db`: migrated unless told otherwise, its intake writer started.
async fn start<DB: Backend>(
    builder: InboxBuilder,
    mut db: Database<DB>,
    config: Config,
) -> Result<Inbox<DB>, InboxError> {
    db.timeout = config.database_timeout;
    if builder.migrate {
        DB::migrate(&db).await?;
    }
    // The file as SQLite opened it (after the migrations, which create it).
    let file = DB::main_file(&db)
        .await
        .ok()
        .flatten()
        .and_then(|path| FileIdentity::of_path(&path));
    if let Some(file) = &file {
        let (path, identity) = file.key();
        db.write_turns = WriteTurns::of_file(path, identity);
    }
    // One ingest task on both backends: it writes every delivery that came in
    // during its previous commit in one statement, so batches grow with the
    // load. SQLite has one writer whatever we do; on PostgreSQL more tasks
    // would split each process's deliveries into smaller batches, the more so
    // the more replicas share the load: more transactions per event
    // (BENCHMARKS.md, inbox section 10).
    let (ingest, queue) = mpsc::channel(4 * INGEST_BATCH);
    let room = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tokio::spawn(write_batches(
        db.clone(),
        config.namespace.clone(),
        queue,
        Arc::clone(&room),
    ));
    m::register(&config.namespace);
    Ok(Inbox {
        inner: Arc::new(Inner {
            receiver: builder.receiver,
            db,
            config,
            ingest,
            arrived: Notify::new(),
            room,
            file,
        }),
        #[cfg(feature = "reconcile")]
        reconcile: builder.reconcile.map(Arc::new),
    })
}
