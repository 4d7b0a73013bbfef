//! Section 13 of the inbox bench: the cost of feature `otel`.
//!
//! Four modes, alternating rounds (`PAYHOOK_BENCH_ROUNDS`, default 3), all
//! under one global subscriber: a `fmt` layer at `INFO` writing to a sink (an
//! app that logs), and the `payhook::otel` layer exporting OTLP over HTTP to
//! a loopback endpoint that decodes nothing and answers `200`:
//!
//! * **off**: the spans that exist only with the feature
//!   (`payhook::otel::TRACE_SPANS`: the request's `webhook`, the inbox's
//!   `ingest` and `attempt`) are disabled at their callsites, and the
//!   OpenTelemetry layer sees nothing — what is left of them when the
//!   feature is compiled out is a no-op;
//! * **no endpoint (init)**: what `payhook::otel::init` installs when
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` is unset: no OpenTelemetry layer, and the
//!   same callsite filter as off (the feature's code paths run with nothing
//!   to export);
//! * **own subscriber, no endpoint**: every span on and no OpenTelemetry
//!   layer, as in an app whose own subscriber keeps the spans (its log
//!   formatter sees them);
//! * **exporting**: every span on and exported.
//!
//! Every delivery carries a `traceparent`, and every layer sees `INFO` and
//! above, as under `init`. Per mode: ingest over HTTP through `inbox_route`
//! (16 clients, events/s) and no-op workers (16) draining stored events
//! (events/s), each in a database of its own; then each mode's rounds, and
//! its median ÷ off's. `PAYHOOK_BENCH_OTEL_MODES` (mode names, comma-
//! separated) runs only those modes.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use payhook::{sign, Secret};
use payhook_test_support::unique;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer as _;

use super::{body, connect, noop_rate, now, quick, SECRET};

const OFF: u8 = 0;
const NO_ENDPOINT: u8 = 1;
const OWN_SUBSCRIBER: u8 = 2;
const EXPORTING: u8 = 3;
/// Outside this section: nothing is recorded.
const IDLE: u8 = 4;
const MODES: [(u8, &str); 4] = [
    (OFF, "off"),
    (NO_ENDPOINT, "no endpoint (init)"),
    (OWN_SUBSCRIBER, "own subscriber, no endpoint"),
    (EXPORTING, "exporting"),
];

static MODE: AtomicU8 = AtomicU8::new(IDLE);

fn set_mode(mode: u8) {
    MODE.store(mode, Ordering::SeqCst);
    // The filters' answers are cached per callsite: ask them again.
    tracing::callsite::rebuild_interest_cache();
}

/// The spans feature `otel` adds (the delivery span exists without it).
fn otel_only(metadata: &tracing::Metadata<'_>) -> bool {
    metadata.is_span()
        && metadata.target() == "payhook"
        && payhook::otel::TRACE_SPANS.contains(&metadata.name())
}

/// A loopback OTLP/HTTP endpoint that takes every export and answers `200`.
async fn sink() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new().route("/v1/traces", axum::routing::post(|| async { "" }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// Installs the bench's one global subscriber (see the module docs).
fn install(otel: &payhook::otel::Otel) {
    let subscriber = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::sink)
                .with_filter(filter_fn(|metadata| *metadata.level() <= tracing::Level::INFO)),
        )
        .with(
            otel.layer()
                .with_filter(filter_fn(|_| MODE.load(Ordering::SeqCst) == EXPORTING)),
        )
        // `INFO` for every layer, as `payhook::otel::init` sets by default.
        .with(filter_fn(|metadata| {
            *metadata.level() <= tracing::Level::INFO
                && match MODE.load(Ordering::SeqCst) {
                    IDLE => false,
                    OFF | NO_ENDPOINT => !otel_only(metadata),
                    _ => true,
                }
        }));
    tracing::subscriber::set_global_default(subscriber).expect("no subscriber installed before");
}

/// `total` signed POSTs with a `traceparent` each, from 16 clients; events/s.
async fn ingest_rate(url: &str, total: usize) -> f64 {
    let inbox = connect(url, 1).await; // no workers: ingest alone
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new().route("/webhooks", payhook::tower::axum::inbox_route(inbox));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let url = format!("http://{addr}/webhooks");
    post_all(&url, 200).await; // warm-up
    let started = Instant::now();
    post_all(&url, total).await;
    total as f64 / started.elapsed().as_secs_f64()
}

async fn post_all(url: &str, total: usize) {
    let client = reqwest::Client::new();
    let next = Arc::new(AtomicUsize::new(0));
    let prefix = unique("evt_otel");
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (client, next, prefix, url) = (client.clone(), Arc::clone(&next), prefix.clone(), url.to_owned());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return;
                }
                let body = body(&format!("{prefix}_{i}"));
                let signature = sign(body.as_bytes(), &Secret::new(SECRET).expect("secret"), now());
                let response = client
                    .post(&url)
                    .header("x-service-signature", signature)
                    .header(
                        "traceparent",
                        format!("00-{:032x}-{:016x}-01", i as u128 + 1, i as u64 + 1),
                    )
                    .body(body)
                    .send()
                    .await
                    .expect("reply");
                assert_eq!(response.status().as_u16(), 200);
                let _ = response.bytes().await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("client");
    }
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Whether a mode runs: all of them, or those `PAYHOOK_BENCH_OTEL_MODES`
/// names (a comma-separated list of mode names: `off,exporting` for a
/// profile of the two).
fn chosen(name: &str) -> bool {
    std::env::var("PAYHOOK_BENCH_OTEL_MODES")
        .map_or(true, |modes| modes.split(',').any(|mode| mode.trim() == name))
}

pub(crate) async fn overhead(url: &dyn Fn() -> String) {
    let rounds = std::env::var("PAYHOOK_BENCH_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if quick() { 1 } else { 3 });
    // Each measurement lasts about two seconds: shorter ones varied by a
    // fifth between rounds of the same mode.
    let requests = if quick() { 1000 } else { 16_000 };
    let events = if quick() { 2000 } else { 16_000 };
    // Once per process (the section runs per backend); kept until the end.
    static OTEL: std::sync::OnceLock<payhook::otel::Otel> = std::sync::OnceLock::new();
    if OTEL.get().is_none() {
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", sink().await);
        let otel = OTEL.get_or_init(|| payhook::otel::Otel::from_env("payhook-bench").expect("exporter"));
        install(otel);
    }
    let mut ingest: [Vec<f64>; 4] = Default::default();
    let mut workers: [Vec<f64>; 4] = Default::default();
    for round in 0..rounds {
        // Alternate the order so no mode always runs first.
        let mut order = MODES;
        if round % 2 == 1 {
            order.reverse();
        }
        for (mode, _) in order.into_iter().filter(|(_, name)| chosen(name)) {
            set_mode(mode);
            // A database of its own per measurement (SQLite: a new file), so
            // no mode meets a table the rounds before it filled.
            ingest[usize::from(mode)].push(ingest_rate(&url(), requests).await);
            workers[usize::from(mode)].push(noop_rate(connect(&url(), 16).await, events).await);
        }
    }
    set_mode(IDLE);
    for (mode, name) in MODES {
        let listed = |rates: &[f64]| {
            rates
                .iter()
                .map(|rate| format!("{rate:.0}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let index = usize::from(mode);
        if !ingest[index].is_empty() {
            println!(
                "    {name}, each round: ingest {}; workers {}",
                listed(&ingest[index]),
                listed(&workers[index])
            );
        }
    }
    let ingest: Vec<f64> = ingest.iter_mut().map(|rates| median(rates)).collect();
    let workers: Vec<f64> = workers.iter_mut().map(|rates| median(rates)).collect();
    for (mode, name) in MODES {
        let index = usize::from(mode);
        println!(
            "13. otel {name}: ingest {:.0}/s ({:.3}x off), no-op workers (16) {:.0}/s ({:.3}x off)",
            ingest[index],
            ingest[index] / ingest[0],
            workers[index],
            workers[index] / workers[0],
        );
    }
    println!("    {rounds} alternating rounds, medians; {requests} deliveries, {events} events per round");
}
