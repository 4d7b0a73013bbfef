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
//! What the queue guarantees, each kept by a test in `tests/guarantees.rs`
//! (and `tests/conformance.rs`) on both backends:
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
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admin;
mod attempts;
mod backend;
mod bulk;
mod clock;
mod database;
mod dialect;
mod driver;
mod duplicates;
mod error;
mod inbox;
mod inner;
pub mod metrics;
mod migrate;
mod model;
mod notify;
mod operations;
mod progress;
mod queue;
mod reads;
mod sqlite_file;
mod trace;
mod upkeep;
mod worker;

pub use admin::Admin;
pub use backend::Backend;
pub use dialect::{SCHEMA_TABLE, TABLE};
pub use error::InboxError;
pub use inbox::{
    Inbox, InboxBuilder, DEFAULT_BACKOFF_BASE, DEFAULT_BACKOFF_CAP, DEFAULT_CONCURRENCY,
    DEFAULT_DATABASE_TIMEOUT, DEFAULT_LEASE, DEFAULT_MAX_ATTEMPTS, DEFAULT_NAMESPACE, DEFAULT_RETENTION,
    DEFAULT_SQLITE_CACHE_KIB,
};
pub use model::{State, MAX_ID_BYTES};
pub use worker::{Handler, HandlerError, HandlerFuture, Job, JobTransaction, Workers};

/// The database crate the inbox runs on, so handlers use the same version.
pub use sqlx;
