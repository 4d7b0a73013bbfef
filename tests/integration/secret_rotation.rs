//! Secrets replaced under a running receiver ([`SecretSet`]), on real servers
//! over loopback: both adapters, inline and in inbox mode, with the service's
//! secrets and with Standard Webhooks `whsec_` secrets and `whpk_` keys. A
//! roll is played through: the old key alone, old and new, the new alone;
//! each step's deliveries get `200` or `400` by the set in force, with no
//! restart.
//!
//! And a set swapped thousands of times while deliveries are verified on
//! other threads: a delivery signed with a key every set holds is never
//! refused, so a verification never meets an empty or half-made set.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_web::{web, App, HttpResponse};
use axum::routing::post;
use payhook::inbox::{Inbox, Job, Workers};
use payhook::sender::{
    generate_standard_keypair, generate_standard_secret, unique_message_id, EventBuilder, SignedDelivery,
    StandardDelivery,
};
use payhook::signature::StandardWebhooks;
use payhook::tower::axum::{Received, Webhook};
use payhook::tower::WebhookLayer;
use payhook::{Event, Receiver, SecretSet, Verifier};

use crate::{actix_loopback, axum_loopback};

/// The schemes and kinds of key a set holds.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// The service's `whsec_` secrets, `x-service-signature`.
    Service,
    /// Standard Webhooks `whsec_` secrets (`v1`).
    StandardSecret,
    /// Standard Webhooks `whpk_` public keys (`v1a`), signed with `whsk_` keys.
    StandardPublicKey,
}

const KINDS: [Kind; 3] = [Kind::Service, Kind::StandardSecret, Kind::StandardPublicKey];

/// One key: what signs a delivery, and the line the receiver's set holds.
struct Key {
    signing: String,
    line: String,
}

impl Key {
    fn new(kind: Kind, n: usize) -> Self {
        match kind {
            Kind::Service => {
                let secret = format!("whsec_rotation_{n}_{}", payhook_test_support::unique("k"));
                Self {
                    signing: secret.clone(),
                    line: secret,
                }
            }
            Kind::StandardSecret => {
                let secret = generate_standard_secret().unwrap();
                Self {
                    signing: secret.clone(),
                    line: secret,
                }
            }
            Kind::StandardPublicKey => {
                let (signing, public) = generate_standard_keypair().unwrap();
                Self {
                    signing,
                    line: public,
                }
            }
        }
    }
}

/// A receiver verifying with a set of `kind` holding `keys`, and the set.
fn receiver(kind: Kind, keys: &[&Key]) -> (Receiver, SecretSet) {
    let lines = keys.iter().map(|key| key.line.as_str());
    match kind {
        Kind::Service => {
            let set = SecretSet::new(lines).unwrap();
            (Receiver::builder().secret_set(&set).build().unwrap(), set)
        }
        Kind::StandardSecret | Kind::StandardPublicKey => {
            let set = SecretSet::standard_webhooks(lines).unwrap();
            let scheme = StandardWebhooks::builder().secret_set(&set).build().unwrap();
            (Receiver::builder().scheme(scheme).build().unwrap(), set)
        }
    }
}

/// POSTs a new event signed with `key`; returns the status.
async fn deliver(url: &str, kind: Kind, key: &Key) -> u16 {
    let body = EventBuilder::payment_intent_succeeded().to_json();
    let headers = match kind {
        Kind::Service => {
            let delivery = SignedDelivery::now(body.clone(), &key.signing).unwrap();
            let mut headers = http::HeaderMap::new();
            headers.insert("x-service-signature", delivery.signature.parse().unwrap());
            headers
        }
        Kind::StandardSecret | Kind::StandardPublicKey => {
            StandardDelivery::now(body.clone(), unique_message_id(), &key.signing)
                .unwrap()
                .headers()
        }
    };
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .headers(headers)
        .body(body)
        .send()
        .await
        .unwrap();
    response.status().as_u16()
}

