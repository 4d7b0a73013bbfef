//! The inbox: connect, ingest a delivery, configure the workers.
//!
//! Ingest runs the core's verify-then-parse ([`Receiver::check`]) and only then
//! writes: nothing unsigned or invalid ever becomes a row. Concurrent ingests are
//! grouped by a few writer tasks into one multi-row `INSERT` each, so many
//! deliveries share one statement and one commit (and, on SQLite, one turn of
//! the single write lock); every delivery still gets its reply only after the
//! commit that holds it.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use payhook_core::adapter::Headers;
use payhook_core::{Error, Event, Receiver, Reply};
use sqlx::Row as _;
use tokio::sync::{mpsc, oneshot, Mutex, Notify};

use crate::db::{answer_batch, now_ms, Backend, Database};
use crate::error::InboxError;
use crate::metrics as m;
use crate::schema;
use crate::worker::{Handler, Workers};

/// The namespace unless configured otherwise (the core receiver's default too).
pub const DEFAULT_NAMESPACE: &str = payhook_core::receiver::DEFAULT_NAMESPACE;
/// How long a done event is kept (the dedupe window) unless configured otherwise.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long a claim lasts before it must be renewed, unless configured otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// The first retry delay unless configured otherwise.
pub const DEFAULT_BACKOFF_BASE: Duration = Duration::from_secs(1);
/// The longest retry delay unless configured otherwise.
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

/// The longest any Duration setting may be: far beyond any sensible value,
/// and far enough from overflow that `Instant::now()` plus it stays valid.
const LONGEST_SETTING: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Most deliveries written in one ingest transaction.
const INGEST_BATCH: usize = 256;

/// A durable inbox: verified events are written to a database and acknowledged,
/// and [`Workers`] hand them to a handler afterwards. Cheap to clone.
#[derive(Clone)]
pub struct Inbox {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) receiver: Receiver,
    pub(crate) db: Database,
    pub(crate) config: Config,
    ingest: mpsc::Sender<Pending>,
    /// Woken after each ingest commit so idle workers look at once.
    pub(crate) arrived: Notify,
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
}

impl fmt::Debug for Inbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inbox")
            .field("backend", &self.inner.db.backend)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// One delivery waiting for its ingest commit.
struct Pending {
    row: Row,
    done: oneshot::Sender<Result<bool, String>>,
}

/// The columns ingest writes.
struct Row {
    event_id: String,
    event_type: String,
    intent_id: Option<String>,
    created: i64,
    body: String,
    received_at: i64,
}

impl Inbox {
    /// Starts a builder around a configured [`Receiver`] (its secrets, header,
    /// tolerance and body limit are used; its dedupe store is not).
    pub fn builder(receiver: Receiver) -> InboxBuilder {
        InboxBuilder {
            receiver,
            config: Config {
                namespace: DEFAULT_NAMESPACE.to_owned(),
                lease: DEFAULT_LEASE,
                retention: DEFAULT_RETENTION,
                backoff_base: DEFAULT_BACKOFF_BASE,
                backoff_cap: DEFAULT_BACKOFF_CAP,
                max_attempts: DEFAULT_MAX_ATTEMPTS,
                concurrency: DEFAULT_CONCURRENCY,
                poll_interval: Duration::from_millis(200),
            },
            migrate: true,
            acquire_timeout: Duration::from_secs(5),
            sqlite_full_sync: false,
            sqlite_cache_kib: DEFAULT_SQLITE_CACHE_KIB,
        }
    }

    /// Connects with the default settings and runs the migrations.
    ///
    /// # Errors
    /// See [`InboxBuilder::connect`].
    pub async fn connect(receiver: Receiver, url: &str) -> Result<Self, InboxError> {
        Self::builder(receiver).connect(url).await
    }

    /// Creates the inbox table when it is missing. [`InboxBuilder::connect`] does
    /// this unless [`InboxBuilder::skip_migrations`] was set.
    ///
    /// # Errors
    /// The database could not be reached or refused the statements.
    pub async fn migrate(&self) -> Result<(), InboxError> {
        schema::migrate(&self.inner.db.pool, self.inner.db.backend).await
    }

