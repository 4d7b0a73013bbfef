//! The receiver pipeline end to end, without any web framework: what each kind of
//! delivery turns into, and how claims are settled.
#![cfg(feature = "testing")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use payhook_core::adapter::{HandlerOutcome, ReceiveOutcome};
use payhook_core::sender::{unix_now, EventBuilder, SignedDelivery};
use payhook_core::store::{Claim, ClaimToken, Completion, DynStore, Store};
use payhook_core::testing::FailingStore;
use payhook_core::{EventKind, FixedClock, MemoryStore, Receiver, ReceiverBuilder, Reply, StoreError};

const SECRET: &str = "whsec_pipeline";

fn headers(signature: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("x-service-signature", signature.parse().unwrap());
    headers
}

fn builder() -> ReceiverBuilder {
    Receiver::builder().secret(SECRET)
}

async fn reply_to(receiver: &Receiver, headers: &HeaderMap, body: impl Into<Bytes>) -> Reply {
    match receiver.receive(headers, body.into()).await {
        ReceiveOutcome::Respond(reply) => reply,
        ReceiveOutcome::Deliver(delivery) => panic!("unexpectedly delivered {:?}", delivery.event().id()),
    }
}

fn assert_error(reply: &Reply, status: u16, message: &str) {
    assert_eq!(reply.status().as_u16(), status, "{reply:?}");
    assert_eq!(reply.body(), format!("Webhook Error: {message}"));
    assert_eq!(reply.content_type(), "text/plain; charset=utf-8");
}

#[tokio::test]
async fn worked_example_is_delivered_with_a_pinned_clock() {
    let receiver = builder()
        .secret("whsec_test_secret")
        .clock(FixedClock::new(1732264800 + 299))
        .build()
        .unwrap();
    let body = r#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{}}}"#;
    let header = "t=1732264800,v1=47e6632c169b959135c86d19df2cb565cdbea26c53beb45123d38a1437d37287";
    // The signature matches, so the verdict comes from the payload: `{}` is not
    // a payment intent. Verification passed first.
    let reply = reply_to(&receiver, &headers(header), body).await;
    assert_eq!(reply.status().as_u16(), 400);
    assert!(
        reply
            .body()
            .starts_with("Webhook Error: invalid payload: data.object: missing field `id`"),
        "{reply:?}"
    );
}

#[tokio::test]
async fn each_bad_delivery_gets_its_own_message() {
    let receiver = builder().build().unwrap();
    let body = EventBuilder::payment_intent_succeeded().to_json();
    let now = unix_now();
    let good = SignedDelivery::at(body.clone(), SECRET, now).unwrap().signature;
    let v1 = good.split_once(",v1=").unwrap().1;
    let big = format!("t={now},{}v1={v1}", "v0=00,".repeat(100 * 1024 / 6));
    let cases: Vec<(String, &str)> = vec![
        ("".into(), "malformed signature header: header value is empty"),
        (
            "garbage".into(),
            "malformed signature header: header has no t timestamp",
        ),
        (
            "t=abc,v1=00".into(),
            "malformed signature header: t is not a non-negative whole number of seconds",
        ),
        (
            format!("t={now},t={},v1={v1}", now - 1),
            "malformed signature header: header has several different t values",
        ),
        (
            format!("t={now},v1=not-hex"),
            "signature header has no v1 signature (64 lowercase hex digits)",
        ),
        (
            format!("t={now},v1={}", v1.to_uppercase()),
            "no signature matches the expected signature for this payload and timestamp",
        ),
        (
            format!("t={},v1={v1}", now + 1),
            "no signature matches the expected signature for this payload and timestamp",
        ),
    ];
    for (header, message) in cases {
        assert_error(
            &reply_to(&receiver, &headers(&header), body.clone()).await,
            400,
            message,
        );
    }
    // A 100 KB header with the genuine signature at its end still verifies.
    assert!(big.len() > 100 * 1024);
    assert!(matches!(
        receiver.receive(&headers(&big), body.clone().into()).await,
        ReceiveOutcome::Deliver(_)
    ));

    assert_error(
        &reply_to(&receiver, &HeaderMap::new(), body.clone()).await,
        400,
        "missing x-service-signature header",
    );
    let mut twice = headers(&good);
    twice.append("x-service-signature", good.parse().unwrap());
    assert_error(
        &reply_to(&receiver, &twice, body).await,
        400,
        "x-service-signature header appears more than once",
    );
}

#[tokio::test]
async fn stale_and_future_timestamps_say_how_far_out_they_are() {
    let clock = FixedClock::new(2_000_000_000);
    let receiver = builder().clock(clock.clone()).build().unwrap();
    let body = EventBuilder::payment_intent_succeeded().to_json();
    let old = SignedDelivery::at(body.clone(), SECRET, 2_000_000_000 - 301).unwrap();
    assert_error(
        &reply_to(&receiver, &headers(&old.signature), old.body).await,
        400,
        "timestamp is 301 s old, outside the 300 s tolerance",
    );
    let ahead = SignedDelivery::at(body, SECRET, 2_000_000_000 + 900).unwrap();
    assert_error(
        &reply_to(&receiver, &headers(&ahead.signature), ahead.body).await,
        400,
        "timestamp is 900 s in the future, outside the 300 s tolerance",
    );
}

