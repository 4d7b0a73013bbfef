//! The extractor in-process, through `actix_web::test`: custom payload types,
//! explicit release, rejections seen by the handler, per-resource configuration
//! and the `testing` helper. (Real-server behaviour is tested at the workspace
//! root, in `tests/integration/actix_behaviour.rs`.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use actix_web::{test, web, App, HttpResponse};
use payhook_actix::testing::SignedDeliveryExt;
use payhook_actix::{Rejection, Webhook, WebhookConfig};
use payhook_core::sender::{EventBuilder, SignedDelivery};
use payhook_core::{EventKind, Receiver};
use serde::Deserialize;

const SECRET: &str = "whsec_extractor_tests";

fn config() -> WebhookConfig {
    WebhookConfig::new(Receiver::builder().secret(SECRET).build().unwrap())
}

fn signed(event: &EventBuilder) -> SignedDelivery {
    SignedDelivery::now(event.to_json(), SECRET).unwrap()
}

/// Sends `delivery` to `/webhooks` on `app`; the status and the body text.
/// (A macro: the request type of `test::init_service`'s service cannot be named.)
macro_rules! send {
    ($app:expr, $delivery:expr) => {{
        let response = test::call_service($app, $delivery.to_test_request("/webhooks").to_request()).await;
        let status = response.status().as_u16();
        let body = test::read_body(response).await;
        (status, String::from_utf8_lossy(&body).into_owned())
    }};
}

/// Counts handler runs.
#[derive(Clone, Default)]
struct Runs(Arc<AtomicUsize>);

impl Runs {
    fn bump(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Debug, Deserialize)]
struct Payout {
    id: String,
    data: PayoutData,
}

#[derive(Debug, Deserialize)]
struct PayoutData {
    object: PayoutObject,
}

#[derive(Debug, Deserialize)]
struct PayoutObject {
    amount: u128,
    destination: String,
}

async fn payout_handler(webhook: Webhook<Payout>, runs: web::Data<Runs>) -> HttpResponse {
    runs.bump();
    let body = format!(
        "{} {} {}",
        webhook.id, webhook.data.object.amount, webhook.data.object.destination
    );
    let _ = webhook.ack().await;
    HttpResponse::Ok().body(body)
}

