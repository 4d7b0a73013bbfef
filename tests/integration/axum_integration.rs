//! axum-specific behaviour of `WebhookLayer`, `Webhook<T>`, `Received` and
//! `EventHandlers`, each over real HTTP on loopback.

use crate::axum_loopback;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use axum_loopback::serve;
use payhook::sender::{EventBuilder, SignedDelivery};
use payhook::tower::axum::{EventHandlers, Received, Webhook};
use payhook::tower::WebhookLayer;
use payhook::{Event, PaymentIntent, Receiver};
use tokio::io::AsyncWriteExt;

const SECRET: &str = "whsec_axum_integration";

fn layer() -> WebhookLayer {
    WebhookLayer::new(
        Receiver::builder()
            .secret(SECRET)
            .build()
            .expect("valid receiver"),
    )
}

#[derive(Debug)]
struct Answer {
    status: u16,
    body: String,
}

async fn post_to(
    addr: SocketAddr,
    path: &str,
    body: impl Into<reqwest::Body>,
    signature: Option<&str>,
) -> Answer {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .body(body);
    if let Some(signature) = signature {
        request = request.header("x-service-signature", signature);
    }
    let response = request.send().await.expect("the test server answers");
    let status = response.status().as_u16();
    Answer {
        status,
        body: response.text().await.expect("reply body"),
    }
}

async fn deliver(addr: SocketAddr, path: &str, event: &EventBuilder) -> Answer {
    let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    post_to(addr, path, signed.body, Some(&signed.signature)).await
}

const RECEIVED: &str = r#"{"received":true}"#;

/// What the handlers of a test saw, in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn push(&self, entry: String) {
        self.0.lock().unwrap().push(entry);
    }
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

async fn record_event(State(seen): State<Seen>, Webhook(event): Webhook) -> Received {
    seen.push(event.id().to_owned());
    Received
}

#[tokio::test]
async fn route_layer_guards_the_webhook_route_and_leaves_other_routes_alone() {
    let seen = Seen::default();
    let app = Router::new()
        .route("/webhooks", post(record_event))
        .route_layer(layer())
        .route("/health", get(|| async { "ok" }))
        .route(
            "/orders",
            post(|body: String| async move { format!("order {body}") }),
        )
        .with_state(seen.clone());
    let addr = serve(app).await;

    let event = EventBuilder::payment_intent_succeeded();
    assert_eq!(deliver(addr, "/webhooks", &event).await.body, RECEIVED);
    assert_eq!(seen.all(), [event.event_id()]);

    let unsigned = post_to(addr, "/webhooks", event.to_json(), None).await;
    assert_eq!(unsigned.status, 400);
    assert_eq!(unsigned.body, "Webhook Error: missing x-service-signature header");

    // Unsigned requests to other routes pass untouched, body included.
    let order = post_to(addr, "/orders", "#17", None).await;
    assert_eq!((order.status, order.body.as_str()), (200, "order #17"));
    let health = reqwest::get(format!("http://{addr}/health")).await.unwrap();
    assert_eq!(health.text().await.unwrap(), "ok");
    assert_eq!(seen.all().len(), 1);
}

