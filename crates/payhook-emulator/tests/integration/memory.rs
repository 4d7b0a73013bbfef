//! Memory bounds: objects held once, idempotency replies kept by reference,
//! and the byte budget of `Limits::stored_bytes` holding with large objects.

use crate::support;

use payhook_emulator::{Emulator, Limits};
use support::{limits, started, Api};

/// A form body creating an intent with `keys` metadata values of 500 characters.
fn large_intent(keys: usize) -> String {
    let mut body = String::from("amount=5&currency=btc");
    for key in 0..keys {
        body.push_str(&format!("&metadata[k{key}]={}", "v".repeat(500)));
    }
    body
}

async fn post_with_key(api: &Api, path: &str, key: &str, body: &str) -> support::Reply {
    api.send(
        api.client
            .post(api.url(path))
            .bearer_auth(&api.key)
            .header("idempotency-key", key)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.to_owned()),
    )
    .await
}

#[tokio::test]
async fn replies_replayed_by_reference_are_the_replies_as_first_sent() {
    let (emulator, api) = started(Emulator::builder()).await;
    let created = post_with_key(&api, "/v1/payment_intents", "create-1", &large_intent(3)).await;
    assert_eq!(created.status, 200, "{}", created.text);
    let id = created.id();
    let paid = post_with_key(
        &api,
        &format!("/v1/test_helpers/payment_intents/{id}/succeed"),
        "pay-1",
        "",
    )
    .await;
    assert_eq!(paid.json["status"], "succeeded");

    // The intent has changed since: the replay is still the first reply, byte for byte.
    let again = post_with_key(&api, "/v1/payment_intents", "create-1", &large_intent(3)).await;
    assert_eq!(again.text, created.text);
    assert_eq!(again.json["status"], "requires_payment");
    assert_eq!(again.json["amount_received"], 0);
    assert!(again.headers.get("idempotent-replayed").is_some());
    let paid_again = post_with_key(
        &api,
        &format!("/v1/test_helpers/payment_intents/{id}/succeed"),
        "pay-1",
        "",
    )
    .await;
    assert_eq!(paid_again.text, paid.text);

    // An endpoint's creation replays its first secret, even after a roll.
    let endpoint = post_with_key(&api, "/v1/webhook_endpoints", "we-1", "url=http://127.0.0.1:9/").await;
    let we = endpoint.id();
    let rolled = api
        .post_empty(&format!("/v1/webhook_endpoints/{we}/roll_secret"))
        .await;
    assert_ne!(rolled.json["secret"], endpoint.json["secret"]);
    let endpoint_again =
        post_with_key(&api, "/v1/webhook_endpoints", "we-1", "url=http://127.0.0.1:9/").await;
    assert_eq!(endpoint_again.text, endpoint.text);

    // Once the object is gone the reply cannot be rebuilt: a clear 404, not another object.
    api.delete(&format!("/v1/webhook_endpoints/{we}")).await;
    let gone = post_with_key(&api, "/v1/webhook_endpoints", "we-1", "url=http://127.0.0.1:9/").await;
    assert_eq!(
        (gone.status, gone.code()),
        (404, "resource_missing"),
        "{}",
        gone.text
    );
    assert!(gone.message().contains("no longer kept"), "{}", gone.message());
    assert_eq!(
        api.get("/v1/webhook_endpoints").await.ids().len(),
        0,
        "nothing re-created"
    );
    emulator.shutdown().await;
}

#[tokio::test]
async fn the_byte_budget_bounds_what_is_kept_with_large_objects() {
    let budget = 2 * 1024 * 1024;
    let (emulator, api) =
        started(Emulator::builder().limits(limits(|limits| limits.stored_bytes = budget))).await;
    let empty = emulator.stats().stored_bytes;
    // Each intent about 25 KB, its event as much again, and each request keyed.
    for n in 0..120 {
        let created = post_with_key(&api, "/v1/payment_intents", &format!("c{n}"), &large_intent(50)).await;
        assert_eq!(created.status, 200, "{}", created.text);
        let id = created.id();
        let paid = post_with_key(
            &api,
            &format!("/v1/test_helpers/payment_intents/{id}/succeed"),
            &format!("p{n}"),
            "",
        )
        .await;
        assert_eq!(paid.status, 200);
        let stats = emulator.stats();
        assert!(stats.stored_bytes <= budget as u64, "{n}: {stats:?}");
    }
    let stats = emulator.stats();
    assert!(
        stats.stored_bytes > (budget as u64) / 2,
        "the estimate counts the content: {stats:?}"
    );
    assert!(stats.intents_evicted > 0 && stats.events_evicted > 0, "{stats:?}");
    // Intents and events share 3/4 of the budget: about 3/8 each.
    let kept_events = emulator.events();
    let event_bytes: usize = kept_events.iter().map(|e| e.body.len()).sum();
    assert!(event_bytes <= budget * 3 / 8, "{event_bytes}");
    assert!(
        kept_events.len() < 120 && kept_events.len() >= 10,
        "{}",
        kept_events.len()
    );
    // The newest are the ones kept, and they still read back whole.
    let newest = &kept_events[kept_events.len() - 1];
    let read = api.get(&format!("/v1/events/{}", newest.id)).await;
    assert_eq!(read.text.as_bytes(), &newest.body[..]);
    let default = Limits::default();
    assert_eq!(
        stats.worst_case_bytes,
        default.worst_case_bytes() - (default.stored_bytes - budget) as u64
    );
    emulator.shutdown().await;
    assert!(empty < 4096, "an empty emulator keeps next to nothing: {empty}");
}

#[test]
fn the_default_worst_case_stays_under_256_mib() {
    let limits = Limits::default();
    assert_eq!(limits.stored_bytes, 160 * 1024 * 1024);
    assert!(
        limits.worst_case_bytes() < 256 * 1024 * 1024,
        "{}",
        limits.worst_case_bytes()
    );
    // Every part counts: more endpoints or pending deliveries raise the bound.
    let mut more = Limits::default();
    more.endpoints *= 2;
    assert!(more.worst_case_bytes() > limits.worst_case_bytes());
}
