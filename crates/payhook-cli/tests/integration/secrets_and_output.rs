//! Where the secret comes from (file, stdin, environment, flag), and how the
//! tool's output behaves: colour, warnings, exit codes. Run as the real binary.

use crate::support;

use support::{payhook, payhook_with_env, reply_lines, temp_dir, TestReceiver, SECRET};

const WORKED_SECRET: &str = "whsec_test_secret";
const WORKED_BODY: &str = r#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{}}}"#;
const WORKED_HEADER: &str =
    "t=1732264800,v1=47e6632c169b959135c86d19df2cb565cdbea26c53beb45123d38a1437d37287";

#[test]
fn sign_takes_the_secret_from_a_file_with_or_without_a_final_line_break() {
    let dir = temp_dir("secret-file");
    for (name, contents) in [
        ("plain", WORKED_SECRET.to_owned()),
        ("newline", format!("{WORKED_SECRET}\n")),
        ("crlf", format!("{WORKED_SECRET}\r\n")),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        let run = payhook(
            &[
                "sign",
                "--secret-file",
                path.to_str().unwrap(),
                "--timestamp",
                "1732264800",
            ],
            WORKED_BODY.as_bytes(),
        );
        assert_eq!(run.code, 0, "{name}: {run:?}");
        assert_eq!(run.stdout, format!("{WORKED_HEADER}\n"), "{name}");
    }
}

#[test]
fn a_bad_secret_file_is_a_usage_error_that_does_not_show_its_contents() {
    let dir = temp_dir("bad-secret-file");
    let empty = dir.join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let two = dir.join("two-lines");
    std::fs::write(&two, "whsec_first\nwhsec_second\n").unwrap();
    let missing = dir.join("missing");
    for (path, why) in [
        (&empty, "is empty"),
        (&two, "more than one line"),
        (&missing, "cannot read"),
    ] {
        let run = payhook(&["sign", "--secret-file", path.to_str().unwrap()], b"{}");
        assert_eq!(run.code, 2, "{path:?}: {run:?}");
        assert!(run.stderr.contains(why), "{path:?}: {run:?}");
        assert!(run.stderr.contains(path.to_str().unwrap()), "{run:?}");
        assert!(!run.stderr.contains("whsec_"), "the secret is shown: {run:?}");
        assert!(run.stdout.is_empty(), "{run:?}");
    }
    // A flag and a file at once is ambiguous.
    let file = dir.join("ok");
    std::fs::write(&file, "whsec_x").unwrap();
    let both = payhook(
        &[
            "sign",
            "--secret",
            "whsec_y",
            "--secret-file",
            file.to_str().unwrap(),
        ],
        b"{}",
    );
    assert_eq!(both.code, 2, "{both:?}");
}

#[test]
fn verify_takes_several_secret_files_for_a_rotation() {
    let dir = temp_dir("verify-files");
    let old = dir.join("old");
    std::fs::write(&old, "whsec_old\n").unwrap();
    let current = dir.join("current");
    std::fs::write(&current, format!("{WORKED_SECRET}\n")).unwrap();
    let run = payhook(
        &[
            "verify",
            "--secret-file",
            old.to_str().unwrap(),
            "--secret-file",
            current.to_str().unwrap(),
            "--header",
            WORKED_HEADER,
            "--no-timestamp-check",
            "--signature-only",
        ],
        WORKED_BODY.as_bytes(),
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout, "signature valid\n");

    // Only the old secret: the signature does not match.
    let run = payhook(
        &[
            "verify",
            "--secret-file",
            old.to_str().unwrap(),
            "--header",
            WORKED_HEADER,
            "--no-timestamp-check",
            "--signature-only",
        ],
        WORKED_BODY.as_bytes(),
    );
    assert_eq!(run.code, 1, "{run:?}");
}

