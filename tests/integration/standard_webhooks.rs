//! A Standard Webhooks sender delivering to every entry point: the axum
//! layer, the actix-web extractor and both one-line inbox routes, each on a
//! real server over loopback, configured with `ReceiverBuilder::scheme`. The
//! `webhook-id` header is the event id the handler sees and the one deliveries
//! are deduplicated (and stored) by; bad deliveries get the core's `400`s.

use crate::actix_loopback;
use crate::axum_loopback;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use payhook::inbox::sqlx::{self, AnyPool};
use payhook::inbox::{Inbox, Job};
use payhook::sender::{generate_standard_keypair, EventBuilder, StandardDelivery, StandardSigner};
use payhook::signature::StandardWebhooks;
use payhook::{Event, Receiver};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const OTHER_SECRET: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// What the handlers saw: each event's id, type and amount, in order.
type Seen = Arc<Mutex<Vec<(String, String, Option<u128>)>>>;

fn record(seen: &Seen, event: &Event) {
    let amount = event.payment_intent().map(|pi| pi.amount);
    let entry = (event.id().to_owned(), event.event_type().to_owned(), amount);
    seen.lock().unwrap().push(entry);
}

/// A receiver of the Standard Webhooks scheme with one secret and one public
/// key, and the signing key that goes with the public key.
fn receiver() -> (Receiver, String) {
    let (signing_key, public_key) = generate_standard_keypair().unwrap();
    let scheme = StandardWebhooks::builder()
        .secret(SECRET)
        .public_key(public_key)
        .build()
        .unwrap();
    (Receiver::builder().scheme(scheme).build().unwrap(), signing_key)
}

async fn post(url: &str, delivery: &StandardDelivery) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .headers(delivery.headers())
        .body(delivery.body.clone())
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

