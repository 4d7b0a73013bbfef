//! Settings: out-of-range ones are refused at start with a message naming
//! them; extreme but valid ones work without overflow.

mod support;

use std::time::Duration;

use payhook_emulator::{Emulator, Faults, Limits, RetrySchedule, StartError};
use support::{RecordingReceiver, Script};

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
    for p in [f64::NAN, -0.1, 1.5] {
        refused(
            Emulator::builder().faults(Faults::default().duplicates(p)),
            "probability",
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
        .faults(Faults::default().skew(i64::MIN).seed(u64::MAX))
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
    let receiver = RecordingReceiver::start(Script {
        fail_first: 3,
        ..Script::default()
    })
    .await;
    emulator.register_endpoint(&receiver.url).expect("registered");
    let intent = emulator.create_payment_intent(u128::MAX, "eth").expect("created");
    emulator.succeed_payment_intent(&intent.id).expect("succeeded");
    assert!(emulator.wait_idle(Duration::from_secs(20)).await);
    let attempts = emulator.attempts();
    assert_eq!(attempts.len(), 4);
    assert!(
        attempts.iter().all(|a| a.signed_at == 0),
        "a clock skewed before 1970 signs t=0"
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
