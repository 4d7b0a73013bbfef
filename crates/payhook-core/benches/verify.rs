//! Verification, parsing and the whole pipeline, each beside the code a
//! hand-written receiver would run for the same bytes.
//!
//! Groups (run with `cargo bench -p payhook-core --bench verify`):
//!
//! * `verify/{1KiB,16KiB,1MiB}`: `Verifier::verify_value` (header parse, HMAC,
//!   constant-time compare) against a bare HMAC-SHA256 of `{t}.{body}` keyed per
//!   call with `hmac` + `sha2`.
//! * `verify_secrets/{raw_hmac,payhook}/{1,3}`: a 1 KiB delivery against a
//!   verifier holding one secret and three (the delivery signed with the
//!   last), beside that many bare HMACs.
//! * `verify_parse/1KiB_{4,16}_metadata`: `Receiver::check` (verify + typed `Event`) on a realistic
//!   payment event against HMAC + `serde_json::from_slice::<Value>`.
//! * `verify_parse_order/{type_first,data_first,raw_hmac_serde_value}/{1KiB,16KiB,1MiB}`:
//!   `Receiver::check` on a payment event with `type` before `data` and with
//!   `type` after `data` (the order of the service's sibling format), against
//!   HMAC + `serde_json::from_slice::<Value>` of the same body. Past 1 KiB the
//!   event grows by a list of on-chain transfers inside the payment intent, a
//!   field payhook does not type (forward compatibility), as a sender adding
//!   fields would make it.
//! * `hex_compare/{subtle_slice,word_fold}`: the constant-time comparison of the
//!   64 expected hex digits with a candidate: `subtle`'s slice `ct_eq` against the
//!   word-folding comparison `signature.rs` uses (copied here, as it is private).
//! * `pipeline/1KiB`: verify + parse against the full `receive` → `complete` round
//!   with the in-memory store, every delivery a new event id.

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hmac::{Hmac, Mac};
use payhook_core::adapter::ReceiveOutcome;
use payhook_core::sender::EventBuilder;
use payhook_core::{sign, DynStore, FixedClock, MemoryStore, Receiver, Secret, Verifier};
use sha2::Sha256;

const SECRET: &str = "whsec_5f0c1d8e2b7a4c9d3e6f8a1b2c4d6e8f";
const T: u64 = 1_732_264_800;

/// What a receiver written by hand computes: the key schedule is derived on
/// every call from the secret bytes, as `Hmac::new_from_slice` does.
fn raw_hmac(secret: &[u8], t: &[u8], body: &[u8]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(t);
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

fn verifier() -> Verifier {
    Verifier::builder()
        .secret(SECRET)
        .clock(FixedClock::new(T as i64))
        .build()
        .expect("valid verifier")
}

/// JSON-shaped filler of exactly `len` bytes (the verifier does not parse it).
fn opaque_body(len: usize) -> Vec<u8> {
    let mut body = br#"{"id":"evt_bench","type":"bench.opaque","data":{"blob":""#.to_vec();
    let tail = br#""}}"#;
    let pattern = b"0123456789abcdefghijklmnopqrstuvwxyz";
    while body.len() + tail.len() < len {
        body.push(pattern[body.len() % pattern.len()]);
    }
    body.extend_from_slice(tail);
    body
}

/// Metadata an integrator typically attaches to a payment, most telling first.
const METADATA: [(&str, &str); 16] = [
    ("order_id", "ord_8f3a2c91d4e7"),
    ("customer_id", "cus_Q2x9LmN4pR7s"),
    ("customer_email", "alice.nakamoto@example.com"),
    ("invoice", "INV-2024-000871"),
    ("plan", "pro-annual"),
    ("wallet_address", "0x52908400098527886E0F7030069857D2E4169EE7"),
    ("network", "ethereum-mainnet"),
    ("confirmations", "12"),
    (
        "tx_hash",
        "0x9fc76417374aa880d4449a1f7f31ec597f00b1f6f3dd2d66f4c9c6c445836d8b",
    ),
    ("ip_country", "DE"),
    ("utm_source", "newsletter-2024-11"),
    ("shipping_city", "Berlin"),
    ("shipping_postcode", "10115"),
    ("gift", "true"),
    ("gift_note", "Happy birthday!"),
    ("coupon", "WINTER24"),
];

/// A `payment_intent.succeeded` event of about 1 KiB (the size of a real
/// delivery) with the first `metadata` entries of [`METADATA`]; the
/// description is lengthened to make up the size.
fn event_with_metadata(id: &str, metadata: usize) -> String {
    let mut builder = EventBuilder::payment_intent_succeeded()
        .id(id)
        .created(T)
        .payment_intent_id("pi_3PqX7bLkdIwHu7ix0B9cQmZr")
        .amount(1_500_000_000_000_000_000)
        .currency("eth");
    for (key, value) in &METADATA[..metadata] {
        builder = builder.metadata(key, value);
    }
    let mut description = String::from("Order #100234 — 2 × Annual subscription (Pro plan)");
    while builder.clone().description(Some(&description)).to_json().len() < 1000 {
        description.push_str(", priority support add-on");
    }
    builder.description(Some(&description)).to_json()
}

/// The event the pipeline groups use: 16 metadata entries, the most the
/// typed parser has to build strings for in these benchmarks.
pub fn realistic_event(id: &str) -> String {
    event_with_metadata(id, 16)
}

fn signed_headers(body: &[u8]) -> http::HeaderMap {
    let secret = Secret::new(SECRET).expect("non-empty secret");
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "x-service-signature",
        sign(body, &secret, T).parse().expect("ASCII header value"),
    );
    headers.insert("content-type", http::HeaderValue::from_static("application/json"));
    headers
}

