//! A payment-service webhook receiver on axum, ready to receive real or test
//! deliveries on `POST /webhooks`.
//!
//! ```text
//! cargo run --example axum_receiver
//! PAYHOOK_ADDR=127.0.0.1:8080 PAYHOOK_SECRET=whsec_… cargo run --example axum_receiver
//! PAYHOOK_REDIS_URL=redis://127.0.0.1:6379 cargo run --example axum_receiver   # shared dedupe store
//! ```
//!
//! * `PAYHOOK_ADDR`: where to listen (default `127.0.0.1:3000`);
//! * `PAYHOOK_SECRET`: the endpoint's signing secret; when unset, a fixed test
//!   secret is used and printed, so test deliveries can be signed with it;
//! * `PAYHOOK_REDIS_URL`: keep the dedupe state in Redis, shared by every
//!   replica, instead of in this process's memory.
//!
//! It prints `listening on http://ADDR` once it accepts connections, then one
//! log line per event it handled (`handled <event id> <event type>`); duplicates
//! and rejections are logged by payhook under the `payhook` target. Set
//! `RUST_LOG` to change what is logged (default `info`).

use std::error::Error;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::process::ExitCode;

use axum::routing::post;
use axum::Router;
use payhook::redis::RedisStore;
use payhook::tower::axum::{Received, Webhook};
use payhook::tower::WebhookLayer;
use payhook::{EventKind, Receiver};
use tracing_subscriber::EnvFilter;

/// The secret used when `PAYHOOK_SECRET` is unset. For local testing only.
const TEST_SECRET: &str = "whsec_payhook_example_test_secret";
const DEFAULT_ADDR: &str = "127.0.0.1:3000";

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stdout)
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("axum_receiver: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn Error>> {
    let addr = std::env::var("PAYHOOK_ADDR").unwrap_or_else(|_| DEFAULT_ADDR.to_owned());
    let addr: SocketAddr = addr
        .parse()
        .map_err(|err| format!("PAYHOOK_ADDR={addr:?} is not an address like {DEFAULT_ADDR}: {err}"))?;

    let secret = match std::env::var("PAYHOOK_SECRET") {
        Ok(secret) => secret,
        Err(_) => {
            println!("PAYHOOK_SECRET is not set; using the test secret {TEST_SECRET}");
            TEST_SECRET.to_owned()
        }
    };
    let mut receiver = Receiver::builder().secret(secret);
    receiver = match std::env::var("PAYHOOK_REDIS_URL") {
        // The URL may hold a password: it is never printed, and the store's
        // errors never quote it.
        Ok(url) => {
            let store = RedisStore::builder(url)
                .connect()
                .await
                .map_err(|err| format!("PAYHOOK_REDIS_URL: {err}"))?;
            println!("dedupe store: Redis");
            receiver.store(store)
        }
        Err(_) => {
            println!("dedupe store: in memory");
            receiver
        }
    };
    let app = app(receiver.build()?);

    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| format!("cannot listen on {addr}: {err}"))?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

fn app(receiver: Receiver) -> Router {
    Router::new()
        .route("/webhooks", post(webhook))
        .route_layer(WebhookLayer::new(receiver))
}

/// Runs once per new, verified event. Returning `Received` (any 2xx) marks the
/// event done; an error status or a panic releases it so the sender retries.
async fn webhook(Webhook(event): Webhook) -> Received {
    match event.kind() {
        EventKind::PaymentIntentSucceeded(intent) => {
            // Fulfil the order for `intent.id` here; `intent.amount` is exact (u128).
            tracing::info!(amount = %intent.amount, currency = %intent.currency, "handled {} {}", event.id(), event.event_type());
        }
        EventKind::PaymentIntentFailed(intent) => {
            tracing::info!(payment_intent = %intent.id, "handled {} {}", event.id(), event.event_type());
        }
        _ => tracing::info!("handled {} {}", event.id(), event.event_type()),
    }
    Received
}