    /// The receiver that verifies and parses deliveries.
    pub fn receiver(&self) -> &Receiver {
        &self.inner.receiver
    }

    /// The database pool, for the app's own queries outside handlers.
    pub fn pool(&self) -> &sqlx::AnyPool {
        &self.inner.db.pool
    }

    /// Verifies, parses and stores one delivery, and returns the reply to send.
    ///
    /// * not signed correctly, or not a valid event → the core's `400`/`413`
    ///   reply, and nothing is written;
    /// * new or already in the inbox → `200 {"received":true}` once the row is
    ///   committed;
    /// * the database is unreachable or failing → `503 Webhook Error: …`:
    ///   nothing was acknowledged, so the sender delivers again.
    ///
    /// Verification and parsing happen before this returns (the future does not
    /// borrow `headers`); the returned future only waits for the commit.
    pub fn ingest(&self, headers: &dyn Headers, body: Bytes) -> impl Future<Output = Reply> + Send + 'static {
        // The receiver's intake verifies, parses, logs and counts; what the
        // inbox adds is only what it takes to store the event.
        let admitted =
            self.inner.receiver.admit(headers, &body).and_then(|event| {
                row_of(&event, &body).map_err(|error| payhook_core::adapter::reject(&error))
            });
        let inner = Arc::clone(&self.inner);
        async move {
            match admitted {
                Ok(row) => store(&inner, row).await,
                Err(reply) => reply,
            }
        }
    }

    /// Starts the workers that hand stored events to `handler`, with the
    /// concurrency, lease and retry settings of the builder. Call it once per
    /// process, beside the server; stop them with [`Workers::shutdown`].
    ///
    /// Must be called inside a tokio runtime.
    pub fn start<H: Handler>(&self, handler: H) -> Workers {
        Workers::start(self.clone(), handler)
    }
}

async fn store(inner: &Inner, row: Row) -> Reply {
    let (done, answer) = oneshot::channel();
    let event_id = row.event_id.clone();
    if inner.ingest.send(Pending { row, done }).await.is_err() {
        return unavailable("the inbox writer has stopped");
    }
    match answer.await {
        Ok(Ok(new)) => {
            let namespace = inner.config.namespace.clone();
            if new {
                m::ingested(namespace);
                inner.arrived.notify_one();
                tracing::debug!(target: "payhook", event_id = %payhook_escape(&event_id), "event stored in the inbox");
            } else {
                m::duplicate(namespace);
                tracing::info!(target: "payhook", event_id = %payhook_escape(&event_id), "duplicate delivery acknowledged; the event is already in the inbox");
            }
            Reply::received()
        }
        Ok(Err(message)) => unavailable(&message),
        Err(_) => unavailable("the inbox writer has stopped"),
    }
}

/// Event ids come from the sender: cap and escape them before they reach a log.
pub(crate) fn payhook_escape(text: &str) -> String {
    // The core's one rule for request-derived text in logs and replies.
    payhook_core::untrusted::Untrusted::value(text).to_string()
}

fn unavailable(message: &str) -> Reply {
    let error = Error::StoreUnavailable(format!("inbox database unavailable: {message}"));
    tracing::error!(target: "payhook", status = 503, reason = %error, "delivery not stored");
    Reply::error(&error)
}

/// The columns of a verified event. The order key is the event's `created`
/// (seconds), or the time of arrival when the event has none.
fn row_of(event: &Event, body: &[u8]) -> Result<Row, Error> {
    let received_at = now_ms();
    let body = std::str::from_utf8(body)
        .map_err(|_| Error::InvalidPayload("body is not UTF-8".to_owned()))?
        .to_owned();
    Ok(Row {
        event_id: event.id().to_owned(),
        event_type: event.event_type().to_owned(),
        intent_id: event.payment_intent().map(|intent| intent.id.clone()),
        created: event.created().unwrap_or(received_at / 1000),
        body,
        received_at,
    })
}

