//! Deliveries per second to one loopback payhook receiver: the emulator
//! (`payhook emulate`'s engine) beside `payhook send`, in the same run.
//!
//! ```text
//! cargo bench -p payhook-cli --bench emulate_throughput [-- EVENTS]
//! ```
//!
//! One axum receiver with payhook's `WebhookLayer` (in-memory dedupe store)
//! runs on its own runtime. Both senders make it do the same work: EVENTS
//! distinct events, each verified, claimed and handled once, at most 64 on the
//! wire at a time. `payhook send --distinct --repeat EVENTS --concurrency 64`
//! (the real binary) builds each event with a fresh id and signs it as it
//! sends it; the emulator (64 attempts on the wire at most) delivers EVENTS
//! payment intents created and succeeded in process, each signed at its
//! attempt. The receiver's handler counts the events it runs for, and each
//! round checks that it ran EVENTS times for each sender. The two alternate
//! for `ROUNDS` rounds and the best rate of each is kept (the machine may be
//! shared). Targets: the emulator ≥ 5 000 events/s and ≥ 0.8× `payhook send`'s
//! rate. The figures and their ratio are printed.

use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;
use payhook_core::{Event, Receiver};
use payhook_emulator::{Emulator, Limits};
use payhook_tower::axum::{Received, Webhook};
use payhook_tower::WebhookLayer;

const SEND_SECRET: &str = "whsec_bench_send_secret";
const CONCURRENCY: usize = 64;
const ROUNDS: usize = 3;

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; the first number given is the event count.
    let events: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000);
    let receiver_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("receiver runtime");
    let emulator_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("emulator runtime");

    let mut limits = Limits::default();
    limits.objects = events;
    limits.attempts = events;
    limits.pending_deliveries = events.saturating_mul(ROUNDS);
    let emulator = emulator_runtime
        .block_on(
            Emulator::builder()
                .max_concurrent_attempts(CONCURRENCY)
                .limits(limits)
                .start(),
        )
        .expect("emulator starts");

    let listener = receiver_runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind loopback");
    let url = format!("http://{}/webhooks", listener.local_addr().expect("addr"));
    let endpoint = emulator.register_endpoint(&url).expect("endpoint registered");
    let receiver = Receiver::builder()
        .secrets([SEND_SECRET, endpoint.secret.as_str()])
        .build()
        .expect("receiver");
    let handled = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&handled);
    let app = axum::Router::new()
        .route(
            "/webhooks",
            post(move |Webhook(_event): Webhook<Event>| async move {
                counter.fetch_add(1, Ordering::Relaxed);
                Received
            }),
        )
        .route_layer(WebhookLayer::new(receiver));
    receiver_runtime.spawn(async move { axum::serve(listener, app).await });

    let mut send_rate: f64 = 0.0;
    let mut emulator_rate: f64 = 0.0;
    for round in 1..=ROUNDS {
        // `payhook send`, the real binary, to the same receiver.
        let handled_before = handled.load(Ordering::Relaxed);
        let started = Instant::now();
        let send = Command::new(env!("CARGO_BIN_EXE_payhook"))
            .args(["send", "--to", &url, "--secret", SEND_SECRET, "--quiet"])
            .args([
                "--distinct",
                "--repeat",
                &events.to_string(),
                "--concurrency",
                &CONCURRENCY.to_string(),
            ])
            .stdout(Stdio::null())
            .status()
            .expect("payhook send runs");
        let send_elapsed = started.elapsed();
        assert!(send.success(), "payhook send failed: {send}");
        assert_eq!(
            handled.load(Ordering::Relaxed) - handled_before,
            events,
            "the handler ran once for each event payhook send sent"
        );
        let rate = events as f64 / send_elapsed.as_secs_f64();
        println!("round {round}: payhook send     {rate:>7.0} events/s");
        send_rate = send_rate.max(rate);

        // The emulator: EVENTS distinct events, created and succeeded in process.
        let handled_before = handled.load(Ordering::Relaxed);
        let before = emulator.stats();
        let started = Instant::now();
        emulator_runtime.block_on(async {
            for _ in 0..events {
                let intent = emulator.create_payment_intent(250_000, "btc").expect("created");
                emulator.succeed_payment_intent(&intent.id).expect("succeeded");
            }
            assert!(
                emulator.wait_idle(Duration::from_secs(600)).await,
                "deliveries finished"
            );
        });
        let emulator_elapsed = started.elapsed();
        let after = emulator.stats();
        assert_eq!(
            (
                after.acknowledged - before.acknowledged,
                after.attempts - before.attempts,
                after.dropped
            ),
            (events as u64, events as u64, 0),
            "every event acknowledged at its first attempt"
        );
        assert_eq!(
            handled.load(Ordering::Relaxed) - handled_before,
            events,
            "the handler ran once for each event the emulator delivered"
        );
        let rate = events as f64 / emulator_elapsed.as_secs_f64();
        println!("round {round}: payhook emulator {rate:>7.0} events/s");
        emulator_rate = emulator_rate.max(rate);
    }
    let ratio = emulator_rate / send_rate;

    println!(
        "events: {events} distinct per sender and round, concurrency {CONCURRENCY}, receiver: axum + payhook WebhookLayer on loopback"
    );
    println!(
        "best of {ROUNDS}: payhook send --distinct {send_rate:.0} events/s, emulator {emulator_rate:.0} events/s"
    );
    println!("ratio emulator / send: {ratio:.2}");
    let met = emulator_rate >= 5_000.0 && ratio >= 0.8;
    println!(
        "targets (>= 5000 events/s, >= 0.8x send): {}",
        if met { "met" } else { "NOT met" }
    );
    drop(emulator);
    if met {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
