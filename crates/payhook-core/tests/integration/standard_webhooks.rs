//! A receiver configured with the Standard Webhooks scheme, end to end without
//! a web framework: the `webhook-id` header is the event id it deduplicates
//! by, payment intents arrive typed, and bad deliveries get their `400`.
#![cfg(feature = "testing")]

use bytes::Bytes;
use http::HeaderMap;
use payhook_core::adapter::ReceiveOutcome;
use payhook_core::sender::{unix_now, EventBuilder, StandardDelivery};
use payhook_core::signature::StandardWebhooks;
use payhook_core::{Event, EventKind, Receiver, Reply};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn receiver() -> Receiver {
    let scheme = StandardWebhooks::builder().secret(SECRET).build().unwrap();
    Receiver::builder().scheme(scheme).build().unwrap()
}

async fn reply_to(receiver: &Receiver, headers: &HeaderMap, body: Bytes) -> Reply {
    match receiver.receive(headers, body).await {
        ReceiveOutcome::Respond(reply) => reply,
        ReceiveOutcome::Deliver(delivery) => panic!("unexpectedly delivered {:?}", delivery.event().id()),
    }
}

async fn deliver(receiver: &Receiver, delivery: &StandardDelivery) -> Event {
    match receiver.receive(&delivery.headers(), delivery.body.clone()).await {
        ReceiveOutcome::Deliver(delivery) => {
            let (event, _, claim) = delivery.into_parts();
            claim.settle(http::StatusCode::OK).await;
            event
        }
        ReceiveOutcome::Respond(reply) => panic!("refused: {reply:?}"),
    }
}

