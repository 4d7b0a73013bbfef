//! The Standard Webhooks conformance fixture through the core: the scheme on
//! its own, and a receiver configured with it (verify, then the event with the
//! `webhook-id` as its id). Each case is verified with a fixed clock at the
//! case's `now`, and must reach the reference implementation's verdict.

use payhook_core::signature::StandardWebhooks;
use payhook_core::{FixedClock, Receiver};
use payhook_test_support::standard_webhooks::{cases, Case};

fn scheme(case: &Case) -> StandardWebhooks {
    StandardWebhooks::builder()
        .secrets(case.secrets.iter().cloned())
        .public_keys(case.public_keys.iter().cloned())
        .clock(FixedClock::new(case.now))
        .build()
        .unwrap_or_else(|error| panic!("{}: the keys are refused: {error}", case.name))
}

fn headers(case: &Case) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    for (name, value) in &case.headers {
        headers.insert(
            http::HeaderName::from_bytes(name.as_bytes()).expect("a header name"),
            http::HeaderValue::from_str(value).expect("a header value"),
        );
    }
    headers
}

#[test]
fn the_scheme_reaches_the_reference_verdict_on_every_case() {
    let mut wrong = Vec::new();
    for case in cases() {
        let verdict = scheme(&case).verify_headers(&headers(&case), case.body.as_bytes());
        if verdict.is_ok() != case.genuine {
            wrong.push(format!(
                "{}: expected genuine={}, got {verdict:?}",
                case.name, case.genuine
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "verdicts differ from the reference:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_scheme_alone_reaches_the_reference_verdict_without_the_clock() {
    // At the delivery's own timestamp, only the signatures decide.
    let mut wrong = Vec::new();
    for case in cases() {
        let Some(timestamp) = case.timestamp() else {
            continue;
        };
        let at_signing = Case {
            now: timestamp,
            ..case.clone()
        };
        let verdict = scheme(&at_signing).verify_headers(&headers(&case), case.body.as_bytes());
        if verdict.is_ok() != case.signature_genuine {
            wrong.push(format!(
                "{}: expected signature_genuine={}, got {verdict:?}",
                case.name, case.signature_genuine
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "verdicts differ from the reference:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn a_receiver_with_the_scheme_reaches_the_reference_verdict_and_takes_the_webhook_id() {
    let mut wrong = Vec::new();
    for case in cases().into_iter().filter(|case| case.event_body) {
        let receiver = Receiver::builder()
            .scheme(scheme(&case))
            .build()
            .expect("a valid receiver");
        match receiver.check(&headers(&case), case.body.as_bytes()) {
            Ok(event) if case.genuine => {
                if Some(event.id()) != case.header("webhook-id") {
                    wrong.push(format!(
                        "{}: the event id is {:?}, not the webhook-id",
                        case.name,
                        event.id()
                    ));
                }
            }
            Err(_) if !case.genuine => {}
            other => wrong.push(format!(
                "{}: expected genuine={}, got {other:?}",
                case.name, case.genuine
            )),
        }
    }
    assert!(
        wrong.is_empty(),
        "verdicts differ from the reference:\n{}",
        wrong.join("\n")
    );
}
