//! `payhook sign` and `payhook verify`, run as the real binary.

use crate::support;

use hmac::{Hmac, Mac};
use payhook_core::sender::{unix_now, EventBuilder};
use payhook_core::{Error, Event, Reply, Verifier};
use sha2::Sha256;
use support::payhook;

const WORKED_SECRET: &str = "whsec_test_secret";
const WORKED_BODY: &str = r#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{}}}"#;
const WORKED_T: &str = "1732264800";
const WORKED_HEADER: &str =
    "t=1732264800,v1=47e6632c169b959135c86d19df2cb565cdbea26c53beb45123d38a1437d37287";

/// HMAC-SHA256 of `{t}.{body}` as lowercase hex, computed without payhook.
fn independent_v1(secret: &str, t: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn signed_header(body: &[u8], secret: &str, t: u64) -> String {
    let run = payhook(&["sign", "--secret", secret, "--timestamp", &t.to_string()], body);
    assert_eq!(run.code, 0, "{run:?}");
    run.stdout.trim_end().to_owned()
}

fn error_reply(error: &Error) -> String {
    format!("{}\n", Reply::error(error).body())
}

#[test]
fn sign_reproduces_the_worked_example() {
    let run = payhook(
        &["sign", "--secret", WORKED_SECRET, "--timestamp", WORKED_T],
        WORKED_BODY.as_bytes(),
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout, format!("{WORKED_HEADER}\n"));
    assert_eq!(
        independent_v1(WORKED_SECRET, 1732264800, WORKED_BODY.as_bytes()),
        WORKED_HEADER["t=1732264800,v1=".len()..]
    );
    assert!(run.stderr.is_empty(), "{run:?}");
}

#[test]
fn sign_output_verifies_with_the_core_and_an_independent_hmac() {
    let body = EventBuilder::payment_intent_succeeded()
        .amount(10u128.pow(30))
        .currency("eth")
        .to_json();
    let before = unix_now();
    let run = payhook(&["sign", "--secret", "whsec_abc"], body.as_bytes());
    assert_eq!(run.code, 0, "{run:?}");
    let header = run.stdout.trim_end();

    let (t, v1) = header
        .strip_prefix("t=")
        .and_then(|rest| rest.split_once(",v1="))
        .unwrap_or_else(|| panic!("not t=…,v1=…: {header}"));
    let t: u64 = t.parse().expect("t is an integer");
    assert!((before..=unix_now()).contains(&t), "t={t} is not now");
    assert_eq!(v1, independent_v1("whsec_abc", t, body.as_bytes()));

    let verifier = Verifier::builder().secret("whsec_abc").build().unwrap();
    assert_eq!(verifier.verify_value(header.as_bytes(), body.as_bytes()), Ok(()));
}

#[test]
fn sign_signs_every_byte_and_notes_a_trailing_newline() {
    let run = payhook(&["sign", "--secret", "whsec_abc", "--timestamp", "5"], b"{}\n");
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        run.stdout,
        format!("t=5,v1={}\n", independent_v1("whsec_abc", 5, b"{}\n"))
    );
    assert!(run.stderr.contains("ends with a line break"), "{run:?}");
}

#[test]
fn sign_reads_the_secret_from_the_environment_without_showing_it() {
    let run = support::payhook_with_env(
        &["sign", "--timestamp", WORKED_T],
        WORKED_BODY.as_bytes(),
        &[("PAYHOOK_SECRET", WORKED_SECRET)],
    );
    assert_eq!(run.stdout, format!("{WORKED_HEADER}\n"), "{run:?}");

    let help = support::payhook_with_env(&["sign", "--help"], b"", &[("PAYHOOK_SECRET", WORKED_SECRET)]);
    assert_eq!(help.code, 0);
    assert!(help.stdout.contains("PAYHOOK_SECRET"), "{help:?}");
    assert!(
        !help.stdout.contains(WORKED_SECRET),
        "help shows the secret: {help:?}"
    );
}