#[tokio::test]
async fn signed_bodies_that_are_not_events_are_payload_errors() {
    let receiver = builder().build().unwrap();
    for (body, message) in [
        ("not json", "invalid payload: expected ident at line 1 column 2"),
        (
            "[]",
            "invalid payload: invalid type: sequence, expected an event object at line 1 column 0",
        ),
        (r#"{"type":"x"}"#, "invalid payload: event has no id"),
    ] {
        let signed = SignedDelivery::now(body, SECRET).unwrap();
        assert_error(
            &reply_to(&receiver, &headers(&signed.signature), signed.body).await,
            400,
            message,
        );
    }
    for (amount, message) in [
        (
            "-1",
            "amount must be a non-negative integer, got the negative number -1",
        ),
        (
            "12.5",
            "amount must be a non-negative integer, got the non-integer number 12.5",
        ),
    ] {
        let body = EventBuilder::payment_intent_succeeded()
            .amount(777)
            .to_json()
            .replace(r#""amount":777"#, &format!(r#""amount":{amount}"#));
        let signed = SignedDelivery::now(body, SECRET).unwrap();
        let reply = reply_to(&receiver, &headers(&signed.signature), signed.body).await;
        assert_eq!(reply.status().as_u16(), 400);
        assert!(reply.body().contains(message), "{reply:?}");
    }
}

#[tokio::test]
async fn wei_amounts_arrive_exact() {
    let receiver = builder().build().unwrap();
    let wei: u128 = 123_456_789_012_345_678_901_234_567_890; // far beyond 2^64
    let event = EventBuilder::payment_intent_succeeded()
        .currency("eth")
        .amount(wei);
    let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    let ReceiveOutcome::Deliver(delivery) = receiver.receive(&headers(&signed.signature), signed.body).await
    else {
        panic!("not delivered")
    };
    let EventKind::PaymentIntentSucceeded(pi) = delivery.event().kind() else {
        panic!()
    };
    assert_eq!(pi.amount, wei);
    assert_eq!(pi.currency, "eth");
}

#[tokio::test]
async fn body_over_the_limit_is_413_before_anything_else() {
    let receiver = builder().body_limit(100).build().unwrap();
    let signed = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), SECRET).unwrap();
    assert!(signed.body.len() > 100);
    assert_error(
        &reply_to(&receiver, &headers(&signed.signature), signed.body).await,
        413,
        "body is larger than the 100-byte limit",
    );
}

/// A store that counts calls, to prove what reaches it.
#[derive(Default)]
struct CountingStore {
    inner: MemoryStore,
    claims: AtomicUsize,
}

impl Store for CountingStore {
    async fn claim(&self, ns: &str, id: &str, lease: Duration) -> Result<Claim, StoreError> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        self.inner.claim(ns, id, lease).await
    }
    async fn renew(&self, ns: &str, id: &str, t: ClaimToken, l: Duration) -> Result<bool, StoreError> {
        self.inner.renew(ns, id, t, l).await
    }
    async fn complete(
        &self,
        ns: &str,
        id: &str,
        t: ClaimToken,
        r: Duration,
    ) -> Result<Completion, StoreError> {
        self.inner.complete(ns, id, t, r).await
    }
    async fn release(&self, ns: &str, id: &str, t: ClaimToken) -> Result<bool, StoreError> {
        self.inner.release(ns, id, t).await
    }
}

