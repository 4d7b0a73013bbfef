//! Every call of the client against the emulator's HTTP API.

use payhook::api::{ApiError, ApiKey, Client, EventsQuery, NewPaymentIntent};
use payhook::emulator::Emulator;
use payhook::{PaymentIntentStatus, PaymentMethod};

#[tokio::test]
async fn create_retrieve_settle_list_and_resend() {
    let emulator = Emulator::builder().start().await.unwrap();
    let api = Client::new(&emulator.base_url(), ApiKey::new(emulator.api_key()).unwrap()).unwrap();

    let created = api
        .create_payment_intent(
            &NewPaymentIntent::new(u128::from(u64::MAX) + 1, "eth")
                .payment_method_types([PaymentMethod::Ethereum])
                .description("Order 42")
                .metadata("order", "42")
                .metadata("user", "7"),
        )
        .await
        .unwrap();
    assert_eq!(created.amount, u128::from(u64::MAX) + 1);
    assert_eq!(created.metadata.get("order"), Some("42"));
    assert_eq!(created.description.as_deref(), Some("Order 42"));
    assert_eq!(created.payment_method_types, Some(vec![PaymentMethod::Ethereum]));

    let retrieved = api.retrieve_payment_intent(&created.id).await.unwrap();
    assert_eq!(retrieved, created);

    let paid = api.succeed_payment_intent(&created.id, Some(5)).await.unwrap();
    assert_eq!(paid.status, PaymentIntentStatus::Succeeded);
    assert_eq!(paid.amount_received, Some(5));
    let again = api.fail_payment_intent(&created.id).await.unwrap_err();
    assert!(
        matches!(&again, ApiError::Refused { status: 400, code: Some(code), .. } if code == "payment_intent_unexpected_state"),
        "{again}"
    );
    let missing = api.retrieve_payment_intent("pi_missing").await.unwrap_err();
    assert!(
        matches!(missing, ApiError::Refused { status: 404, .. }),
        "{missing}"
    );
    assert!(matches!(
        api.retrieve_payment_intent("../v1/events").await,
        Err(ApiError::Invalid(_))
    ));

    let other = api
        .create_payment_intent(&NewPaymentIntent::new(5000, "btc"))
        .await
        .unwrap();
    api.fail_payment_intent(&other.id).await.unwrap();

    // Both events, newest first, two pages of one.
    let mut pages = api.events(EventsQuery {
        limit: 1,
        ..EventsQuery::default()
    });
    let mut types = Vec::new();
    while let Some(page) = pages.next().await {
        types.extend(
            page.unwrap()
                .events
                .into_iter()
                .map(|l| l.event.event_type().to_owned()),
        );
    }
    assert_eq!(types, ["payment_intent.failed", "payment_intent.succeeded"]);
    assert_eq!(pages.requests(), 2);
    let only = api
        .page(&EventsQuery {
            types: vec!["payment_intent.succeeded".to_owned()],
            ..EventsQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(only.events.len(), 1);

    let resend = api.resend_event(only.events[0].event.id(), None).await.unwrap();
    assert_eq!(resend.resend, 1);
    assert!(resend.webhook_endpoints.is_empty());

    // A key the emulator refuses.
    let live = Client::new(&emulator.base_url(), ApiKey::new("sk_live_nope").unwrap()).unwrap();
    let refused = live.page(&EventsQuery::default()).await.unwrap_err();
    assert!(
        matches!(refused, ApiError::Unauthorized { status: 401, .. }),
        "{refused}"
    );
    assert!(!refused.to_string().contains("sk_live_nope"), "{refused}");
}
