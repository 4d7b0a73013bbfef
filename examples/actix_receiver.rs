//! A payment-service webhook receiver on actix-web, ready to receive real or
//! test deliveries on `POST /webhooks`.
//!
//! ```text
//! PAYHOOK_SECRET=whsec_… cargo run --example actix_receiver
//! PAYHOOK_ADDR=127.0.0.1:8080 PAYHOOK_SECRET=whsec_… cargo run --example actix_receiver
//! PAYHOOK_SECRET=whsec_… PAYHOOK_REDIS_URL=redis://127.0.0.1:6379 cargo run --example actix_receiver   # shared dedupe store
//! ```
//!
//! * `PAYHOOK_ADDR`: where to listen (default `127.0.0.1:3000`);
//! * `PAYHOOK_SECRET` (required): the endpoint's signing secret; without it the
//!   example prints why on stderr and exits with status 1;
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
//! A connection whose request headers have not arrived within 5 s, or that sits
//! idle that long between requests, is closed (actix-web's defaults, set here
//! explicitly so they are not lost in a copy).
//!
//! Those settings are read by `common/mod.rs`, which the axum example shares;
//! this file is the actix-web part: the app, its `WebhookConfig` and the
//! handler with its `Webhook` extractor.
//!
//! It prints `listening on http://ADDR` once it accepts connections, then one
//! log line per event it handled (`handled <event id> <event type>`); duplicates
//! and rejections are answered by the extractor before the handler runs, and
//! logged by payhook under the `payhook` target. Set `RUST_LOG` to change what
//! is logged (default `info`).

mod common;

use std::error::Error;
use std::process::ExitCode;
use std::time::Duration;

use actix_web::{web, App, HttpResponse, HttpServer};
use common::Settings;
use payhook::actix::{Webhook, WebhookConfig};
use payhook::untrusted::Untrusted;
use payhook::EventKind;

#[actix_web::main]
async fn main() -> ExitCode {
    let _otel = common::init_logging();
    common::exit_status("actix_receiver", serve().await)
}

async fn serve() -> Result<(), Box<dyn Error>> {
    let Settings { addr, receiver } = Settings::from_env().await?;
    // The `Webhook` extractor finds its receiver in the app data. Each worker
    // builds its own app, so each gets a clone of this one config: all workers
    // share one receiver and one dedupe store.
    let config = WebhookConfig::new(receiver);

    let server = HttpServer::new(move || {
        App::new()
            .app_data(config.clone())
            .route("/webhooks", web::post().to(webhook))
    })
    // The request head must arrive within 5 s, and an idle kept-alive
    // connection is closed after 5 s: a peer trickling its headers cannot hold
    // a connection open.
    .client_request_timeout(Duration::from_secs(5))
    .keep_alive(Duration::from_secs(5))
    .bind(addr)
    .map_err(|err| format!("cannot listen on {addr}: {err}"))?;
    for addr in server.addrs() {
        println!("listening on http://{addr}");
    }
    // actix-web stops gracefully on Ctrl-C / SIGTERM by itself.
    server.run().await?;
    Ok(())
}

/// Runs once per new, verified event. `ack` marks the event done and answers
/// `200 {"received":true}`; returning an error (or panicking) before it releases
/// the event, so the sender's retry is handled.
async fn webhook(webhook: Webhook) -> actix_web::Result<HttpResponse> {
    // Values from the request are escaped and shortened before they are logged.
    let (id, event_type) = (
        Untrusted::value(webhook.id()),
        Untrusted::value(webhook.event_type()),
    );
    match webhook.kind() {
        EventKind::PaymentIntentSucceeded(intent) => {
            // Fulfil the order for `intent.id` here; `intent.amount` is exact (u128).
            tracing::info!(amount = %intent.amount, currency = %Untrusted::value(&intent.currency), "handled {id} {event_type}");
        }
        EventKind::PaymentIntentFailed(intent) => {
            tracing::info!(payment_intent = %Untrusted::value(&intent.id), "handled {id} {event_type}");
        }
        _ => tracing::info!("handled {id} {event_type}"),
    }
    Ok(webhook.ack().await)
}