#[tokio::test]
async fn unsigned_requests_never_reach_the_store() {
    let store = Arc::new(CountingStore::default());
    let receiver = builder()
        .shared_store(store.clone())
        .namespace("counting")
        .build()
        .unwrap();
    let event = EventBuilder::payment_intent_succeeded();
    let forged = SignedDelivery::now(event.to_json(), "whsec_attacker").unwrap();
    let stale = SignedDelivery::at(event.to_json(), SECRET, unix_now() - 3600).unwrap();
    for (signed, message) in [
        (
            &forged,
            "no signature matches the expected signature for this payload and timestamp",
        ),
        (&stale, "timestamp is 3600 s old, outside the 300 s tolerance"),
    ] {
        let reply = reply_to(&receiver, &headers(&signed.signature), signed.body.clone()).await;
        // A second old: the clock may tick between signing and checking.
        let message = if reply.body().contains("3601 s old") {
            "timestamp is 3601 s old, outside the 300 s tolerance"
        } else {
            message
        };
        assert_error(&reply, 400, message);
    }
    assert_error(
        &reply_to(&receiver, &HeaderMap::new(), event.to_json()).await,
        400,
        "missing x-service-signature header",
    );
    assert_eq!(
        store.claims.load(Ordering::SeqCst),
        0,
        "rejected deliveries touched the store"
    );
    // The genuine delivery of that id is still handled: nothing marked it seen.
    let genuine = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    assert!(matches!(
        receiver.receive(&headers(&genuine.signature), genuine.body).await,
        ReceiveOutcome::Deliver(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_deliveries_claim_once_then_release_then_complete() {
    let receiver = builder().build().unwrap();
    let event = EventBuilder::payment_intent_succeeded();
    let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    let race = || {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (receiver, signed) = (receiver.clone(), signed.clone());
                tokio::spawn(async move {
                    let headers = headers(&signed.signature);
                    receiver.receive(&headers, signed.body).await
                })
            })
            .collect();
        async move {
            let mut outcomes = Vec::new();
            for task in tasks {
                outcomes.push(task.await.unwrap());
            }
            outcomes
        }
    };

    let mut outcomes = race().await;
    let winner = outcomes
        .iter()
        .position(|o| matches!(o, ReceiveOutcome::Deliver(_)))
        .expect("one winner");
    let ReceiveOutcome::Deliver(delivery) = outcomes.swap_remove(winner) else {
        unreachable!()
    };
    for outcome in &outcomes {
        let ReceiveOutcome::Respond(reply) = outcome else {
            panic!("second winner")
        };
        assert_error(
            reply,
            409,
            &format!(
                "event {} is being handled by another delivery; retry later",
                event.event_id()
            ),
        );
    }
    // The handler failed: release, and a later delivery claims the id again.
    delivery.into_claim().settle(HandlerOutcome::Failed).await;
    let ReceiveOutcome::Deliver(retry) = receiver
        .receive(&headers(&signed.signature), signed.body.clone())
        .await
    else {
        panic!("released id was not handed out again")
    };
    retry.into_claim().settle(http::StatusCode::OK).await;
    // After completion every delivery is a duplicate, acknowledged with 200.
    for outcome in race().await {
        let ReceiveOutcome::Respond(reply) = outcome else {
            panic!("duplicate was delivered")
        };
        assert_eq!(reply, Reply::received());
    }
}

#[tokio::test]
async fn dropping_an_unsettled_claim_releases_it() {
    let receiver = builder().build().unwrap();
    let signed = SignedDelivery::now(EventBuilder::payment_intent_failed().to_json(), SECRET).unwrap();
    let deliver = || receiver.receive(&headers(&signed.signature), signed.body.clone());
    let ReceiveOutcome::Deliver(first) = deliver().await else {
        panic!()
    };
    drop(first); // handler panicked or the request was cancelled
    let ReceiveOutcome::Deliver(second) = deliver().await else {
        panic!("claim was not released on drop")
    };
    second
        .into_claim()
        .settle(http::StatusCode::INTERNAL_SERVER_ERROR)
        .await;
    let ReceiveOutcome::Deliver(third) = deliver().await else {
        panic!("claim was not released after a 500")
    };
    third.into_claim().settle(http::StatusCode::NO_CONTENT).await;
    assert!(matches!(deliver().await, ReceiveOutcome::Respond(r) if r == Reply::received()));
}

#[tokio::test]
async fn store_down_is_503_and_nothing_is_handed_out() {
    let receiver = builder()
        .store(FailingStore::down())
        .namespace("down")
        .build()
        .unwrap();
    let signed = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), SECRET).unwrap();
    assert_error(
        &reply_to(&receiver, &headers(&signed.signature), signed.body).await,
        503,
        "dedupe store unavailable: the store is down",
    );
}

#[tokio::test]
async fn namespaces_keep_endpoints_apart_on_one_store() {
    let store: Arc<dyn DynStore> = Arc::new(MemoryStore::new());
    let a = builder()
        .shared_store(store.clone())
        .namespace("endpoint-a")
        .build()
        .unwrap();
    let b = builder()
        .shared_store(store)
        .namespace("endpoint-b")
        .build()
        .unwrap();
    let signed = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), SECRET).unwrap();
    for receiver in [&a, &b] {
        let ReceiveOutcome::Deliver(d) = receiver
            .receive(&headers(&signed.signature), signed.body.clone())
            .await
        else {
            panic!("namespaces leaked into each other")
        };
        d.into_claim().settle(http::StatusCode::OK).await;
    }
}

#[tokio::test]
async fn a_store_passed_in_needs_a_namespace_so_endpoints_cannot_mark_each_others_events() {
    use payhook_core::ConfigError;
    let store: Arc<dyn DynStore> = Arc::new(MemoryStore::new());
    // A live endpoint and a test endpoint share one store; neither names a namespace.
    let live = Receiver::builder()
        .secret("whsec_live_endpoint")
        .shared_store(store.clone())
        .build();
    let test = Receiver::builder()
        .secret("whsec_test_endpoint")
        .store(Arc::clone(&store))
        .build();
    for refused in [live, test] {
        let err = refused.unwrap_err();
        assert_eq!(err, ConfigError::NamespaceRequired);
        assert!(
            err.to_string()
                .starts_with("a store set with store() or shared_store() needs namespace(...) too"),
            "{err}"
        );
    }
    // Named, the test secret's holder marks an id done in its own namespace only:
    // the same id sent to the live endpoint is still handled there.
    let live = Receiver::builder()
        .secret("whsec_live_endpoint")
        .shared_store(store.clone())
        .namespace("live")
        .build()
        .unwrap();
    let test = Receiver::builder()
        .secret("whsec_test_endpoint")
        .shared_store(store)
        .namespace("test")
        .build()
        .unwrap();
    let event = EventBuilder::payment_intent_succeeded();
    let by_attacker = SignedDelivery::now(event.to_json(), "whsec_test_endpoint").unwrap();
    let ReceiveOutcome::Deliver(d) = test
        .receive(&headers(&by_attacker.signature), by_attacker.body)
        .await
    else {
        panic!("not delivered")
    };
    d.into_claim().settle(http::StatusCode::OK).await;
    let genuine = SignedDelivery::now(event.to_json(), "whsec_live_endpoint").unwrap();
    assert!(
        matches!(
            live.receive(&headers(&genuine.signature), genuine.body).await,
            ReceiveOutcome::Deliver(_)
        ),
        "the test endpoint marked the live endpoint's event done"
    );
    // A receiver with its own in-memory store keeps the default namespace.
    assert!(builder().build().is_ok());
}

