//! `payhook sign --scheme standard` and `payhook verify --scheme standard`, run
//! as the real binary: the output lines, the exit codes, the conformance
//! fixture, and that no key is ever printed.
//!
//! The CLI verifies against the wall clock, so the fixture's fixed `now`
//! cannot be given to it. The fixture goes through it twice:
//!
//! * every case with `--no-timestamp-check`, where the verdict must be the
//!   reference's verdict on the signatures alone (`signature_genuine`);
//! * every time-sensitive case (stale, future, within the tolerance) signed
//!   again at test time, by `payhook sign --scheme standard` with the keys the
//!   fixture lists for it, at the same distance from the wall clock as from
//!   the case's `now`, and verified with the timestamp check on: the verdict
//!   must be the reference's `genuine`.

use crate::support;

use payhook_core::sender::unix_now;
use payhook_test_support::standard_webhooks::{cases, Case};
use support::{payhook, Run};

const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const SPEC_T: &str = "1614265330";
const SPEC_BODY: &str = r#"{"test": 2432232314}"#;
const SPEC_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

/// Every key of the fixture, without its prefix (what must never be printed).
fn key_material() -> Vec<String> {
    let mut keys = vec![SPEC_SECRET.to_owned()];
    for case in cases() {
        keys.extend(case.secrets.iter().cloned());
        keys.extend(case.signed_with.iter().flatten().cloned());
    }
    keys.iter()
        .map(|key| {
            key.split_once('_')
                .map_or(key.as_str(), |(_, rest)| rest)
                .to_owned()
        })
        .collect()
}

/// Runs the binary and checks that no secret or signing key shows in its output.
fn run(args: &[&str], body: &[u8]) -> Run {
    let run = payhook(args, body);
    for key in key_material() {
        assert!(
            !run.stdout.contains(&key) && !run.stderr.contains(&key),
            "a key is printed by {args:?}: {run:?}"
        );
    }
    run
}

/// The arguments that configure `case`'s keys.
fn key_args(case: &Case) -> Vec<String> {
    let mut args = Vec::new();
    for secret in &case.secrets {
        args.extend(["--secret".to_owned(), secret.clone()]);
    }
    for key in &case.public_keys {
        args.extend(["--public-key".to_owned(), key.clone()]);
    }
    args
}

fn verify(case: &Case, headers: [&str; 3], extra: &[&str]) -> Run {
    let [id, t, signature] = headers;
    let mut args = vec![
        "verify",
        "--scheme",
        "standard",
        "--webhook-id",
        id,
        "--webhook-timestamp",
        t,
        "--webhook-signature",
        signature,
        "--signature-only",
    ];
    args.extend_from_slice(extra);
    let keys = key_args(case);
    args.extend(keys.iter().map(String::as_str));
    run(&args, case.body.as_bytes())
}

/// The `webhook-signature` value of `payhook sign --scheme standard`.
fn sign(key: &str, id: &str, t: i64, body: &[u8]) -> String {
    let flag = if key.starts_with("whsk_") {
        "--signing-key"
    } else {
        "--secret"
    };
    let t = t.to_string();
    let args = [
        "sign",
        "--scheme",
        "standard",
        "--webhook-id",
        id,
        "--timestamp",
        &t,
        flag,
        key,
    ];
    let signed = run(&args, body);
    assert_eq!(signed.code, 0, "{signed:?}");
    let lines: Vec<&str> = signed.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{signed:?}");
    assert_eq!(lines[0], format!("webhook-id: {id}"));
    assert_eq!(lines[1], format!("webhook-timestamp: {t}"));
    lines[2]
        .strip_prefix("webhook-signature: ")
        .unwrap_or_else(|| panic!("not a webhook-signature line: {signed:?}"))
        .to_owned()
}

fn expect_verdict(case: &Case, genuine: bool, run: &Run, wrong: &mut Vec<String>) {
    let as_expected = if genuine {
        run.code == 0 && run.stdout == "signature valid\n"
    } else {
        run.code == 1 && run.stdout.starts_with("Webhook Error: ") && run.stdout.lines().count() == 1
    };
    if !as_expected {
        wrong.push(format!("{}: genuine={genuine}, got {run:?}", case.name));
    }
}

