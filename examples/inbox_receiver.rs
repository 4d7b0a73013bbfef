//! A webhook receiver in inbox mode on axum: each verified event is stored and
//! acknowledged at once, then handled by a worker, its effect committed in the
//! same transaction as its done mark.
//!
//! ```text
//! PAYHOOK_SECRET=whsec_… cargo run --example inbox_receiver
//! PAYHOOK_SECRET=whsec_… PAYHOOK_DATABASE_URL=postgres://app@127.0.0.1/app cargo run --example inbox_receiver
//! ```
//!
//! * `PAYHOOK_ADDR`: where to listen (default `127.0.0.1:3000`);
//! * `PAYHOOK_SECRET`: the endpoint's signing secret (required: it refuses to
//!   start without one, unless `PAYHOOK_SECRET_FILE` is set);
//! * `PAYHOOK_SECRET_FILE`: the signing secrets from this file instead, one
//!   per line, read again when the process gets `SIGHUP` (`kill -HUP PID`
//!   after rewriting it: a rolled secret without a restart; see
//!   `common/mod.rs`);
//! * `PAYHOOK_SCHEME=standard`: a Standard Webhooks sender instead, with
//!   `PAYHOOK_SECRET` (a `whsec_` key) and/or `PAYHOOK_PUBLIC_KEYS`
//!   (comma-separated `whpk_` keys); events are stored and deduplicated by
//!   their `webhook-id` (see `common/mod.rs`);
//! * `PAYHOOK_DATABASE_URL`: `sqlite://FILE` or `postgres://…` (default
//!   `sqlite://payhook-inbox.db`). Several processes on one PostgreSQL database
//!   are replicas of one app;
//! * `PAYHOOK_HANDLER_DELAY_MS`: how long the handler sleeps before writing,
//!   standing in for slow external work (default 0);
//! * `PAYHOOK_ALLOWED_IPS`, `PAYHOOK_TRUSTED_PROXIES`: the source-IP allowlist
//!   and the load balancers in front (comma-separated CIDRs; see
//!   `common/mod.rs`);
//! * `PAYHOOK_DASHBOARD_TOKEN`: when set (16 bytes or more), the inbox
//!   dashboard is served under `/payhook/` (HTTP Basic, any user name, this
//!   token as the password); when unset, it is not served at all (`404`);
//! * `PAYHOOK_API_BASE`, `PAYHOOK_API_KEY`: reconcile with the service's
//!   events list, so events no delivery brought are handled too;
//!   `PAYHOOK_RECONCILE_INTERVAL_MS` sets how often (see `common/mod.rs`);
//! * optional tuning: `PAYHOOK_INBOX_LEASE_MS`, `PAYHOOK_INBOX_MAX_ATTEMPTS`,
//!   `PAYHOOK_INBOX_BACKOFF_MS` (first retry delay), `PAYHOOK_INBOX_CONCURRENCY`.
//!
//! It serves `POST /webhooks` and prints `listening on http://ADDR` once it
//! accepts connections. For each event its handler sleeps the delay, then
//! inserts one row into `ledger(event_id TEXT, event_type TEXT, amount TEXT)`
//! (created when missing, deliberately without a unique constraint: the inbox
//! alone keeps it to one row per event) through the transaction payhook hands
//! it, commits, and prints `handled <event id> <event type>` (whether a
//! delivery or the reconciler stored the event). When the
//! payment intent's `metadata.fail_attempts` is `"N"`, its first N attempts
//! fail after writing the row, so a failed attempt must leave no row. When its
//! `metadata.crash` is `"abort"`, the handler aborts the whole process
//! (`std::process::abort()`) before writing, standing in for an event whose
//! handling crashes the service (out of memory, a native crash): restarted
//! after each crash, the process takes such an event up at most
//! `PAYHOOK_INBOX_MAX_ATTEMPTS` times, then it is `dead` and the others keep
//! flowing. Logs go to stderr (`RUST_LOG`, default `info`).

mod common;

use std::error::Error;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use axum::Router;
use payhook::inbox::sqlx;
use payhook::inbox::{HandlerError, Inbox, Job};
use payhook::tower::axum::inbox_route;
use payhook::untrusted::Untrusted;
use payhook::Receiver;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

const DEFAULT_ADDR: &str = "127.0.0.1:3000";
const DEFAULT_DATABASE_URL: &str = "sqlite://payhook-inbox.db";

#[tokio::main]
async fn main() -> ExitCode {
    // Spans to OTEL_EXPORTER_OTLP_ENDPOINT (OTLP over HTTP) when it is set.
    let otel = match payhook::otel::Otel::from_env("inbox_receiver") {
        Ok(otel) => Some(otel),
        Err(error) => {
            eprintln!("OpenTelemetry export off: {error}");
            None
        }
    };
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false),
        )
        .with(otel.as_ref().and_then(payhook::otel::Otel::layer))
        .with(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .init();
    match serve().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("inbox_receiver: {error}");
            ExitCode::FAILURE
        }
    }
}

fn env_number(name: &str) -> Result<Option<u64>, Box<dyn Error>> {
    match std::env::var(name) {
        Ok(value) => {
            Ok(Some(value.parse().map_err(|_| {
                format!("{name}={value:?} is not a whole number")
            })?))
        }
        Err(_) => Ok(None),
    }
}