#[test]
fn configuration_mistakes_fail_at_build_time() {
    let message = |b: ReceiverBuilder| b.build().unwrap_err().to_string();
    assert_eq!(message(Receiver::builder()), "no signing secret configured");
    assert_eq!(message(builder().secret("")), "a signing secret is empty");
    assert_eq!(
        message(builder().namespace("")),
        "invalid setting: namespace must not be empty"
    );
    let cases = [
        (builder().lease(Duration::ZERO), "lease must be at least 1 second"),
        (
            builder().lease(Duration::from_millis(999)),
            "lease must be at least 1 second",
        ),
        (builder().lease(Duration::MAX), "lease must be at most 100 years"),
        (
            builder().lease(Duration::from_secs(u64::MAX)),
            "lease must be at most 100 years",
        ),
        (
            builder().retention(Duration::ZERO),
            "retention must be at least 1 second",
        ),
        (
            builder().retention(Duration::MAX),
            "retention must be at most 100 years",
        ),
        (
            builder().retention(payhook_core::defaults::MAX_DURATION + Duration::from_nanos(1)),
            "retention must be at most 100 years",
        ),
        (builder().body_limit(0), "body limit must be at least 1 byte"),
    ];
    for (builder, expected) in cases {
        assert_eq!(message(builder), format!("invalid setting: {expected}"));
    }
    let shown = format!("{:?}", builder().build().unwrap());
    assert!(!shown.contains(SECRET), "{shown}");
    let shown = format!("{:?}", builder());
    assert!(!shown.contains(SECRET), "{shown}");
}

#[test]
fn payloads_come_in_the_type_the_handler_asks_for() {
    use payhook_core::event::into_payload;
    use payhook_core::{Event, PaymentIntent};

    let paid = EventBuilder::payment_intent_succeeded().amount(u128::MAX);
    let body = paid.to_json();
    let event = Event::from_slice(body.as_bytes()).unwrap();
    let same: Event = into_payload(Some(event.clone()), body.as_bytes()).unwrap();
    assert_eq!(same.id(), paid.event_id());
    // Without the pipeline's event, the body is parsed again.
    let reparsed: Event = into_payload(None, body.as_bytes()).unwrap();
    assert_eq!(reparsed.id(), paid.event_id());
    let intent: PaymentIntent = into_payload(Some(event), body.as_bytes()).unwrap();
    assert_eq!(intent.amount, u128::MAX);
    let intent: PaymentIntent = into_payload(None, body.as_bytes()).unwrap();
    assert_eq!(intent.amount, u128::MAX);

    let other = EventBuilder::other("customer.created").to_json();
    let err = into_payload::<PaymentIntent>(None, other.as_bytes()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid payload: customer.created events carry no payment intent"
    );

    #[derive(serde::Deserialize)]
    struct Mine {
        id: String,
        r#type: String,
    }
    let mine: Mine = into_payload(None, other.as_bytes()).unwrap();
    assert_eq!(mine.r#type, "customer.created");
    assert!(mine.id.starts_with("evt_"));
    assert!(into_payload::<Vec<u8>>(None, other.as_bytes()).is_err());
}

/// A store whose complete and release wait at a gate the test opens, like a
/// remote store whose reply is slow; it counts the settles that reached the
/// in-memory store behind it.
struct GatedStore {
    inner: MemoryStore,
    gate: tokio::sync::Semaphore,
    settled: tokio::sync::Notify,
}

impl Default for GatedStore {
    fn default() -> Self {
        Self {
            inner: MemoryStore::new(),
            gate: tokio::sync::Semaphore::new(0),
            settled: tokio::sync::Notify::new(),
        }
    }
}

impl Store for GatedStore {
    async fn claim(&self, ns: &str, id: &str, lease: Duration) -> Result<Claim, StoreError> {
        self.inner.claim(ns, id, lease).await
    }
    async fn renew(&self, ns: &str, id: &str, t: ClaimToken, lease: Duration) -> Result<bool, StoreError> {
        self.inner.renew(ns, id, t, lease).await
    }
    async fn complete(
        &self,
        ns: &str,
        id: &str,
        t: ClaimToken,
        r: Duration,
    ) -> Result<Completion, StoreError> {
        let _permit = self
            .gate
            .acquire()
            .await
            .map_err(|_| StoreError::new("gate closed"))?;
        let done = self.inner.complete(ns, id, t, r).await;
        self.settled.notify_one();
        done
    }
    async fn release(&self, ns: &str, id: &str, t: ClaimToken) -> Result<bool, StoreError> {
        let _permit = self
            .gate
            .acquire()
            .await
            .map_err(|_| StoreError::new("gate closed"))?;
        let released = self.inner.release(ns, id, t).await;
        self.settled.notify_one();
        released
    }
}

/// Cancels a settle while its store call is in flight (a client disconnect or an
/// outer timeout), then lets the store answer: the id must end where the settle
/// was taking it, not stuck in flight.
async fn cancel_settle_mid_call(settle: impl FnOnce(payhook_core::ClaimGuard) -> Settle) -> Claim {
    let store = Arc::new(GatedStore::default());
    let receiver = builder()
        .shared_store(store.clone())
        .namespace("cancel")
        .build()
        .unwrap();
    let signed = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), SECRET).unwrap();
    let ReceiveOutcome::Deliver(delivery) = receiver.receive(&headers(&signed.signature), signed.body).await
    else {
        panic!("not delivered")
    };
    let id = delivery.event().id().to_owned();
    let cancelled = tokio::time::timeout(Duration::from_millis(50), settle(delivery.into_claim())).await;
    assert!(
        cancelled.is_err(),
        "the gated store answered before the gate opened"
    );
    // The settle was cancelled half-way; now the store answers.
    store.gate.add_permits(1);
    tokio::time::timeout(Duration::from_secs(5), store.settled.notified())
        .await
        .expect("the cancelled settle never reached the store");
    store
        .inner
        .claim("cancel", &id, Duration::from_secs(60))
        .await
        .unwrap()
}