#[actix_web::test]
async fn custom_type_is_parsed_and_a_misfit_releases_the_claim() {
    let runs = Runs::default();
    let app = test::init_service(
        App::new()
            .app_data(config())
            .app_data(web::Data::new(runs.clone()))
            .route("/webhooks", web::post().to(payout_handler)),
    )
    .await;
    let amount = u128::from(u64::MAX) * 1000; // beyond u64: must arrive exact
    let payout = |destination: Option<&str>| {
        let destination = destination.map_or(String::new(), |d| format!(r#","destination":"{d}""#));
        EventBuilder::other("payout.paid")
            .id("evt_payout_1")
            .data(format!(r#"{{"object":{{"amount":{amount}{destination}}}}}"#))
    };

    // Genuine, but not a Payout: 400, no handler run, claim released.
    let (status, body) = send!(&app, signed(&payout(None)));
    assert_eq!(status, 400, "{body}");
    assert!(
        body.starts_with("Webhook Error: invalid payload: missing field `destination`"),
        "{body}"
    );
    assert_eq!(runs.get(), 0);

    // The same id again, now fitting: handled, not refused as in flight.
    let (status, body) = send!(&app, signed(&payout(Some("ba_9"))));
    assert_eq!(
        (status, body.as_str()),
        (200, format!("evt_payout_1 {amount} ba_9").as_str())
    );
    assert_eq!(runs.get(), 1);
    // `ack()` marked it done: the next delivery is a duplicate, not a second run.
    assert_eq!(
        send!(&app, signed(&payout(Some("ba_9")))),
        (200, r#"{"received":true}"#.to_owned())
    );
    assert_eq!(runs.get(), 1);
}

async fn event_handler(webhook: Webhook) -> HttpResponse {
    let summary = match webhook.kind() {
        EventKind::PaymentIntentSucceeded(pi) => {
            format!("{} paid {} {}", webhook.event_id(), pi.amount, pi.currency)
        }
        _ => format!("{} other", webhook.event_id()),
    };
    let raw_len = webhook.body().len();
    let _ = webhook.ack().await;
    HttpResponse::Ok().body(format!("{summary} ({raw_len} bytes)"))
}

#[actix_web::test]
async fn default_type_is_the_pipelines_event() {
    let app = test::init_service(
        App::new()
            .app_data(config())
            .route("/webhooks", web::post().to(event_handler)),
    )
    .await;
    let event = EventBuilder::payment_succeeded()
        .id("evt_ev_1")
        .amount(10u128.pow(21))
        .currency("eth");
    let delivery = signed(&event);
    let (status, body) = send!(&app, &delivery);
    assert_eq!(status, 200);
    assert_eq!(
        body,
        format!(
            "evt_ev_1 paid {} eth ({} bytes)",
            10u128.pow(21),
            delivery.body.len()
        )
    );
    // `ack()` marked it done: the handler's summary is not produced again.
    assert_eq!(send!(&app, &delivery), (200, r#"{"received":true}"#.to_owned()));
}

async fn releasing_handler(webhook: Webhook, runs: web::Data<Runs>) -> HttpResponse {
    runs.bump();
    if runs.get() == 1 {
        webhook.release().await;
        return HttpResponse::ServiceUnavailable().finish();
    }
    webhook.ack().await
}

#[actix_web::test]
async fn explicit_release_lets_the_retry_run() {
    let runs = Runs::default();
    let app = test::init_service(
        App::new()
            .app_data(config())
            .app_data(web::Data::new(runs.clone()))
            .route("/webhooks", web::post().to(releasing_handler)),
    )
    .await;
    let delivery = signed(&EventBuilder::payment_intent_failed());
    assert_eq!(send!(&app, &delivery).0, 503);
    assert_eq!(send!(&app, &delivery), (200, r#"{"received":true}"#.to_owned()));
    assert_eq!(send!(&app, &delivery), (200, r#"{"received":true}"#.to_owned()));
    assert_eq!(runs.get(), 2);
}

async fn observing_handler(webhook: Result<Webhook, Rejection>) -> HttpResponse {
    match webhook {
        Ok(webhook) => webhook.ack().await,
        Err(rejection) => HttpResponse::Ok().body(format!(
            "duplicate={} status={} {rejection}",
            rejection.is_duplicate(),
            rejection.reply().status().as_u16(),
        )),
    }
}

#[actix_web::test]
async fn handler_can_observe_rejections() {
    let app = test::init_service(
        App::new()
            .app_data(config())
            .route("/webhooks", web::post().to(observing_handler)),
    )
    .await;
    let delivery = signed(&EventBuilder::payment_intent_succeeded());
    assert_eq!(send!(&app, &delivery).1, r#"{"received":true}"#);
    assert_eq!(
        send!(&app, &delivery).1,
        r#"duplicate=true status=200 {"received":true}"#
    );
    let forged = SignedDelivery::now(delivery.body.clone(), "whsec_forger").unwrap();
    let (_, body) = send!(&app, &forged);
    assert!(
        body.starts_with("duplicate=false status=400 Webhook Error: no signature matches"),
        "{body}"
    );
}

#[actix_web::test]
async fn resource_configuration_overrides_the_apps() {
    let other = WebhookConfig::new(
        Receiver::builder()
            .secret("whsec_other_endpoint")
            .header_name("x-other-signature")
            .build()
            .unwrap(),
    );
    let app = test::init_service(
        App::new().app_data(config()).service(
            web::resource("/other")
                .app_data(other)
                .route(web::post().to(event_handler)),
        ),
    )
    .await;
    let event = EventBuilder::payment_intent_succeeded().id("evt_other_1");
    let delivery = SignedDelivery::now(event.to_json(), "whsec_other_endpoint").unwrap();

    let request = delivery.to_test_request_with_header("/other", "x-other-signature");
    let response = test::call_service(&app, request.to_request()).await;
    assert_eq!(response.status(), 200);

    // The app-level secret and header do not apply to this resource.
    let response = test::call_service(&app, signed(&event).to_test_request("/other").to_request()).await;
    assert_eq!(response.status(), 400);
    let body = test::read_body(response).await;
    assert_eq!(&body[..], b"Webhook Error: missing x-other-signature header");
}

#[actix_web::test]
async fn testing_helper_builds_a_genuine_request() {
    let delivery = signed(&EventBuilder::payment_intent_succeeded());
    let request = delivery.to_test_request("/webhooks").to_http_request();
    assert_eq!(request.method(), "POST");
    assert_eq!(request.path(), "/webhooks");
    let header = |name| request.headers().get(name).and_then(|v| v.to_str().ok());
    assert_eq!(header("content-type"), Some("application/json"));
    assert_eq!(header("x-service-signature"), Some(delivery.signature.as_str()));

    // An invalid header name is left out rather than panicking.
    let request = delivery
        .to_test_request_with_header("/webhooks", "bad header")
        .to_http_request();
    assert!(request.headers().get("x-service-signature").is_none());
    let names: Vec<_> = request.headers().keys().map(|name| name.as_str()).collect();
    assert!(
        !names
            .iter()
            .any(|name| name.contains("signature") || name.contains(' ')),
        "{names:?}"
    );
}