#[test]
fn every_case_reaches_the_reference_verdict_on_its_signatures() {
    let mut wrong = Vec::new();
    for case in cases() {
        let header = |name| case.header(name).unwrap_or_default();
        let headers = [
            header("webhook-id"),
            header("webhook-timestamp"),
            header("webhook-signature"),
        ];
        let run = verify(&case, headers, &["--no-timestamp-check"]);
        expect_verdict(&case, case.signature_genuine, &run, &mut wrong);
    }
    assert!(
        wrong.is_empty(),
        "verdicts differ from the reference:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn time_sensitive_cases_signed_again_now_reach_the_reference_verdict() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for case in cases().into_iter().filter(|case| case.time_sensitive) {
        let keys = case
            .signed_with
            .clone()
            .expect("a time-sensitive case lists its keys");
        let offset = case.timestamp().expect("a numeric timestamp") - case.now;
        let t = i64::try_from(unix_now()).expect("a 64-bit time") + offset;
        let id = case.header("webhook-id").expect("an id");
        let signature = keys
            .iter()
            .map(|key| sign(key, id, t, case.body.as_bytes()))
            .collect::<Vec<_>>()
            .join(" ");
        let run = verify(&case, [id, &t.to_string(), &signature], &[]);
        expect_verdict(&case, case.genuine, &run, &mut wrong);
        checked += 1;
    }
    assert!(checked >= 6, "only {checked} time-sensitive cases");
    assert!(
        wrong.is_empty(),
        "verdicts differ from the reference:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn sign_prints_the_three_headers_of_the_specification_example() {
    let run = run(
        &[
            "sign",
            "--scheme",
            "standard",
            "--webhook-id",
            SPEC_ID,
            "--timestamp",
            SPEC_T,
            "--secret",
            SPEC_SECRET,
        ],
        SPEC_BODY.as_bytes(),
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        run.stdout,
        format!("webhook-id: {SPEC_ID}\nwebhook-timestamp: {SPEC_T}\nwebhook-signature: {SPEC_SIGNATURE}\n")
    );
    assert!(run.stderr.is_empty(), "{run:?}");
}

#[test]
fn sign_with_a_signing_key_reproduces_the_reference_ed25519_signature() {
    // Ed25519 signatures are deterministic: the fixture's v1a items, made by
    // PyNaCl, come out of `payhook sign` byte for byte.
    let mut compared = 0;
    for case in cases().into_iter().filter(|case| case.time_sensitive) {
        let keys = case.signed_with.clone().expect("keys");
        let [key] = keys.as_slice() else { continue };
        if !key.starts_with("whsk_") {
            continue;
        }
        let t = case.timestamp().expect("a numeric timestamp");
        let id = case.header("webhook-id").expect("an id");
        let signature = sign(key, id, t, case.body.as_bytes());
        assert!(signature.starts_with("v1a,"), "{signature}");
        assert_eq!(
            Some(signature.as_str()),
            case.header("webhook-signature"),
            "{}",
            case.name
        );
        compared += 1;
    }
    assert!(compared >= 2, "only {compared} v1a cases compared");
}

#[test]
fn sign_takes_the_timestamp_now_by_default_and_verify_accepts_it_with_the_event() {
    let case = cases()
        .into_iter()
        .find(|case| case.name == "v1_genuine")
        .expect("the case");
    let secret = &case.secrets[0];
    let before = unix_now();
    let signed = run(
        &[
            "sign",
            "--scheme",
            "standard",
            "--webhook-id",
            "msg_now",
            "--secret",
            secret,
        ],
        case.body.as_bytes(),
    );
    assert_eq!(signed.code, 0, "{signed:?}");
    let lines: Vec<&str> = signed.stdout.lines().collect();
    let t: u64 = lines[1]
        .strip_prefix("webhook-timestamp: ")
        .expect("a timestamp line")
        .parse()
        .expect("a number");
    assert!((before..=unix_now()).contains(&t), "{signed:?}");
    let signature = lines[2]
        .strip_prefix("webhook-signature: ")
        .expect("a signature line");
    assert!(signature.starts_with("v1,"), "{signature}");

    let t = t.to_string();
    let verified = run(
        &[
            "verify",
            "--scheme",
            "standard",
            "--webhook-id",
            "msg_now",
            "--webhook-timestamp",
            &t,
            "--webhook-signature",
            signature,
            "--secret",
            secret,
        ],
        case.body.as_bytes(),
    );
    assert_eq!(verified.code, 0, "{verified:?}");
    // The event id is the webhook-id; the body has none of its own.
    assert_eq!(
        verified.stdout.lines().next(),
        Some("verified msg_now payment_intent.succeeded"),
        "{verified:?}"
    );
    assert!(verified.stdout.contains("payment_intent pi_"), "{verified:?}");
}

#[test]
fn verify_takes_several_secrets_and_public_keys_for_a_rotation() {
    let case = cases()
        .into_iter()
        .find(|case| case.name == "v1a_beside_v1_with_wrong_secret")
        .expect("the case");
    let header = |name| case.header(name).expect("a header");
    let ids = [
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
    ];
    let other = cases()
        .into_iter()
        .find(|c| c.name == "v1a_wrong_public_key")
        .expect("the case");
    // The matching public key second, after a secret and a public key that match nothing.
    let mut args = vec!["--secret".to_owned(), case.secrets[0].clone()];
    args.extend(["--public-key".to_owned(), other.public_keys[0].clone()]);
    args.extend(["--public-key".to_owned(), case.public_keys[0].clone()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let no_keys = Case {
        secrets: Vec::new(),
        public_keys: Vec::new(),
        ..case.clone()
    };
    let mut extra = vec!["--no-timestamp-check"];
    extra.extend(args.iter().copied());
    let genuine = verify(&no_keys, ids, &extra);
    assert_eq!(genuine.code, 0, "{genuine:?}");

    // Without the matching public key: rejected, with the receiver's reply.
    let mut extra = vec!["--no-timestamp-check"];
    extra.extend(args[..4].iter().copied());
    let rejected = verify(&no_keys, ids, &extra);
    assert_eq!(rejected.code, 1, "{rejected:?}");
    assert!(rejected.stdout.starts_with("Webhook Error: "), "{rejected:?}");
}

#[test]
fn signature_only_skips_the_event_check_as_for_the_service_scheme() {
    let base = [
        "verify",
        "--scheme",
        "standard",
        "--webhook-id",
        SPEC_ID,
        "--webhook-timestamp",
        SPEC_T,
        "--webhook-signature",
        SPEC_SIGNATURE,
        "--secret",
        SPEC_SECRET,
        "--no-timestamp-check",
    ];
    let only = run(&[&base[..], &["--signature-only"]].concat(), SPEC_BODY.as_bytes());
    assert_eq!(only.code, 0, "{only:?}");
    assert_eq!(only.stdout, "signature valid\n");

    // The specification's body is no event: without --signature-only, rejected.
    let whole = run(&base, SPEC_BODY.as_bytes());
    assert_eq!(whole.code, 1, "{whole:?}");
    assert!(whole.stdout.starts_with("Webhook Error: "), "{whole:?}");
    assert!(whole.stderr.contains("the signature is valid"), "{whole:?}");

    // And the timestamp is checked unless told otherwise: 2021 is stale.
    let stale = run(
        &[&base[..base.len() - 1], &["--signature-only"]].concat(),
        SPEC_BODY.as_bytes(),
    );
    assert_eq!(stale.code, 1, "{stale:?}");
    assert!(stale.stdout.starts_with("Webhook Error: "), "{stale:?}");
}

#[test]
fn usage_errors_exit_2_without_showing_a_key() {
    let spec = [
        "--webhook-id",
        SPEC_ID,
        "--webhook-timestamp",
        SPEC_T,
        "--webhook-signature",
        SPEC_SIGNATURE,
    ];
    let bad_secret = "whsec_not!base64";
    for args in [
        // A standard header is missing.
        vec![
            "verify",
            "--scheme",
            "standard",
            "--webhook-id",
            SPEC_ID,
            "--secret",
            SPEC_SECRET,
        ],
        // No key at all.
        [&["verify", "--scheme", "standard"][..], &spec].concat(),
        // A key that is not one.
        [
            &["verify", "--scheme", "standard", "--secret", bad_secret][..],
            &spec,
        ]
        .concat(),
        [
            &["verify", "--scheme", "standard", "--public-key", "whpk_AAAA"][..],
            &spec,
        ]
        .concat(),
        // Standard arguments without --scheme standard.
        [&["verify", "--secret", SPEC_SECRET][..], &spec].concat(),
        vec![
            "verify",
            "--secret",
            SPEC_SECRET,
            "--header",
            "t=1,v1=00",
            "--public-key",
            "whpk_AAAA",
        ],
        // Both kinds of header.
        [
            &[
                "verify",
                "--scheme",
                "standard",
                "--secret",
                SPEC_SECRET,
                "--header",
                "t=1,v1=00",
            ][..],
            &spec,
        ]
        .concat(),
        // sign: no id, a bad key, an id without the scheme, a key and a secret.
        vec!["sign", "--scheme", "standard", "--secret", SPEC_SECRET],
        vec![
            "sign",
            "--scheme",
            "standard",
            "--webhook-id",
            "msg_1",
            "--secret",
            bad_secret,
        ],
        vec![
            "sign",
            "--scheme",
            "standard",
            "--webhook-id",
            "msg_1",
            "--signing-key",
            "whsk_AAAA",
        ],
        vec!["sign", "--webhook-id", "msg_1", "--secret", SPEC_SECRET],
        vec![
            "sign",
            "--scheme",
            "standard",
            "--webhook-id",
            "msg_1",
            "--secret",
            SPEC_SECRET,
            "--signing-key",
            "whsk_AAAA",
        ],
        vec!["sign", "--scheme", "other", "--secret", SPEC_SECRET],
    ] {
        let result = run(&args, SPEC_BODY.as_bytes());
        assert_eq!(result.code, 2, "{args:?}: {result:?}");
        assert!(result.stdout.is_empty(), "{args:?}: {result:?}");
        assert!(result.stderr.contains("error"), "{args:?}: {result:?}");
        assert!(!result.stderr.contains("not!base64"), "{args:?}: {result:?}");
    }
}

#[test]
fn scheme_service_is_the_default() {
    let body = br#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{}}}"#;
    let plain = run(
        &[
            "sign",
            "--secret",
            "whsec_test_secret",
            "--timestamp",
            "1732264800",
        ],
        body,
    );
    let named = run(
        &[
            "sign",
            "--scheme",
            "service",
            "--secret",
            "whsec_test_secret",
            "--timestamp",
            "1732264800",
        ],
        body,
    );
    assert_eq!(plain.code, 0, "{plain:?}");
    assert_eq!(plain.stdout, named.stdout);
    assert!(plain.stdout.starts_with("t=1732264800,v1="), "{plain:?}");
}