#[test]
fn sign_rejects_bad_arguments_with_exit_code_2() {
    for args in [
        &["sign"][..],
        &["sign", "--secret", ""],
        &["sign", "--secret", "whsec_x", "--timestamp", "-1"],
        &["sign", "--secret", "whsec_x", "--timestamp", "soon"],
    ] {
        let run = payhook(args, b"{}");
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stderr.contains("error"), "{args:?}: {run:?}");
        assert!(run.stdout.is_empty(), "{args:?}: {run:?}");
    }
}

#[test]
fn verify_checks_the_worked_example_signature_then_the_payload() {
    // The signature is genuine: with the timestamp check off (or a tolerance
    // reaching back to 2024) it passes.
    for extra in [&["--no-timestamp-check"][..], &["--tolerance", "4000000000"]] {
        let mut args = vec![
            "verify",
            "--secret",
            WORKED_SECRET,
            "--header",
            WORKED_HEADER,
            "--signature-only",
        ];
        args.extend_from_slice(extra);
        let run = payhook(&args, WORKED_BODY.as_bytes());
        assert_eq!(run.code, 0, "{extra:?}: {run:?}");
        assert_eq!(run.stdout, "signature valid\n");
    }
    // Its `data.object` is `{}`, which is not a payment intent: a receiver
    // checks the signature, then refuses the payload, and so does verify.
    let run = payhook(
        &[
            "verify",
            "--secret",
            WORKED_SECRET,
            "--header",
            WORKED_HEADER,
            "--no-timestamp-check",
        ],
        WORKED_BODY.as_bytes(),
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stdout
            .starts_with("Webhook Error: invalid payload: data.object: missing field `id`"),
        "{run:?}"
    );
    assert!(run.stderr.contains("the signature is valid"), "{run:?}");
}

#[test]
fn verify_accepts_a_genuine_event_and_prints_it() {
    let amount = 1_500_000_000_000_000_000_000u128; // beyond 2^64
    let builder = EventBuilder::payment_intent_succeeded()
        .id("evt_cli_ok")
        .amount(amount)
        .currency("eth");
    let body = builder.to_json();
    let header = signed_header(body.as_bytes(), "whsec_abc", unix_now());
    let run = payhook(
        &["verify", "--secret", "whsec_abc", "--header", &header],
        body.as_bytes(),
    );
    assert_eq!(run.code, 0, "{run:?}");
    let mut lines = run.stdout.lines();
    assert_eq!(lines.next(), Some("verified evt_cli_ok payment_intent.succeeded"));
    let detail = lines.next().expect("a payment intent line");
    assert!(
        detail.ends_with(&format!("amount {amount} eth status succeeded received {amount}")),
        "{detail}"
    );
    // A received amount the sender left out is not shown as 0.
    let body = builder.without_amount_received().to_json();
    let header = signed_header(body.as_bytes(), "whsec_abc", unix_now());
    let run = payhook(
        &["verify", "--secret", "whsec_abc", "--header", &header],
        body.as_bytes(),
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .ends_with(&format!("amount {amount} eth status succeeded\n")),
        "{run:?}"
    );
}

#[test]
fn verify_accepts_any_of_several_secrets() {
    let body = EventBuilder::other("customer.created").id("evt_rot").to_json();
    let header = signed_header(body.as_bytes(), "whsec_old", unix_now());
    let run = payhook(
        &[
            "verify",
            "--secret",
            "whsec_new",
            "--secret",
            "whsec_old",
            "--header",
            &header,
        ],
        body.as_bytes(),
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout, "verified evt_rot customer.created\n");
}

