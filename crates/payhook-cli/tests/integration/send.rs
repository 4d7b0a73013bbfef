//! `payhook send` against a real receiver on a loopback port.

use crate::support;

use std::net::TcpListener;
use std::time::Duration;

use support::{payhook, reply_lines, Config, TestReceiver, SECRET};

const RECEIVED: &str = r#"200 {"received":true}"#;

fn send(receiver: &TestReceiver, extra: &[&str]) -> support::Run {
    let mut args = vec!["send", "--to", &receiver.url, "--secret", SECRET];
    args.extend_from_slice(extra);
    payhook(&args, b"")
}

#[test]
fn a_built_event_is_delivered_and_acknowledged() {
    let receiver = TestReceiver::start();
    let run = send(&receiver, &["--id", "evt_cli_single"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(reply_lines(&run.stdout), [format!("#1 {RECEIVED}")]);
    assert!(
        run.stdout.contains("payment_intent.succeeded evt_cli_single"),
        "{run:?}"
    );
    assert!(run.stdout.contains("all as expected"), "{run:?}");
    let handled = receiver.handled();
    assert_eq!(handled.len(), 1);
    assert_eq!(handled[0].id, "evt_cli_single");
    assert_eq!(handled[0].event_type, "payment_intent.succeeded");
    assert_eq!(handled[0].amount, Some(250_000));
}

#[test]
fn a_single_delivery_prints_no_rate_and_several_do() {
    let receiver = TestReceiver::start();
    let one = send(&receiver, &[]);
    assert_eq!(one.code, 0, "{one:?}");
    let summary = one.stdout.lines().find(|l| l.starts_with("summary:")).unwrap();
    assert!(!summary.contains("/s"), "a rate for one request: {summary}");

    let three = send(&receiver, &["--repeat", "3"]);
    assert_eq!(three.code, 0, "{three:?}");
    let summary = three.stdout.lines().find(|l| l.starts_with("summary:")).unwrap();
    assert!(summary.contains("/s)"), "no rate for three requests: {summary}");
}

#[test]
fn every_event_type_is_built_and_delivered() {
    let receiver = TestReceiver::start();
    let types = [
        "payment.succeeded",
        "payment_intent.failed",
        "payment_intent.payment_failed",
        "customer.created",
    ];
    for event_type in types {
        let run = send(&receiver, &["--type", event_type]);
        assert_eq!(run.code, 0, "{event_type}: {run:?}");
    }
    let handled = receiver.handled();
    let sent: Vec<&str> = handled.iter().map(|h| h.event_type.as_str()).collect();
    assert_eq!(sent, types);
    // Both failure names are built as payment events, with their intent.
    let with_intent: Vec<bool> = handled.iter().map(|h| h.amount.is_some()).collect();
    assert_eq!(with_intent, [true, true, true, false]);
}

#[test]
fn repeat_sends_duplicates_that_are_handled_once() {
    let receiver = TestReceiver::start();
    let run = send(&receiver, &["--repeat", "3"]);
    assert_eq!(run.code, 0, "{run:?}");
    let lines = reply_lines(&run.stdout);
    assert_eq!(lines.len(), 3, "{run:?}");
    assert!(lines.iter().all(|line| line.ends_with(RECEIVED)), "{run:?}");
    assert_eq!(receiver.requests(), 3);
    assert_eq!(
        receiver.handled().len(),
        1,
        "duplicates must not reach the handler"
    );
}

#[test]
fn concurrency_sends_at_once_and_the_handler_runs_once() {
    let receiver = TestReceiver::with(Config {
        request_delay: Duration::from_millis(250),
        handler_delay: Duration::from_millis(300),
        ..Config::default()
    });
    let run = send(&receiver, &["--concurrency", "4", "--repeat", "8"]);
    assert_eq!(run.code, 0, "{run:?}");
    let lines = reply_lines(&run.stdout);
    assert_eq!(lines.len(), 8, "{run:?}");
    for line in &lines {
        assert!(
            line.ends_with(RECEIVED) || line.contains(" 409 Webhook Error: "),
            "{line}"
        );
    }
    assert_eq!(receiver.requests(), 8);
    assert_eq!(receiver.max_in_flight(), 4, "four deliveries at once, never more");
    assert_eq!(receiver.handled().len(), 1, "{run:?}");
}

#[test]
fn concurrency_alone_sends_that_many_deliveries() {
    let receiver = TestReceiver::with(Config {
        request_delay: Duration::from_millis(250),
        ..Config::default()
    });
    let run = send(&receiver, &["--concurrency", "3"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(reply_lines(&run.stdout).len(), 3, "{run:?}");
    assert_eq!(receiver.max_in_flight(), 3);
    assert_eq!(receiver.handled().len(), 1);
}

#[test]
fn distinct_sends_that_many_events_and_the_handler_runs_for_each() {
    let receiver = TestReceiver::with(Config {
        // Deliveries overlap on the wire, as in a load test.
        request_delay: Duration::from_millis(20),
        ..Config::default()
    });
    let run = send(
        &receiver,
        &[
            "--distinct",
            "--repeat",
            "40",
            "--concurrency",
            "8",
            "--amount",
            "777",
        ],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .contains("payment_intent.succeeded events, each with a fresh id"),
        "{run:?}"
    );
    let lines = reply_lines(&run.stdout);
    assert_eq!(lines.len(), 40, "{run:?}");
    assert!(lines.iter().all(|line| line.ends_with(RECEIVED)), "{run:?}");
    assert_eq!(receiver.requests(), 40);
    assert!(receiver.max_in_flight() > 1, "deliveries went out one at a time");
    let handled = receiver.handled();
    assert_eq!(handled.len(), 40, "every distinct event reaches the handler");
    let ids: std::collections::HashSet<&str> = handled.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(ids.len(), 40, "forty different event ids: {handled:?}");
    assert!(handled.iter().all(|h| h.id.starts_with("evt_test_")
        && h.event_type == "payment_intent.succeeded"
        && h.amount == Some(777)));

    // A second run sends forty more new events, not the first run's again.
    let again = send(&receiver, &["--distinct", "--repeat", "40", "--concurrency", "8"]);
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(receiver.handled().len(), 80);
}

#[test]
fn distinct_tampered_deliveries_are_each_refused() {
    let receiver = TestReceiver::start();
    let run = send(
        &receiver,
        &["--distinct", "--tamper", "--repeat", "3", "--concurrency", "3"],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("[tampered]"), "{run:?}");
    let lines = reply_lines(&run.stdout);
    assert_eq!(lines.len(), 3, "{run:?}");
    assert!(
        lines
            .iter()
            .all(|line| line.contains(" 400 Webhook Error: no signature matches")),
        "{run:?}"
    );
    assert!(receiver.handled().is_empty());
}

#[test]
fn tampered_deliveries_must_be_refused() {
    let receiver = TestReceiver::start();
    let run = send(&receiver, &["--tamper", "--repeat", "2"]);
    assert_eq!(run.code, 0, "{run:?}");
    let lines = reply_lines(&run.stdout);
    assert_eq!(lines.len(), 2);
    for line in lines {
        assert!(
            line.ends_with("400 Webhook Error: no signature matches the expected signature for this payload and timestamp"),
            "{line}"
        );
    }
    assert!(run.stdout.contains("[tampered]"), "{run:?}");
    assert_eq!(receiver.requests(), 2);
    assert!(receiver.handled().is_empty());
}

#[test]
fn stale_deliveries_must_be_refused() {
    let receiver = TestReceiver::start();
    let run = send(&receiver, &["--stale"]);
    assert_eq!(run.code, 0, "{run:?}");
    let lines = reply_lines(&run.stdout);
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].starts_with("#1 400 Webhook Error: timestamp is 36"),
        "{run:?}"
    );
    assert!(
        lines[0].ends_with(" s old, outside the 300 s tolerance"),
        "{run:?}"
    );
    assert!(receiver.handled().is_empty());
}

#[test]
fn a_receiver_reading_another_header_fails_the_run() {
    let receiver = TestReceiver::with(Config {
        header: Some("x-other-signature"),
        ..Config::default()
    });
    let run = send(&receiver, &[]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stdout
            .contains("#1 400 Webhook Error: missing x-other-signature header"),
        "{run:?}"
    );
    assert!(
        run.stdout.contains("unexpected: a valid delivery should get 200"),
        "{run:?}"
    );
    assert!(run.stdout.contains("see --header"), "{run:?}");
    assert!(run.stdout.contains("1 unexpected"), "{run:?}");

    let run = send(&receiver, &["--header", "X-Other-Signature"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(receiver.handled().len(), 1);
}

#[test]
fn a_receiver_without_a_replay_guard_fails_the_stale_check() {
    let receiver = TestReceiver::with(Config {
        no_timestamp_check: true,
        ..Config::default()
    });
    let run = send(&receiver, &["--stale"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stdout.contains(&format!("#1 {RECEIVED}")), "{run:?}");
    assert!(
        run.stdout
            .contains("unexpected: a delivery signed an hour ago should get 400 Webhook Error: …"),
        "{run:?}"
    );
    assert_eq!(receiver.handled().len(), 1);
}

#[test]
fn a_wrong_secret_is_an_unexpected_reply() {
    let receiver = TestReceiver::start();
    let args = ["send", "--to", &receiver.url, "--secret", "whsec_not_the_one"];
    let run = payhook(&args, b"");
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stdout.contains("#1 400 Webhook Error: no signature matches"),
        "{run:?}"
    );
    assert!(run.stdout.contains("is --secret the secret"), "{run:?}");
    assert!(!run.stdout.contains("whsec_not_the_one") && !run.stderr.contains("whsec_not_the_one"));
    assert!(receiver.handled().is_empty());
}

#[test]
fn a_failing_handler_is_an_unexpected_reply() {
    let receiver = TestReceiver::with(Config {
        handler_fails: true,
        ..Config::default()
    });
    let run = send(&receiver, &["--repeat", "2"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        reply_lines(&run.stdout),
        ["#1 500 handler failed", "#2 500 handler failed"]
    );
    assert!(run.stdout.contains("2 unexpected"), "{run:?}");
    // The claim was released each time, so the retry reached the handler again.
    assert_eq!(receiver.handled().len(), 2);
}

#[test]
fn data_file_is_sent_as_is() {
    let receiver = TestReceiver::start();
    let dir = std::env::temp_dir().join(format!("payhook-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let event = dir.join("event.json");
    std::fs::write(
        &event,
        r#"{"id":"evt_from_file","type":"payment_intent.succeeded","data":{"object":{"id":"pi_file","amount":123456789012345678901234567890,"currency":"eth","status":"succeeded"}}}"#,
    )
    .unwrap();
    let run = send(&receiver, &["--data", event.to_str().unwrap(), "--repeat", "2"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("evt_from_file"), "{run:?}");
    let handled = receiver.handled();
    assert_eq!(handled.len(), 1);
    assert_eq!(handled[0].id, "evt_from_file");
    assert_eq!(handled[0].amount, Some(123_456_789_012_345_678_901_234_567_890));

    // A file that is not an event: a healthy receiver refuses it with 400.
    let junk = dir.join("junk.json");
    std::fs::write(&junk, "[1, 2, 3]").unwrap();
    let run = send(&receiver, &["--data", junk.to_str().unwrap()]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.contains("#1 400 Webhook Error: invalid payload"),
        "{run:?}"
    );
    assert!(run.stderr.contains("is not a valid event"), "{run:?}");

    // A tampered file body is refused too.
    let run = send(&receiver, &["--data", event.to_str().unwrap(), "--tamper"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.contains("#1 400 Webhook Error: no signature matches"),
        "{run:?}"
    );
    assert_eq!(receiver.handled().len(), 1);

    // A file that cannot be read is a usage error.
    let missing = dir.join("missing.json");
    let run = send(&receiver, &["--data", missing.to_str().unwrap()]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("cannot read") && run.stderr.contains("missing.json"),
        "{run:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn data_can_come_from_stdin() {
    let receiver = TestReceiver::start();
    let body = br#"{"id":"evt_stdin","type":"customer.created","data":{}}"#;
    let run = payhook(
        &["send", "--to", &receiver.url, "--secret", SECRET, "--data", "-"],
        body,
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(receiver.handled()[0].id, "evt_stdin");
}

#[test]
fn amounts_beyond_u64_arrive_exactly() {
    let receiver = TestReceiver::start();
    let wei = "340282366920938463463374607431768211455"; // u128::MAX
    let run = send(&receiver, &["--amount", wei, "--currency", "eth"]);
    assert_eq!(run.code, 0, "{run:?}");
    let handled = receiver.handled();
    assert_eq!(handled[0].amount, Some(u128::MAX));
    assert_eq!(handled[0].currency.as_deref(), Some("eth"));

    let run = send(
        &receiver,
        &["--amount", "340282366920938463463374607431768211456"],
    );
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("--amount"), "{run:?}");
}

#[test]
fn a_dead_port_is_a_clear_error_with_its_own_exit_code() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    }; // closed again: nothing listens there now
    let url = format!("http://127.0.0.1:{port}/webhooks");
    let run = payhook(&["send", "--to", &url, "--secret", SECRET, "--repeat", "5"], b"");
    // 3, not the 2 of a usage error: a script can tell "receiver down" apart.
    assert_eq!(run.code, 3, "{run:?}");
    assert!(run.stderr.contains(&url), "{run:?}");
    assert!(run.stderr.contains("connection refused"), "{run:?}");
    assert!(
        run.stderr
            .contains(&format!("nothing is listening on 127.0.0.1:{port}")),
        "{run:?}"
    );
}

#[test]
fn long_runs_report_progress_on_stderr() {
    let receiver = TestReceiver::with(Config {
        request_delay: Duration::from_millis(400),
        ..Config::default()
    });
    let run = send(&receiver, &["--repeat", "4", "--quiet"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stderr.contains("progress: 3/4 replies, 0 unexpected"),
        "{run:?}"
    );
    assert!(
        reply_lines(&run.stdout).is_empty(),
        "--quiet prints no expected reply: {run:?}"
    );
    assert!(run.stdout.contains("summary: 4 replies"), "{run:?}");
}

#[test]
fn bad_send_arguments_exit_with_2() {
    let refused = |args: &[&str]| {
        let run = payhook(args, b"");
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stderr.contains("error"), "{args:?}: {run:?}");
        assert!(run.stdout.is_empty(), "{args:?}: {run:?}");
    };
    for args in [
        &["send", "--secret", SECRET][..],
        &["send", "--to", "http://127.0.0.1:9/", "--secret", ""],
        &["send", "--to", "ftp://127.0.0.1:9/", "--secret", SECRET],
        &["send", "--to", "https://", "--secret", SECRET],
        &["send", "--to", "http://127.0.0.1:9/"],
        &["send", "--to", "127.0.0.1:9/webhooks", "--secret", SECRET],
    ] {
        refused(args);
    }
    // A well-formed target and secret with one bad option (or a bad pair).
    let well_formed = ["send", "--to", "http://127.0.0.1:9/", "--secret", SECRET];
    for options in [
        &["--amount", "-5"][..],
        &["--amount", "1.5"],
        &["--concurrency", "0"],
        &["--repeat", "0"],
        &["--header", "bad header"],
        &["--data", "x", "--amount", "5"],
        &["--distinct", "--id", "evt_1"],
        &["--distinct", "--data", "x"],
    ] {
        let args: Vec<&str> = well_formed.iter().chain(options).copied().collect();
        refused(&args);
    }
    // A negative number is refused for what it is, not taken for an unknown flag.
    for option in ["--amount", "--repeat", "--concurrency", "--timeout"] {
        let args: Vec<&str> = well_formed.iter().copied().chain([option, "-5"]).collect();
        let run = payhook(&args, b"");
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(
            run.stderr.contains(&format!("invalid value '-5' for '{option} ")),
            "{args:?}: {run:?}"
        );
    }
}
