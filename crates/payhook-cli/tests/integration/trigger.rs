//! `payhook trigger` and `payhook events resend` against a real `payhook
//! emulate` process delivering to a real payhook receiver, all on loopback:
//! the three-terminal loop of the guide's emulator page
//! (`docs/guide/emulator.md`), with a fixed signing secret.
#![cfg(feature = "emulate")]

use crate::{emulate, support};

use std::time::{Duration, Instant};

use support::{payhook, Config, Run, TestReceiver, SECRET};

const KEY: &str = "sk_test_trigger";

/// `payhook emulate` with a fixed key and secret, forwarding to `url`; killed when dropped.
struct Emulate {
    _process: emulate::Emulate,
    base: String,
}

impl Emulate {
    fn start(url: &str, extra: &[&str]) -> Self {
        let mut args = vec!["--secret", SECRET];
        args.extend_from_slice(extra);
        let (process, base) = emulate::Emulate::forwarding_to(url, KEY, &args);
        Self {
            _process: process,
            base,
        }
    }
}

fn trigger(base: &str, event_type: &str, extra: &[&str]) -> Run {
    let mut args = vec!["trigger", event_type, "--api", base, "--key", KEY];
    args.extend(extra);
    payhook(&args, b"")
}

/// The value after `prefix` on the stdout line that starts with it.
fn after<'a>(stdout: &'a str, prefix: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{stdout}"))
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn trigger_delivers_each_type_and_resend_delivers_the_event_again() {
    let receiver = TestReceiver::start();
    let emulate = Emulate::start(&receiver.url, &[]);

    let mut events = Vec::new();
    for (asked, emitted) in [
        ("payment_intent.succeeded", "payment_intent.succeeded"),
        ("payment_intent.failed", "payment_intent.failed"),
        ("payment_intent.payment_failed", "payment_intent.failed"),
    ] {
        let run = trigger(
            &emulate.base,
            asked,
            &[
                "--amount",
                "18446744073709551617",
                "--currency",
                "btc",
                "--metadata",
                "order=42",
            ],
        );
        assert_eq!(run.code, 0, "{asked}: {run:?}");
        let intent = after(&run.stdout, "payment intent ");
        assert!(
            intent.starts_with("pi_") && intent.ends_with("(18446744073709551617 btc)"),
            "{intent}"
        );
        let event = after(&run.stdout, "event ");
        let (event_id, rest) = event.split_once(' ').expect("id and type");
        assert!(event_id.starts_with("evt_"), "{event}");
        assert!(rest.starts_with(emitted), "{event}");
        let attempt = after(&run.stdout, "attempt 1 to we_");
        assert!(
            attempt.contains(&receiver.url) && attempt.ends_with(", acknowledged"),
            "{attempt}"
        );
        assert!(attempt.contains(": 200 in "), "{attempt}");
        assert_eq!(after(&run.stdout, "delivered "), "to 1 of 1 endpoint");
        assert!(
            !run.stdout.contains(KEY) && !run.stderr.contains(KEY),
            "the key is never printed"
        );
        events.push((event_id.to_owned(), emitted));
    }
    // The receiver verified each with the fixed secret and ran its handler once per event.
    let handled = receiver.handled();
    assert_eq!(
        handled
            .iter()
            .map(|h| (h.id.clone(), h.event_type.as_str()))
            .collect::<Vec<_>>(),
        events
    );
    assert!(
        handled.iter().all(|h| h.amount == Some((1 << 64) + 1)),
        "{handled:?}"
    );
    assert_eq!(receiver.requests(), 3);

    // A resend: the same event reaches the receiver again (a duplicate to it).
    let (event_id, _) = &events[0];
    let run = payhook(
        &["events", "resend", event_id, "--api", &emulate.base, "--key", KEY],
        b"",
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        after(&run.stdout, "resend "),
        format!("1 of event {event_id} to 1 endpoint")
    );
    assert!(
        after(&run.stdout, "attempt 1 to we_").ends_with(", acknowledged"),
        "{}",
        run.stdout
    );
    assert_eq!(after(&run.stdout, "delivered "), "to 1 of 1 endpoint");
    wait_for("the resent delivery arrives", || receiver.requests() == 4);
    assert_eq!(
        receiver.handled().len(),
        3,
        "a duplicate: the handler does not run again"
    );

    // To one endpoint by id.
    let endpoint = after(&run.stdout, "attempt 1 to ")
        .split_once(' ')
        .expect("endpoint id")
        .0
        .to_owned();
    let run = payhook(
        &[
            "events",
            "resend",
            event_id,
            "--webhook-endpoint",
            &endpoint,
            "--api",
            &emulate.base,
            "--key",
            KEY,
        ],
        b"",
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run
        .stdout
        .starts_with(&format!("resend 2 of event {event_id} to 1 endpoint")));
    wait_for("the second resend arrives", || receiver.requests() == 5);
}

