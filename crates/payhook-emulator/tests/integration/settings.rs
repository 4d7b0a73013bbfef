//! Settings: out-of-range ones are refused at start with a message naming
//! them; extreme but valid ones work without overflow.

use crate::support;

use std::time::Duration;

use payhook_emulator::{Emulator, Faults, Limits, RetrySchedule, StartError};
use support::{RecordingReceiver, Script};

/// The largest clock skew the emulator accepts, either way: 366 days.
const MOST_SKEW: i64 = 366 * 24 * 3600;

async fn refused(builder: payhook_emulator::EmulatorBuilder, mentions: &str) {
    match builder.start().await {
        Err(StartError::Setting(message)) => assert!(message.contains(mentions), "{message}"),
        other => panic!("expected a setting error about {mentions}, got {other:?}"),
    }
}

#[tokio::test]
async fn out_of_range_settings_are_refused_at_start() {
    let zero_limits = {
        let mut limits = Limits::default();
        limits.pending_deliveries = 0;
        limits
    };
    refused(Emulator::builder().limits(zero_limits), "limits").await;
    refused(
        Emulator::builder().retry_schedule(RetrySchedule::new(Duration::ZERO, Duration::from_secs(1), 3)),
        "base interval",
    )
    .await;
    refused(
        Emulator::builder().retry_schedule(RetrySchedule::new(
            Duration::from_secs(2),
            Duration::from_secs(1),
            3,
        )),
        "cap",
    )
    .await;
    refused(
        Emulator::builder().retry_schedule(RetrySchedule::new(
            Duration::from_secs(1),
            Duration::from_secs(1),
            0,
        )),
        "attempt",
    )
    .await;
    for skew in [i64::MIN, -MOST_SKEW - 1, MOST_SKEW + 1, i64::MAX] {
        refused(
            Emulator::builder().faults(Faults::default().skew(skew)),
            "clock skew",
        )
        .await;
    }
    for p in [f64::NAN, -0.1, 1.5] {
        refused(
            Emulator::builder().faults(Faults::default().duplicates(p)),
            "probability",
        )
        .await;
        refused(
            Emulator::builder().faults(Faults::default().undeliverable(p)),
            "undeliverable probability",
        )
        .await;
    }
    refused(Emulator::builder().attempt_timeout(Duration::ZERO), "timeout").await;
    refused(Emulator::builder().attempt_timeout(Duration::MAX), "timeout").await;
    refused(Emulator::builder().signature_header("bad header"), "header").await;
    refused(Emulator::builder().api_key("sk_live_abc"), "test mode").await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    assert!(matches!(
        Emulator::builder().addr(addr).start().await,
        Err(StartError::Bind { .. })
    ));
}

#[tokio::test]
async fn extreme_valid_settings_deliver_without_overflow() {
    let emulator = Emulator::builder()
        .retry_schedule(RetrySchedule::new(
            Duration::from_millis(1),
            Duration::MAX,
            u32::MAX,
        ))
        .faults(Faults::default().skew(-MOST_SKEW).seed(u64::MAX))
        .limits({
            let mut limits = Limits::default();
            limits.objects = usize::MAX;
            limits.attempts = usize::MAX;
            limits.pending_deliveries = usize::MAX;
            limits
        })
        .max_concurrent_attempts(usize::MAX)
        .signature_header("x-custom-signature")
        .start()
        .await
        .expect("starts");
    let receiver = RecordingReceiver::start(Script::failing_first(3)).await;
    emulator.register_endpoint(&receiver.url).expect("registered");
    let intent = emulator.create_payment_intent(u128::MAX, "eth").expect("created");
    emulator.succeed_payment_intent(&intent.id).expect("succeeded");
    assert!(emulator.wait_idle(Duration::from_secs(20)).await);
    let attempts = emulator.attempts();
    assert_eq!(attempts.len(), 4);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let skewed = i64::try_from(now).expect("now") - MOST_SKEW;
    assert!(
        attempts
            .iter()
            .all(|a| (i64::try_from(a.signed_at).expect("signed_at") - skewed).abs() < 120),
        "the clock skewed by the most allowed signs a year back: {:?}",
        attempts.iter().map(|a| a.signed_at).collect::<Vec<_>>()
    );
    assert!(attempts[3].succeeded);
    // The custom header carried the signature.
    assert!(receiver.arrivals().iter().all(|a| a.signature.is_empty()));
}

#[test]
fn the_fixed_api_key_stays_out_of_the_builders_debug_output() {
    let builder = Emulator::builder().api_key("sk_test_do_not_print");
    let shown = format!("{builder:?}");
    assert!(!shown.contains("do_not_print"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
}

#[tokio::test]
async fn a_non_loopback_address_needs_a_fixed_key() {
    let any = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
    match Emulator::builder().addr(any).start().await {
        Err(payhook_emulator::StartError::Setting(why)) => {
            assert!(
                why.contains("not a loopback address") && why.contains("api_key"),
                "{why}"
            );
        }
        other => panic!("started without a key: {other:?}"),
    }
    let emulator = Emulator::builder()
        .addr(any)
        .api_key("sk_test_exposed")
        .start()
        .await
        .expect("a fixed key allows it");
    assert_eq!(emulator.api_key(), "sk_test_exposed");
    emulator.shutdown().await;
}

#[tokio::test]
async fn the_forward_endpoint_signs_with_the_fixed_secret() {
    for (builder, why) in [
        (
            Emulator::builder().forward_secret("whsec_x"),
            "needs a forward_to",
        ),
        (
            Emulator::builder()
                .forward_to("http://127.0.0.1:9/")
                .forward_secret("x"),
            "must start with whsec_",
        ),
        (
            Emulator::builder()
                .forward_to("http://127.0.0.1:9/")
                .forward_secret("whsec_\n"),
            "visible ASCII",
        ),
        (
            Emulator::builder().forward_to("ftp://127.0.0.1:9/"),
            "forward_to: url must be",
        ),
    ] {
        match builder.start().await {
            Err(payhook_emulator::StartError::Setting(message)) => {
                assert!(message.contains(why), "{message}");
            }
            other => panic!("{why}: {other:?}"),
        }
    }
    let emulator = Emulator::builder()
        .forward_to("http://127.0.0.1:9/webhooks")
        .forward_secret("whsec_fixed")
        .start()
        .await
        .expect("starts");
    let endpoint = emulator.forward_endpoint().expect("registered at start");
    assert_eq!(endpoint.secret, "whsec_fixed");
    assert!(endpoint.id.starts_with("we_"));
    emulator.shutdown().await;
    let fresh = Emulator::builder()
        .forward_to("http://127.0.0.1:9/webhooks")
        .start()
        .await
        .expect("starts");
    assert!(fresh
        .forward_endpoint()
        .expect("registered")
        .secret
        .starts_with("whsec_"));
    assert_ne!(
        fresh.forward_endpoint().expect("registered").secret,
        "whsec_fixed"
    );
    fresh.shutdown().await;
}
