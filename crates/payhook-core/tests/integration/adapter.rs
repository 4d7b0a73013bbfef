//! The adapter interface on its own: body intake under the limit and the body
//! timeout, settling claims from handler outcomes, and the adapters' replies.
#![cfg(feature = "testing")]

use std::convert::Infallible;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use payhook_core::adapter::{not_configured, BodyIntake, HandlerOutcome, ReceiveOutcome};
use payhook_core::sender::{EventBuilder, SignedDelivery};
use payhook_core::{ConfigError, Receiver, Reply};

const SECRET: &str = "whsec_adapter";

fn receiver(limit: usize) -> Receiver {
    Receiver::builder()
        .secret(SECRET)
        .body_limit(limit)
        .body_timeout(Duration::from_millis(200))
        .build()
        .unwrap()
}

fn content_length(value: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("content-length", value.parse().unwrap());
    headers
}

#[test]
fn declared_lengths_over_the_limit_are_refused_before_reading() {
    let receiver = receiver(100);
    assert!(BodyIntake::new(&receiver, &content_length("100")).is_ok());
    assert!(BodyIntake::new(&receiver, &HeaderMap::new()).is_ok());
    // Not a number: the framework rejects it, and the limit still applies while reading.
    assert!(BodyIntake::new(&receiver, &content_length("lots")).is_ok());
    for too_long in ["101", "18446744073709551615", " 4096 "] {
        let reply = BodyIntake::new(&receiver, &content_length(too_long)).unwrap_err();
        assert_eq!(reply.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            reply.body(),
            "Webhook Error: body is larger than the 100-byte limit"
        );
        assert!(reply.closes_connection());
    }
}

#[tokio::test]
async fn chunks_are_read_up_to_the_limit_and_no_further() {
    let receiver = receiver(10);
    let mut chunks = vec![Bytes::from_static(b"12345"), Bytes::from_static(b"67890")].into_iter();
    let intake = BodyIntake::new(&receiver, &HeaderMap::new()).unwrap();
    let body = intake
        .read(|_| Poll::Ready(chunks.next().map(Ok::<_, Infallible>)))
        .await
        .unwrap();
    assert_eq!(body, "1234567890");

    let mut pulled = 0;
    let mut endless = std::iter::repeat(Bytes::from_static(b"1234")).inspect(|_| pulled += 1);
    let intake = BodyIntake::new(&receiver, &HeaderMap::new()).unwrap();
    let reply = intake
        .read(|_| Poll::Ready(endless.next().map(Ok::<_, Infallible>)))
        .await
        .unwrap_err();
    assert_eq!(reply.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(reply.closes_connection());
    drop(endless);
    assert_eq!(pulled, 3, "stops at the chunk that passes the limit");

    let mut failing = vec![Ok(Bytes::from_static(b"12")), Err("connection reset")].into_iter();
    let intake = BodyIntake::new(&receiver, &HeaderMap::new()).unwrap();
    let reply = intake.read(|_| Poll::Ready(failing.next())).await.unwrap_err();
    assert_eq!(
        (reply.status().as_u16(), reply.body()),
        (
            400,
            "Webhook Error: could not read the request body: connection reset"
        )
    );
}

#[tokio::test]
async fn a_stalled_body_times_out_with_408_and_a_closed_connection() {
    let receiver = receiver(1024);
    let mut sent = false;
    let intake = BodyIntake::new(&receiver, &content_length("100")).unwrap();
    let started = tokio::time::Instant::now();
    // Ten bytes, then nothing ever again (and nobody to wake the reader).
    let reply = intake
        .read(|_| {
            if std::mem::replace(&mut sent, true) {
                Poll::Pending
            } else {
                Poll::Ready(Some(Ok::<_, Infallible>(Bytes::from_static(b"0123456789"))))
            }
        })
        .await
        .unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(reply.status(), StatusCode::REQUEST_TIMEOUT);
    assert_eq!(
        reply.body(),
        "Webhook Error: the request body did not arrive within 200ms"
    );
    assert!(reply.closes_connection());
    let response = reply.into_response::<String>();
    assert_eq!(response.headers()["connection"], "close");
}

#[test]
fn the_body_timeout_is_checked_and_defaults_to_five_seconds() {
    let built = Receiver::builder().secret(SECRET).build().unwrap();
    assert_eq!(built.body_timeout(), Duration::from_secs(5));
    let err = Receiver::builder()
        .secret(SECRET)
        .body_timeout(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        ConfigError::InvalidSetting("body timeout must be longer than zero")
    );
    // A huge timeout is accepted and does not overflow the timer.
    let huge = Receiver::builder()
        .secret(SECRET)
        .body_timeout(Duration::MAX)
        .build()
        .unwrap();
    assert_eq!(huge.body_timeout(), Duration::MAX);
}

#[tokio::test]
async fn a_huge_body_timeout_still_reads_bodies() {
    let receiver = Receiver::builder()
        .secret(SECRET)
        .body_timeout(Duration::MAX)
        .build()
        .unwrap();
    let mut chunks = vec![Bytes::from_static(b"{}")].into_iter();
    let intake = BodyIntake::new(&receiver, &HeaderMap::new()).unwrap();
    let body = intake
        .read(|_| Poll::Ready(chunks.next().map(Ok::<_, Infallible>)))
        .await
        .unwrap();
    assert_eq!(body, "{}");
}

async fn claimed(receiver: &Receiver, signed: &SignedDelivery) -> payhook_core::ClaimGuard {
    let request = signed.to_request("/webhooks");
    match receiver.receive(request.headers(), signed.body.clone()).await {
        ReceiveOutcome::Deliver(delivery) => delivery.into_claim(),
        ReceiveOutcome::Respond(reply) => panic!("not delivered: {reply:?}"),
    }
}

async fn settled_as(outcome: HandlerOutcome) -> Reply {
    let receiver = receiver(64 * 1024);
    let signed = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), SECRET).unwrap();
    claimed(&receiver, &signed).await.settle(outcome).await;
    // What the next delivery of the same event is told.
    let request = signed.to_request("/webhooks");
    match receiver.receive(request.headers(), signed.body.clone()).await {
        ReceiveOutcome::Respond(reply) => reply,
        ReceiveOutcome::Deliver(delivery) => {
            drop(delivery);
            Reply::error(&payhook_core::Error::InvalidPayload("delivered again".into()))
        }
    }
}

#[tokio::test]
async fn settling_marks_2xx_done_and_releases_everything_else() {
    assert_eq!(
        settled_as(HandlerOutcome::Responded(StatusCode::NO_CONTENT)).await,
        Reply::received()
    );
    for outcome in [
        HandlerOutcome::Responded(StatusCode::INTERNAL_SERVER_ERROR),
        HandlerOutcome::Responded(StatusCode::SEE_OTHER),
        HandlerOutcome::Failed,
        HandlerOutcome::Panicked,
    ] {
        assert_eq!(
            settled_as(outcome).await.body(),
            "Webhook Error: invalid payload: delivered again",
            "{outcome:?} must release the claim"
        );
    }
}

#[test]
fn adapter_replies_have_one_wording() {
    let panicked = Reply::handler_panicked();
    assert_eq!(panicked.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        panicked.body(),
        "Webhook Error: the handler panicked; the event was not acknowledged and will be delivered again"
    );
    let missing = not_configured("add the thing");
    assert_eq!(missing.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        missing.body(),
        "Webhook Error: server misconfigured: this webhook route has no payhook receiver; add the thing"
    );
    assert_eq!(missing.content_type(), "text/plain; charset=utf-8");
    assert!(!missing.closes_connection());
}