type Settle = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

#[tokio::test]
async fn a_complete_cancelled_mid_call_still_marks_the_event_done() {
    let state = cancel_settle_mid_call(|claim| {
        Box::pin(async move {
            claim.settle(http::StatusCode::OK).await;
        })
    })
    .await;
    assert_eq!(state, Claim::Done, "the id was left neither done nor released");
}

#[tokio::test]
async fn a_release_cancelled_mid_call_still_releases_the_claim() {
    let state = cancel_settle_mid_call(|claim| Box::pin(claim.settle(http::StatusCode::BAD_GATEWAY))).await;
    assert!(
        matches!(state, Claim::Claimed(_)),
        "the id was left in flight: {state:?}"
    );
}

/// Everything logged while the guard lives, as the plain text a log file gets.
#[derive(Clone, Default)]
struct CapturedLog(Arc<std::sync::Mutex<Vec<u8>>>);

impl CapturedLog {
    fn start(&self) -> tracing::subscriber::DefaultGuard {
        let sink = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_signed_event_id_cannot_forge_a_log_line() {
    let log = CapturedLog::default();
    let _logging = log.start();
    let receiver = builder().build().unwrap();
    let forged = "evt_1\n2026-01-01T00:00:00Z ERROR payhook: forged\u{1b}[2J";
    let body = EventBuilder::other("customer.created\r\nforged")
        .id(forged)
        .to_json();
    let signed = SignedDelivery::now(body, SECRET).unwrap();
    let deliver = || receiver.receive(&headers(&signed.signature), signed.body.clone());
    let ReceiveOutcome::Deliver(delivery) = deliver().await else {
        panic!("not delivered")
    };
    assert_eq!(delivery.event().id(), forged, "the handler gets the id as sent");
    // The same id while the first is in flight: a 409 whose body quotes the id.
    let busy = match deliver().await {
        ReceiveOutcome::Respond(reply) => reply,
        ReceiveOutcome::Deliver(_) => panic!("second delivery of an in-flight id"),
    };
    assert_error(
        &busy,
        409,
        r"event evt_1\n2026-01-01T00:00:00Z ERROR payhook: forged\u{1b}[2J is being handled by another delivery; retry later",
    );
    delivery.into_claim().settle(http::StatusCode::OK).await;
    assert_eq!(
        reply_to(&receiver, &headers(&signed.signature), signed.body.clone()).await,
        Reply::received()
    );

    let text = log.text();
    assert!(!text.contains('\u{1b}'), "raw ESC reached the log:\n{text}");
    assert!(!text.contains('\r'), "raw CR reached the log:\n{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.len() >= 4,
        "expected claim, 409, completion and duplicate lines:\n{text}"
    );
    for line in &lines {
        // Every line is one the subscriber began: a timestamp of today, not 2026-01-01.
        assert!(
            line.len() > 30 && !line.starts_with("2026-01-01T00:00:00Z"),
            "forged line: {line:?}"
        );
        assert!(line.contains("payhook"), "line not written by payhook: {line:?}");
    }
    assert!(
        text.contains(r"event_id=evt_1\n2026-01-01T00:00:00Z ERROR payhook: forged\u{1b}[2J"),
        "the id is not shown escaped:\n{text}"
    );
    assert!(text.contains(r"event_type=customer.created\r\nforged"), "{text}");
}

#[tokio::test]
async fn a_huge_signed_amount_gets_a_short_precise_400() {
    let log = CapturedLog::default();
    let _logging = log.start();
    let receiver = builder().build().unwrap();
    let amount = format!("1{}", "0".repeat(200 * 1024));
    let body = EventBuilder::payment_intent_succeeded()
        .amount(777)
        .to_json()
        .replace(r#""amount":777"#, &format!(r#""amount":{amount}"#));
    let signed = SignedDelivery::now(body, SECRET).unwrap();
    let reply = reply_to(&receiver, &headers(&signed.signature), signed.body).await;
    assert_eq!(reply.status().as_u16(), 400);
    assert!(
        reply.body().starts_with(&format!(
            "Webhook Error: invalid payload: data.object: amount 1{}… is larger than 2^128 - 1",
            "0".repeat(63)
        )),
        "{reply:?}"
    );
    assert!(
        reply.body().len() < 400,
        "{} bytes: {}",
        reply.body().len(),
        reply.body()
    );
    let text = log.text();
    assert!(text.contains("delivery rejected"), "{text}");
    assert!(text.len() < 1000, "{} bytes of log for one rejection", text.len());
}

#[tokio::test]
async fn a_megabyte_event_id_gets_a_short_409_and_short_logs() {
    let log = CapturedLog::default();
    let _logging = log.start();
    let receiver = builder().body_limit(4 * 1024 * 1024).build().unwrap();
    let id = format!("evt_{}", "x".repeat(1024 * 1024));
    let signed =
        SignedDelivery::now(EventBuilder::payment_intent_succeeded().id(&id).to_json(), SECRET).unwrap();
    let ReceiveOutcome::Deliver(first) = receiver
        .receive(&headers(&signed.signature), signed.body.clone())
        .await
    else {
        panic!("not delivered")
    };
    let busy = reply_to(&receiver, &headers(&signed.signature), signed.body.clone()).await;
    assert_error(
        &busy,
        409,
        &format!(
            "event evt_{}… is being handled by another delivery; retry later",
            "x".repeat(60)
        ),
    );
    first.into_claim().settle(HandlerOutcome::Failed).await;
    let text = log.text();
    assert!(text.lines().count() >= 3, "{text}");
    for line in text.lines() {
        assert!(line.len() < 400, "a {}-byte log line", line.len());
    }
}

#[tokio::test]
async fn the_largest_accepted_settings_deliver_settle_and_dedupe_without_panicking() {
    use payhook_core::defaults::MAX_DURATION;
    let receiver = builder()
        .lease(MAX_DURATION)
        .retention(MAX_DURATION)
        .body_limit(usize::MAX)
        .tolerance(Duration::MAX)
        .body_timeout(Duration::MAX)
        .build()
        .unwrap();
    let mut declared = HeaderMap::new();
    declared.insert("content-length", "18446744073709551615".parse().unwrap());
    assert!(payhook_core::adapter::BodyIntake::new(&receiver, &declared).is_ok());
    // A timestamp from 1970 passes an unbounded tolerance.
    let event = EventBuilder::payment_intent_succeeded();
    let signed = SignedDelivery::at(event.to_json(), SECRET, 0).unwrap();
    let deliver = || receiver.receive(&headers(&signed.signature), signed.body.clone());
    let ReceiveOutcome::Deliver(first) = deliver().await else {
        panic!("not delivered")
    };
    first.into_claim().settle(HandlerOutcome::Failed).await;
    let ReceiveOutcome::Deliver(second) = deliver().await else {
        panic!("release did not give the id back")
    };
    second.into_claim().settle(http::StatusCode::OK).await;
    assert!(matches!(deliver().await, ReceiveOutcome::Respond(r) if r == Reply::received()));
}

#[tokio::test]
async fn the_builders_tolerance_is_the_one_checked_and_zero_means_exactly_now() {
    let now = 2_000_000_000;
    let body = EventBuilder::payment_intent_succeeded().to_json();
    let at = |t: u64| SignedDelivery::at(body.clone(), SECRET, t).unwrap();
    let ten = builder()
        .clock(FixedClock::new(now as i64))
        .tolerance(Duration::from_secs(10))
        .build()
        .unwrap();
    for inside in [at(now - 10), at(now + 10)] {
        let outcome = ten.receive(&headers(&inside.signature), inside.body).await;
        assert!(matches!(outcome, ReceiveOutcome::Deliver(_)), "{outcome:?}");
    }
    let old = at(now - 11);
    assert_error(
        &reply_to(&ten, &headers(&old.signature), old.body).await,
        400,
        "timestamp is 11 s old, outside the 10 s tolerance",
    );
    let zero = builder()
        .clock(FixedClock::new(now as i64))
        .tolerance(Duration::ZERO)
        .build()
        .unwrap();
    let exact = at(now);
    assert!(matches!(
        zero.receive(&headers(&exact.signature), exact.body).await,
        ReceiveOutcome::Deliver(_)
    ));
    let ahead = at(now + 1);
    assert_error(
        &reply_to(&zero, &headers(&ahead.signature), ahead.body).await,
        400,
        "timestamp is 1 s in the future, outside the 0 s tolerance",
    );
}

/// A memory store with knobs: renewals that fail, a complete whose reply is
/// "lost" and retried, and a count of renewals.
#[derive(Default)]
struct FlakyStore {
    inner: MemoryStore,
    renewals: AtomicUsize,
    renew_fails: bool,
    complete_retried: bool,
}

impl Store for FlakyStore {
    async fn claim(&self, ns: &str, id: &str, lease: Duration) -> Result<Claim, StoreError> {
        self.inner.claim(ns, id, lease).await
    }
    async fn renew(&self, ns: &str, id: &str, t: ClaimToken, lease: Duration) -> Result<bool, StoreError> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        if self.renew_fails {
            return Err(StoreError::timed_out("timed out"));
        }
        self.inner.renew(ns, id, t, lease).await
    }
    async fn complete(
        &self,
        ns: &str,
        id: &str,
        t: ClaimToken,
        r: Duration,
    ) -> Result<Completion, StoreError> {
        if self.complete_retried {
            // Applied, but the reply never came back; the call is retried.
            let _lost = self.inner.complete(ns, id, t, r).await?;
        }
        self.inner.complete(ns, id, t, r).await
    }
    async fn release(&self, ns: &str, id: &str, t: ClaimToken) -> Result<bool, StoreError> {
        self.inner.release(ns, id, t).await
    }
}

#[tokio::test]
async fn a_handler_running_three_leases_long_runs_once_under_concurrent_retries() {
    let log = CapturedLog::default();
    let _logging = log.start();
    let store = Arc::new(FlakyStore::default());
    let lease = Duration::from_secs(1);
    let receiver = builder()
        .shared_store(store.clone())
        .namespace("slow")
        .lease(lease)
        .build()
        .unwrap();
    let signed = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), SECRET).unwrap();
    let deliver = || receiver.receive(&headers(&signed.signature), signed.body.clone());
    let ReceiveOutcome::Deliver(slow) = deliver().await else {
        panic!("not delivered")
    };
    // The handler runs for three leases; the sender retries all along.
    let handler_ends = tokio::time::Instant::now() + 3 * lease + Duration::from_millis(200);
    let mut retries = 0;
    while tokio::time::Instant::now() < handler_ends {
        match deliver().await {
            ReceiveOutcome::Deliver(_) => {
                panic!("a retry ran the handler a second time after {retries} retries")
            }
            ReceiveOutcome::Respond(reply) => assert_eq!(reply.status().as_u16(), 409, "{reply:?}"),
        }
        retries += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(retries > 25, "only {retries} retries");
    let renewed = store.renewals.load(Ordering::SeqCst);
    assert!(
        renewed >= 8,
        "the lease was renewed {renewed} times in 3.2 leases"
    );
    slow.into_claim().settle(http::StatusCode::OK).await;
    assert!(log.text().contains("delivery completed"), "{}", log.text());
    assert!(matches!(deliver().await, ReceiveOutcome::Respond(r) if r == Reply::received()));
    // Settled: the renewals stop.
    tokio::time::sleep(lease).await;
    assert_eq!(
        store.renewals.load(Ordering::SeqCst),
        renewed,
        "renewal kept running"
    );
}

#[tokio::test]
async fn a_completion_refused_because_the_lease_was_lost_is_an_error() {
    let log = CapturedLog::default();
    let _logging = log.start();
    let store = Arc::new(FlakyStore {
        renew_fails: true,
        ..FlakyStore::default()
    });
    let lease = Duration::from_secs(1);
    let receiver = builder()
        .shared_store(store.clone())
        .namespace("lost")
        .lease(lease)
        .build()
        .unwrap();
    let signed = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), SECRET).unwrap();
    let deliver = || receiver.receive(&headers(&signed.signature), signed.body.clone());
    let ReceiveOutcome::Deliver(first) = deliver().await else {
        panic!("not delivered")
    };
    // The store cannot renew; the lease runs out and a retry takes the event over.
    tokio::time::sleep(lease + Duration::from_millis(300)).await;
    let ReceiveOutcome::Deliver(second) = deliver().await else {
        panic!("the expired claim was not handed on")
    };
    // The first handler finishes late: still acknowledged, but the refusal is an ERROR.
    first.into_claim().settle(http::StatusCode::OK).await;
    let text = log.text();
    assert!(
        text.contains("WARN") && text.contains("lease could not be renewed; trying again reason=timed out"),
        "{text}"
    );
    let refused: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("handler finished but its lease was lost"))
        .collect();
    assert_eq!(refused.len(), 1, "{text}");
    assert!(refused[0].contains("ERROR"), "{}", refused[0]);
    assert!(!text.contains("delivery completed"), "{text}");
    // The new owner's completion is the one that counts.
    second.into_claim().settle(http::StatusCode::OK).await;
    assert!(log.text().contains("delivery completed"));
}

