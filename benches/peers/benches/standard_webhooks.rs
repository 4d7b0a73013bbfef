//! Standard Webhooks verification (BENCHMARKS.md, section 6), each
//! beside what it is measured against, in one run:
//!
//! * `sw_v1/{1KiB,16KiB,1MiB}`: payhook's `StandardWebhooks::verify_headers`
//!   (headers read, base64 decoded, HMAC-SHA256, constant-time compare,
//!   timestamp checked against the system clock) beside a raw HMAC-SHA256 of
//!   the same signed content `{id}.{timestamp}.{body}` keyed per call with
//!   `hmac` + `sha2`, and beside the `standardwebhooks` and `svix` crates'
//!   `Webhook::verify` of the same deliveries (both also read the system
//!   clock).
//! * `sw_v1a/1KiB`: payhook's `v1a` verification beside a bare
//!   `ed25519-dalek` `verify` (and `verify_strict`, which payhook uses) of the
//!   same message, assembled beforehand.
//!
//! Run with `cargo bench --manifest-path benches/peers/Cargo.toml`. The
//! deliveries are signed when each group starts, so the timestamp checks pass.

use std::hint::black_box;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ed25519_dalek::{Signer as _, SigningKey, Verifier as _};
use hmac::{Hmac, Mac};
use payhook_core::sender::StandardDelivery;
use payhook_core::signature::StandardWebhooks;
use sha2::Sha256;

const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
/// 32 key bytes, base64 after the prefix.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYo=";
const MSG_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// JSON-shaped filler of exactly `len` bytes (nobody parses it; valid UTF-8,
/// which the peer crates require).
fn body(len: usize) -> Vec<u8> {
    let mut body = br#"{"type":"bench.opaque","timestamp":"2026-11-25T21:00:00Z","data":{"blob":""#.to_vec();
    let tail = br#""}}"#;
    let pattern = b"0123456789abcdefghijklmnopqrstuvwxyz";
    while body.len() + tail.len() < len {
        body.push(pattern[body.len() % pattern.len()]);
    }
    body.extend_from_slice(tail);
    body
}

fn headers(delivery: &StandardDelivery) -> http::HeaderMap {
    delivery.headers()
}

/// What a receiver written by hand computes for `v1`: the key schedule derived
/// on every call, the signed content fed in its three parts.
fn raw_hmac(key: &[u8], id: &[u8], t: &[u8], body: &[u8]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(id);
    mac.update(b".");
    mac.update(t);
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

fn v1(c: &mut Criterion) {
    let key = BASE64.decode(&SECRET["whsec_".len()..]).expect("base64 secret");
    let payhook = StandardWebhooks::builder()
        .secret(SECRET)
        .build()
        .expect("valid secret");
    let standardwebhooks = standardwebhooks::Webhook::new(SECRET).expect("valid secret");
    let svix = svix::webhooks::Webhook::new(SECRET).expect("valid secret");
    let mut group = c.benchmark_group("sw_v1");
    for (name, len) in [("1KiB", 1024), ("16KiB", 16 * 1024), ("1MiB", 1024 * 1024)] {
        let delivery = StandardDelivery::at(body(len), MSG_ID, SECRET, unix_now()).expect("signs");
        let headers = headers(&delivery);
        let t = delivery.webhook_timestamp.to_string();
        assert!(payhook.verify_headers(&headers, &delivery.body).is_ok());
        assert!(standardwebhooks.verify(&delivery.body, &headers).is_ok());
        assert!(svix.verify(&delivery.body, &headers).is_ok());
        let expected = BASE64
            .decode(&delivery.webhook_signature["v1,".len()..])
            .expect("base64 signature");
        assert_eq!(
            raw_hmac(&key, MSG_ID.as_bytes(), t.as_bytes(), &delivery.body)[..],
            expected[..]
        );

        group.throughput(Throughput::Bytes(len as u64));
        group.bench_function(BenchmarkId::new("payhook", name), |b| {
            b.iter(|| payhook.verify_headers(black_box(&headers), black_box(&delivery.body)))
        });
        group.bench_function(BenchmarkId::new("raw_hmac_sha256", name), |b| {
            b.iter(|| {
                raw_hmac(
                    black_box(&key),
                    black_box(MSG_ID.as_bytes()),
                    black_box(t.as_bytes()),
                    black_box(&delivery.body),
                )
            })
        });
        group.bench_function(BenchmarkId::new("standardwebhooks", name), |b| {
            b.iter(|| standardwebhooks.verify(black_box(&delivery.body), black_box(&headers)))
        });
        group.bench_function(BenchmarkId::new("svix", name), |b| {
            b.iter(|| svix.verify(black_box(&delivery.body), black_box(&headers)))
        });
    }
    group.finish();
}

fn v1a(c: &mut Criterion) {
    let signing = SigningKey::from_bytes(&[7; 32]);
    let whsk = format!("whsk_{}", BASE64.encode(signing.to_bytes()));
    let whpk = format!("whpk_{}", BASE64.encode(signing.verifying_key().to_bytes()));
    let payhook = StandardWebhooks::builder()
        .public_key(whpk)
        .build()
        .expect("valid public key");
    let mut group = c.benchmark_group("sw_v1a");
    let len = 1024;
    let delivery = StandardDelivery::at(body(len), MSG_ID, &whsk, unix_now()).expect("signs");
    let headers = headers(&delivery);
    assert!(payhook.verify_headers(&headers, &delivery.body).is_ok());
    let message = [
        MSG_ID.as_bytes(),
        b".",
        delivery.webhook_timestamp.to_string().as_bytes(),
        b".",
        &delivery.body,
    ]
    .concat();
    let signature = ed25519_dalek::Signature::from_bytes(
        &BASE64
            .decode(&delivery.webhook_signature["v1a,".len()..])
            .expect("base64 signature")
            .try_into()
            .expect("64 bytes"),
    );
    let public = signing.verifying_key();
    assert!(public.verify(&message, &signature).is_ok());
    assert_eq!(signing.sign(&message), signature, "Ed25519 is deterministic");

    group.throughput(Throughput::Bytes(len as u64));
    group.bench_function(BenchmarkId::new("payhook", "1KiB"), |b| {
        b.iter(|| payhook.verify_headers(black_box(&headers), black_box(&delivery.body)))
    });
    group.bench_function(BenchmarkId::new("ed25519_dalek_verify", "1KiB"), |b| {
        b.iter(|| public.verify(black_box(&message), black_box(&signature)))
    });
    group.bench_function(BenchmarkId::new("ed25519_dalek_verify_strict", "1KiB"), |b| {
        b.iter(|| public.verify_strict(black_box(&message), black_box(&signature)))
    });
    group.finish();
}

criterion_group!(benches, v1, v1a);
criterion_main!(benches);