/// Builder for [`Inbox`].
#[derive(Debug)]
pub struct InboxBuilder {
    receiver: Receiver,
    config: Config,
    migrate: bool,
    acquire_timeout: Duration,
    sqlite_full_sync: bool,
    sqlite_cache_kib: u32,
}

impl InboxBuilder {
    /// The namespace events are kept under (default `payhook`). Endpoints that
    /// share one database each need their own.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.config.namespace = namespace.into();
        self
    }

    /// How long a claim on an event lasts (default 30 s). It is renewed every
    /// third of it while the handler runs, so it only runs out when the worker
    /// stopped (crashed, paused, cut off from the database). At least 300 ms,
    /// at most 100 years.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease;
        self
    }

    /// How long done events are kept, and so how long a repeated delivery is
    /// recognised (default 7 days; above zero, at most 100 years). Workers
    /// purge done events whose `done_at` is older than this (when they start,
    /// then every minute); events in any other state are never purged.
    ///
    /// A delivery of an event whose row was purged is not recognised: it is
    /// stored as a new event and handled again. Keep the retention longer than
    /// the longest time the sender may still redeliver an event (its retries,
    /// and replays you trigger from its dashboard).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.config.retention = retention;
        self
    }

    /// Retry delays: the first failure waits about `base`, each further one twice
    /// as long, never more than `cap`; each delay is jittered between half and
    /// all of its value (defaults 1 s and 1 h; `base` above zero and not above
    /// `cap`, `cap` at most 100 years).
    pub fn backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.config.backoff_base = base;
        self.config.backoff_cap = cap;
        self
    }

    /// How many attempts an event gets before it is dead (default 10; at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.config.max_attempts = attempts;
        self
    }

    /// How many handlers run at once in this process (default 8; 1 to 65 536).
    pub fn concurrency(mut self, handlers: usize) -> Self {
        self.config.concurrency = handlers;
        self
    }

    /// How often idle workers look for due events (default 200 ms). Events
    /// ingested by this process wake them at once; this bounds the delay for
    /// retries and for events ingested by other processes. Above zero, at most
    /// 100 years.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.config.poll_interval = interval;
        self
    }

    /// How long to wait for a database connection before answering `503`
    /// (default 5 s; above zero, at most 100 years).
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// SQLite only: sync the write-ahead log to disk at every commit
    /// (`synchronous = FULL`), so acknowledged events also survive a power loss
    /// or an operating-system crash. By default (`NORMAL`) a commit survives a
    /// crash or kill of the process, and the log is synced at checkpoints: many
    /// times the commit rate on ordinary disks.
    pub fn sqlite_full_sync(mut self) -> Self {
        self.sqlite_full_sync = true;
        self
    }

    /// SQLite only: the most each pooled connection keeps in its page cache, in
    /// KiB (default [`DEFAULT_SQLITE_CACHE_KIB`], 256). Each connection fills its
    /// cache as the file grows, so resident memory grows by up to this much per
    /// connection (the pool holds up to [`concurrency`](Self::concurrency) + 6)
    /// before it levels off. In WAL mode a connection drops its cache whenever
    /// another one has written since its last read, which in a busy inbox is
    /// almost always, so a large cache buys little here. Raise it when the app's
    /// own read-heavy queries share this pool and this file. At most
    /// `i32::MAX` KiB (SQLite's limit); [`connect`](Self::connect) refuses more.
    pub fn sqlite_page_cache(mut self, kib: u32) -> Self {
        self.sqlite_cache_kib = kib;
        self
    }

    /// Does not create the table on connect; call [`Inbox::migrate`] instead.
    pub fn skip_migrations(mut self) -> Self {
        self.migrate = false;
        self
    }

    /// Connects to `sqlite://FILE` (created when missing) or `postgres://…` and,
    /// unless told otherwise, runs the migrations. Must be called inside a tokio
    /// runtime: it starts the ingest writers.
    ///
    /// # Errors
    /// An unsupported URL, a setting out of range, or (when migrating) a
    /// database that cannot be reached.
    pub async fn connect(self, url: &str) -> Result<Inbox, InboxError> {
        let config = self.config;
        if config.namespace.is_empty() {
            return Err(InboxError::InvalidSetting("namespace must not be empty"));
        }
        if config.lease < Duration::from_millis(300) {
            return Err(InboxError::InvalidSetting("lease must be at least 300 ms"));
        }
        if config.retention.is_zero() {
            return Err(InboxError::InvalidSetting("retention must be longer than zero"));
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
        if config.poll_interval.is_zero() {
            return Err(InboxError::InvalidSetting("poll interval must be above zero"));
        }
        // Zero would time out every acquire: each delivery a 503 blaming the database.
        if self.acquire_timeout.is_zero() {
            return Err(InboxError::InvalidSetting("acquire timeout must be above zero"));
        }
        // Deadlines are `Instant::now() + setting` (std and sqlx add without
        // saturating), so an unbounded Duration would panic a worker or the
        // pool later instead of failing here.
        for (setting, refusal) in [
            (config.lease, "lease must be at most 100 years"),
            (config.retention, "retention must be at most 100 years"),
            (config.backoff_cap, "backoff cap must be at most 100 years"),
            (config.poll_interval, "poll interval must be at most 100 years"),
            (self.acquire_timeout, "acquire timeout must be at most 100 years"),
        ] {
            if setting > LONGEST_SETTING {
                return Err(InboxError::InvalidSetting(refusal));
            }
        }
        // SQLite reads a larger cache_size as 0 (almost no cache) without a word.
        if i32::try_from(self.sqlite_cache_kib).is_err() {
            return Err(InboxError::InvalidSetting(
                "sqlite page cache must be at most 2147483647 KiB",
            ));
        }
        let connections = u32::try_from(config.concurrency)
            .unwrap_or(u32::MAX)
            .saturating_add(6);
        let db = Database::connect(
            url,
            connections,
            self.acquire_timeout,
            self.sqlite_full_sync,
            self.sqlite_cache_kib,
        )
        .await?;
        if self.migrate {
            schema::migrate(&db.pool, db.backend).await?;
        }
        // SQLite has one writer whatever we do: one ingest task batches best.
        // PostgreSQL commits in parallel, so a few tasks keep it busy.
        let writers = match db.backend {
            Backend::Sqlite => 1,
            Backend::Postgres => 4,
        };
        let (ingest, queue) = mpsc::channel(4 * INGEST_BATCH);
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..writers {
            tokio::spawn(write_batches(
                db.clone(),
                config.namespace.clone(),
                Arc::clone(&queue),
            ));
        }
        Ok(Inbox {
            inner: Arc::new(Inner {
                receiver: self.receiver,
                db,
                config,
                ingest,
                arrived: Notify::new(),
            }),
        })
    }
}

