//! The in-process handle's own calls, checked against what the HTTP API then
//! shows: an intent created with every field, and faults changed while the
//! emulator runs.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use payhook_api::NewPaymentIntent;
use payhook_core::{PaymentIntent, PaymentIntentStatus, PaymentMethod};
use payhook_emulator::{Emulator, Faults, RetrySchedule};
use support::{RecordingReceiver, Script};

const WAIT: Duration = Duration::from_secs(20);

/// The API's payment intents list, first page, newest first: read from the
/// reply's text, where an amount beyond 2^64 is an exact JSON integer (a
/// `serde_json::Value` would round it).
async fn listed_intents(emulator: &Emulator) -> Vec<PaymentIntent> {
    #[derive(serde::Deserialize)]
    struct Page {
        data: Vec<PaymentIntent>,
    }
    let reply = support::Api::new(emulator)
        .get("/v1/payment_intents?limit=100")
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let page: Page = serde_json::from_str(&reply.text).expect("a list of payment intents");
    page.data
}

/// Every field of `asked` as `intent` carries it.
fn assert_same_fields(intent: &PaymentIntent, asked: &NewPaymentIntent) {
    assert_eq!(intent.amount, asked.amount);
    assert_eq!(intent.currency, asked.currency);
    assert_eq!(
        intent.payment_method_types.as_deref(),
        Some(asked.payment_method_types.as_slice())
    );
    assert_eq!(intent.description, asked.description);
    let metadata: BTreeMap<String, String> = asked.metadata.iter().cloned().collect();
    assert_eq!(intent.metadata.to_map(), metadata);
    assert_eq!(intent.amount_received, Some(0));
    assert_eq!(
        intent.status,
        PaymentIntentStatus::Other("requires_payment".to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intent_created_with_every_field_through_the_handle_reads_back_exactly() {
    let emulator = Emulator::builder().start().await.expect("starts");
    let api = emulator.api().expect("a loopback client");
    let plain = emulator.create_payment_intent(7, "btc").expect("created");

    // Beyond 2^64, methods other than the currency's default, two keys.
    let asked = NewPaymentIntent::new(340_282_366_920_938_463_463_374_607_431_768_211_455, "usdc")
        .payment_method_types([
            PaymentMethod::Bitcoin,
            PaymentMethod::Other("solana_pay".to_owned()),
        ])
        .description("Order 42: two mugs, gift-wrapped")
        .metadata("order", "42")
        .metadata("customer", "cus_7");
    let created = emulator.create_payment_intent_with(&asked).expect("created");
    assert!(created.id.starts_with("pi_"), "{}", created.id);
    assert_same_fields(&created, &asked);

    let retrieved = api.retrieve_payment_intent(&created.id).await.expect("retrieved");
    assert_same_fields(&retrieved, &asked);
    assert_eq!(retrieved, created);

    let listed = listed_intents(&emulator).await;
    let ids: Vec<&str> = listed.iter().map(|intent| intent.id.as_str()).collect();
    assert_eq!(ids, [created.id.as_str(), plain.id.as_str()], "newest first");
    assert_same_fields(&listed[0], &asked);
    assert_eq!(listed[0], created);
    assert_eq!(emulator.payment_intent(&created.id), Some(created.clone()));

    // A refused field is an error naming it, and nothing is stored.
    let refused = emulator
        .create_payment_intent_with(
            &NewPaymentIntent::new(5, "btc")
                .payment_method_types([PaymentMethod::Other("Solana-Pay".to_owned())]),
        )
        .expect_err("an invalid payment method type is refused");
    assert_eq!(refused.status, 400, "{refused:?}");
    assert_eq!(refused.param.as_deref(), Some("payment_method_types"));
    assert_eq!(refused.code.as_deref(), Some("parameter_invalid_array"));
    assert!(refused.message.contains("Solana-Pay"), "{}", refused.message);
    let too_long_key = "k".repeat(41);
    let refused = emulator
        .create_payment_intent_with(&NewPaymentIntent::new(5, "btc").metadata(&too_long_key, "v"))
        .expect_err("a metadata key over 40 characters is refused");
    assert_eq!(refused.status, 400, "{refused:?}");
    assert!(
        refused
            .param
            .as_deref()
            .is_some_and(|param| param.starts_with("metadata")),
        "{refused:?}"
    );
    assert_eq!(
        listed_intents(&emulator).await.len(),
        2,
        "nothing refused was stored"
    );
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_changed_through_the_handle_keep_the_state_and_apply_to_the_next_delivery() {
    let emulator = Emulator::builder()
        .retry_schedule(RetrySchedule::new(
            Duration::from_millis(20),
            Duration::from_millis(50),
            2,
        ))
        .start()
        .await
        .expect("starts");
    let api = emulator.api().expect("a loopback client");
    let receiver = RecordingReceiver::start(Script::default()).await;
    let endpoint = emulator.register_endpoint(&receiver.url).expect("registered");

    // Before: one event delivered, one intent still waiting.
    let paid = emulator.create_payment_intent(5, "btc").expect("created");
    let paid = emulator.succeed_payment_intent(&paid.id).expect("succeeded");
    let waiting = emulator.create_payment_intent(7, "eth").expect("created");
    assert!(emulator.wait_idle(WAIT).await);
    assert_eq!(receiver.arrivals().len(), 1);
    let events_before: Vec<String> = emulator.events().iter().map(|e| e.id.clone()).collect();
    assert_eq!(events_before.len(), 1);
    let attempts_before = emulator.attempts();
    assert_eq!(attempts_before.len(), 1);
    assert!(attempts_before[0].succeeded);

    // The endpoint goes down: every event undeliverable.
    let down = emulator
        .faults()
        .undeliverable(1.0)
        .delay(Duration::from_millis(5));
    assert_ne!(emulator.faults(), down);
    emulator.set_faults(down.clone()).expect("faults changed");
    assert_eq!(emulator.faults(), down, "read back as set");
    assert_eq!(emulator.faults().seed_value(), Some(emulator.seed()));

    // Nothing held was lost: intents, events, attempts, the endpoint.
    assert_eq!(emulator.payment_intent(&paid.id), Some(paid.clone()));
    assert_eq!(emulator.payment_intent(&waiting.id), Some(waiting.clone()));
    assert_eq!(listed_intents(&emulator).await, [waiting.clone(), paid.clone()]);
    let events_after: Vec<String> = emulator.events().iter().map(|e| e.id.clone()).collect();
    assert_eq!(events_after, events_before);
    let page = api.get_json("/v1/events").await.expect("events listed");
    assert_eq!(page["data"][0]["id"], events_before[0].as_str());
    assert_eq!(emulator.attempts(), attempts_before);
    let kept = api
        .get_json(&format!("/v1/webhook_endpoints/{}", endpoint.id))
        .await
        .expect("the endpoint is still there");
    assert_eq!(kept["url"], receiver.url.as_str());

    // The next delivery follows the new faults: never sent.
    emulator.succeed_payment_intent(&waiting.id).expect("succeeded");
    assert!(emulator.wait_idle(WAIT).await);
    assert_eq!(receiver.arrivals().len(), 1, "no request was sent");
    let events = emulator.events();
    assert_eq!(events.len(), 2);
    let undelivered = &events[1];
    assert!(!undelivered.delivery_success());
    let attempts: Vec<_> = emulator
        .attempts()
        .into_iter()
        .filter(|attempt| attempt.event == undelivered.id)
        .collect();
    assert_eq!(attempts.len(), 2, "every attempt of the schedule: {attempts:?}");
    for attempt in &attempts {
        assert_eq!((attempt.status, attempt.succeeded), (None, false), "{attempt:?}");
        assert_eq!(
            attempt.error.as_deref(),
            Some("not sent: the injected fault undeliverable fails every attempt of this event (the receiver got no request)")
        );
    }

    // Back up: faults off, and the resend gets through.
    emulator.set_faults(Faults::default()).expect("faults off");
    assert_eq!(emulator.faults(), Faults::default().seed(emulator.seed()));
    emulator.resend_event(&undelivered.id, None).expect("resent");
    assert!(emulator.wait_idle(WAIT).await);
    let arrivals = receiver.arrivals();
    assert_eq!(arrivals.len(), 2);
    assert_eq!(arrivals[1].event_id(), undelivered.id);
    assert!(emulator.events()[1].delivery_success());
    emulator.shutdown().await;
}