/// Polls a future that an in-memory store finishes at once.
fn now<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the in-memory pipeline never waits"),
    }
}

fn bench_verify(c: &mut Criterion) {
    #[cfg(target_arch = "x86_64")]
    println!(
        "CPU SHA extensions (sha_ni) detected: {} (sha2 picks its SHA-NI backend at run time when they are)",
        std::arch::is_x86_feature_detected!("sha")
    );
    let verifier = verifier();
    let secret = Secret::new(SECRET).expect("non-empty secret");
    let mut group = c.benchmark_group("verify");
    for (label, len) in [("1KiB", 1024), ("16KiB", 16 * 1024), ("1MiB", 1024 * 1024)] {
        let body = opaque_body(len);
        let header = sign(&body, &secret, T);
        group.throughput(Throughput::Bytes(len as u64));
        group.bench_with_input(BenchmarkId::new("raw_hmac", label), &body, |b, body| {
            b.iter(|| {
                raw_hmac(
                    black_box(SECRET.as_bytes()),
                    black_box(b"1732264800"),
                    black_box(body),
                )
            })
        });
        group.bench_with_input(BenchmarkId::new("payhook", label), &body, |b, body| {
            b.iter(|| {
                verifier
                    .verify_value(black_box(header.as_bytes()), black_box(body))
                    .expect("genuine delivery")
            })
        });
    }
    group.finish();
}

/// The secrets of `verify_secrets`: the delivery is signed with the last, so
/// it matches after every HMAC (payhook computes them all in any case).
const SECRETS: [&str; 3] = [
    "whsec_0a1b2c3d4e5f60718293a4b5c6d7e8f9",
    "whsec_f9e8d7c6b5a4938271605f4e3d2c1b0a",
    SECRET,
];

fn bench_verify_secrets(c: &mut Criterion) {
    let secret = Secret::new(SECRET).expect("non-empty secret");
    let body = opaque_body(1024);
    let header = sign(&body, &secret, T);
    let mut group = c.benchmark_group("verify_secrets");
    group.throughput(Throughput::Bytes(1024));
    for count in [1, 3] {
        let secrets = &SECRETS[SECRETS.len() - count..];
        group.bench_function(BenchmarkId::new("raw_hmac", count), |b| {
            b.iter(|| {
                for secret in secrets {
                    black_box(raw_hmac(
                        black_box(secret.as_bytes()),
                        black_box(b"1732264800"),
                        black_box(&body),
                    ));
                }
            })
        });
        let verifier = Verifier::builder()
            .secrets(secrets)
            .clock(FixedClock::new(T as i64))
            .build()
            .expect("valid verifier");
        group.bench_function(BenchmarkId::new("payhook", count), |b| {
            b.iter(|| {
                verifier
                    .verify_value(black_box(header.as_bytes()), black_box(&body))
                    .expect("genuine delivery")
            })
        });
    }
    group.finish();
}

