//! A payment-service webhook receiver on axum, ready to receive real or test
//! deliveries on `POST /webhooks`.
//!
//! ```text
//! PAYHOOK_SECRET=whsec_… cargo run --example axum_receiver
//! PAYHOOK_ADDR=127.0.0.1:8080 PAYHOOK_SECRET=whsec_… cargo run --example axum_receiver
//! PAYHOOK_SECRET=whsec_… PAYHOOK_REDIS_URL=redis://127.0.0.1:6379 cargo run --example axum_receiver   # shared dedupe store
//! ```
//!
//! * `PAYHOOK_ADDR`: where to listen (default `127.0.0.1:3000`);
//! * `PAYHOOK_SECRET` (required): the endpoint's signing secret; without it the
//!   example prints why on stderr and exits with status 1;
//! * `PAYHOOK_SECRET_FILE`: the signing secrets from this file instead, one
//!   per line, read again when the process gets `SIGHUP` (`kill -HUP PID`
//!   after rewriting it: a rolled secret without a restart; see
//!   `common/mod.rs`);
//! * `PAYHOOK_SCHEME=standard`: a Standard Webhooks sender instead, with
//!   `PAYHOOK_SECRET` (a `whsec_` key) and/or `PAYHOOK_PUBLIC_KEYS`
//!   (comma-separated `whpk_` keys); the `webhook-id` is the event id
//!   (see `common/mod.rs`);
//! * `PAYHOOK_REDIS_URL`: keep the dedupe state in Redis, shared by every
//!   replica, instead of in this process's memory;
//! * `PAYHOOK_ALLOWED_IPS`, `PAYHOOK_TRUSTED_PROXIES`: the source-IP allowlist
//!   and the load balancers in front (comma-separated CIDRs; see
//!   `common/mod.rs`).
//!
//! It serves with `payhook::tower::axum::serve`, which closes a connection
//! whose request headers have not arrived within 5 s (or that sits idle that
//! long between requests) and passes each connection's peer address to the
//! allowlist; plain `axum::serve` does neither.
//!
//! Those settings are read by `common/mod.rs`, which the actix-web example
//! shares; this file is the axum part: the router, `WebhookLayer` and the
//! handler.
//!
//! It prints `listening on http://ADDR` once it accepts connections, then one
//! log line per event it handled (`handled <event id> <event type>`); duplicates
//! and rejections are answered by `WebhookLayer` before the handler runs, and
//! logged by payhook under the `payhook` target. Set `RUST_LOG` to change what
//! is logged (default `info`).

mod common;

use std::error::Error;
use std::process::ExitCode;

use axum::routing::post;
use axum::Router;
use common::Settings;
use payhook::tower::axum::{Received, Webhook};
use payhook::tower::WebhookLayer;
use payhook::untrusted::Untrusted;
use payhook::EventKind;

#[tokio::main]
async fn main() -> ExitCode {
    let _otel = common::init_logging();
    common::exit_status("axum_receiver", serve().await)
}

async fn serve() -> Result<(), Box<dyn Error>> {
    let Settings { addr, receiver } = Settings::from_env().await?;
    // `route_layer` puts the layer in front of this route alone: other routes
    // (health checks, the rest of the app) are not verified as webhooks.
    let app = Router::new()
        .route("/webhooks", post(webhook))
        .route_layer(WebhookLayer::new(receiver));

    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| format!("cannot listen on {addr}: {err}"))?;
    println!("listening on http://{}", listener.local_addr()?);
    // A 5 s header-read timeout, and the peer address for the allowlist.
    payhook::tower::axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

/// Runs once per new, verified event. Returning `Received` (any 2xx) marks the
/// event done; an error status or a panic releases it so the sender retries.
async fn webhook(Webhook(event): Webhook) -> Received {
    // Values from the request are escaped and shortened before they are logged.
    let (id, event_type) = (Untrusted::value(event.id()), Untrusted::value(event.event_type()));
    match event.kind() {
        EventKind::PaymentIntentSucceeded(intent) => {
            // Fulfil the order for `intent.id` here; `intent.amount` is exact (u128).
            tracing::info!(amount = %intent.amount, currency = %Untrusted::value(&intent.currency), "handled {id} {event_type}");
        }
        EventKind::PaymentIntentFailed(intent) => {
            tracing::info!(payment_intent = %Untrusted::value(&intent.id), "handled {id} {event_type}");
        }
        _ => tracing::info!("handled {id} {event_type}"),
    }
    Received
}
