//! `payhook send` to an `https://` receiver: a real TLS server on loopback with
//! a certificate from a throwaway CA made by `openssl`.

use crate::support;

use support::{make_certificates, payhook_with_env, reply_lines, temp_dir, Config, TestReceiver, SECRET};

#[test]
fn send_delivers_over_https_to_a_trusted_receiver() {
    let dir = temp_dir("https-trusted");
    let (ca, server) = make_certificates(&dir);
    let receiver = TestReceiver::with(Config {
        tls: Some(server),
        ..Config::default()
    });
    assert!(receiver.url.starts_with("https://127.0.0.1:"), "{}", receiver.url);

    let run = payhook_with_env(
        &[
            "send",
            "--to",
            &receiver.url,
            "--id",
            "evt_over_tls",
            "--repeat",
            "2",
        ],
        b"",
        &[
            ("PAYHOOK_SECRET", SECRET),
            ("SSL_CERT_FILE", ca.to_str().unwrap()),
        ],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        reply_lines(&run.stdout),
        [r#"#1 200 {"received":true}"#, r#"#2 200 {"received":true}"#],
        "{run:?}"
    );
    let handled = receiver.handled();
    assert_eq!(
        handled.len(),
        1,
        "the duplicate is not handled again: {handled:?}"
    );
    assert_eq!(handled[0].id, "evt_over_tls");
}

#[test]
fn an_untrusted_certificate_means_unreachable_not_a_reply() {
    let dir = temp_dir("https-untrusted");
    let (_ca, server) = make_certificates(&dir);
    // Another CA: the receiver's certificate does not chain to it.
    let other = temp_dir("https-other-ca");
    let (other_ca, _) = make_certificates(&other);
    let receiver = TestReceiver::with(Config {
        tls: Some(server),
        ..Config::default()
    });

    let run = payhook_with_env(
        &["send", "--to", &receiver.url],
        b"",
        &[
            ("PAYHOOK_SECRET", SECRET),
            ("SSL_CERT_FILE", other_ca.to_str().unwrap()),
        ],
    );
    assert_eq!(run.code, 3, "{run:?}");
    assert!(run.stderr.contains("cannot reach"), "{run:?}");
    assert!(run.stderr.to_lowercase().contains("certificate"), "{run:?}");
    assert!(receiver.handled().is_empty());
    assert_eq!(
        receiver.requests(),
        0,
        "no request went over an untrusted connection"
    );
}