/// Rows of one ingest `INSERT` statement: its batch, padded with empty rows
/// to the next power of two, so that only nine statements exist.
fn padded_rows(rows: usize) -> usize {
    rows.max(1).next_power_of_two()
}

/// One `INSERT … SELECT … FROM (VALUES …)` for `rows` rows: `$1` is the
/// namespace, then six parameters per row (`received_at` is also the first
/// `due_at`). Padding rows are all NULL and filtered out; repeats are skipped
/// by `ON CONFLICT`, and the new rows' ids come back.
fn insert_statement(rows: usize) -> String {
    let mut sql = String::with_capacity(rows * 40 + 400);
    sql.push_str(
        "INSERT INTO payhook_inbox \
         (namespace, event_id, event_type, intent_id, created, body, received_at, state, attempts, due_at) \
         SELECT $1, column1, column2, column3, column4, column5, column6, 'pending', 0, column6 \
         FROM (VALUES ",
    );
    for row in 0..rows {
        let first = 2 + row * 6;
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!(
            "(${}, ${}, ${}, ${}, ${}, ${})",
            first,
            first + 1,
            first + 2,
            first + 3,
            first + 4,
            first + 5
        ));
    }
    // The WHERE also tells SQLite's parser that ON CONFLICT is the upsert clause.
    sql.push_str(
        ") AS batch WHERE column1 IS NOT NULL \
         ON CONFLICT (namespace, event_id) DO NOTHING RETURNING event_id",
    );
    sql
}

