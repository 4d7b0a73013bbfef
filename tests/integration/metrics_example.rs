//! `cargo run --example metrics` as a user runs it: real deliveries over HTTP,
//! then a scrape of `GET /metrics` in Prometheus text format, whose counts must
//! match what was sent.

use crate::example_process;

use std::collections::BTreeMap;
use std::time::Duration;

use example_process::Example;
use payhook::sender::{unix_now, EventBuilder, SignedDelivery};
use payhook_test_support::prometheus_samples as samples;

const SECRET: &str = "whsec_metrics_example";

async fn scrape(example: &Example) -> String {
    let response = reqwest::get(format!("http://{}/metrics", example.addr))
        .await
        .expect("the example answers /metrics");
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    response.text().await.unwrap()
}

#[tokio::test]
async fn deliveries_show_up_in_the_prometheus_scrape() {
    let example = Example::start("metrics", &[("PAYHOOK_SECRET", SECRET)]);

    let events = [
        EventBuilder::payment_intent_succeeded(),
        EventBuilder::payment_intent_failed(),
        EventBuilder::other("customer.created"),
    ];
    for event in &events {
        let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
        assert_eq!(example.post(signed.body, &signed.signature).await.0, 200);
    }
    // The sender retries the first one twice.
    let again = SignedDelivery::now(events[0].to_json(), SECRET).unwrap();
    for _ in 0..2 {
        assert_eq!(example.post(again.body.clone(), &again.signature).await.0, 200);
    }
    let forged = SignedDelivery::now(events[1].to_json(), "whsec_forger").unwrap();
    assert_eq!(example.post(forged.body, &forged.signature).await.0, 400);
    let stale = SignedDelivery::at(events[2].to_json(), SECRET, unix_now() - 3600).unwrap();
    assert_eq!(example.post(stale.body, &stale.signature).await.0, 400);
    // 2 MiB declared, over the example's limit: refused from the header.
    assert_eq!(example.post_declaring(2 * 1024 * 1024, "t=1,v1=00"), 413);

    // The settle (and its count) may finish just after the reply is sent.
    let mut text = scrape(&example).await;
    for _ in 0..50 {
        if samples(&text, "payhook_deliveries_total").get(r#"outcome="handled""#) == Some(&3.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        text = scrape(&example).await;
    }
    let deliveries = samples(&text, "payhook_deliveries_total");
    let expected: BTreeMap<String, f64> = [
        (r#"outcome="verified""#, 5.0),
        (r#"outcome="handled""#, 3.0),
        (r#"outcome="duplicate""#, 2.0),
        (r#"outcome="rejected",reason="signature_mismatch""#, 1.0),
        (r#"outcome="rejected",reason="timestamp_too_old""#, 1.0),
        (r#"outcome="rejected",reason="body_too_large""#, 1.0),
    ]
    .into_iter()
    .map(|(labels, count)| (labels.to_owned(), count))
    .collect();
    assert_eq!(deliveries, expected, "{text}");
    let handler = samples(&text, "payhook_handler_seconds_count");
    assert_eq!(handler.get(r#"result="handled""#), Some(&3.0), "{text}");
    assert!(text.contains("# TYPE payhook_deliveries_total counter"), "{text}");
    assert!(text.contains("# HELP payhook_handler_seconds"), "{text}");
}
