//! The receiver examples with `PAYHOOK_SCHEME=standard`, as users run them:
//! each in its own process on a free loopback port, fed Standard Webhooks
//! deliveries over HTTP, judged by its replies and by what it prints.
//!
//! The contract: with `PAYHOOK_SCHEME=standard`, `PAYHOOK_SECRET` is a `whsec_`
//! key (`v1`) and `PAYHOOK_PUBLIC_KEYS` comma-separated `whpk_` keys (`v1a`), at
//! least one of them set; deliveries are deduplicated by `webhook-id`, and the
//! `handled <id> <type>` line carries the `webhook-id` as the id. Without
//! `PAYHOOK_SCHEME` the examples behave as before (example_receivers.rs).

use crate::example_process;

use std::time::Duration;

use example_process::{for_each_receiver, Example};
use payhook::sender::{
    generate_standard_keypair, generate_standard_secret, EventBuilder, SignedDelivery, StandardDelivery,
};

const RECEIVED: &str = r#"{"received":true}"#;
const LOG_TIMEOUT: Duration = Duration::from_secs(10);

/// `env` plus, for `inbox_receiver`, a database of its own.
fn with_database(example: &str, mut env: Vec<(&'static str, String)>) -> Vec<(&'static str, String)> {
    if example == "inbox_receiver" {
        env.push((
            "PAYHOOK_DATABASE_URL",
            payhook_test_support::sqlite_url("payhook-example-standard"),
        ));
    }
    env
}

fn borrowed<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(name, value)| (*name, value.as_str())).collect()
}

for_each_receiver!(dedupes_by_webhook_id_and_prints_it_as_the_event_id);
async fn dedupes_by_webhook_id_and_prints_it_as_the_event_id(example: &str) {
    let secret = generate_standard_secret().unwrap();
    let (old_signing_key, old_public_key) = generate_standard_keypair().unwrap();
    let (signing_key, public_key) = generate_standard_keypair().unwrap();
    let env = with_database(
        example,
        vec![
            ("PAYHOOK_SCHEME", "standard".to_owned()),
            ("PAYHOOK_SECRET", secret.clone()),
            ("PAYHOOK_PUBLIC_KEYS", format!("{old_public_key}, {public_key}")),
        ],
    );
    let mut receiver = Example::start(example, &borrowed(&env));

    let body = EventBuilder::payment_intent_succeeded().to_standard_json();
    let symmetric = StandardDelivery::now(body.clone(), "msg_example_v1", &secret).unwrap();
    // The same message twice: handled once.
    for _ in 0..2 {
        let reply = receiver
            .post_with(symmetric.body.clone(), symmetric.headers())
            .await;
        assert_eq!(reply, (200, RECEIVED.to_owned()));
    }
    // `v1a`, with the second public key and then the first (rotation).
    for (id, key) in [
        ("msg_example_v1a", &signing_key),
        ("msg_example_old", &old_signing_key),
    ] {
        let asymmetric = StandardDelivery::now(body.clone(), id, key).unwrap();
        let reply = receiver
            .post_with(asymmetric.body.clone(), asymmetric.headers())
            .await;
        assert_eq!(reply, (200, RECEIVED.to_owned()), "{id}");
    }
    // Forged, and the service's own header: refused, naming what failed.
    let other = generate_standard_secret().unwrap();
    let forged = StandardDelivery::now(body.clone(), "msg_example_forged", &other).unwrap();
    let (status, reply) = receiver.post_with(forged.body.clone(), forged.headers()).await;
    assert_eq!(status, 400);
    assert!(
        reply.starts_with("Webhook Error: no signature matches"),
        "{reply}"
    );
    let service = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), &secret).unwrap();
    let (status, reply) = receiver.post(service.body, &service.signature).await;
    assert_eq!(
        (status, reply.as_str()),
        (400, "Webhook Error: missing webhook-id header")
    );

    let handled = |id: &str| format!("handled {id} payment_intent.succeeded");
    for id in ["msg_example_v1", "msg_example_v1a", "msg_example_old"] {
        receiver.wait_for_line(LOG_TIMEOUT, |line| line.contains(&handled(id)));
    }
    // Give a second, wrong `handled` line the time to appear.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lines = receiver.lines();
    let handled_lines: Vec<_> = lines.iter().filter(|line| line.contains("handled ")).collect();
    assert_eq!(handled_lines.len(), 3, "one line per webhook-id: {lines:#?}");
    for key in [&secret, &signing_key, &old_signing_key, &other] {
        let value = &key[key.find('_').unwrap() + 1..];
        assert!(
            !lines.iter().any(|line| line.contains(value)),
            "a key is never printed: {lines:#?}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|line| line == "signature scheme: Standard Webhooks (1 secret(s), 2 public key(s))"),
        "{lines:#?}"
    );
}

