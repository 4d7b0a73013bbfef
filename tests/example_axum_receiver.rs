//! `cargo run --example axum_receiver` as a user runs it: a separate process
//! on a free loopback port, fed genuine, duplicate and tampered deliveries
//! over HTTP, judged by its replies and by what it prints.

mod axum_example;

use std::time::Duration;

use axum_example::Example;
use payhook::testing::{EventBuilder, SignedDelivery};

const RECEIVED: &str = r#"{"received":true}"#;

#[tokio::test]
async fn handles_an_event_once_and_logs_duplicates_and_rejections_without_handled() {
    let secret = "whsec_example_test_from_env";
    let mut example = Example::start(&[("PAYHOOK_SECRET", secret)]);

    let event = EventBuilder::payment_intent_succeeded();
    let id = event.event_id().to_owned();
    let signed = SignedDelivery::now(event.to_json(), secret).unwrap();
    assert_eq!(
        example.post(signed.body.clone(), &signed.signature).await,
        (200, RECEIVED.to_owned())
    );
    assert_eq!(
        example.post(signed.body.clone(), &signed.signature).await,
        (200, RECEIVED.to_owned())
    );
    let tampered = event.to_json().replace(&id, "evt_forged");
    let (status, body) = example.post(tampered, &signed.signature).await;
    assert_eq!(status, 400);
    assert!(body.starts_with("Webhook Error: no signature matches"), "{body}");

    let handled = format!("handled {id} payment_intent.succeeded");
    example.wait_for_line(Duration::from_secs(5), |line| {
        line.contains(&handled) && line.contains("INFO")
    });
    example.wait_for_line(Duration::from_secs(5), |line| {
        line.contains("duplicate delivery acknowledged") && line.contains(&id)
    });
    example.wait_for_line(Duration::from_secs(5), |line| {
        line.contains("delivery rejected") && line.contains("no signature matches")
    });

    let lines = example.lines();
    let handled_lines: Vec<_> = lines.iter().filter(|line| line.contains("handled")).collect();
    assert_eq!(
        handled_lines.len(),
        1,
        "one `handled` line, for the one new event: {lines:#?}"
    );
    assert!(handled_lines[0].contains(&handled));
    assert!(
        !lines.iter().any(|line| line.contains(secret)),
        "the secret is never printed: {lines:#?}"
    );
    assert!(!lines
        .iter()
        .any(|line| line.contains("PAYHOOK_SECRET is not set")));
    assert!(
        lines.iter().any(|line| line == "dedupe store: in memory"),
        "{lines:#?}"
    );
}

#[tokio::test]
async fn without_payhook_secret_it_prints_and_uses_a_test_secret() {
    let mut example = Example::start(&[]);
    let notice = example.wait_for_line(Duration::from_secs(1), |line| {
        line.contains("PAYHOOK_SECRET is not set")
    });
    let secret = notice
        .split_whitespace()
        .find(|word| word.starts_with("whsec_"))
        .unwrap_or_else(|| panic!("no whsec_ secret in {notice:?}"))
        .to_owned();

    let event = EventBuilder::other("customer.created");
    let signed = SignedDelivery::now(event.to_json(), &secret).unwrap();
    assert_eq!(
        example.post(signed.body, &signed.signature).await,
        (200, RECEIVED.to_owned())
    );
    let handled = format!("handled {} customer.created", event.event_id());
    example.wait_for_line(Duration::from_secs(5), |line| line.contains(&handled));

    let wrong = SignedDelivery::now(event.to_json(), "whsec_not_the_test_secret").unwrap();
    assert_eq!(example.post(wrong.body, &wrong.signature).await.0, 400);
}

#[test]
fn an_unreachable_redis_url_stops_it_with_a_clear_error_that_hides_the_password() {
    // Port 1 on loopback refuses connections at once.
    let output = std::process::Command::new(axum_example::executable())
        .env("PAYHOOK_ADDR", "127.0.0.1:0")
        .env("PAYHOOK_SECRET", "whsec_example_test_from_env")
        .env("PAYHOOK_REDIS_URL", "redis://:hunter2-password@127.0.0.1:1/0")
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        stderr.contains("PAYHOOK_REDIS_URL: Redis unavailable"),
        "{stderr}"
    );
    assert!(!stdout.contains("listening on"), "{stdout}");
    for text in [&stdout, &stderr] {
        assert!(!text.contains("hunter2"), "the password is never printed: {text}");
    }
}
