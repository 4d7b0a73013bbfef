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
//! For contributors. The crate is built in layers, listed here from the bottom
//! up: a file may use the files above it in this list, never one below it (the
//! module tree aside: `reads/dashboard.rs` uses its parent's `COLUMNS`), and no
//! two of these files import each other. ARCHITECTURE.md in the repository has
//! the invariants every change must keep.
//!
//! Four words name the database layer, one thing each:
//!
//! - **backend** (`backend.rs`) — the trait bound the crate names: `Backend`,
//!   every layer's trait at once (`Inbox<DB: Backend>`).
//! - **driver** (`database/driver.rs`) — what only the concrete sqlx type knows: which
//!   dialect it is, how it counts rows affected, and the bounds it must meet.
//! - **database** (`database/pool.rs`) — the pool at run time, with the deadline
//!   each piece of work on it is held to and, on SQLite, the write turns.
//! - **dialect** (`database/dialect/`) — the SQL text that differs per database, and
//!   its migrations.
//!
//! **Model — what the inbox is about, no SQL, no sqlx, no database**
//!
//! - `model/state.rs` — `State` (`#[non_exhaustive]`, listed in `State::ALL`,
//!   stored by `as_str`, its groups — waiting, retryable, purgeable… — as
//!   exhaustive methods the reads, actions and tools use) and `AttemptOutcome`
//!   (how one attempt ended).
//! - `model/event.rs` — `StoredEvent`, `Filter`, `Attempt`, `IntentEvent`,
//!   `MAX_ID_BYTES`: what the operator's tools see.
//! - `model/page.rs` — `PageQuery`, `Page`, `Cursor`, `MAX_PAGE`: keyset pages.
//! - `model/stats.rs` — `Stats` (one count per `State`, `count`/`counts`),
//!   `ActivitySlot`.
//! - `model/pause.rs` — `PausedType`: a paused event type as the tools list it.
//! - `model/bulk.rs` — `BulkAction` (what each action does, the states it acts
//!   on), `Selection`, `BulkCount`, `BulkReport`, `MAX_BULK_IDS`.
//! - `model/rows.rs` — crate-internal rows passed between intake, workers and
//!   the database (`NewRow`, `Claimed`, `ClaimRequest`, `ClaimResult`,
//!   `AttemptRecord`).
//! - `model/source.rs` — `Source`: where a stored event came from, a delivery
//!   or the reconciler (`source = 'reconciled'`), as the tools filter and show it.
//! - `model/mod.rs` — the model's module list and its re-exports.
//! - `clock.rs` — now in Unix milliseconds, lease tokens, backoff jitter.
//! - `error.rs` — `InboxError`, the kind of a database failure, and the escaping
//!   of sender-chosen ids before a log line or error text.
//! - `metrics.rs` — metric names and how they are recorded.
//!
//! **The database layer — what the inbox knows of the database it runs on;
//! no event semantics, no worker, no feature's store**
//!
//! - `database/` — `Database` (`database/pool.rs`: the pool, its dialect, the deadline
//!   of each piece of work, SQLite's write turns, opening a URL), `Driver` and
//!   `sql_bounds!` (`database/driver.rs`), the dialect with its table names and
//!   numbered migrations (`database/dialect/`, one `.sql` file per version and database in the
//!   crate's `migrations` folder,
//!   loaded with `include_str!`), running them (`database/migrate.rs`), `NOTIFY` and
//!   `LISTEN` (`database/notify.rs`), the SQLite file's identity
//!   (`database/sqlite_file.rs`).
//!   Other files ask the `Dialect`'s methods and compare a `Dialect` only for
//!   what is not SQL: `database/pool.rs` (opening a SQLite file),
//!   `database/notify.rs` and `inbox/builder.rs` (listening on PostgreSQL),
//!   `operations.rs` (`purge_batch`).
//!
//! **Layers over the database — each a trait with one generic implementation,
//! each statement beside the method that runs it; they know no HTTP, receiver,
//! handler, worker loop or metrics, and none uses another**
//!
//! - `intake/` — intake: one verified delivery to a row and its reply, the
//!   intake writer (one multi-row insert per batch, each delivery answered
//!   after its commit), `Intake::insert` (new → pending, shared with the
//!   reconciler), the duplicates records.
//! - `queue/` — the queue's state changes (`queue/transitions.rs`): `claim`
//!   (expired leases requeued as suspects or, a suspect's last attempt, made
//!   dead, then pending → running under a lease token, no attempt counted),
//!   `renew`, `mark_done_in` (running → done in the handler's transaction, the
//!   attempt counted), `record_failure` (running → pending later, or dead, the
//!   attempt counted).
//! - `operations.rs` — the operator's state changes: `retry`, `retry_dead`,
//!   `replay`, the bounded `purge` batch (`purge_batch`), and `pause`/`resume`
//!   (a row of the paused types' table, which the claim reads).
//! - `bulk.rs` — bulk actions over a `Selection`: the `count` that comes first
//!   and one keyset `batch` (at most `BULK_BATCH` keys of one state read, then
//!   changed by key in one statement of their own), each built from the
//!   selection beside the method that runs it; `Admin::bulk_run` loops the
//!   batches and rests between them.
//! - `reads/mod.rs` — depth, `list`, `show`, the paused types (`paused`),
//!   whether a database holds an inbox, the SQLite main file.
//! - `reads/dashboard.rs` — the dashboard's counts, activity chart, keyset
//!   pages, attempts, events of one payment intent.
//! - `reads/plans.rs` — the query plans of the dashboard's statements.
//! - `backend.rs` — `Backend`: every layer's trait at once, the one bound the
//!   rest of the crate (and `Inbox<DB>`, `Job<DB>`, `Admin<DB>`) names.
//!
//! **The running inbox and its users — no SQL text: they call `DB::claim`,
//! `DB::insert`, … through `Backend`**
//!
//! - `inner.rs` — what the intake and the workers share (`Inner`, `Config`,
//!   `Pending`); neither uses the other's internals.
//! - `upkeep.rs` — the workers' upkeep between claims: the depth gauges and the
//!   retention purge rounds; and beside the claims, the copy of SQLite's WAL back
//!   into its file a moment after each write (`copy_back_wal`, counting the
//!   file's write turns).
//! - `worker/mod.rs` — `Workers`: the dispatch loop (claiming ahead into the
//!   local queue at the handlers' pace, starting events, renewing and handing
//!   back what waits there).
//! - `worker/job.rs` — `Handler`, `Job`, `JobTransaction`: what a handler sees.
//! - `worker/attempt.rs` — one attempt: the handler under its renewed lease, the
//!   done mark or the failure with its backoff, the `INFO` line.
//! - `inbox/mod.rs` — `Inbox`: the handle (ingest, start the workers, wait
//!   until idle); `inbox/builder.rs` — `InboxBuilder`, its settings and the
//!   start of a running inbox.
//! - `trace.rs` — feature `otel`: the delivery's span, whose `traceparent` the
//!   row keeps (`trace_context`, migration 6): the adapter's request span in
//!   payhook's inbox routes, otherwise an ingest span of its own. Also each
//!   attempt's span, a child of the delivery's (why a child and not a link: its
//!   module docs). No span and `NULL` without the feature.
//! - `admin.rs` — `Admin`, the operator's API (CLI `payhook inbox`, the
//!   dashboard), and `parse_age`; re-exports the model under `admin::`. It holds
//!   no SQL; the dashboard and the CLI hold neither SQL nor the list of states
//!   (they iterate `State::ALL` and `Stats::counts()`).
//! - `admin/bulk.rs` — `Admin::bulk_count` and `Admin::bulk_run`: the count
//!   first, then the run over what was counted in batches of `BULK_BATCH`,
//!   resting between them.
//!
//! **The reconciler (feature `reconcile`) — every event the service created
//! handled once, the ones no delivery brought included**
//!
//! - `reconcile/mod.rs` — the reconciler's docs (why, the window, the turn,
//!   each bound) and `run`, its passes every interval until the inbox stops.
//! - `reconcile/settings.rs` — `Reconcile`: its settings (the API, interval,
//!   overlap, pages and time per pass), their defaults and bounds.
//! - `reconcile/pass.rs` — one pass over one namespace: take the turn, list
//!   the window's events, store the ones the inbox lacks, move the mark.
//! - `reconcile/store.rs` — storing what the events list has and the inbox
//!   lacks, through the intake's insert: the part of a pass `Admin` runs too.
//! - `reconcile/metrics.rs` — the reconciler's metrics and failure reasons.
//! - `reconcile/record.rs` — `ReconcilerRecord`, the reconciler's state in the
//!   database: whose turn a namespace is (a lease one process holds, taken
//!   over once it runs out), up to when the service's events are known to be
//!   in the inbox, how the last passes went, and which of a page's ids the
//!   inbox has.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admin;
mod backend;
mod bulk;
mod clock;
mod database;
mod error;
mod inbox;
mod inner;
mod intake;
pub mod metrics;
mod model;
mod operations;
mod queue;
mod reads;
#[cfg(feature = "reconcile")]
pub mod reconcile;
mod trace;
mod upkeep;
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