const RECEIVED: (u16, &str) = (200, r#"{"received":true}"#);

/// The deliveries every entry point gets, and the replies it must give.
/// Returns the ids that must reach the handler, once each, in order.
async fn behaves(url: &str, signing_key: &str) -> [&'static str; 3] {
    let body = EventBuilder::payment_intent_succeeded()
        .amount(1500)
        .to_standard_json();
    // `v1`, then the same message again (a sender's retry, signed anew).
    let first = StandardDelivery::now(body.clone(), "msg_sw_1", SECRET).unwrap();
    assert_eq!(post(url, &first).await, (RECEIVED.0, RECEIVED.1.to_owned()));
    let retry = StandardDelivery::now(body.clone(), "msg_sw_1", SECRET).unwrap();
    assert_eq!(post(url, &retry).await, (RECEIVED.0, RECEIVED.1.to_owned()));
    // `v1a` under another id.
    let asymmetric = StandardDelivery::now(body.clone(), "msg_sw_2", signing_key).unwrap();
    assert!(asymmetric.webhook_signature.starts_with("v1a,"));
    assert_eq!(post(url, &asymmetric).await, (RECEIVED.0, RECEIVED.1.to_owned()));
    // A rotation header: a `v1` of an unknown secret beside a good `v1a`.
    let signers = [
        StandardSigner::new(OTHER_SECRET).unwrap(),
        StandardSigner::new(signing_key).unwrap(),
    ];
    let service_shape = EventBuilder::payment_intent_failed()
        .id("evt_ignored")
        .amount(7)
        .to_json();
    let rotated =
        StandardDelivery::signed_by(service_shape, "msg_sw_3", &signers, payhook::sender::unix_now());
    assert_eq!(post(url, &rotated).await, (RECEIVED.0, RECEIVED.1.to_owned()));

    // Bad deliveries, each under a new id: none is stored or handled.
    let new = StandardDelivery::now(body.clone(), "msg_sw_bad", SECRET).unwrap();
    let mut empty_id = new.clone();
    empty_id.webhook_id = String::new();
    let cases = [
        (
            StandardDelivery::now(body.clone(), "msg_sw_bad", OTHER_SECRET).unwrap(),
            "no signature matches the expected signature for this payload and timestamp",
        ),
        (
            StandardDelivery {
                webhook_signature: "v2,abc".to_owned(),
                ..new.clone()
            },
            "malformed webhook-signature header: no well-formed v1 or v1a signature",
        ),
        (
            StandardDelivery::at(body.clone(), "msg_sw_bad", SECRET, 1).unwrap(),
            "timestamp is ",
        ),
        (empty_id, "malformed webhook-id header: the id is empty"),
    ];
    for (delivery, message) in cases {
        let (status, text) = post(url, &delivery).await;
        assert_eq!(status, 400, "{text}");
        assert!(text.starts_with(&format!("Webhook Error: {message}")), "{text}");
    }
    let response = reqwest::Client::new()
        .post(url)
        .header("webhook-timestamp", "1")
        .header("webhook-signature", "v1,x")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(
        response.text().await.unwrap(),
        "Webhook Error: missing webhook-id header"
    );
    ["msg_sw_1", "msg_sw_2", "msg_sw_3"]
}

fn assert_seen(seen: &Seen, ids: [&str; 3]) {
    let seen = seen.lock().unwrap();
    let expected = [
        (ids[0], "payment_intent.succeeded", Some(1500)),
        (ids[1], "payment_intent.succeeded", Some(1500)),
        (ids[2], "payment_intent.failed", Some(7)),
    ];
    let seen: Vec<_> = seen
        .iter()
        .map(|(id, t, a)| (id.as_str(), t.as_str(), *a))
        .collect();
    assert_eq!(seen, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_axum_layer_takes_standard_webhooks() {
    use payhook::tower::axum::{Received, Webhook};
    use payhook::tower::WebhookLayer;

    let (receiver, signing_key) = receiver();
    let seen = Seen::default();
    let app = axum::Router::new()
        .route(
            "/webhooks",
            axum::routing::post(
                |axum::extract::State(seen): axum::extract::State<Seen>, Webhook(event): Webhook| async move {
                    record(&seen, &event);
                    Received
                },
            ),
        )
        .route_layer(WebhookLayer::new(receiver))
        .with_state(Arc::clone(&seen));
    let addr = axum_loopback::serve(app).await;
    let ids = behaves(&format!("http://{addr}/webhooks"), &signing_key).await;
    assert_seen(&seen, ids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_actix_extractor_takes_standard_webhooks() {
    use actix_web::{web, App, HttpResponse};
    use payhook::actix::{Webhook, WebhookConfig};

    async fn handler(webhook: Webhook, seen: web::Data<Seen>) -> HttpResponse {
        record(&seen, webhook.event());
        webhook.ack().await
    }

    let (receiver, signing_key) = receiver();
    let config = WebhookConfig::new(receiver);
    let seen = Seen::default();
    let data = web::Data::new(Arc::clone(&seen));
    let addr = actix_loopback::serve(move || {
        App::new()
            .app_data(config.clone())
            .app_data(data.clone())
            .route("/webhooks", web::post().to(handler))
    });
    let ids = behaves(&format!("http://{addr}/webhooks"), &signing_key).await;
    assert_seen(&seen, ids);
}

async fn inbox(receiver: Receiver) -> Inbox {
    let dir = std::env::temp_dir().join(format!(
        "payhook-standard-webhooks-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    Inbox::builder(receiver)
        .poll_interval(Duration::from_millis(20))
        .connect(&format!("sqlite://{}", dir.join("inbox.db").display()))
        .await
        .unwrap()
}

/// Starts the inbox's workers, recording what they hand out.
fn start(inbox: &Inbox, seen: &Seen) -> payhook::inbox::Workers {
    let seen = Arc::clone(seen);
    inbox.start(move |job: Job| {
        let seen = Arc::clone(&seen);
        async move {
            record(&seen, job.event());
            Ok(())
        }
    })
}

/// Waits for the workers to hand out `ids`, then checks what the table holds.
async fn processed(seen: &Seen, pool: &AnyPool, ids: [&str; 3]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.lock().unwrap().len() < ids.len() {
        assert!(
            Instant::now() < deadline,
            "the stored events were not all processed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    seen.lock().unwrap().sort();
    assert_seen(seen, ids);
    let mut stored: Vec<String> = sqlx::query_scalar("SELECT event_id FROM payhook_inbox")
        .fetch_all(pool)
        .await
        .unwrap();
    stored.sort();
    assert_eq!(stored, ids, "stored once each, under their webhook-id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_axum_inbox_route_takes_standard_webhooks() {
    let (receiver, signing_key) = receiver();
    let inbox = inbox(receiver).await;
    let pool = inbox.pool().clone();
    let seen = Seen::default();
    let workers = start(&inbox, &seen);
    let app = axum::Router::new().route("/webhooks", payhook::tower::axum::inbox_route(inbox));
    let addr = axum_loopback::serve(app).await;
    let ids = behaves(&format!("http://{addr}/webhooks"), &signing_key).await;
    processed(&seen, &pool, ids).await;
    workers.shutdown().await;
}

#[actix_web::test]
async fn the_actix_inbox_route_takes_standard_webhooks() {
    let (receiver, signing_key) = receiver();
    let inbox = inbox(receiver).await;
    let pool = inbox.pool().clone();
    let seen = Seen::default();
    let workers = start(&inbox, &seen);
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new().route("/webhooks", payhook::actix::inbox_route(inbox.clone()))
    })
    .workers(1)
    .bind(("127.0.0.1", 0))
    .unwrap();
    let addr = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    let ids = behaves(&format!("http://{addr}/webhooks"), &signing_key).await;
    processed(&seen, &pool, ids).await;
    workers.shutdown().await;
    handle.stop(true).await;
}

/// Genuine `v1a` deliveries beside a flood of headers carrying 1 300 distinct
/// `v1a` items each, every one a real Ed25519 signature by a key the receiver
/// does not hold: the flood is refused before any check, naming the header,
/// and the genuine deliveries keep their latency. Without the bound each
/// flood request cost 1 300 Ed25519 checks (about 60 ms) on a server thread,
/// and the genuine deliveries waited behind them.
async fn a_signature_flood_leaves_genuine_deliveries_alone(url: &str, signing_key: &str) {
    let body = EventBuilder::payment_intent_succeeded().to_standard_json();
    let (attacker, _) = generate_standard_keypair().unwrap();
    let attacker = StandardSigner::new(&attacker).unwrap();
    let t = payhook::sender::unix_now();
    let items: Vec<String> = (0..1300)
        .map(|n| attacker.sign(&format!("msg_flood_{n}"), t, body.as_bytes()))
        .collect();
    let flood = StandardDelivery {
        webhook_signature: items.join(" "),
        ..StandardDelivery::now(body.clone(), "msg_flood", signing_key).unwrap()
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut flooders = Vec::new();
    for _ in 0..4 {
        let (url, flood, stop) = (url.to_owned(), flood.clone(), Arc::clone(&stop));
        flooders.push(tokio::spawn(async move {
            let mut replies = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                replies.push(post(&url, &flood).await);
            }
            replies
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut latencies = Vec::new();
    for n in 0..20 {
        let genuine = StandardDelivery::now(body.clone(), format!("msg_genuine_{n}"), signing_key).unwrap();
        let started = Instant::now();
        assert_eq!(post(url, &genuine).await, (RECEIVED.0, RECEIVED.1.to_owned()));
        latencies.push(started.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    latencies.sort();
    let p50 = latencies[latencies.len() / 2];
    assert!(
        p50 < Duration::from_millis(75),
        "genuine deliveries beside the flood took {p50:?} (p50), all: {latencies:?}"
    );
    let mut flooded = 0;
    for flooder in flooders {
        for (status, text) in flooder.await.unwrap() {
            assert_eq!(status, 400, "{text}");
            assert_eq!(
                text,
                "Webhook Error: malformed webhook-signature header: more than 8 signatures"
            );
            flooded += 1;
        }
    }
    assert!(
        flooded >= 20,
        "the flood ran beside the deliveries: {flooded} requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_axum_layer_refuses_a_signature_flood() {
    use payhook::tower::axum::{Received, Webhook};
    use payhook::tower::WebhookLayer;

    let (receiver, signing_key) = receiver();
    let app = axum::Router::new()
        .route(
            "/webhooks",
            axum::routing::post(|Webhook(_): Webhook| async { Received }),
        )
        .route_layer(WebhookLayer::new(receiver));
    let addr = axum_loopback::serve(app).await;
    a_signature_flood_leaves_genuine_deliveries_alone(&format!("http://{addr}/webhooks"), &signing_key).await;
}

#[actix_web::test]
async fn the_actix_extractor_refuses_a_signature_flood() {
    use actix_web::{web, App, HttpResponse};
    use payhook::actix::{Webhook, WebhookConfig};

    async fn handler(webhook: Webhook) -> HttpResponse {
        webhook.ack().await
    }

    let (receiver, signing_key) = receiver();
    let config = WebhookConfig::new(receiver);
    let addr = actix_loopback::serve(move || {
        App::new()
            .app_data(config.clone())
            .route("/webhooks", web::post().to(handler))
    });
    a_signature_flood_leaves_genuine_deliveries_alone(&format!("http://{addr}/webhooks"), &signing_key).await;
}
