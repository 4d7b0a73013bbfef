//! What the `Webhook` extractor costs inside actix-web, beside a hand-written
//! handler doing the same checks.
//!
//! Run with `cargo bench -p payhook-actix --bench extract`. Every case sends a
//! realistic ~600-byte `payment_intent.succeeded` delivery through
//! `actix_web::test::call_service` (the whole app, no socket), a new event id
//! each time; building and signing the request is outside the timing.
//!
//! * `actix/bytes_only`: a handler taking `web::Bytes` and answering 200 — what
//!   actix-web itself costs for the request, the floor;
//! * `actix/hand_written`: `web::Bytes` + HMAC-SHA256 of `{t}.{body}` compared
//!   with the header's `v1` + `serde_json::Value` parse, no dedupe — a typical
//!   receiver written by hand;
//! * `actix/webhook`: `Webhook` + `ack`: limited read, verify, typed parse,
//!   claim and complete in the in-memory store.

use std::hint::black_box;

use actix_web::{test, web, App, HttpRequest, HttpResponse};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use hmac::{Hmac, Mac};
use payhook_actix::testing::SignedDeliveryExt;
use payhook_actix::{Webhook, WebhookConfig};
use payhook_core::sender::{EventBuilder, SignedDelivery};
use payhook_core::{FixedClock, Receiver};
use sha2::Sha256;

const SECRET: &str = "whsec_5f0c1d8e2b7a4c9d3e6f8a1b2c4d6e8f";
const T: u64 = 1_732_264_800;

fn delivery() -> SignedDelivery {
    let event = EventBuilder::payment_intent_succeeded()
        .created(T)
        .metadata("order_id", "ord_8c1f2a");
    SignedDelivery::at(event.to_json(), SECRET, T).expect("non-empty secret")
}

async fn bytes_only(body: web::Bytes) -> HttpResponse {
    black_box(&body);
    HttpResponse::Ok()
        .content_type("application/json")
        .body(r#"{"received":true}"#)
}

async fn hand_written(req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let Some(header) = req
        .headers()
        .get("x-service-signature")
        .and_then(|v| v.to_str().ok())
    else {
        return HttpResponse::BadRequest().finish();
    };
    let (mut t, mut v1) = (None, None);
    for item in header.split(',') {
        match item.split_once('=') {
            Some(("t", value)) => t = Some(value),
            Some(("v1", value)) => v1 = Some(value),
            _ => {}
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else {
        return HttpResponse::BadRequest().finish();
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).expect("any key length");
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(&body);
    let Ok(expected) = hex_decode(v1) else {
        return HttpResponse::BadRequest().finish();
    };
    if mac.verify_slice(&expected).is_err() {
        return HttpResponse::BadRequest().finish();
    }
    match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(event) => {
            black_box(&event);
            HttpResponse::Ok()
                .content_type("application/json")
                .body(r#"{"received":true}"#)
        }
        Err(_) => HttpResponse::BadRequest().finish(),
    }
}

fn hex_decode(hex: &str) -> Result<Vec<u8>, ()> {
    if hex.len() % 2 != 0 {
        return Err(());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2).ok_or(())?, 16).map_err(|_| ()))
        .collect()
}

async fn webhook(webhook: Webhook) -> HttpResponse {
    black_box(webhook.kind());
    webhook.ack().await
}

fn bench(c: &mut Criterion) {
    let system = actix_web::rt::System::new();
    let config = WebhookConfig::new(
        Receiver::builder()
            .secret(SECRET)
            .clock(FixedClock::new(T as i64))
            .build()
            .expect("valid receiver"),
    );
    let app = system.block_on(test::init_service(
        App::new()
            .app_data(config)
            .route("/bytes_only", web::post().to(bytes_only))
            .route("/hand_written", web::post().to(hand_written))
            .route("/webhook", web::post().to(webhook)),
    ));

    let mut group = c.benchmark_group("actix");
    for path in ["/bytes_only", "/hand_written", "/webhook"] {
        group.bench_function(&path[1..], |b| {
            b.iter_batched(
                || delivery().to_test_request(path).to_request(),
                |request| {
                    let response = system.block_on(test::call_service(&app, request));
                    assert_eq!(response.status(), 200);
                    response
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
