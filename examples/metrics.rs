//! The axum receiver with its metrics exported for Prometheus on `GET /metrics`.
//!
//! ```text
//! PAYHOOK_SECRET=whsec_… cargo run --example metrics
//! curl http://127.0.0.1:3000/metrics
//! ```
//!
//! payhook records what happens to every delivery through the `metrics` crate
//! (see the `payhook::metrics` module for the names: `payhook_deliveries_total`
//! by outcome and reason, `payhook_handler_seconds`, …). Any `metrics` recorder
//! collects them; this example installs `metrics-exporter-prometheus` and
//! renders its text format from a route of the app itself, so no second port
//! or listener is needed.
//!
//! The settings (`PAYHOOK_SECRET` required, `PAYHOOK_ADDR`, `PAYHOOK_REDIS_URL`)
//! are the ones `axum_receiver` reads, in `common/mod.rs`.

mod common;

use std::error::Error;
use std::process::ExitCode;

use axum::routing::{get, post};
use axum::Router;
use common::Settings;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use payhook::tower::axum::{Received, Webhook};
use payhook::tower::WebhookLayer;
use payhook::untrusted::Untrusted;

#[tokio::main]
async fn main() -> ExitCode {
    let _otel = common::init_logging();
    common::exit_status("metrics", serve().await)
}

async fn serve() -> Result<(), Box<dyn Error>> {
    // Install the recorder first: what is recorded before it is lost.
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    payhook::metrics::describe();
    let Settings { addr, receiver } = Settings::from_env().await?;

    let app = Router::new()
        .route("/webhooks", post(webhook))
        .route_layer(WebhookLayer::new(receiver))
        .route("/metrics", get(move || render(prometheus.clone())));

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

/// The Prometheus text exposition of everything recorded so far.
async fn render(prometheus: PrometheusHandle) -> ([(http::header::HeaderName, &'static str); 1], String) {
    (
        [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        prometheus.render(),
    )
}

/// Runs once per new, verified event; payhook counts it as `handled` (or
/// `handler_failed` for an error status) and times it.
async fn webhook(Webhook(event): Webhook) -> Received {
    tracing::info!(
        "handled {} {}",
        Untrusted::value(event.id()),
        Untrusted::value(event.event_type())
    );
    Received
}