#[test]
fn send_reads_the_secret_from_stdin() {
    let receiver = TestReceiver::start();
    let run = payhook(
        &[
            "send",
            "--to",
            &receiver.url,
            "--secret",
            "-",
            "--id",
            "evt_secret_on_stdin",
        ],
        format!("{SECRET}\n").as_bytes(),
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(reply_lines(&run.stdout), [r#"#1 200 {"received":true}"#]);
    assert_eq!(receiver.handled()[0].id, "evt_secret_on_stdin");
}

#[test]
fn the_secret_cannot_come_from_stdin_when_stdin_is_the_body() {
    for args in [
        &["sign", "--secret", "-"][..],
        &["verify", "--secret", "-", "--header", WORKED_HEADER],
        &[
            "send",
            "--to",
            "http://127.0.0.1:9/",
            "--secret",
            "-",
            "--data",
            "-",
        ],
    ] {
        let run = payhook(args, WORKED_BODY.as_bytes());
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stderr.contains("stdin carries the body"), "{args:?}: {run:?}");
        assert!(run.stdout.is_empty(), "{args:?}: {run:?}");
    }
}

#[test]
fn without_any_secret_the_error_names_every_way_to_give_one() {
    let run = payhook(&["sign"], b"{}");
    assert_eq!(run.code, 2, "{run:?}");
    for way in ["PAYHOOK_SECRET", "--secret-file", "--secret -"] {
        assert!(run.stderr.contains(way), "{way}: {run:?}");
    }
    let empty = payhook_with_env(&["sign"], b"{}", &[("PAYHOOK_SECRET", "")]);
    assert_eq!(empty.code, 2, "{empty:?}");
    assert!(
        empty.stderr.contains("PAYHOOK_SECRET is set but empty"),
        "{empty:?}"
    );
}

#[test]
fn an_empty_stdin_is_warned_about() {
    let run = payhook(&["sign", "--secret", "whsec_abc", "--timestamp", "5"], b"");
    assert_eq!(run.code, 0, "an empty body can still be signed: {run:?}");
    assert!(run.stderr.contains("warning: stdin was empty"), "{run:?}");

    let run = payhook(&["sign", "--secret", "whsec_abc", "--timestamp", "5"], b"{}");
    assert!(!run.stderr.contains("empty"), "{run:?}");
}

#[test]
fn colour_only_when_asked_and_never_with_no_color() {
    let receiver = TestReceiver::start();
    let args = ["send", "--to", receiver.url.as_str(), "--secret", SECRET];
    // Tests read pipes, not a terminal: plain text.
    let plain = payhook(&args, b"");
    assert_eq!(plain.code, 0, "{plain:?}");
    assert!(!plain.stdout.contains('\x1b'), "{plain:?}");

    let forced = payhook_with_env(&args, b"", &[("CLICOLOR_FORCE", "1")]);
    assert_eq!(forced.code, 0, "{forced:?}");
    assert!(
        forced.stdout.contains("\x1b[32m#1 200"),
        "the expected reply is green: {forced:?}"
    );

    let refused = payhook_with_env(&args, b"", &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]);
    assert_eq!(refused.code, 0, "{refused:?}");
    assert!(!refused.stdout.contains('\x1b'), "NO_COLOR wins: {refused:?}");

    // Usage errors on stderr follow the same rules.
    let error = payhook_with_env(&["sign"], b"", &[("CLICOLOR_FORCE", "1")]);
    assert!(error.stderr.contains("\x1b[31merror"), "{error:?}");
    let error = payhook_with_env(&["sign"], b"", &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]);
    assert!(!error.stderr.contains('\x1b'), "{error:?}");
}

#[test]
fn help_gives_distinct_exit_codes_and_the_secret_sources() {
    let run = payhook(&["send", "--help"], b"");
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.contains("2  usage error or unreadable input"),
        "{run:?}"
    );
    assert!(
        run.stdout.contains("3  the endpoint could not be reached"),
        "{run:?}"
    );
    assert!(run.stdout.contains("--secret-file"), "{run:?}");
    assert!(run.stdout.contains("https://"), "{run:?}");
}