fn bench_verify_parse(c: &mut Criterion) {
    let receiver = Receiver::builder()
        .secret(SECRET)
        .clock(FixedClock::new(T as i64))
        .build()
        .expect("valid receiver");
    let mut group = c.benchmark_group("verify_parse");
    // Metadata strings are built by both parsers, so how many there are moves
    // the ratio: 4 entries and 16 entries, both about 1 KiB.
    for metadata in [4, 16] {
        let body = event_with_metadata("evt_1PqX7bLkdIwHu7ixQ2cVbN0k", metadata);
        let headers = signed_headers(body.as_bytes());
        let label = format!("1KiB_{metadata}_metadata");
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(BenchmarkId::new("raw_hmac_serde_value", &label), |b| {
            b.iter(|| {
                let mac = raw_hmac(SECRET.as_bytes(), b"1732264800", black_box(body.as_bytes()));
                let value: serde_json::Value =
                    serde_json::from_slice(black_box(body.as_bytes())).expect("valid JSON");
                (mac, value)
            })
        });
        group.bench_function(BenchmarkId::new("payhook_check", &label), |b| {
            b.iter(|| {
                receiver
                    .check(black_box(&headers), black_box(body.as_bytes()))
                    .expect("genuine delivery")
            })
        });
    }
    group.finish();
}