for_each_receiver!(public_keys_alone_are_enough);
async fn public_keys_alone_are_enough(example: &str) {
    let (signing_key, public_key) = generate_standard_keypair().unwrap();
    let env = with_database(
        example,
        vec![
            ("PAYHOOK_SCHEME", "standard".to_owned()),
            ("PAYHOOK_PUBLIC_KEYS", public_key),
        ],
    );
    let mut receiver = Example::start(example, &borrowed(&env));
    let body = EventBuilder::payment_intent_failed().to_standard_json();
    let delivery = StandardDelivery::now(body, "msg_example_pk", &signing_key).unwrap();
    let reply = receiver
        .post_with(delivery.body.clone(), delivery.headers())
        .await;
    assert_eq!(reply, (200, RECEIVED.to_owned()));
    receiver.wait_for_line(LOG_TIMEOUT, |line| {
        line.contains("handled msg_example_pk payment_intent.failed")
    });
}

for_each_receiver!(bad_standard_settings_stop_it_naming_the_variable);
async fn bad_standard_settings_stop_it_naming_the_variable(example: &str) {
    let (_, public_key) = generate_standard_keypair().unwrap();
    let cases: [(&[(&str, &str)], String); 4] = [
        (
            &[("PAYHOOK_SCHEME", "standard")],
            "PAYHOOK_SCHEME=standard needs PAYHOOK_SECRET (a whsec_ key) and/or PAYHOOK_PUBLIC_KEYS"
                .to_owned(),
        ),
        (
            &[
                ("PAYHOOK_SCHEME", "standard"),
                ("PAYHOOK_SECRET", "whsec_not*base64"),
            ],
            "PAYHOOK_SECRET: secret #1 is not base64".to_owned(),
        ),
        (
            &[
                ("PAYHOOK_SCHEME", "standard"),
                ("PAYHOOK_PUBLIC_KEYS", &format!("{public_key},whpk_AAAA")),
            ],
            "PAYHOOK_PUBLIC_KEYS: public key #2 does not decode to 32 bytes".to_owned(),
        ),
        (
            &[("PAYHOOK_SCHEME", "svix"), ("PAYHOOK_SECRET", "whsec_x")],
            "PAYHOOK_SCHEME=svix is not a scheme".to_owned(),
        ),
    ];
    for (env, expected) in cases {
        let env = with_database(example, env.iter().map(|(k, v)| (*k, (*v).to_owned())).collect());
        let mut command = tokio::process::Command::from(example_process::command(example, &borrowed(&env)));
        command.kill_on_drop(true);
        let output = tokio::time::timeout(Duration::from_secs(30), command.output())
            .await
            .unwrap_or_else(|_| panic!("{example} kept running with {env:?}"))
            .expect("run the example");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(1),
            "stdout: {stdout}\nstderr: {stderr}"
        );
        assert!(stderr.contains(&format!("{example}: {expected}")), "{stderr}");
        assert!(!stdout.contains("listening on"), "{stdout}");
        assert!(
            !stderr.contains("not*base64") && !stderr.contains("AAAA"),
            "{stderr}"
        );
    }
}