/// One ingest writer: takes every delivery waiting, writes them in one
/// statement, answers each after the commit. Ends when the inbox is dropped.
async fn write_batches(db: Database, namespace: String, queue: Arc<Mutex<mpsc::Receiver<Pending>>>) {
    let mut batch = Vec::with_capacity(INGEST_BATCH);
    loop {
        {
            let mut queue = queue.lock().await;
            if queue.recv_many(&mut batch, INGEST_BATCH).await == 0 {
                return;
            }
        }
        let rows: Vec<&Row> = batch.iter().map(|pending| &pending.row).collect();
        let new = insert_all(&db, &namespace, &rows).await;
        answer_batch(batch.drain(..).map(|pending| pending.done), new);
    }
}

/// Inserts the rows in one statement (atomic on its own: no transaction to
/// open and commit around it); for each row, whether it was new.
async fn insert_all(db: &Database, namespace: &str, rows: &[&Row]) -> Result<Vec<bool>, sqlx::Error> {
    // Insert in id order so two writers holding the same ids in their batches
    // wait for each other instead of deadlocking (PostgreSQL). A repeated id
    // within the batch is written once; its later copies are duplicates.
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&a, &b| rows[a].event_id.cmp(&rows[b].event_id));
    order.dedup_by(|&mut later, &mut first| rows[later].event_id == rows[first].event_id);
    let padded = padded_rows(order.len());
    let sql = insert_statement(padded);
    // Statements for up to 16 rows stay prepared on their connection. Larger
    // ones are prepared for each use: kept on every connection of the pool,
    // the 32- to 256-row ones add up to several hundred KiB per connection
    // (SQLite), and their parse is shared by at least 17 rows.
    let mut query = sqlx::query(&sql).persistent(padded <= 16).bind(namespace);
    for &index in &order {
        let row = rows[index];
        query = query
            .bind(Some(row.event_id.as_str()))
            .bind(Some(row.event_type.as_str()))
            .bind(row.intent_id.as_deref())
            .bind(Some(row.created))
            .bind(Some(row.body.as_str()))
            .bind(Some(row.received_at));
    }
    for _ in order.len()..padded {
        query = query
            .bind(None::<&str>)
            .bind(None::<&str>)
            .bind(None::<&str>)
            .bind(None::<i64>)
            .bind(None::<&str>)
            .bind(None::<i64>);
    }
    let inserted: HashSet<String> = query
        .fetch_all(&db.pool)
        .await?
        .iter()
        .map(|row| row.try_get("event_id"))
        .collect::<Result<_, _>>()?;
    // The first row of each id is new when its id came back; every other
    // row is a duplicate.
    let mut new = vec![false; rows.len()];
    for index in order {
        new[index] = inserted.contains(&rows[index].event_id);
    }
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_caps_and_escapes() {
        let long = "é\n".repeat(200);
        let escaped = payhook_escape(&long);
        assert!(!escaped.contains('\n'));
        // The core's rule (payhook_core::untrusted): control characters escaped,
        // readable text kept, at most 64 characters shown, then an ellipsis.
        assert!(escaped.starts_with("é\\né\\n"), "{escaped}");
        assert!(escaped.ends_with('…'), "{escaped}");
        assert!(escaped.chars().count() <= 2 * 64 + 1, "{escaped}");
        let forged = payhook_escape("evt_1\n2026-01-01 INFO payhook: forged\u{1b}[2J");
        assert_eq!(forged, r"evt_1\n2026-01-01 INFO payhook: forged\u{1b}[2J");
    }
}