#[tokio::test]
async fn the_webhook_id_is_the_event_id_and_the_dedupe_key() {
    let receiver = receiver();
    let body = EventBuilder::payment_intent_succeeded()
        .amount(1500)
        .to_standard_json();
    let first = StandardDelivery::now(body.clone(), "msg_1", SECRET).unwrap();
    let event = deliver(&receiver, &first).await;
    assert_eq!(event.id(), "msg_1");
    assert!(matches!(event.kind(), EventKind::PaymentIntentSucceeded(pi) if pi.amount == 1500));
    assert!(event.field("timestamp").is_some());

    // The same message again, even signed anew: acknowledged, not handed out.
    let again = StandardDelivery::now(body.clone(), "msg_1", SECRET).unwrap();
    let reply = reply_to(&receiver, &again.headers(), again.body.clone()).await;
    assert_eq!(
        (reply.status().as_u16(), reply.body()),
        (200, r#"{"received":true}"#)
    );

    // The same body under another id is another event.
    let other = StandardDelivery::now(body, "msg_2", SECRET).unwrap();
    assert_eq!(deliver(&receiver, &other).await.id(), "msg_2");
}

#[tokio::test]
async fn the_body_id_is_ignored_and_data_object_is_read_as_in_the_service_format() {
    let receiver = receiver();
    // The service's own body shape, id and all, signed the Standard Webhooks way.
    let service_body = EventBuilder::payment_intent_failed()
        .id("evt_body")
        .amount(7)
        .to_json();
    let delivery = StandardDelivery::now(service_body, "msg_header", SECRET).unwrap();
    let event = deliver(&receiver, &delivery).await;
    assert_eq!(event.id(), "msg_header");
    assert!(matches!(event.kind(), EventKind::PaymentIntentFailed(pi) if pi.amount == 7));
    // A later delivery of the body's id under the header's is a duplicate
    // only by the header.
    let by_body_id = StandardDelivery::now(delivery.body.clone(), "evt_body", SECRET).unwrap();
    assert_eq!(deliver(&receiver, &by_body_id).await.id(), "evt_body");
}

/// A payment event whose `data` is the intent sent bare, with or without its
/// `"object": "payment_intent"` member, as senders following the standard's
/// examples send a resource.
#[tokio::test]
async fn a_bare_intent_is_read_with_or_without_its_object_member() {
    let receiver = receiver();
    let intent = r#""id":"pi_bare","amount":1500,"currency":"btc","status":"succeeded""#;
    for (n, data) in [
        format!(r#"{{{intent},"object":"payment_intent"}}"#),
        format!("{{{intent}}}"),
    ]
    .into_iter()
    .enumerate()
    {
        let body = format!(
            r#"{{"type":"payment_intent.succeeded","timestamp":"2026-11-25T21:00:00Z","data":{data}}}"#
        );
        let delivery = StandardDelivery::now(body, format!("msg_bare_{n}"), SECRET).unwrap();
        let event = deliver(&receiver, &delivery).await;
        let pi = event
            .payment_intent()
            .expect("the bare intent is the event's intent");
        assert_eq!(
            (pi.id.as_str(), pi.amount, pi.object.as_str()),
            ("pi_bare", 1500, "payment_intent")
        );
    }
    // Bare but not an intent: still a payload error, naming the field.
    let body = r#"{"type":"payment_intent.succeeded","data":{"id":"pi_bare","currency":"btc","status":"succeeded"}}"#;
    let delivery = StandardDelivery::now(body, "msg_bare_bad", SECRET).unwrap();
    let reply = reply_to(&receiver, &delivery.headers(), delivery.body.clone()).await;
    assert_eq!(reply.status().as_u16(), 400);
    assert!(reply.body().contains("amount"), "{reply:?}");
}

#[tokio::test]
async fn unknown_types_keep_their_data_and_bad_payloads_are_400() {
    let receiver = receiver();
    let body = r#"{"type":"user.created","timestamp":"2026-11-25T21:00:00Z","data":{"id":1}}"#;
    let delivery = StandardDelivery::now(body, "msg_3", SECRET).unwrap();
    let event = deliver(&receiver, &delivery).await;
    assert!(matches!(event.kind(), EventKind::Other { data } if data.get() == r#"{"id":1}"#));

    let bare_charge = r#"{"type":"payment_intent.succeeded","data":{"id":"ch_1","object":"charge"}}"#;
    let delivery = StandardDelivery::now(bare_charge, "msg_4", SECRET).unwrap();
    let reply = reply_to(&receiver, &delivery.headers(), delivery.body.clone()).await;
    assert_eq!(reply.status().as_u16(), 400);
    assert!(
        reply
            .body()
            .starts_with("Webhook Error: invalid payload: data.object"),
        "{reply:?}"
    );
}

/// The `webhook-signature` header holds at most 8 items: 8 verify, with the
/// genuine one last after 7 that match no key; 9 are a malformed header
/// whichever item is the genuine one, and nothing is claimed. The numbers are
/// written out here, so a bound changed by one fails this test.
#[tokio::test]
async fn eight_signature_items_verify_and_a_ninth_is_refused() {
    let receiver = receiver();
    let body = EventBuilder::payment_intent_succeeded().to_standard_json();
    // Distinct well-formed `v1` items (32 bytes each) that match no key.
    let decoy = |n: u8| format!("v1,{}{}=", char::from(b'B' + n), "A".repeat(42));
    let with_items = |id: &str, genuine_at: usize, count: usize| {
        let mut delivery = StandardDelivery::now(body.clone(), id, SECRET).unwrap();
        let mut items: Vec<String> = (0..count - 1).map(|n| decoy(n as u8)).collect();
        items.insert(genuine_at, delivery.webhook_signature.clone());
        assert_eq!(items.len(), count);
        delivery.webhook_signature = items.join(" ");
        delivery
    };

    let eight = with_items("msg_eight_items", 7, 8);
    assert_eq!(deliver(&receiver, &eight).await.id(), "msg_eight_items");

    for genuine_at in [0, 8] {
        let nine = with_items("msg_nine_items", genuine_at, 9);
        let reply = reply_to(&receiver, &nine.headers(), nine.body.clone()).await;
        assert_eq!(
            (reply.status().as_u16(), reply.body()),
            (
                400,
                "Webhook Error: malformed webhook-signature header: more than 8 signatures"
            ),
            "genuine item at {genuine_at}"
        );
    }
    // Refused before any claim: the message is new when it comes validly.
    let one = StandardDelivery::now(body, "msg_nine_items", SECRET).unwrap();
    assert_eq!(deliver(&receiver, &one).await.id(), "msg_nine_items");
}

/// A change to a genuine delivery's headers.
type Change = fn(&mut HeaderMap);

#[tokio::test]
async fn bad_deliveries_get_a_400_naming_what_failed() {
    let receiver = receiver();
    let body = EventBuilder::payment_intent_succeeded().to_standard_json();
    let good = StandardDelivery::now(body.clone(), "msg_5", SECRET).unwrap();
    let cases: [(&str, Change, &str); 4] = [
        (
            "no id",
            |h| drop(h.remove("webhook-id")),
            "missing webhook-id header",
        ),
        (
            "bad timestamp",
            |h| drop(h.insert("webhook-timestamp", "soon".parse().unwrap())),
            "malformed webhook-timestamp header: not a whole number of unix seconds",
        ),
        (
            "no usable signature",
            |h| drop(h.insert("webhook-signature", "v2,abc".parse().unwrap())),
            "malformed webhook-signature header: no well-formed v1 or v1a signature",
        ),
        (
            "wrong signature",
            |h| {
                drop(h.insert(
                    "webhook-signature",
                    "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".parse().unwrap(),
                ))
            },
            "no signature matches the expected signature for this payload and timestamp",
        ),
    ];
    for (case, change, message) in cases {
        let mut headers = good.headers();
        change(&mut headers);
        let reply = reply_to(&receiver, &headers, good.body.clone()).await;
        assert_eq!(reply.status().as_u16(), 400, "{case}");
        assert_eq!(reply.body(), format!("Webhook Error: {message}"), "{case}");
    }
    let stale = StandardDelivery::at(body, "msg_6", SECRET, unix_now() - 3600).unwrap();
    let reply = reply_to(&receiver, &stale.headers(), stale.body.clone()).await;
    assert!(
        reply.body().starts_with("Webhook Error: timestamp is 3"),
        "{reply:?}"
    );
    // The good one still goes through after all that.
    assert_eq!(deliver(&receiver, &good).await.id(), "msg_5");
}