#[test]
fn trigger_exits_non_zero_when_the_event_is_not_delivered() {
    // No receiver listens at the forward URL: the attempt fails and is retried.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/webhooks", closed.local_addr().expect("addr"));
    drop(closed);
    let emulate = Emulate::start(&url, &[]);
    let run = trigger(&emulate.base, "payment_intent.succeeded", &["--wait", "1"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        after(&run.stdout, "attempt 1 to we_").contains("could not connect"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("not delivered to we_"), "{}", run.stdout);
    assert_eq!(after(&run.stdout, "delivered "), "to 0 of 1 endpoint");

    // A resend of an unknown event, a wrong key, an emulator that is not there.
    let run = payhook(
        &[
            "events",
            "resend",
            "evt_missing",
            "--api",
            &emulate.base,
            "--key",
            KEY,
        ],
        b"",
    );
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("404 resource_missing"), "{}", run.stderr);
    let run = payhook(
        &[
            "trigger",
            "payment_intent.succeeded",
            "--api",
            &emulate.base,
            "--key",
            "sk_test_wrong",
        ],
        b"",
    );
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("401 api_key_unknown"), "{}", run.stderr);
    assert!(!run.stderr.contains("sk_test_wrong"), "the key is never printed");
    drop(emulate);
    let gone = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", gone.local_addr().expect("addr"));
    drop(gone);
    let run = trigger(&base, "payment_intent.succeeded", &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert!(run.stderr.contains("cannot reach the emulator"), "{}", run.stderr);
}

#[test]
fn trigger_without_an_endpoint_for_the_type_delivers_nothing_and_says_so() {
    let receiver = TestReceiver::start();
    let emulate = Emulate::start(&receiver.url, &[]);
    // Remove the forward endpoint through the API, then trigger.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let listed = client
            .get(format!("{}/v1/webhook_endpoints", emulate.base))
            .bearer_auth(KEY)
            .send()
            .await
            .expect("the emulator answers");
        let listed: serde_json::Value =
            serde_json::from_str(&listed.text().await.expect("body")).expect("JSON");
        let id = listed["data"][0]["id"].as_str().expect("the forward endpoint");
        let deleted = client
            .delete(format!("{}/v1/webhook_endpoints/{id}", emulate.base))
            .bearer_auth(KEY)
            .send()
            .await
            .expect("the emulator answers");
        assert_eq!(deleted.status(), 200);
    });
    let run = trigger(&emulate.base, "payment_intent.failed", &[]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stdout
            .contains("no webhook endpoint is enabled for payment_intent.failed"),
        "{}",
        run.stdout
    );
    assert_eq!(receiver.requests(), 0);
}

/// The commands that drive the emulator take its API key, not a signing
/// secret: their help ends with their exit codes and where the key comes
/// from, and never sends the reader to PAYHOOK_SECRET.
#[test]
fn trigger_and_resend_help_name_the_api_key() {
    for args in [
        &["trigger", "--help"][..],
        &["events", "--help"],
        &["events", "resend", "--help"],
    ] {
        let run = payhook(args, b"");
        assert_eq!(run.code, 0, "{args:?}: {run:?}");
        let help = &run.stdout;
        assert!(help.contains("Exit codes:"), "{args:?}: {help}");
        assert!(
            help.contains("2  usage error, or the emulator refused the request"),
            "{args:?}: {help}"
        );
        assert!(
            help.contains("3  the emulator could not be reached"),
            "{args:?}: {help}"
        );
        assert!(
            help.contains("The API key comes from --key or the PAYHOOK_API_KEY environment variable"),
            "{args:?}: {help}"
        );
        assert!(!help.contains("PAYHOOK_SECRET"), "{args:?}: {help}");
        assert!(!help.contains("--secret"), "{args:?}: {help}");
    }
}