/// Plays a roll against the receiver at `url`, whose set holds `old` alone.
async fn rolls(url: &str, kind: Kind, set: &SecretSet, old: &Key, new: &Key) {
    assert_eq!(deliver(url, kind, old).await, 200, "{kind:?}: the old key alone");
    assert_eq!(
        deliver(url, kind, new).await,
        400,
        "{kind:?}: the new key before the roll"
    );

    assert_eq!(set.replace([&old.line, &new.line]).unwrap(), 2);
    assert_eq!(
        deliver(url, kind, old).await,
        200,
        "{kind:?}: the old key during the overlap"
    );
    assert_eq!(
        deliver(url, kind, new).await,
        200,
        "{kind:?}: the new key during the overlap"
    );

    assert_eq!(set.replace([&new.line]).unwrap(), 1);
    assert_eq!(deliver(url, kind, new).await, 200, "{kind:?}: the new key alone");
    assert_eq!(
        deliver(url, kind, old).await,
        400,
        "{kind:?}: the old key once dropped"
    );

    // A replacement that cannot be used keeps the set in force.
    assert!(set.replace(["not a key"]).is_err());
    assert!(set.replace(Vec::<String>::new()).is_err());
    assert_eq!(
        deliver(url, kind, new).await,
        200,
        "{kind:?}: after refused replacements"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_layer_sees_each_replacement() {
    for kind in KINDS {
        let (old, new) = (Key::new(kind, 1), Key::new(kind, 2));
        let (receiver, set) = receiver(kind, &[&old]);
        let app = axum::Router::new()
            .route("/webhooks", post(|Webhook(_): Webhook<Event>| async { Received }))
            .route_layer(WebhookLayer::new(receiver));
        let addr = axum_loopback::serve(app).await;
        rolls(&format!("http://{addr}/webhooks"), kind, &set, &old, &new).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actix_extractor_sees_each_replacement() {
    for kind in KINDS {
        let (old, new) = (Key::new(kind, 1), Key::new(kind, 2));
        let (receiver, set) = receiver(kind, &[&old]);
        let addr = actix_loopback::serve(move || {
            App::new()
                .wrap(payhook::actix::WebhookConfig::new(receiver.clone()))
                .route(
                    "/webhooks",
                    web::post().to(|_webhook: payhook::actix::Webhook| async { HttpResponse::Ok().finish() }),
                )
        });
        rolls(&format!("http://{addr}/webhooks"), kind, &set, &old, &new).await;
    }
}

async fn inbox(receiver: Receiver) -> (Inbox, Workers) {
    let inbox = Inbox::builder(receiver)
        .poll_interval(Duration::from_millis(20))
        .connect(&payhook_test_support::sqlite_url("payhook-rotation"))
        .await
        .unwrap();
    let workers = inbox.start(|_job: Job| async { Ok(()) });
    (inbox, workers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_inbox_route_sees_each_replacement() {
    for kind in KINDS {
        let (old, new) = (Key::new(kind, 1), Key::new(kind, 2));
        let (receiver, set) = receiver(kind, &[&old]);
        let (inbox, workers) = inbox(receiver).await;
        let app = axum::Router::new().route("/webhooks", payhook::tower::axum::inbox_route(inbox));
        let addr = axum_loopback::serve(app).await;
        rolls(&format!("http://{addr}/webhooks"), kind, &set, &old, &new).await;
        workers.shutdown().await;
    }
}

#[actix_web::test]
async fn actix_inbox_route_sees_each_replacement() {
    for kind in KINDS {
        let (old, new) = (Key::new(kind, 1), Key::new(kind, 2));
        let (receiver, set) = receiver(kind, &[&old]);
        let (inbox, workers) = inbox(receiver).await;
        let server = actix_web::HttpServer::new(move || {
            App::new().route("/webhooks", payhook::actix::inbox_route(inbox.clone()))
        })
        .workers(1)
        .bind(("127.0.0.1", 0))
        .unwrap();
        let addr = server.addrs()[0];
        let server = server.run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        rolls(&format!("http://{addr}/webhooks"), kind, &set, &old, &new).await;
        workers.shutdown().await;
        handle.stop(true).await;
    }
}

/// Verifications on two threads while a third swaps the set between two sets
/// that both hold the delivery's secret (at different places, beside a
/// different other secret): every verification must pass. One that met no
/// set, an empty one, or a set built in place would refuse some.
#[test]
fn a_verification_during_a_swap_sees_a_whole_set() {
    let (shared, a, b) = (
        "whsec_kept_in_both",
        "whsec_only_in_first",
        "whsec_only_in_second",
    );
    let set = SecretSet::new([a, shared]).unwrap();
    let verifier = Verifier::builder().secret_set(&set).build().unwrap();
    let body = EventBuilder::payment_intent_succeeded().to_json();
    let delivery = SignedDelivery::now(body.clone(), shared).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (verified, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (verifier, delivery, body) = (verifier.clone(), delivery.clone(), body.clone());
            let (stop, verified, refused) = (Arc::clone(&stop), Arc::clone(&verified), Arc::clone(&refused));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match verifier.verify_value(delivery.signature.as_bytes(), body.as_bytes()) {
                        Ok(()) => verified.fetch_add(1, Ordering::Relaxed),
                        Err(_) => refused.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    for round in 0..20_000 {
        let replaced = if round % 2 == 0 {
            set.replace([shared, b])
        } else {
            set.replace([a, shared])
        };
        assert_eq!(replaced, Ok(2));
        if round % 64 == 0 {
            std::thread::yield_now();
        }
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(
        verified.load(Ordering::Relaxed) > 100,
        "the verifying threads ran"
    );
    assert_eq!(
        refused.load(Ordering::Relaxed),
        0,
        "a verification met a partial set"
    );
}

/// `watch_file`: a rewritten file is in force within a few intervals, without
/// a signal; a file that cannot be used meanwhile keeps the set in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_file_is_reloaded_when_it_changes() {
    let dir = std::env::temp_dir().join(payhook_test_support::unique("payhook-watched"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("webhook-secrets");
    let (old, new) = (Key::new(Kind::Service, 1), Key::new(Kind::Service, 2));
    std::fs::write(&path, format!("{}\n", old.line)).unwrap();
    let set = SecretSet::from_file(&path).unwrap();
    set.watch_file(Duration::from_millis(50)).unwrap();
    let app = axum::Router::new()
        .route("/webhooks", post(|Webhook(_): Webhook<Event>| async { Received }))
        .route_layer(WebhookLayer::new(
            Receiver::builder().secret_set(&set).build().unwrap(),
        ));
    let url = format!("http://{}/webhooks", axum_loopback::serve(app).await);
    assert_eq!(deliver(&url, Kind::Service, &new).await, 400);

    let until = |count: usize| {
        let set = set.clone();
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while set.count() != count {
                assert!(std::time::Instant::now() < deadline, "the watch did not reload");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    std::fs::write(&path, format!("{}\n{}\n", old.line, new.line)).unwrap();
    until(2).await;
    assert_eq!(deliver(&url, Kind::Service, &new).await, 200);

    std::fs::write(&path, "whsec_\n").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(set.count(), 2, "a file that cannot be used keeps the set");
    assert_eq!(deliver(&url, Kind::Service, &old).await, 200);

    std::fs::write(&path, format!("{}\n", new.line)).unwrap();
    until(1).await;
    assert_eq!(deliver(&url, Kind::Service, &old).await, 400);
    assert_eq!(deliver(&url, Kind::Service, &new).await, 200);
}