#[tokio::test]
async fn a_completion_applied_twice_says_what_is_known() {
    let log = CapturedLog::default();
    let _logging = log.start();
    let store = Arc::new(FlakyStore {
        complete_retried: true,
        ..FlakyStore::default()
    });
    let receiver = builder()
        .shared_store(store.clone())
        .namespace("retried")
        .build()
        .unwrap();
    let signed = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), SECRET).unwrap();
    let ReceiveOutcome::Deliver(delivery) = receiver
        .receive(&headers(&signed.signature), signed.body.clone())
        .await
    else {
        panic!("not delivered")
    };
    delivery.into_claim().settle(http::StatusCode::OK).await;
    let text = log.text();
    let line = text
        .lines()
        .find(|line| line.contains("the event was already marked done"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("WARN"), "{line}");
    assert!(
        line.contains("an earlier attempt of this completion was applied and its reply lost"),
        "{line}"
    );
    assert!(!text.contains("took the event over"), "{text}");
    assert!(!text.contains("ERROR"), "{text}");
    assert_eq!(
        reply_to(&receiver, &headers(&signed.signature), signed.body).await,
        Reply::received()
    );
}

#[tokio::test]
async fn a_store_failing_after_the_claim_still_acknowledges_success_and_logs_both_failures() {
    let log = CapturedLog::default();
    let _logging = log.start();
    // A store that stops answering after the claim, like a Redis that went
    // away while the handler ran.
    let store = FailingStore::new();
    store.fail_renewals(true);
    store.fail_settles(true);
    let receiver = builder().store(store).namespace("gone").build().unwrap();
    let handled = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), SECRET).unwrap();
    let ReceiveOutcome::Deliver(delivery) =
        receiver.receive(&headers(&handled.signature), handled.body).await
    else {
        panic!("not delivered")
    };
    // The handler succeeded: 200, not 503, or the sender would run it again.
    delivery.into_claim().settle(http::StatusCode::OK).await;

    let failed = SignedDelivery::now(EventBuilder::payment_intent_failed().to_json(), SECRET).unwrap();
    let deliver = || receiver.receive(&headers(&failed.signature), failed.body.clone());
    let ReceiveOutcome::Deliver(delivery) = deliver().await else {
        panic!("not delivered")
    };
    delivery.into_claim().settle(HandlerOutcome::Failed).await;
    // The release never reached the store: the retry is refused until the lease ends.
    let ReceiveOutcome::Respond(reply) = deliver().await else {
        panic!("handed out while the unreleased claim lasts")
    };
    assert_eq!(reply.status().as_u16(), 409);

    let text = log.text();
    let line_with = |text: &str, words: &str| {
        text.lines()
            .find(|line| line.contains(words))
            .unwrap_or_else(|| panic!("no {words:?} in:\n{text}"))
            .to_owned()
    };
    let completed = line_with(
        &text,
        "handler succeeded but the event could not be marked done; acknowledging anyway",
    );
    assert!(
        completed.contains("ERROR") && completed.contains("reason=the store is down"),
        "{completed}"
    );
    let released = line_with(
        &text,
        "claim could not be released; a retry is refused until the lease runs out",
    );
    assert!(
        released.contains("ERROR") && released.contains("reason=the store is down"),
        "{released}"
    );
}