#[tokio::test]
async fn a_nested_webhook_router_works_under_its_prefix() {
    let seen = Seen::default();
    let webhooks = Router::new()
        .route("/webhooks", post(record_event))
        .route_layer(layer());
    let app = Router::new()
        .nest("/api/v1", webhooks)
        .route("/", get(|| async { "home" }))
        .with_state(seen.clone());
    let addr = serve(app).await;

    let event = EventBuilder::payment_intent_failed();
    let answer = deliver(addr, "/api/v1/webhooks", &event).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, RECEIVED));
    let duplicate = deliver(addr, "/api/v1/webhooks", &event).await;
    assert_eq!((duplicate.status, duplicate.body.as_str()), (200, RECEIVED));
    assert_eq!(seen.all(), [event.event_id()]);

    let wrong = SignedDelivery::now(event.to_json(), "whsec_someone_else").unwrap();
    let answer = post_to(addr, "/api/v1/webhooks", wrong.body, Some(&wrong.signature)).await;
    assert_eq!(answer.status, 400);
    assert_eq!(
        reqwest::get(format!("http://{addr}/"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "home"
    );
}

#[derive(Clone)]
struct Shop {
    paid: Seen,
    label: &'static str,
}

/// `Webhook` composes with `State`, `HeaderMap` and a body extractor.
async fn shop_webhook(
    State(shop): State<Shop>,
    headers: HeaderMap,
    Webhook(intent): Webhook<PaymentIntent>,
    Webhook(event): Webhook,
    body: String,
) -> Received {
    assert!(headers.contains_key("x-service-signature"));
    assert!(body.contains(&intent.id), "the raw body is still readable");
    shop.paid.push(format!(
        "{} {} {} {}",
        shop.label,
        event.id(),
        intent.amount,
        intent.currency
    ));
    Received
}

#[tokio::test]
async fn with_state_and_other_extractors() {
    let shop = Shop {
        paid: Seen::default(),
        label: "shop-1",
    };
    let app = Router::new()
        .route("/webhooks", post(shop_webhook))
        .route_layer(layer())
        .with_state(shop.clone());
    let addr = serve(app).await;

    let wei = 3 * 10u128.pow(24); // beyond u64: must arrive exact
    let event = EventBuilder::payment_succeeded().currency("eth").amount(wei);
    assert_eq!(deliver(addr, "/webhooks", &event).await.body, RECEIVED);
    assert_eq!(
        shop.paid.all(),
        [format!("shop-1 {} {wei} eth", event.event_id())]
    );

    // `Webhook<PaymentIntent>` on an event without one is a 400, not a handler run.
    let other = EventBuilder::other("customer.created");
    let answer = deliver(addr, "/webhooks", &other).await;
    assert_eq!(answer.status, 400);
    assert_eq!(
        answer.body,
        "Webhook Error: invalid payload: customer.created events carry no payment intent"
    );
    assert_eq!(shop.paid.all().len(), 1);
}

#[tokio::test]
async fn extractor_and_event_handlers_without_the_layer_answer_500_naming_it() {
    let app = Router::new()
        .route("/webhooks", post(record_event))
        .route("/typed", post(EventHandlers::new().other(record_event)))
        .with_state(Seen::default());
    let addr = serve(app).await;
    for path in ["/webhooks", "/typed"] {
        let answer = deliver(addr, path, &EventBuilder::payment_intent_succeeded()).await;
        assert_eq!(answer.status, 500, "{path}: {answer:?}");
        assert_eq!(
            answer.body,
            "Webhook Error: server misconfigured: this webhook route has no payhook receiver; \
             add `.route_layer(WebhookLayer::new(receiver))` to its router so deliveries are verified first",
            "{path}"
        );
    }
}

async fn as_json(Webhook(value): Webhook<serde_json::Value>) -> String {
    format!(
        "{} {}",
        value["id"].as_str().unwrap_or_default(),
        value["data"]["object"]["currency"]
    )
}

async fn as_string_map(Webhook(_map): Webhook<HashMap<String, String>>) -> Received {
    Received
}

#[tokio::test]
async fn custom_payload_types_are_parsed_from_the_raw_body() {
    let app = Router::new()
        .route("/json", post(as_json))
        .route("/strings", post(as_string_map))
        .route_layer(layer());
    let addr = serve(app).await;

    let event = EventBuilder::payment_intent_succeeded().currency("btc");
    let answer = deliver(addr, "/json", &event).await;
    assert_eq!(
        (answer.status, answer.body),
        (200, format!("{} \"btc\"", event.event_id()))
    );

    // The body does not fit the handler's type: 400, and nothing is marked
    // done, so the same event is refused again rather than acknowledged.
    let event = EventBuilder::payment_intent_succeeded();
    for _ in 0..2 {
        let answer = deliver(addr, "/strings", &event).await;
        assert_eq!(answer.status, 400, "{answer:?}");
        assert!(
            answer
                .body
                .starts_with("Webhook Error: invalid payload: invalid type: "),
            "{answer:?}"
        );
    }
}

async fn succeeded(
    State(seen): State<Seen>,
    Webhook(intent): Webhook<PaymentIntent>,
    Webhook(event): Webhook,
) -> Received {
    seen.push(format!("succeeded {} {}", event.event_type(), intent.id));
    Received
}

async fn failed(State(seen): State<Seen>, Webhook(event): Webhook<Event>) -> Response {
    seen.push(format!("failed {}", event.id()));
    // The first failure cannot be stored: not acknowledged, so it is retried.
    if seen.all().iter().filter(|s| s.starts_with("failed")).count() == 1 {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    Received.into_response()
}

async fn other(State(seen): State<Seen>, Webhook(event): Webhook) -> Received {
    seen.push(format!("other {}", event.event_type()));
    Received
}

#[tokio::test]
async fn event_handlers_send_each_kind_to_its_handler() {
    let seen = Seen::default();
    let handlers = EventHandlers::new()
        .payment_succeeded(succeeded)
        .payment_failed(failed)
        .other(other);
    let without_other = EventHandlers::new().payment_succeeded(succeeded);
    let app = Router::new()
        .route("/webhooks", post(handlers))
        .route("/payments-only", post(without_other))
        .route_layer(layer())
        .with_state(seen.clone());
    let addr = serve(app).await;

    let paid = EventBuilder::payment_intent_succeeded().payment_intent_id("pi_a");
    let paid_other_spelling = EventBuilder::payment_succeeded().payment_intent_id("pi_b");
    let customer = EventBuilder::other("customer.created");
    for event in [&paid, &paid_other_spelling, &customer] {
        assert_eq!(deliver(addr, "/webhooks", event).await.body, RECEIVED);
    }
    let failure = EventBuilder::payment_intent_failed();
    assert_eq!(deliver(addr, "/webhooks", &failure).await.status, 503);
    assert_eq!(
        deliver(addr, "/webhooks", &failure).await.body,
        RECEIVED,
        "retry after the release"
    );
    assert_eq!(
        seen.all(),
        [
            "succeeded payment_intent.succeeded pi_a".to_owned(),
            "succeeded payment.succeeded pi_b".to_owned(),
            "other customer.created".to_owned(),
            format!("failed {}", failure.event_id()),
            format!("failed {}", failure.event_id()),
        ]
    );

    // A kind with no handler is acknowledged without running anything.
    let before = seen.all().len();
    for event in [
        EventBuilder::other("payout.paid"),
        EventBuilder::payment_intent_failed(),
    ] {
        let answer = deliver(addr, "/payments-only", &event).await;
        assert_eq!((answer.status, answer.body.as_str()), (200, RECEIVED));
    }
    assert_eq!(seen.all().len(), before);
}

#[tokio::test]
async fn a_client_that_disconnects_mid_handler_releases_the_claim() {
    #[derive(Clone)]
    struct Slow {
        runs: Seen,
        started: Arc<tokio::sync::Notify>,
    }
    async fn slow_once(State(slow): State<Slow>, Webhook(event): Webhook) -> Received {
        slow.runs.push(event.id().to_owned());
        if slow.runs.all().len() == 1 {
            slow.started.notify_one();
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        Received
    }
    let slow = Slow {
        runs: Seen::default(),
        started: Arc::new(tokio::sync::Notify::new()),
    };
    let app = Router::new()
        .route("/webhooks", post(slow_once))
        .route_layer(layer())
        .with_state(slow.clone());
    let addr = serve(app).await;

    let event = EventBuilder::payment_intent_succeeded();
    let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /webhooks HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         x-service-signature: {}\r\ncontent-length: {}\r\n\r\n",
        signed.signature,
        signed.body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&signed.body).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), slow.started.notified())
        .await
        .expect("the handler starts");
    drop(stream); // the client goes away while the handler runs

    // The server drops the request's future, which releases the claim: the
    // sender's retry runs the handler instead of getting 409 for a minute.
    let retry = async {
        loop {
            let answer = post_to(addr, "/webhooks", signed.body.clone(), Some(&signed.signature)).await;
            if answer.status != 409 {
                return answer;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let answer = tokio::time::timeout(Duration::from_secs(5), retry)
        .await
        .expect("the claim is released soon after the disconnect");
    assert_eq!((answer.status, answer.body.as_str()), (200, RECEIVED));
    assert_eq!(slow.runs.all().len(), 2);
}

#[tokio::test]
async fn on_the_method_router_other_methods_keep_their_405() {
    let seen = Seen::default();
    let app = Router::new()
        .route("/webhooks", post(record_event).route_layer(layer()))
        .with_state(seen.clone());
    let addr = serve(app).await;

    let event = EventBuilder::payment_intent_succeeded();
    assert_eq!(deliver(addr, "/webhooks", &event).await.body, RECEIVED);
    assert_eq!(
        post_to(addr, "/webhooks", event.to_json(), None).await.status,
        400
    );
    let get = reqwest::get(format!("http://{addr}/webhooks")).await.unwrap();
    assert_eq!(get.status().as_u16(), 405);
    assert_eq!(seen.all(), [event.event_id()]);
}

async fn three_views(
    Webhook(first): Webhook<Event>,
    Webhook(second): Webhook<Event>,
    Webhook(intent): Webhook<PaymentIntent>,
) -> String {
    // The first extractor takes the layer's event; the others parse the raw body.
    let amount = second.payment_intent().map(|pi| pi.amount);
    format!("{} {} {:?} {}", first.id(), second.id(), amount, intent.amount)
}

#[tokio::test]
async fn several_webhook_extractors_in_one_handler_all_see_the_event() {
    let app = Router::new()
        .route("/webhooks", post(three_views))
        .route_layer(layer());
    let addr = serve(app).await;
    let event = EventBuilder::payment_intent_succeeded().amount(u128::from(u64::MAX) + 7);
    let answer = deliver(addr, "/webhooks", &event).await;
    let id = event.event_id();
    let amount = u128::from(u64::MAX) + 7;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.body, format!("{id} {id} Some({amount}) {amount}"));
}

async fn payout_paid(State(seen): State<Seen>, Webhook(event): Webhook) -> Received {
    seen.push(format!("payout {}", event.event_type()));
    Received
}

async fn exact_success(State(seen): State<Seen>, Webhook(event): Webhook) -> Response {
    seen.push(format!("exact {}", event.event_type()));
    // Fails the first time: `on` handlers settle the claim like any other.
    if seen.all().iter().filter(|s| s.starts_with("exact")).count() == 1 {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    Received.into_response()
}

#[tokio::test]
async fn event_handlers_route_any_type_string_with_on() {
    let seen = Seen::default();
    let handlers = EventHandlers::new()
        .on("payout.paid", payout_paid)
        .on("payment_intent.succeeded", exact_success)
        .payment_succeeded(succeeded)
        .other(other);
    let app = Router::new()
        .route("/webhooks", post(handlers))
        .route_layer(layer())
        .with_state(seen.clone());
    let addr = serve(app).await;

    let payout = EventBuilder::other("payout.paid");
    assert_eq!(deliver(addr, "/webhooks", &payout).await.body, RECEIVED);
    // The exact type wins over the kind shortcut; the other spelling of the
    // success event still goes to the shortcut.
    let paid = EventBuilder::payment_intent_succeeded().payment_intent_id("pi_x");
    assert_eq!(deliver(addr, "/webhooks", &paid).await.status, 500);
    assert_eq!(
        deliver(addr, "/webhooks", &paid).await.body,
        RECEIVED,
        "retry after the release"
    );
    assert_eq!(
        deliver(addr, "/webhooks", &paid).await.body,
        RECEIVED,
        "a duplicate"
    );
    let spelled = EventBuilder::payment_succeeded().payment_intent_id("pi_y");
    assert_eq!(deliver(addr, "/webhooks", &spelled).await.body, RECEIVED);
    let unknown = EventBuilder::other("refund.created");
    assert_eq!(deliver(addr, "/webhooks", &unknown).await.body, RECEIVED);
    // Marked done: a duplicate of the payout runs nothing.
    assert_eq!(deliver(addr, "/webhooks", &payout).await.body, RECEIVED);
    assert_eq!(
        seen.all(),
        [
            "payout payout.paid",
            "exact payment_intent.succeeded",
            "exact payment_intent.succeeded",
            "succeeded payment.succeeded pi_y",
            "other refund.created",
        ]
    );
}

#[tokio::test]
async fn event_handlers_send_a_payment_without_its_shortcut_to_other() {
    // The catch-all takes what nothing else does, known kinds included: the
    // same rule as the actix adapter (payhook_core::adapter::HandlerTable).
    let seen = Seen::default();
    let app = Router::new()
        .route("/webhooks", post(EventHandlers::new().other(other)))
        .route_layer(layer())
        .with_state(seen.clone());
    let addr = serve(app).await;
    let paid = EventBuilder::payment_intent_succeeded();
    assert_eq!(deliver(addr, "/webhooks", &paid).await.body, RECEIVED);
    assert_eq!(seen.all(), ["other payment_intent.succeeded".to_owned()]);
}
