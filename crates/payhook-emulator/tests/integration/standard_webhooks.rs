//! `DeliveryScheme::StandardWebhooks`: the emulator delivers Standard Webhooks
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature` with a `v1` and a
//! `v1a` item) to real payhook receivers configured with that scheme, over
//! loopback HTTP; one receiver holds the endpoint's `whsec_` secret, the other
//! only its `whpk_` public key.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use payhook_core::signature::StandardWebhooks;
use payhook_core::Receiver;
use payhook_emulator::{DeliveryScheme, Emulator, Faults, RetrySchedule};
use support::{eventually, started, Api, PayhookReceiver};

const WAIT: Duration = Duration::from_secs(20);

/// Registers an endpoint for `url`; its secret and public key from the reply.
async fn register(api: &Api, url: &str) -> (String, String, String) {
    let reply = api
        .post_form("/v1/webhook_endpoints", &format!("url={url}"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let field = |name: &str| {
        reply.json[name]
            .as_str()
            .unwrap_or_else(|| panic!("no {name}: {}", reply.text))
            .to_owned()
    };
    (reply.id(), field("secret"), field("public_key"))
}

fn standard_receiver(
    configure: impl FnOnce(
        payhook_core::signature::StandardWebhooksBuilder,
    ) -> payhook_core::signature::StandardWebhooksBuilder,
) -> Receiver {
    let scheme = configure(StandardWebhooks::builder())
        .build()
        .expect("valid keys");
    Receiver::builder()
        .scheme(scheme)
        .build()
        .expect("valid receiver")
}

#[tokio::test]
async fn standard_deliveries_are_verified_by_secret_or_public_key_and_handled_once() {
    // Every first reply is dropped and every delivery duplicated: the
    // receivers see the same webhook-id several times and handle it once.
    let (emulator, api) = started(
        Emulator::builder()
            .scheme(DeliveryScheme::StandardWebhooks)
            .retry_schedule(RetrySchedule::new(
                Duration::from_millis(100),
                Duration::from_secs(1),
                6,
            ))
            .faults(Faults::default().drop_first().duplicates(1.0).seed(29)),
    )
    .await;

    let (by_secret_listener, by_secret_url) = PayhookReceiver::bind().await;
    let (_, secret, public_key) = register(&api, &by_secret_url).await;
    assert!(secret.starts_with("whsec_") && public_key.starts_with("whpk_"));
    let by_secret = PayhookReceiver::serve_receiver(
        by_secret_listener,
        by_secret_url,
        standard_receiver(|scheme| scheme.secret(secret.clone())),
        Duration::ZERO,
    );

    let (by_key_listener, by_key_url) = PayhookReceiver::bind().await;
    let (endpoint, other_secret, other_public_key) = register(&api, &by_key_url).await;
    assert_ne!(
        (&secret, &public_key),
        (&other_secret, &other_public_key),
        "each endpoint has its own keys"
    );
    let by_key = PayhookReceiver::serve_receiver(
        by_key_listener,
        by_key_url,
        standard_receiver(|scheme| scheme.public_key(other_public_key.clone())),
        Duration::ZERO,
    );

    // The keys are shown on create only.
    let fetched = api.get(&format!("/v1/webhook_endpoints/{endpoint}")).await;
    assert!(
        !fetched.text.contains(&other_secret) && !fetched.text.contains("public_key"),
        "{}",
        fetched.text
    );

    let intent = api.create_intent("5", "btc").await;
    let succeeded = api.succeed(&intent).await;
    assert_eq!(succeeded.status, 200, "{}", succeeded.text);
    let event = emulator.events()[0].id.clone();
    eventually(WAIT, "both receivers handled the event", || {
        by_secret.runs().contains_key(&event) && by_key.runs().contains_key(&event)
    })
    .await;
    assert!(emulator.wait_idle(WAIT).await, "every delivery settled");

    // The webhook-id is the event id, and each receiver ran its handler once
    // although it was asked several times.
    let once = HashMap::from([(event.clone(), 1)]);
    assert_eq!(by_secret.runs(), once);
    assert_eq!(by_key.runs(), once);
    assert!(
        by_secret.requests() >= 2 && by_key.requests() >= 2,
        "redeliveries reached the receivers"
    );
    let attempts = emulator.attempts();
    assert!(
        attempts.iter().all(|attempt| attempt.signatures == 2),
        "a v1 and a v1a item: {attempts:?}"
    );
    assert!(attempts.iter().any(|attempt| attempt.succeeded));
}

#[tokio::test]
async fn a_receiver_with_other_keys_refuses_standard_deliveries() {
    let (emulator, api) = started(
        Emulator::builder()
            .scheme(DeliveryScheme::StandardWebhooks)
            .retry_schedule(RetrySchedule::new(
                Duration::from_millis(50),
                Duration::from_millis(100),
                2,
            )),
    )
    .await;
    let (listener, url) = PayhookReceiver::bind().await;
    register(&api, &url).await;
    // The specification's example secret: not this endpoint's.
    let receiver = PayhookReceiver::serve_receiver(
        listener,
        url,
        standard_receiver(|scheme| scheme.secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")),
        Duration::ZERO,
    );
    let intent = api.create_intent("5", "btc").await;
    assert_eq!(api.succeed(&intent).await.status, 200);
    assert!(emulator.wait_idle(WAIT).await);
    assert!(receiver.runs().is_empty());
    let attempts = emulator.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert!(
        attempts.iter().all(|attempt| attempt.status == Some(400)),
        "{attempts:?}"
    );
}
