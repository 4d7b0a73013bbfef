//! Two replicas of `examples/axum_receiver.rs` sharing one Redis dedupe store
//! (`PAYHOOK_REDIS_URL`): an event handled by one replica is a duplicate for
//! the other. Needs the Redis server named by `PAYHOOK_TEST_REDIS_URL`.

mod axum_example;

use std::time::Duration;

use axum_example::Example;
use payhook::testing::{EventBuilder, SignedDelivery};

const SECRET: &str = "whsec_example_replicas";
const RECEIVED: &str = r#"{"received":true}"#;

fn redis_url() -> String {
    std::env::var("PAYHOOK_TEST_REDIS_URL").unwrap_or_else(|_| {
        panic!(
            "PAYHOOK_TEST_REDIS_URL is not set: this test needs a Redis 7 server. Start one with \
             `eval \"$(.ci/start-redis)\"`, or `redis-server --port 6390 --save '' --daemonize yes` and \
             `export PAYHOOK_TEST_REDIS_URL=redis://127.0.0.1:6390/`"
        )
    })
}

#[tokio::test]
async fn replicas_sharing_redis_handle_each_event_once() {
    let url = redis_url();
    let env = [("PAYHOOK_SECRET", SECRET), ("PAYHOOK_REDIS_URL", url.as_str())];
    let mut first = Example::start(&env);
    let mut second = Example::start(&env);
    for replica in [&first, &second] {
        assert!(replica.lines().iter().any(|line| line == "dedupe store: Redis"));
    }

    let event = EventBuilder::payment_intent_succeeded();
    let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    assert_eq!(
        first.post(signed.body.clone(), &signed.signature).await,
        (200, RECEIVED.to_owned())
    );
    // The sender retries on the other replica: acknowledged, not handled again.
    assert_eq!(
        second.post(signed.body.clone(), &signed.signature).await,
        (200, RECEIVED.to_owned())
    );

    let handled = format!("handled {} payment_intent.succeeded", event.event_id());
    first.wait_for_line(Duration::from_secs(5), |line| line.contains(&handled));
    second.wait_for_line(Duration::from_secs(5), |line| {
        line.contains("duplicate delivery acknowledged") && line.contains(event.event_id())
    });
    assert!(
        !second.lines().iter().any(|line| line.contains("handled")),
        "{:#?}",
        second.lines()
    );
    for replica in [&first, &second] {
        assert!(
            !replica.lines().iter().any(|line| line.contains(&url)),
            "the Redis URL is never printed"
        );
    }
}
