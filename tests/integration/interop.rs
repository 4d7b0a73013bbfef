//! Deliveries recorded from a Stripe-style sender (`tests/data/stripe_style`:
//! its own secret, header, timestamps and payload shapes), replayed byte for
//! byte with a fixed clock through the axum layer, the actix extractor and the
//! inbox, each on a real server over loopback: every one verifies, parses to
//! the right kind and runs the right handler once, and the sender's retry of
//! an event runs nothing again. The service's own name for a failed payment,
//! `payment_intent.failed`, reaches the same `payment_failed` handler as
//! Stripe's `payment_intent.payment_failed`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::routing::post;
use axum::Router;
use payhook::inbox::{Inbox, Job};
use payhook::sender::EventBuilder;
use payhook::tower::axum::{EventHandlers, Received, Webhook};
use payhook::tower::WebhookLayer;
use payhook::{sign, Event, EventKind, FixedClock, Receiver, Secret};

const SECRET: &str = "whsec_s7r1peStyleRecorded0aX4Lm9Qw2Zt";
const HEADER: &str = "stripe-signature";
/// Just after the last recorded signing time (1764000067).
const REPLAY_AT: i64 = 1_764_000_070;
const TWO_POW_64_PLUS_1: u128 = (1 << 64) + 1;
const RECEIVED: &str = r#"{"received":true}"#;

/// One recorded request: its headers as sent and its raw body.
struct Recorded {
    name: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn recorded() -> Vec<Recorded> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/stripe_style");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "http"))
        .collect();
    files.sort();
    let deliveries: Vec<Recorded> = files
        .iter()
        .map(|path| {
            let raw = std::fs::read(path).unwrap();
            let split = raw
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .expect("a head and a body");
            let head = std::str::from_utf8(&raw[..split]).unwrap();
            let body = raw[split + 4..].to_vec();
            let mut lines = head.split("\r\n");
            assert!(lines.next().unwrap().starts_with("POST /webhooks HTTP/1.1"));
            let headers: Vec<(String, String)> = lines
                .map(|line| {
                    let (name, value) = line.split_once(": ").expect("a header line");
                    (name.to_owned(), value.to_owned())
                })
                .collect();
            let length = headers
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
                .map(|(_, value)| value.parse::<usize>().unwrap());
            assert_eq!(length, Some(body.len()), "{path:?}: the recording is whole");
            Recorded {
                name: path.file_stem().unwrap().to_string_lossy().into_owned(),
                headers,
                body,
            }
        })
        .collect();
    assert_eq!(deliveries.len(), 7);
    deliveries
}

/// The service's own failure name, signed like the recordings.
fn service_named_failure() -> Recorded {
    let body = EventBuilder::payment_intent_failed()
        .id("evt_service_named_failure")
        .payment_intent_id("pi_service_named")
        .amount(7)
        .to_json()
        .into_bytes();
    let signature = sign(&body, &Secret::new(SECRET).unwrap(), REPLAY_AT as u64 - 1);
    Recorded {
        name: "payment_intent.failed (the service's name)".to_owned(),
        headers: vec![
            ("Content-Type".to_owned(), "application/json".to_owned()),
            ("Stripe-Signature".to_owned(), signature),
        ],
        body,
    }
}

fn receiver() -> Receiver {
    Receiver::builder()
        .secret(SECRET)
        .header_name(HEADER)
        .clock(FixedClock::new(REPLAY_AT))
        .build()
        .unwrap()
}

/// What each handler run saw, in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn record(&self, handler: &str, event: &Event) {
        let detail = match event.kind() {
            EventKind::PaymentIntentSucceeded(pi) | EventKind::PaymentIntentFailed(pi) => {
                format!(
                    " {} amount {} received {:?}",
                    pi.id, pi.amount, pi.amount_received
                )
            }
            _ => String::new(),
        };
        self.0
            .lock()
            .unwrap()
            .push(format!("{handler} {} {}{detail}", event.event_type(), event.id()));
    }

    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// What the handlers must have seen after every delivery (the retry of
/// `01` included) was replayed twice.
fn expected() -> Vec<String> {
    let big = TWO_POW_64_PLUS_1;
    [
        format!("succeeded payment_intent.succeeded evt_3QxSucc01Lw2Zt8sRkP pi_3QxSucc01Lw2Zt8sR amount {big} received Some({big})"),
        "succeeded payment_intent.succeeded evt_3QxSucc02Lw2Zt8sRkP pi_3QxSucc02Lw2Zt8sR amount 5000 received None".to_owned(),
        "failed payment_intent.payment_failed evt_3QxFail03Lw2Zt8sRkP pi_3QxFail03Lw2Zt8sR amount 2000 received Some(0)".to_owned(),
        "other customer.created evt_1QxCust04Lw2Zt8sRkP".to_owned(),
        "other invoice.paid evt_1QxInvc05Lw2Zt8sRkP".to_owned(),
        "other charge.succeeded evt_3QxChrg06Lw2Zt8sRkP".to_owned(),
        "failed payment_intent.failed evt_service_named_failure pi_service_named amount 7 received Some(0)".to_owned(),
    ]
    .into()
}

