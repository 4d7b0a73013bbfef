//! The emulator filled to its default limits with the largest objects it
//! accepts, and the process's memory measured against the documented bound.
//!
//! ```text
//! cargo bench -p payhook-cli --bench emulate_memory
//! ```
//!
//! Everything runs in this process (so its resident size is an upper bound
//! for the emulator's): the emulator with `Limits::default()`, one loopback
//! receiver answering every delivery `200` with 4 KiB of control characters
//! (so every attempt record keeps the longest reply excerpt), and a client
//! that fills every kind of kept state at its largest:
//!
//! * 100 webhook endpoints (the most), each with a 2 048-byte URL, 100
//!   `enabled_events` of up to 255 characters and a 5 000-character
//!   description of 4-byte characters; 20 of them enabled for every event;
//! * 3 000 payment intents (700 of them paid) of 41 metadata values of 500 control characters
//!   (the most a 64 KiB form body carries: about 21 KB kept, and an event body
//!   of about 130 KB once JSON escapes them), each created and paid with a
//!   255-character `Idempotency-Key`;
//! * every event delivered to 20 endpoints: more attempt records than the
//!   byte budget keeps, and more events than it keeps;
//! * 10 000 more keyed requests answered with an error, filling the
//!   idempotency keys.
//!
//! It prints the emulator's own estimate (`stats().stored_bytes` against
//! `Limits::stored_bytes`), the resident set now and at its peak (`VmRSS`,
//! `VmHWM` from `/proc/self/status`) against the documented 256 MiB, and
//! exits 1 if the peak is above it.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use axum::routing::post;
use payhook_emulator::{Emulator, Limits};

const BOUND_MIB: u64 = 256;
const INTENTS: usize = 3_000;
const PAID: usize = 700;
/// Endpoints enabled for every event (`*`); the others name 100 types that
/// are never emitted, so deliveries stay at a few gigabytes of loopback traffic.
const DELIVERING_ENDPOINTS: usize = 20;
const ERROR_KEYS: usize = 10_000;

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (before, _) = memory();
    let code = runtime.block_on(fill());
    drop(runtime);
    println!("resident before start: {:.1} MiB", mib(before));
    code
}

async fn fill() -> ExitCode {
    let emulator = Emulator::builder().start().await.expect("emulator starts");
    let limits = Limits::default();

    // The receiver: 200 and 4 KiB of control characters to every delivery.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let reply: &'static str = Box::leak("\u{1}".repeat(4096).into_boxed_str());
    let app = axum::Router::new().route("/webhooks", post(move || async move { reply }));
    tokio::spawn(async move { axum::serve(listener, app).await });

    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let base = emulator.base_url();
    let key = emulator.api_key().to_owned();
    let post = |path: &str, idempotency: Option<String>, content_type: &str, body: String| {
        let mut request = client
            .post(format!("{base}{path}"))
            .bearer_auth(&key)
            .header("content-type", content_type.to_owned())
            .body(body);
        if let Some(idempotency) = idempotency {
            request = request.header("idempotency-key", idempotency);
        }
        async move {
            let response = request.send().await.expect("the emulator answers");
            let status = response.status().as_u16();
            let text = response.text().await.expect("body");
            (status, text)
        }
    };
    let started = Instant::now();

    // The endpoints, each at its largest.
    let url = {
        let head = format!("http://{addr}/webhooks?pad=");
        format!("{head}{}", "a".repeat(2048 - head.len()))
    };
    let types: Vec<String> = (0..100).map(|i| format!("{i:03}{}", "t".repeat(252))).collect();
    let description = "\u{1d11e}".repeat(5000);
    for n in 0..limits.endpoints {
        let mut events = types.clone();
        if n < DELIVERING_ENDPOINTS {
            events[0] = "*".to_owned();
        }
        let body = serde_json::json!({ "url": url, "enabled_events": events, "description": description });
        let (status, text) = post(
            "/v1/webhook_endpoints",
            None,
            "application/json",
            body.to_string(),
        )
        .await;
        assert_eq!(status, 200, "{text}");
    }

    // The intents and their events.
    let mut intent_body = String::from("amount=1500000000000000000&currency=eth");
    for k in 0..41 {
        intent_body.push_str(&format!("&metadata[key{k:02}{}]=", "k".repeat(35)));
        intent_body.push_str(&"%01".repeat(500));
    }
    assert!(intent_body.len() <= limits.body_bytes, "{}", intent_body.len());
    let long_key = |tag: &str, n: usize| format!("{tag}{n:08}{}", "i".repeat(255 - 8 - tag.len()));
    for n in 0..INTENTS {
        let (status, text) = post(
            "/v1/payment_intents",
            Some(long_key("c", n)),
            "application/x-www-form-urlencoded",
            intent_body.clone(),
        )
        .await;
        assert_eq!(status, 200, "{}", &text[..text.len().min(300)]);
        if n >= INTENTS - PAID {
            let id = serde_json::from_str::<serde_json::Value>(&text).expect("JSON")["id"]
                .as_str()
                .expect("id")
                .to_owned();
            let (status, text) = post(
                &format!("/v1/test_helpers/payment_intents/{id}/succeed"),
                Some(long_key("p", n)),
                "application/x-www-form-urlencoded",
                String::new(),
            )
            .await;
            assert_eq!(status, 200, "{}", &text[..text.len().min(300)]);
        }
    }
    for n in 0..ERROR_KEYS {
        let (status, _) = post(
            "/v1/payment_intents",
            Some(long_key("e", n)),
            "application/x-www-form-urlencoded",
            "amount=0&currency=eth".to_owned(),
        )
        .await;
        assert_eq!(status, 400);
    }
    let idle = emulator.wait_idle(Duration::from_secs(600)).await;
    let elapsed = started.elapsed();
    let stats = emulator.stats();
    let attempts = emulator.attempts();
    let excerpt = attempts
        .last()
        .and_then(|a| a.response_body.as_ref())
        .map_or(0, String::len);
    let (rss, peak) = memory();

    println!(
        "filled in {:.1} s (deliveries idle: {idle})",
        elapsed.as_secs_f64()
    );
    println!(
        "kept: {} events ({} evicted), {} intents evicted, {} attempt records ({} evicted, \
         excerpts of {excerpt} bytes), {} attempts made, {} deliveries dropped, {} abandoned",
        emulator.events().len(),
        stats.events_evicted,
        stats.intents_evicted,
        attempts.len(),
        stats.attempts_evicted,
        stats.attempts,
        stats.dropped,
        stats.abandoned,
    );
    println!(
        "emulator estimate: stored {:.1} MiB of the {:.0} MiB budget; worst case {:.1} MiB",
        mib(stats.stored_bytes),
        mib(limits.stored_bytes as u64),
        mib(stats.worst_case_bytes)
    );
    println!(
        "process resident: {:.1} MiB now, {:.1} MiB at peak; documented bound {BOUND_MIB} MiB",
        mib(rss),
        mib(peak)
    );
    emulator.shutdown().await;
    if peak > BOUND_MIB * 1024 * 1024 {
        println!("FAIL: the peak is above the bound");
        return ExitCode::FAILURE;
    }
    println!("ok: within the bound");
    ExitCode::SUCCESS
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// `VmRSS` and `VmHWM` in bytes (0 where `/proc` is not there).
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
