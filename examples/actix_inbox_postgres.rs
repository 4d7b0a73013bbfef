//! An actix-web receiver in inbox mode on PostgreSQL, on the app's own sqlx
//! pool ([`Inbox::from_pool`]): each verified event is stored and acknowledged
//! at once, then a worker records the payment in the app's table through the
//! transaction that also marks the event done, typed as the app's
//! `PgConnection`. Every effect happens once, however often the event is
//! delivered and whenever the process dies.
//!
//! ```text
//! PAYHOOK_SECRET=whsec_… PAYHOOK_DATABASE_URL=postgres://app@127.0.0.1/app cargo run --example actix_inbox_postgres
//! ```
//!
//! * `PAYHOOK_ADDR`: where to listen (default `127.0.0.1:3000`);
//! * `PAYHOOK_SECRET` (required): the endpoint's signing secret;
//! * `PAYHOOK_DATABASE_URL` (required): the app's PostgreSQL database, a
//!   `postgres://` URL. The inbox creates its tables there at start (its
//!   migrations), and several processes on one database are replicas of one
//!   app;
//! * `PAYHOOK_INBOX_CONCURRENCY`: handlers at once (default 8); the app's
//!   pool gets that many connections plus 4 for ingest and claims;
//! * `PAYHOOK_API_BASE`, `PAYHOOK_API_KEY`: reconcile with the service's
//!   events list, so events no delivery brought are handled too (one replica
//!   reconciles at a time); `PAYHOOK_RECONCILE_INTERVAL_MS` sets how often
//!   (see `common/mod.rs`).
//!
//! It serves `POST /webhooks` (200 once stored, new or repeat; 400/413/408 for
//! what fails the checks; 503 while the database is down) and prints
//! `listening on http://ADDR` once it accepts connections. For each
//! `payment_intent.*` event the handler inserts one row into
//! `payments_received(event_id, payment_intent, status, amount, currency)`
//! (created when missing, deliberately without a unique constraint: the inbox
//! alone keeps it to one row per event), then prints `handled <event id>
//! <event type>`; other types are only printed. Logs go to stdout (`RUST_LOG`,
//! default `info`). On Ctrl-C or SIGTERM the server stops first, then the
//! running handlers finish.

mod common;

use std::error::Error;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use actix_web::{App, HttpServer};
use payhook::inbox::{HandlerError, Inbox, Job};
use payhook::untrusted::Untrusted;
use payhook::{PaymentIntent, Receiver};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgConnection;

const DEFAULT_ADDR: &str = "127.0.0.1:3000";

#[actix_web::main]
async fn main() -> ExitCode {
    let _otel = common::init_logging();
    common::exit_status("actix_inbox_postgres", serve().await)
}

/// A required variable, not empty.
fn required(name: &str, what: &str) -> Result<String, Box<dyn Error>> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.is_empty())
        .ok_or_else(|| format!("{name} is required: set it to {what}").into())
}

async fn serve() -> Result<(), Box<dyn Error>> {
    let addr = std::env::var("PAYHOOK_ADDR").unwrap_or_else(|_| DEFAULT_ADDR.to_owned());
    let addr: SocketAddr = addr
        .parse()
        .map_err(|err| format!("PAYHOOK_ADDR={addr:?} is not an address like {DEFAULT_ADDR}: {err}"))?;
    let secret = required("PAYHOOK_SECRET", "the endpoint's signing secret (whsec_…)")?;
    let url = required("PAYHOOK_DATABASE_URL", "the app's database, postgres://…")?;
    let concurrency = match std::env::var("PAYHOOK_INBOX_CONCURRENCY") {
        Ok(value) => value
            .parse::<u32>()
            .map_err(|_| format!("PAYHOOK_INBOX_CONCURRENCY={value:?} is not a whole number"))?,
        Err(_) => 8,
    };

    // The app's own pool: the inbox takes a clone, so its handlers get the
    // app's connection type. The URL may hold a password: errors name the
    // variable, never its value.
    let pool = PgPoolOptions::new()
        .max_connections(concurrency.saturating_add(4))
        .acquire_timeout(Duration::from_secs(5))
        .connect(&url)
        .await
        .map_err(|err| format!("cannot connect to PAYHOOK_DATABASE_URL: {err}"))?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS payments_received \
         (event_id TEXT, payment_intent TEXT, status TEXT, amount NUMERIC(40, 0), currency TEXT)",
    )
    .execute(&pool)
    .await
    .map_err(|err| format!("cannot create the payments_received table: {err}"))?;

    let receiver = Receiver::builder().secret(secret).build()?;
    let mut builder =
        Inbox::builder(receiver).concurrency(usize::try_from(concurrency).unwrap_or(usize::MAX));
    if let Some(reconcile) = common::reconcile_from_env()? {
        builder = builder.reconcile(reconcile);
    }
    let inbox = builder
        .from_pool(pool)
        .await
        .map_err(|err| format!("cannot open the inbox in PAYHOOK_DATABASE_URL: {err}"))?;
    let workers = inbox.start(handle);

    let server = HttpServer::new(move || {
        // One line mounts the inbox; each actix worker gets a clone of it.
        App::new().route("/webhooks", payhook::actix::inbox_route(inbox.clone()))
    })
    .client_request_timeout(Duration::from_secs(5))
    .keep_alive(Duration::from_secs(5))
    .bind(addr)
    .map_err(|err| format!("cannot listen on {addr}: {err}"))?;
    for addr in server.addrs() {
        println!("listening on http://{addr}");
    }
    // actix-web stops gracefully on Ctrl-C / SIGTERM by itself; running
    // handlers finish after it.
    server.run().await?;
    workers.shutdown().await;
    Ok(())
}

/// The worker's handler: the app's own function on its own connection type,
/// committed with the event's done mark.
async fn handle(job: Job<sqlx::Postgres>) -> Result<(), HandlerError> {
    let event = job.event();
    if let Some(intent) = event.payment_intent() {
        let mut tx = job.transaction().await?;
        record_payment(&mut tx, event.id(), intent).await?;
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

/// What the app does with a payment, written as it would be anywhere else in
/// the app: on a `PgConnection`.
async fn record_payment(
    conn: &mut PgConnection,
    event_id: &str,
    intent: &PaymentIntent,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO payments_received (event_id, payment_intent, status, amount, currency) \
         VALUES ($1, $2, $3, $4::NUMERIC, $5)",
    )
    .bind(event_id)
    .bind(&intent.id)
    .bind(intent.status.as_str())
    .bind(intent.amount.to_string())
    .bind(&intent.currency)
    .execute(conn)
    .await?;
    Ok(())
}
