//! A genuine Standard Webhooks `v1a` delivery's latency beside a flood of
//! `webhook-signature` headers stuffed with Ed25519 items, over loopback, to
//! an axum receiver with one public key (BENCHMARKS.md, "Signature flood").
//!
//! `cargo bench --bench signature_flood`. Each flood request carries 1 300
//! distinct `v1a` items (about 120 KiB, under actix-web's header limit), each
//! a real signature by a key the receiver does not hold; 8 connections send
//! them back to back. Beside them, one client sends 400 genuine deliveries
//! one after another and records each one's time to its `200`. The same is
//! run without the flood first, for the idle figures. The server has two
//! worker threads.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use payhook::sender::{generate_standard_keypair, unix_now, EventBuilder, StandardDelivery, StandardSigner};
use payhook::signature::StandardWebhooks;
use payhook::tower::axum::{Received, Webhook};
use payhook::tower::WebhookLayer;
use payhook::Receiver;

const FLOODERS: usize = 8;
const ITEMS: usize = 1300;
const GENUINE: usize = 400;

async fn post(client: &reqwest::Client, url: &str, delivery: &StandardDelivery) -> u16 {
    client
        .post(url)
        .header("content-type", "application/json")
        .headers(delivery.headers())
        .body(delivery.body.clone())
        .send()
        .await
        .map(|reply| reply.status().as_u16())
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

async fn genuine_latencies(url: &str, signing_key: &str) -> Vec<Duration> {
    let client = reqwest::Client::new();
    let body = EventBuilder::payment_intent_succeeded().to_standard_json();
    let mut latencies = Vec::with_capacity(GENUINE);
    for n in 0..GENUINE {
        let delivery =
            StandardDelivery::now(body.clone(), format!("msg_bench_{n}_{}", unix_now()), signing_key)
                .expect("signs");
        let started = Instant::now();
        assert_eq!(post(&client, url, &delivery).await, 200);
        latencies.push(started.elapsed());
    }
    latencies.sort();
    latencies
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let (signing_key, public_key) = generate_standard_keypair().expect("keys");
        let scheme = StandardWebhooks::builder().public_key(public_key).build().expect("scheme");
        let receiver = Receiver::builder().scheme(scheme).build().expect("receiver");
        let app = axum::Router::new()
            .route("/webhooks", axum::routing::post(|Webhook(_): Webhook| async { Received }))
            .route_layer(WebhookLayer::new(receiver));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/webhooks", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });

        let idle = genuine_latencies(&url, &signing_key).await;

        let body = EventBuilder::payment_intent_succeeded().to_standard_json();
        let (attacker, _) = generate_standard_keypair().expect("keys");
        let attacker = StandardSigner::new(&attacker).expect("signer");
        let t = unix_now();
        let items: Vec<String> = (0..ITEMS)
            .map(|n| attacker.sign(&format!("msg_flood_{n}"), t, body.as_bytes()))
            .collect();
        let flood = StandardDelivery {
            webhook_signature: items.join(" "),
            ..StandardDelivery::now(body, "msg_flood", &signing_key).expect("signs")
        };
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicUsize::new(0));
        let mut flooders = Vec::new();
        for _ in 0..FLOODERS {
            let (url, flood, stop, sent) = (url.clone(), flood.clone(), Arc::clone(&stop), Arc::clone(&sent));
            flooders.push(tokio::spawn(async move {
                let client = reqwest::Client::new();
                while !stop.load(Ordering::Relaxed) {
                    post(&client, &url, &flood).await;
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let started = Instant::now();
        let flooded = genuine_latencies(&url, &signing_key).await;
        let elapsed = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        for flooder in flooders {
            let _ = flooder.await;
        }
        let rate = sent.load(Ordering::Relaxed) as f64 / (elapsed.as_secs_f64() + 0.5);
        println!("genuine v1a delivery, {GENUINE} sequential, axum, 2 server threads");
        println!(
            "idle:   p50 {:?}  p99 {:?}",
            percentile(&idle, 0.5),
            percentile(&idle, 0.99)
        );
        println!(
            "flood:  p50 {:?}  p99 {:?}  ({FLOODERS} connections, {ITEMS} v1a items each, {rate:.0} flood requests/s)",
            percentile(&flooded, 0.5),
            percentile(&flooded, 0.99)
        );
    });
}
