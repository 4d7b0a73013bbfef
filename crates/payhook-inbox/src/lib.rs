//! A durable inbox for payhook: acknowledge each verified webhook event as soon
//! as it is stored, process it afterwards, and make every event's effect happen
//! exactly once.
//!
//! * [`Inbox::ingest`] verifies and parses a delivery with the core's
//!   [`Receiver`](payhook_core::Receiver), stores it keyed by (namespace, event
//!   id) — a repeat is a no-op — and returns `200 {"received":true}` once the row
//!   is committed, or `503` when the database is down (nothing acknowledged).
//! * [`Inbox::start`] starts workers beside the server. Each stored event is
//!   handed to your handler as a [`Job`]; [`Job::transaction`] opens the
//!   database transaction in which payhook marks the event done, so the
//!   handler's own writes commit atomically with the mark. Failures are retried
//!   with exponential backoff and jitter, and the event is *dead* after the last
//!   attempt (see [`admin`] to list, retry or replay events).
//! * Events of one payment intent run one at a time, in `created` order.
//!
//! What the queue guarantees, each kept by a test in
//! `tests/integration/guarantees.rs` (and `conformance.rs` beside it) on both
//! backends:
//!
//! * a repeated delivery is acknowledged and counted as a duplicate, one row;
//! * a failed database write answers `503` and stores nothing;
//! * a lease is renewed while the handler runs, so a long handler is never
//!   run twice; a worker whose lease was taken over cannot commit anything;
//! * a failed attempt waits at least half its backoff delay before the next;
//! * two events of one payment intent never run at once, across replicas;
//! * only done events older than the retention are purged.
//!
//! Backends (features): `sqlite` (default; bundled, a file in WAL mode) and
//! `postgres` (for several replicas of one app, woken across replicas by
//! `LISTEN`/`NOTIFY`). The inbox is typed by its database: built on the app's
//! own pool with [`Inbox::from_pool`] (`Inbox<sqlx::Postgres>`,
//! `Inbox<sqlx::Sqlite>`), its handlers get [`Job<DB>`](Job) whose
//! [`transaction`](Job::transaction) derefs to the app's `PgConnection` /
//! `SqliteConnection`; built from a URL with [`Inbox::connect`], it is an
//! `Inbox<sqlx::Any>` (the default type parameter). The table is created by
//! numbered migrations (recorded in [`SCHEMA_TABLE`]) when the inbox is built,
//! or by [`Inbox::migrate`] with [`InboxBuilder::skip_migrations`].
//!
//! Defaults and caps are the core receiver's: namespace, lease (5 seconds) and
//! retention (7 days) come from the [`Receiver`](payhook_core::Receiver) the
//! inbox is built around unless the builder overrides them, and every duration
//! is capped at `payhook_core::defaults::MAX_DURATION` (100 years).
//!
//! ```
//! use payhook::inbox::{HandlerError, Inbox, Job};
//! use payhook::Receiver;
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! # let dir = std::env::temp_dir().join(format!("payhook-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! # let url = format!("sqlite://{}", dir.join("inbox.db").display());
//! let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
//! let inbox = Inbox::connect(receiver, &url).await.unwrap(); // e.g. "sqlite://inbox.db"
//! sqlx::query("CREATE TABLE IF NOT EXISTS orders_paid (event_id TEXT, amount TEXT)")
//!     .execute(inbox.pool()).await.unwrap();
//!
//! let workers = inbox.start(|job: Job| async move {
//!     let Some(intent) = job.event().payment_intent().cloned() else { return Ok(()) };
//!     // Slow external work goes here, before the transaction is opened.
//!     let mut tx = job.transaction().await?;
//!     sqlx::query("INSERT INTO orders_paid (event_id, amount) VALUES ($1, $2)")
//!         .bind(job.event().id())
//!         .bind(intent.amount.to_string())
//!         .execute(&mut *tx)
//!         .await?;
//!     Ok::<(), HandlerError>(()) // payhook commits the insert and the done mark together
//! });
//!
//! // In the web handler: `let reply = inbox.ingest(&headers, body).await;`
//! workers.shutdown().await; // on shutdown: running handlers finish first
//! # });
//! ```
//!
//! # Source map
//!
//! For contributors. One folder per capability, each with its SQL beside
//! the code that runs it; listed from the bottom up: a file may use what is
//! listed before it, never what comes after (drawn from the imports: no
//! import runs back up, and no two files import each other).
//! ARCHITECTURE.md in the repository has the invariants every change must
//! keep. Each folder's module docs say what each of its files holds.
//!
//! **The ground — no SQL, no sqlx pool, no runtime**
//!
//! - `model/` — what the inbox is about: `State` and its groups, the stored
//!   event and its attempts as the tools see them, keyset pages, counts, the
//!   paused types, `Source`, and the crate-internal rows passed between
//!   intake, workers and the database.
//! - `clock.rs` — now in Unix milliseconds, lease tokens, backoff jitter.
//! - `error.rs` — `InboxError`, the kind of a database failure, and the escaping
//!   of sender-chosen ids before a log line or error text.
//! - `metrics.rs` — metric names and how they are recorded.
//! - `trace.rs` — feature `otel`: the delivery's span, whose `traceparent` the
//!   row keeps, and each attempt's span, a child of the delivery's. No span
//!   and `NULL` without the feature.
//!
//! **The database layer — what the inbox knows of the database it runs on**
//!
//! - `database/` — `Database` (the pool, its dialect, the deadline of each
//!   piece of work, SQLite's write turns, opening a URL), `Driver` and
//!   `sql_bounds!` (why one implementation serves three sqlx types), the
//!   dialect with its table names and numbered migrations (one `.sql` file
//!   per version and database in the crate's `migrations` folder), running
//!   them, `NOTIFY`/`LISTEN`, the SQLite file's identity.
//!
//! **The features — each a store (a trait with one generic implementation,
//! each statement beside the method that runs it) and the code that drives
//! it, naming only the stores it uses**
//!
//! - `inner.rs` — what the intake, the workers and the reconciler share
//!   (`Inner`, `Config`, `Pending`).
//! - `queue/` — an event's state changes after intake (`claim`, `renew`,
//!   done in the handler's transaction, `record_failure`), the workers'
//!   batched writes (start and done marks, lease renewals, hand-backs), the
//!   attempts record, and the writer tasks that batch them.
//! - `actions/` — the operator's actions: one event's retry and replay, the
//!   purge in paced batches (the retention's and the admin's), pause and
//!   resume, and the bulk actions (what they select, the count first, the
//!   run in resting batches).
//! - `reads/` — what the operator's tools read: depth, lists, one event, the
//!   dashboard's counts (from the tally), activity (from its buckets), pages
//!   and query plans.
//! - `intake/` — a verified delivery to a row and its reply, the batching
//!   intake writer, the insert statement (shared with the reconciler), the
//!   duplicates records, a later copy compared with its stored event (shared
//!   with the reconciler), the refused events record.
//! - `reconcile/` — feature `reconcile`: the reconciler's passes, its
//!   settings and metrics, its record in the database (turn, mark, passes),
//!   and storing what the events list has and the inbox lacks.
//!
//! **The running inbox and its handles — no SQL text**
//!
//! - `backend.rs` — `Backend`: every store at once, the one bound the
//!   workers and the public `Inbox<DB>`, `Job<DB>`, `Admin<DB>` name.
//! - `worker/` — `Workers`: the dispatch loop (claiming ahead at the
//!   handlers' pace, starting events, renewing and handing back what waits),
//!   one attempt under its renewed lease, `Job` and `Handler` (what a handler
//!   sees), and the upkeep between claims (depth gauges, retention purge,
//!   SQLite's WAL copied back).
//! - `inbox/` — `Inbox`: the handle (ingest, start the workers, wait until
//!   idle) and `InboxBuilder`, its settings and the start of a running inbox.
//! - `admin.rs` — `Admin`, the operator's API (CLI `payhook inbox`, the
//!   dashboard), and `parse_age`; re-exports the model under `admin::`. It
//!   holds no SQL; the dashboard and the CLI hold neither SQL nor the list of
//!   states (they iterate `State::ALL` and `Stats::counts()`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod actions;
pub mod admin;
mod backend;
mod clock;
mod database;
mod error;
mod inbox;
mod inner;
mod intake;
pub mod metrics;
mod model;
mod queue;
mod reads;
#[cfg(feature = "reconcile")]
pub mod reconcile;
mod trace;
mod worker;

pub use admin::Admin;
pub use backend::Backend;
pub use database::dialect::{SCHEMA_TABLE, TABLE};
pub use error::InboxError;
pub use inbox::{
    Inbox, InboxBuilder, DEFAULT_BACKOFF_BASE, DEFAULT_BACKOFF_CAP, DEFAULT_CONCURRENCY,
    DEFAULT_DATABASE_TIMEOUT, DEFAULT_LEASE, DEFAULT_MAX_ATTEMPTS, DEFAULT_NAMESPACE, DEFAULT_RETENTION,
    DEFAULT_SQLITE_CACHE_KIB,
};
pub use model::{Source, State, MAX_ID_BYTES};
#[cfg(feature = "reconcile")]
pub use reconcile::Reconcile;
pub use worker::{Handler, HandlerError, HandlerFuture, Job, JobTransaction, Workers};

/// The database crate the inbox runs on, so handlers use the same version.
pub use sqlx;