#[test]
fn verify_rejects_each_bad_delivery_with_the_receivers_reply() {
    let body = EventBuilder::payment_intent_failed().to_json();
    let now = unix_now();
    let good = signed_header(body.as_bytes(), "whsec_abc", now);
    let v1 = good.split_once(",v1=").unwrap().1.to_owned();
    let stale = signed_header(body.as_bytes(), "whsec_abc", now - 3600);
    let not_json = "<html>not an event</html>";
    let not_json_header = signed_header(not_json.as_bytes(), "whsec_abc", now);
    let tampered = body.replace("requires_payment_method", "succeeded");

    let cases: [(&str, &str, &str, &str); 6] = [
        ("tampered body", "whsec_abc", &good, &tampered),
        ("wrong secret", "whsec_wrong", &good, &body),
        ("stale", "whsec_abc", &stale, &body),
        ("missing v1", "whsec_abc", &format!("t={now}"), &body),
        ("malformed t", "whsec_abc", &format!("t=12x,v1={v1}"), &body),
        ("invalid JSON", "whsec_abc", &not_json_header, not_json),
    ];
    for (case, secret, header, body) in cases {
        let run = payhook(
            &["verify", "--secret", secret, "--header", header],
            body.as_bytes(),
        );
        assert_eq!(run.code, 1, "{case}: {run:?}");
        let expected = match case {
            "tampered body" | "wrong secret" => error_reply(&Error::NoSignatureMatch),
            "missing v1" => error_reply(&Error::NoSignature),
            "malformed t" => error_reply(&Error::MalformedHeader(
                "t is not a non-negative whole number of seconds",
            )),
            "stale" => {
                // The age is measured when verify runs: 3600 s, or a second more.
                let age = run
                    .stdout
                    .strip_prefix("Webhook Error: timestamp is ")
                    .and_then(|rest| rest.split_once(" s old, outside the 300 s tolerance\n"))
                    .map(|(age, _)| age.parse::<u64>().expect("age in seconds"))
                    .unwrap_or_else(|| panic!("stale: {run:?}"));
                assert!((3600..=3602).contains(&age), "{run:?}");
                run.stdout.clone()
            }
            _ => error_reply(&Event::from_slice(body.as_bytes()).unwrap_err()),
        };
        assert_eq!(run.stdout, expected, "{case}");
        if case == "invalid JSON" {
            assert!(
                run.stdout.starts_with("Webhook Error: invalid payload: "),
                "{run:?}"
            );
        }
        assert!(!run.stdout.contains(&v1), "{case} echoes a signature");
    }
}

#[test]
fn verify_timestamp_options() {
    let body = EventBuilder::other("customer.created").to_json();
    let header = signed_header(body.as_bytes(), "whsec_abc", unix_now() - 3600);
    let verify = |extra: &[&str]| {
        let mut args = vec!["verify", "--secret", "whsec_abc", "--header", &header];
        args.extend_from_slice(extra);
        payhook(&args, body.as_bytes())
    };
    assert_eq!(verify(&[]).code, 1);
    assert_eq!(verify(&["--tolerance", "7200"]).code, 0);
    assert_eq!(verify(&["--no-timestamp-check"]).code, 0);
    let conflict = verify(&["--tolerance", "10", "--no-timestamp-check"]);
    assert_eq!(conflict.code, 2, "{conflict:?}");
}

#[test]
fn verify_rejects_bad_arguments_with_exit_code_2() {
    for args in [
        &["verify", "--secret", "whsec_x"][..],
        &["verify", "--header", WORKED_HEADER],
        &["verify", "--secret", "", "--header", WORKED_HEADER],
        &[
            "verify",
            "--secret",
            "whsec_x",
            "--header",
            WORKED_HEADER,
            "--tolerance",
            "-5",
        ],
    ] {
        let run = payhook(args, WORKED_BODY.as_bytes());
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stdout.is_empty(), "{args:?}: {run:?}");
    }
}

#[test]
fn help_documents_the_exit_codes() {
    for args in [
        &["--help"][..],
        &["sign", "--help"],
        &["verify", "--help"],
        &["send", "--help"],
    ] {
        let run = payhook(args, b"");
        assert_eq!(run.code, 0, "{args:?}");
        assert!(run.stdout.contains("Exit codes:"), "{args:?}: {}", run.stdout);
        assert!(run.stdout.contains("2  usage error"), "{args:?}");
    }
}

#[cfg(target_os = "linux")]
#[test]
fn an_unwritable_stdout_is_an_error_not_a_panic() {
    use std::io::Write;
    use std::process::{Command, Stdio};

    let mut child = Command::new(env!("CARGO_BIN_EXE_payhook"))
        .args(["sign", "--secret", "whsec_abc"])
        .env_remove("PAYHOOK_SECRET")
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create("/dev/full").expect("/dev/full exists on Linux"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"{}").unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot write to stdout"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