/// A payment event of about `len` bytes, with `type` before or after `data`.
fn sized_event(len: usize, data_first: bool) -> String {
    let mut body = realistic_event("evt_1PqX7bLkdIwHu7ixQ2cVbN0k");
    if len > body.len() {
        let mut transfers = String::from(r#""transfers":["#);
        let mut i = 0u64;
        while body.len() + transfers.len() + 1 < len {
            if i > 0 {
                transfers.push(',');
            }
            transfers.push_str(&format!(
                r#"{{"tx_hash":"0x{i:064x}","confirmations":{},"amount":"{}","network":"ethereum-mainnet"}}"#,
                12 + i % 7,
                1_000_000_000_000_000 + i
            ));
            i += 1;
        }
        transfers.push_str("],");
        body = body.replacen(r#""metadata":{"#, &format!(r#"{transfers}"metadata":{{"#), 1);
    }
    let type_item = r#""type":"payment_intent.succeeded","#;
    assert!(body.contains(type_item), "the builder writes type before data");
    if data_first {
        body = body.replacen(type_item, "", 1);
        body.truncate(body.len() - 1);
        body.push_str(r#","type":"payment_intent.succeeded"}"#);
    }
    body
}

fn bench_verify_parse_order(c: &mut Criterion) {
    let receiver = Receiver::builder()
        .secret(SECRET)
        .clock(FixedClock::new(T as i64))
        .body_limit(2 * 1024 * 1024)
        .build()
        .expect("valid receiver");
    let mut group = c.benchmark_group("verify_parse_order");
    for (label, len) in [("1KiB", 1024), ("16KiB", 16 * 1024), ("1MiB", 1024 * 1024)] {
        let type_first = sized_event(len, false);
        let data_first = sized_event(len, true);
        assert_eq!(type_first.len(), data_first.len());
        group.throughput(Throughput::Bytes(type_first.len() as u64));
        group.bench_function(BenchmarkId::new("raw_hmac_serde_value", label), |b| {
            b.iter(|| {
                let body = black_box(type_first.as_bytes());
                let mac = raw_hmac(SECRET.as_bytes(), b"1732264800", body);
                let value: serde_json::Value = serde_json::from_slice(body).expect("valid JSON");
                (mac, value)
            })
        });
        for (order, body) in [("type_first", &type_first), ("data_first", &data_first)] {
            let headers = signed_headers(body.as_bytes());
            let event = receiver
                .check(&headers, body.as_bytes())
                .expect("genuine delivery");
            assert_eq!(event.payment_intent().map(|pi| pi.metadata.len()), Some(16));
            group.bench_function(BenchmarkId::new(order, label), |b| {
                b.iter(|| {
                    receiver
                        .check(black_box(&headers), black_box(body.as_bytes()))
                        .expect("genuine delivery")
                })
            });
        }
    }
    group.finish();
}

/// The comparison in `signature.rs` (`hex_ct_eq`), copied: eight 8-byte words
/// folded into one difference, one `subtle` call for the result.
fn word_fold_ct_eq(expected: &[u8; 64], candidate: &[u8]) -> subtle::Choice {
    use subtle::ConstantTimeEq;
    if candidate.len() != expected.len() {
        return subtle::Choice::from(0);
    }
    let mut diff = 0u64;
    for (a, b) in expected.chunks_exact(8).zip(candidate.chunks_exact(8)) {
        let mut wa = [0u8; 8];
        let mut wb = [0u8; 8];
        wa.copy_from_slice(a);
        wb.copy_from_slice(b);
        diff |= u64::from_ne_bytes(wa) ^ u64::from_ne_bytes(wb);
    }
    diff.ct_eq(&0)
}

fn bench_hex_compare(c: &mut Criterion) {
    use subtle::ConstantTimeEq;
    let expected: [u8; 64] = *b"47e6632c169b959135c86d19df2cb565cdbea26c53beb45123d38a1437d37287";
    let mut candidate = expected;
    candidate[63] = b'8';
    let mut group = c.benchmark_group("hex_compare");
    group.bench_function("subtle_slice", |b| {
        b.iter(|| black_box(&expected[..]).ct_eq(black_box(&candidate[..])))
    });
    group.bench_function("word_fold", |b| {
        b.iter(|| word_fold_ct_eq(black_box(&expected), black_box(&candidate[..])))
    });
    group.finish();
}

/// Pre-signed deliveries, each with its own event id.
struct Pool {
    deliveries: Vec<(http::HeaderMap, Bytes)>,
}

impl Pool {
    fn new(size: usize) -> Self {
        let deliveries = (0..size)
            .map(|i| {
                let body = realistic_event(&format!("evt_1PqX7bLkdIwHu7ix{i:010}"));
                (signed_headers(body.as_bytes()), Bytes::from(body))
            })
            .collect();
        Self { deliveries }
    }
}

fn bench_pipeline(c: &mut Criterion) {
    const POOL: usize = 20_000;
    let pool = Pool::new(POOL);
    // One store for the whole run, as in a long-lived process: each pass over the
    // pool uses a new namespace, so every delivery is a new id for the store and
    // the store fills up to its capacity like a real one.
    let store: Arc<dyn DynStore> = Arc::new(MemoryStore::new());
    let receiver_for = |pass: usize| {
        Receiver::builder()
            .secret(SECRET)
            .clock(FixedClock::new(T as i64))
            .shared_store(Arc::clone(&store))
            .namespace(format!("bench{pass}"))
            .build()
            .expect("valid receiver")
    };
    let check_receiver = receiver_for(0);
    let mut group = c.benchmark_group("pipeline");
    group.throughput(Throughput::Elements(1));

    let mut cursor = 0;
    group.bench_function(BenchmarkId::new("verify_parse", "1KiB"), |b| {
        b.iter(|| {
            let (headers, body) = &pool.deliveries[cursor % POOL];
            cursor += 1;
            check_receiver
                .check(black_box(headers), black_box(body))
                .expect("genuine delivery")
        })
    });

    let mut pass = 0;
    let mut cursor = 0;
    let mut receiver = receiver_for(pass);
    group.bench_function(BenchmarkId::new("receive_complete", "1KiB"), |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                if cursor == POOL {
                    pass += 1;
                    cursor = 0;
                    receiver = receiver_for(pass);
                }
                let run = left.min((POOL - cursor) as u64) as usize;
                let started = Instant::now();
                for (headers, body) in &pool.deliveries[cursor..cursor + run] {
                    match now(receiver.receive(black_box(headers), body.clone())) {
                        ReceiveOutcome::Deliver(delivery) => {
                            now(delivery.into_claim().settle(http::StatusCode::OK));
                        }
                        ReceiveOutcome::Respond(reply) => panic!("not delivered: {}", reply.body()),
                    }
                }
                elapsed += started.elapsed();
                cursor += run;
                left -= run as u64;
            }
            elapsed
        })
    });

    // The same inside a tokio runtime, as under axum or actix-web: each claim then
    // also starts (and its settle stops) the task that renews its lease.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    group.bench_function(BenchmarkId::new("receive_complete_in_runtime", "1KiB"), |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut elapsed = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    if cursor == POOL {
                        pass += 1;
                        cursor = 0;
                        receiver = receiver_for(pass);
                    }
                    let run = left.min((POOL - cursor) as u64) as usize;
                    let started = Instant::now();
                    for (headers, body) in &pool.deliveries[cursor..cursor + run] {
                        match receiver.receive(black_box(headers), body.clone()).await {
                            ReceiveOutcome::Deliver(delivery) => {
                                delivery.into_claim().settle(http::StatusCode::OK).await;
                            }
                            ReceiveOutcome::Respond(reply) => panic!("not delivered: {}", reply.body()),
                        }
                    }
                    elapsed += started.elapsed();
                    cursor += run;
                    left -= run as u64;
                }
                elapsed
            })
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    bench_verify,
    bench_verify_secrets,
    bench_verify_parse,
    bench_verify_parse_order,
    bench_hex_compare,
    bench_pipeline
);
criterion_main!(benches);