#[test]
fn trigger_and_resend_refuse_bad_arguments() {
    for args in [
        &["trigger", "charge.refunded", "--key", KEY][..],
        &["trigger", "payment_intent.succeeded", "--key", "sk_live_x"],
        &[
            "trigger",
            "payment_intent.succeeded",
            "--key",
            KEY,
            "--amount",
            "0",
        ],
        &[
            "trigger",
            "payment_intent.succeeded",
            "--key",
            KEY,
            "--metadata",
            "novalue",
        ],
        &[
            "trigger",
            "payment_intent.succeeded",
            "--key",
            KEY,
            "--api",
            "https://127.0.0.1:1",
        ],
        &["trigger", "payment_intent.succeeded"],
        &[
            "events",
            "resend",
            "evt_1/../../x",
            "--key",
            KEY,
            "--api",
            "http://127.0.0.1:9",
        ],
    ] {
        let run = payhook(args, b"");
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn signature_header_signs_in_the_named_header() {
    // A receiver of the sibling format: it reads only stripe-signature.
    let receiver = TestReceiver::with(Config {
        header: Some("stripe-signature"),
        ..Config::default()
    });
    let emulate = Emulate::start(&receiver.url, &["--signature-header", "stripe-signature"]);
    let run = trigger(&emulate.base, "payment_intent.succeeded", &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(receiver.handled().len(), 1);
    drop(emulate);

    // Signed in the default header, the same receiver refuses it: the flag did the work.
    let emulate = Emulate::start(&receiver.url, &[]);
    let run = trigger(&emulate.base, "payment_intent.succeeded", &["--wait", "1"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        after(&run.stdout, "attempt 1 to we_").contains(": 400 in "),
        "{}",
        run.stdout
    );
    assert_eq!(receiver.handled().len(), 1);

    let refused = payhook(&["emulate", "--signature-header", "bad header"], b"");
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused.stderr.contains("not a valid HTTP header name"),
        "{}",
        refused.stderr
    );
}

/// A server posing as the emulator whose every reply is far larger than the
/// emulator sends: announced by `Content-Length` (5 GiB), or streamed without
/// a length. Serves `replies` connections, then stops.
fn oversized_api(announced: bool, replies: usize) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().take(replies) {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let head = if announced {
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5368709120\r\n\r\n"
            } else {
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n"
            };
            if stream.write_all(head.as_bytes()).is_err() || stream.write_all(b"\"").is_err() {
                continue;
            }
            // Up to 64 MiB, until the client hangs up.
            let chunk = vec![b'a'; 64 * 1024];
            for _ in 0..1024 {
                if stream.write_all(&chunk).is_err() {
                    break;
                }
            }
        }
    });
    base
}

/// `trigger` and `events resend` read at most 4 MiB of an API reply: a longer
/// one, announced or not, ends the command with a usage error naming the cap,
/// at once rather than after reading it all.
#[test]
fn api_replies_over_the_cap_are_refused() {
    for announced in [true, false] {
        let base = oversized_api(announced, 2);
        let started = Instant::now();
        for args in [
            &[
                "trigger",
                "payment_intent.succeeded",
                "--api",
                &base,
                "--key",
                KEY,
            ][..],
            &["events", "resend", "evt_1", "--api", &base, "--key", KEY],
        ] {
            let run = payhook(args, b"");
            assert_eq!(run.code, 2, "{args:?} (announced: {announced}): {run:?}");
            assert!(
                run.stderr
                    .contains("is larger than 4 MiB, more than the emulator sends"),
                "{args:?}: {run:?}"
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
}