async fn serve() -> Result<(), Box<dyn Error>> {
    let addr = std::env::var("PAYHOOK_ADDR").unwrap_or_else(|_| DEFAULT_ADDR.to_owned());
    let addr: SocketAddr = addr
        .parse()
        .map_err(|err| format!("PAYHOOK_ADDR={addr:?} is not an address like {DEFAULT_ADDR}: {err}"))?;
    let builder = match common::standard_scheme_from_env()? {
        Some(builder) => builder,
        None => match common::secret_file_from_env(false)? {
            // Reloaded on SIGHUP: a rolled secret without a restart.
            Some(secrets) => Receiver::builder().secret_set(&secrets),
            None => Receiver::builder().secret(
                std::env::var("PAYHOOK_SECRET")
                    .ok()
                    .filter(|secret| !secret.is_empty())
                    .ok_or(
                        "PAYHOOK_SECRET is required: set it to the endpoint's signing secret (whsec_…), \
                         or PAYHOOK_SECRET_FILE to a file of them",
                    )?,
            ),
        },
    };
    let url = std::env::var("PAYHOOK_DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned());
    let delay = Duration::from_millis(env_number("PAYHOOK_HANDLER_DELAY_MS")?.unwrap_or(0));

    let receiver = common::allowlist_from_env(builder)?.build()?;
    let mut builder = Inbox::builder(receiver);
    if let Some(lease) = env_number("PAYHOOK_INBOX_LEASE_MS")? {
        builder = builder.lease(Duration::from_millis(lease));
    }
    if let Some(attempts) = env_number("PAYHOOK_INBOX_MAX_ATTEMPTS")? {
        builder = builder.max_attempts(u32::try_from(attempts).unwrap_or(u32::MAX));
    }
    if let Some(base) = env_number("PAYHOOK_INBOX_BACKOFF_MS")? {
        builder = builder.backoff(
            Duration::from_millis(base),
            Duration::from_secs(60).max(Duration::from_millis(base)),
        );
    }
    if let Some(handlers) = env_number("PAYHOOK_INBOX_CONCURRENCY")? {
        builder = builder.concurrency(usize::try_from(handlers).unwrap_or(usize::MAX));
    }
    if let Some(reconcile) = common::reconcile_from_env()? {
        builder = builder.reconcile(reconcile);
    }
    // The URL may hold a password: errors name the variable, never its value.
    let inbox = builder
        .connect(&url)
        .await
        .map_err(|err| format!("cannot open the inbox at PAYHOOK_DATABASE_URL: {err}"))?;
    sqlx::query("CREATE TABLE IF NOT EXISTS ledger (event_id TEXT, event_type TEXT, amount TEXT)")
        .execute(inbox.pool())
        .await
        .map_err(|err| format!("cannot create the ledger table: {err}"))?;

    let workers = inbox.start(move |job: Job| handle(job, delay));
    // One line mounts the inbox: 200 once stored (new or repeat), 400/413/408
    // for what fails the checks, 503 when the database is down.
    let mut app = Router::new().route("/webhooks", inbox_route(inbox.clone()));
    // The dashboard for the people on call, only when a token is set.
    if let Some(token) = std::env::var("PAYHOOK_DASHBOARD_TOKEN")
        .ok()
        .filter(|token| !token.is_empty())
    {
        let dashboard = payhook::dashboard::Dashboard::for_inbox(&inbox, &token)
            .map_err(|err| format!("PAYHOOK_DASHBOARD_TOKEN: {err}"))?;
        app = app.nest_service("/payhook", payhook::tower::axum::dashboard_router(dashboard));
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| format!("cannot listen on {addr}: {err}"))?;
    println!("listening on http://{}", listener.local_addr()?);
    // A 5 s header-read timeout, and the peer address for the allowlist.
    payhook::tower::axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    // Running handlers finish before the process exits.
    workers.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match terminate.as_mut() { Some(signal) => { signal.recv().await; } None => std::future::pending().await } } => {}
    }
}

/// The worker's handler: one ledger row per event, committed with the mark.
async fn handle(job: Job, delay: Duration) -> Result<(), HandlerError> {
    // Slow work first, outside any transaction.
    tokio::time::sleep(delay).await;
    let event = job.event();
    let intent = event.payment_intent();
    let amount = intent.map(|intent| intent.amount.to_string());
    let fail_attempts: u32 = intent
        .and_then(|intent| intent.metadata.get("fail_attempts"))
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    if intent.and_then(|intent| intent.metadata.get("crash")) == Some("abort") {
        eprintln!("inbox_receiver: aborting on request (attempt {})", job.attempt());
        std::process::abort();
    }
    {
        let mut tx = job.transaction().await?;
        sqlx::query("INSERT INTO ledger (event_id, event_type, amount) VALUES ($1, $2, $3)")
            .bind(event.id())
            .bind(event.event_type())
            .bind(amount)
            .execute(&mut *tx)
            .await?;
    }
    if job.attempt() <= fail_attempts {
        // The row written above is rolled back with the attempt.
        return Err(format!("failing attempt {} of {fail_attempts} on request", job.attempt()).into());
    }
    job.commit().await?;
    // Id and type come from the request: escaped, so they cannot forge a line.
    println!(
        "handled {} {}",
        Untrusted::value(event.id()),
        Untrusted::value(event.event_type())
    );
    Ok(())
}