/// Posts a recording as it was sent (every recorded header; the client sets
/// `Host` and `Content-Length` itself).
async fn replay(url: &str, delivery: &Recorded) -> (u16, String) {
    let mut request = reqwest::Client::new().post(url);
    for (name, value) in &delivery.headers {
        if !(name.eq_ignore_ascii_case("host") || name.eq_ignore_ascii_case("content-length")) {
            request = request.header(name, value);
        }
    }
    let response = request.body(delivery.body.clone()).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// Replays every recording twice, then the service-named failure: each is
/// answered `200 {"received":true}`.
async fn replay_all(url: &str) {
    let recordings = recorded();
    for round in 0..2 {
        for delivery in &recordings {
            let (status, reply) = replay(url, delivery).await;
            assert_eq!(
                (status, reply.as_str()),
                (200, RECEIVED),
                "round {round}: {}",
                delivery.name
            );
        }
    }
    let failure = service_named_failure();
    assert_eq!(replay(url, &failure).await, (200, RECEIVED.to_owned()));
}

async fn paid(State(seen): State<Seen>, Webhook(event): Webhook<Event>) -> Received {
    seen.record("succeeded", &event);
    Received
}

async fn failed(State(seen): State<Seen>, Webhook(event): Webhook<Event>) -> Received {
    seen.record("failed", &event);
    Received
}

async fn other(State(seen): State<Seen>, Webhook(event): Webhook<Event>) -> Received {
    seen.record("other", &event);
    Received
}

async fn serve_axum(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/webhooks")
}

#[tokio::test]
async fn axum_layer_replays_a_stripe_style_sender() {
    let seen = Seen::default();
    let handlers = EventHandlers::new()
        .payment_succeeded(paid)
        .payment_failed(failed)
        .other(other);
    let app = Router::new()
        .route("/webhooks", post(handlers))
        .route_layer(WebhookLayer::new(receiver()))
        .with_state(seen.clone());
    let url = serve_axum(app).await;
    replay_all(&url).await;
    assert_eq!(seen.all(), expected());

    // The recordings are old: without the fixed clock they are refused as
    // replays, so the replay above did depend on their own timestamps.
    let live = Receiver::builder()
        .secret(SECRET)
        .header_name(HEADER)
        .build()
        .unwrap();
    let app = Router::new()
        .route("/webhooks", post(EventHandlers::new().other(other)))
        .route_layer(WebhookLayer::new(live))
        .with_state(Seen::default());
    let url = serve_axum(app).await;
    let (status, reply) = replay(&url, &recorded()[3]).await;
    assert_eq!(status, 400, "{reply}");
    assert!(reply.starts_with("Webhook Error: timestamp is "), "{reply}");
}

#[actix_web::test]
async fn actix_extractor_replays_a_stripe_style_sender() {
    use actix_web::{web, App, HttpServer};
    use payhook::actix::{EventHandlers, Webhook, WebhookConfig};

    let seen = Seen::default();
    let handler = |name: &'static str, seen: Seen| {
        move |event: Webhook| {
            seen.record(name, &event);
            async { Ok::<_, actix_web::Error>(()) }
        }
    };
    let handlers = EventHandlers::new()
        .payment_succeeded(handler("succeeded", seen.clone()))
        .payment_failed(handler("failed", seen.clone()))
        .other(handler("other", seen.clone()));
    let config = WebhookConfig::new(receiver());
    let server = HttpServer::new(move || {
        App::new()
            .app_data(config.clone())
            .route("/webhooks", web::post().to(handlers.clone()))
    })
    .workers(1)
    .disable_signals()
    .bind(("127.0.0.1", 0))
    .unwrap();
    let addr = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    replay_all(&format!("http://{addr}/webhooks")).await;
    assert_eq!(seen.all(), expected());
    handle.stop(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_replays_a_stripe_style_sender() {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "payhook-interop-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let inbox = Inbox::builder(receiver())
        .poll_interval(Duration::from_millis(20))
        .connect(&format!("sqlite://{}", dir.join("inbox.db").display()))
        .await
        .unwrap();
    let seen = Seen::default();
    let recorder = seen.clone();
    let workers = inbox.start(move |job: Job| {
        let seen = recorder.clone();
        async move {
            let handler = match job.event().kind() {
                EventKind::PaymentIntentSucceeded(_) => "succeeded",
                EventKind::PaymentIntentFailed(_) => "failed",
                _ => "other",
            };
            seen.record(handler, job.event());
            Ok(())
        }
    });
    let app = Router::new().route("/webhooks", payhook::tower::axum::inbox_route(inbox));
    let url = serve_axum(app).await;
    replay_all(&url).await;

    let want = expected();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.all().len() < want.len() {
        assert!(Instant::now() < deadline, "processed only {:?}", seen.all());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Give a second run of anything the time to show up.
    tokio::time::sleep(Duration::from_millis(300)).await;
    workers.shutdown().await;
    // Workers take stored events in their own order: compare as sets, and
    // count each once.
    let mut got = seen.all();
    got.sort();
    let mut want = want;
    want.sort();
    assert_eq!(got, want);
}
