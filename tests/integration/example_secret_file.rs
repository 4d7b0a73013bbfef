//! `PAYHOOK_SECRET_FILE` in the receiver examples, as users run them: each in
//! its own process, verifying with the secrets of a file of one `whsec_` per
//! line, which it reads again when it gets a real `SIGHUP` (`kill -HUP`).
//!
//! The contract: after the file is rewritten and the process gets `SIGHUP`,
//! a delivery signed with a secret only in the new file gets `200` within
//! 1 s, and one signed only with a secret no longer in the file `400`,
//! from the same process. A file that becomes unreadable, or that holds no
//! usable secret, keeps the last good set. No secret is ever printed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use payhook::sender::{EventBuilder, SignedDelivery};

use crate::example_process::{for_each_receiver, Example};

/// How soon after `SIGHUP` the new set must be in force.
const RELOAD_WITHIN: Duration = Duration::from_secs(1);

fn secret_file(lines: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(payhook_test_support::unique("payhook-secret-file"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("webhook-secrets");
    std::fs::write(&path, lines).unwrap();
    path
}

/// Rewrites the file as a secret manager does: a new file moved over the old.
fn rewrite(path: &Path, lines: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, lines).unwrap();
    std::fs::rename(&next, path).unwrap();
}

fn hangup(example: &Example) {
    let status = Command::new("kill")
        .args(["-HUP", &example.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -HUP failed");
}

/// The status of a new event signed with `secret`.
async fn deliver(example: &Example, secret: &str) -> u16 {
    let delivery = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), secret).unwrap();
    example.post(delivery.body, &delivery.signature).await.0
}

/// Delivers with `secret` until it gets `want`, for at most [`RELOAD_WITHIN`]
/// after `since`; panics naming the last status otherwise.
async fn gets_within(example: &Example, secret: &str, want: u16, since: Instant) {
    loop {
        let status = deliver(example, secret).await;
        if status == want {
            return;
        }
        assert!(
            since.elapsed() < RELOAD_WITHIN,
            "still {status}, not {want}, {RELOAD_WITHIN:?} after SIGHUP"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

for_each_receiver!(reloads_the_secret_file_on_sighup);
async fn reloads_the_secret_file_on_sighup(example: &str) {
    let (old, new, newer) = (
        "whsec_file_old_8d1f",
        "whsec_file_new_2c7a",
        "whsec_file_newer_5e90",
    );
    let path = secret_file(&format!("# the endpoint's signing secret\n{old}\n"));
    let database = payhook_test_support::sqlite_url("payhook-secret-file");
    let mut receiver = Example::start(
        example,
        &[
            ("PAYHOOK_SECRET_FILE", path.to_str().unwrap()),
            ("PAYHOOK_DATABASE_URL", &database),
        ],
    );
    let pid = receiver.pid();
    assert_eq!(deliver(&receiver, old).await, 200);
    assert_eq!(deliver(&receiver, new).await, 400);

    // The roll's overlap: both accepted.
    rewrite(&path, &format!("{old}\n{new}\n"));
    hangup(&receiver);
    let sent = Instant::now();
    gets_within(&receiver, new, 200, sent).await;
    assert_eq!(deliver(&receiver, old).await, 200);

    // The old secret dropped: the new one alone.
    rewrite(&path, &format!("{new}\n"));
    hangup(&receiver);
    let sent = Instant::now();
    gets_within(&receiver, old, 400, sent).await;
    assert_eq!(deliver(&receiver, new).await, 200);

    // A file that becomes unreadable, then one with no usable secret: the
    // last good set stays.
    std::fs::remove_file(&path).unwrap();
    hangup(&receiver);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        deliver(&receiver, new).await,
        200,
        "the last good set after a missing file"
    );
    assert_eq!(deliver(&receiver, old).await, 400);
    std::fs::write(&path, "not a secret\n").unwrap();
    hangup(&receiver);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        deliver(&receiver, new).await,
        200,
        "the last good set after a bad file"
    );

    // And the next good file is taken again.
    rewrite(&path, &format!("{newer}\n"));
    hangup(&receiver);
    let sent = Instant::now();
    gets_within(&receiver, newer, 200, sent).await;
    assert_eq!(deliver(&receiver, new).await, 400);

    assert!(receiver.running(), "SIGHUP must not end the process");
    assert_eq!(receiver.pid(), pid);
    let lines = receiver.lines();
    assert!(
        lines
            .iter()
            .any(|line| line.contains("signing secrets: 1 from PAYHOOK_SECRET_FILE")),
        "{lines:#?}"
    );
    for secret in [old, new, newer] {
        assert!(
            lines.iter().all(|line| !line.contains(secret)),
            "a secret was printed: {lines:#?}"
        );
    }
}

/// The axum example logs to stdout: each reload says how many secrets are
/// active, and a file that cannot be used says why at WARN, naming the line
/// and never its content.
#[tokio::test]
async fn each_reload_is_logged_with_the_count_and_a_refused_file_at_warn() {
    let path = secret_file("whsec_logged_1\n");
    let mut receiver = Example::start(
        "axum_receiver",
        &[("PAYHOOK_SECRET_FILE", path.to_str().unwrap())],
    );
    rewrite(&path, "whsec_logged_1\nwhsec_logged_2\n");
    hangup(&receiver);
    let line = receiver.wait_for_line(Duration::from_secs(5), |line| {
        line.contains("secret file reloaded")
    });
    assert!(
        line.contains("INFO") && line.contains("2 secret(s) active"),
        "{line}"
    );
    rewrite(&path, "whsec_logged_2\nwhsec_logged 3\n");
    hangup(&receiver);
    let line = receiver.wait_for_line(Duration::from_secs(5), |line| {
        line.contains("secret file not reloaded")
    });
    assert!(line.contains("WARN"), "{line}");
    assert!(
        line.contains(
            "the 2 secret(s) in force stay: line 2: the secret has characters other than visible ASCII"
        ),
        "{line}"
    );
    assert!(!line.contains("logged"), "the file's content was logged: {line}");
}

/// With `PAYHOOK_SCHEME=standard` the file holds Standard Webhooks keys, a
/// `whsec_` secret and a `whpk_` public key here, reloaded on `SIGHUP` alike.
#[tokio::test]
async fn standard_webhooks_keys_from_the_file_are_reloaded_on_sighup() {
    use payhook::sender::{
        generate_standard_keypair, generate_standard_secret, unique_message_id, StandardDelivery,
    };
    let secret = generate_standard_secret().unwrap();
    let (signing_key, public_key) = generate_standard_keypair().unwrap();
    let path = secret_file(&format!("{secret}\n"));
    let receiver = Example::start(
        "axum_receiver",
        &[
            ("PAYHOOK_SCHEME", "standard"),
            ("PAYHOOK_SECRET_FILE", path.to_str().unwrap()),
        ],
    );
    let deliver = |key: String| {
        let receiver = &receiver;
        async move {
            let body = EventBuilder::payment_intent_succeeded().to_json();
            let delivery = StandardDelivery::now(body, unique_message_id(), &key).unwrap();
            receiver
                .post_with(delivery.body.clone(), delivery.headers())
                .await
                .0
        }
    };
    assert_eq!(deliver(secret.clone()).await, 200);
    assert_eq!(deliver(signing_key.clone()).await, 400);

    rewrite(&path, &format!("{public_key}\n"));
    hangup(&receiver);
    let sent = Instant::now();
    loop {
        if deliver(signing_key.clone()).await == 200 {
            break;
        }
        assert!(sent.elapsed() < RELOAD_WITHIN, "the whpk_ key is not in force");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(deliver(secret).await, 400);
}