#[tokio::test]
async fn a_refused_source_is_logged_once_at_warn_with_hostile_header_text_escaped() {
    let log = CapturedLog::default();
    let _logging = log.start();
    let receiver = builder()
        .allowed_networks(["198.51.100.0/24"])
        .trusted_proxies(["10.0.0.0/8"])
        .build()
        .unwrap();
    let mut forwarded = http::HeaderMap::new();
    // Bytes a header may carry that a terminal or log reader acts on.
    let hostile = "\u{202e}evil\u{85}\u{2028}FORGED ERROR payhook: x";
    forwarded.insert(
        "x-forwarded-for",
        http::HeaderValue::from_bytes(format!("198.51.100.7, {hostile}").as_bytes()).unwrap(),
    );
    let refused = receiver
        .check_source(Some("10.0.0.2".parse().unwrap()), &forwarded, "")
        .unwrap_err();
    assert_eq!(refused.status(), 403);
    assert!(
        !refused.body().contains("evil"),
        "the reply is fixed: {}",
        refused.body()
    );
    let stranger = receiver
        .check_source(Some("192.0.2.1".parse().unwrap()), &http::HeaderMap::new(), "")
        .unwrap_err();
    assert_eq!(stranger, refused);

    let text = log.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines.iter().all(|line| line.contains(" WARN ")), "{text}");
    assert!(
        lines[0].contains(r#"X-Forwarded-For entry "\u{202e}evil\u{85}\u{2028}FORGED ERROR payhook: x""#),
        "{text}"
    );
    assert!(lines[0].contains("peer=10.0.0.2"), "{text}");
    assert!(lines[1].contains("peer=192.0.2.1 client=192.0.2.1"), "{text}");
    assert!(!text.contains(['\u{202e}', '\u{85}', '\u{2028}']), "{text}");
}
