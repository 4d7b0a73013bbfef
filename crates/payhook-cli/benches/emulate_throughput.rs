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
//! round checks that it ran EVENTS times for each sender. The two run back to
//! back for `ROUNDS` rounds, taking turns to go first, and each round's ratio
//! is taken. Targets: the emulator's best rate ≥ 5 000 events/s, and the
//! median of the rounds' ratios ≥ 0.8. The median of paired rounds, not the
//! ratio of the two best rates: on a shared machine one sender's best round
//! can fall in a quiet moment the other never gets (both are printed).

use std::process::{Command, ExitCode};
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
const ROUNDS: usize = 5;

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; the first number given is the event count.
    let events: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000);
    // Named threads, so a profile can tell the receiver's CPU time from the
    // emulator's (and both from `payhook send`'s, a separate process).
    let receiver_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bench-receiver")
        .enable_all()
        .build()
        .expect("receiver runtime");
    let emulator_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bench-emulator")
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

    // `payhook send`, the real binary, to the same receiver.
    let run_send = || {
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
            .output()
            .expect("payhook send runs");
        let elapsed = started.elapsed();
        // With --quiet the output is the unexpected replies and the summary.
        assert!(
            send.status.success(),
            "payhook send failed ({}):\n{}{}",
            send.status,
            String::from_utf8_lossy(&send.stdout),
            String::from_utf8_lossy(&send.stderr)
        );
        assert_eq!(
            handled.load(Ordering::Relaxed) - handled_before,
            events,
            "the handler ran once for each event payhook send sent"
        );
        events as f64 / elapsed.as_secs_f64()
    };
    // The emulator: EVENTS distinct events, created and succeeded in process.
    let run_emulator = || {
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
        let elapsed = started.elapsed();
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
        events as f64 / elapsed.as_secs_f64()
    };

    let mut send_rate: f64 = 0.0;
    let mut emulator_rate: f64 = 0.0;
    let mut round_ratios = Vec::with_capacity(ROUNDS);
    for round in 1..=ROUNDS {
        // Each goes first in every other round, so neither always meets the
        // receiver's (or the machine's) state the other left behind.
        let (send, emulated) = if round % 2 == 1 {
            let send = run_send();
            (send, run_emulator())
        } else {
            let emulated = run_emulator();
            (run_send(), emulated)
        };
        println!(
            "round {round}: payhook send --distinct {send:>7.0} events/s, emulator {emulated:>7.0} events/s, ratio {:.2}",
            emulated / send
        );
        round_ratios.push(emulated / send);
        send_rate = send_rate.max(send);
        emulator_rate = emulator_rate.max(emulated);
    }
    round_ratios.sort_by(f64::total_cmp);
    let median_ratio = round_ratios[round_ratios.len() / 2];
    let ratio = emulator_rate / send_rate;

    println!(
        "events: {events} distinct per sender and round, concurrency {CONCURRENCY}, receiver: axum + payhook WebhookLayer on loopback"
    );
    println!(
        "best of {ROUNDS}: payhook send --distinct {send_rate:.0} events/s, emulator {emulator_rate:.0} events/s"
    );
    println!(
        "ratio emulator / send (best rates): {ratio:.2}; median of the rounds' ratios: {median_ratio:.2}"
    );
    let met = emulator_rate >= 5_000.0 && median_ratio >= 0.8;
    println!(
        "targets (best >= 5000 events/s, median ratio >= 0.8x send): {}",
        if met { "met" } else { "NOT met" }
    );
    drop(emulator);
    if met {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
