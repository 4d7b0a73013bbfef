//! `payhook emulate`, run as the real binary: the `listening on http://ADDR`
//! contract, the API with a fixed key, `--forward-to` deliveries to a real
//! payhook receiver, faults, the per-attempt log, usage errors and a clean stop.
#![cfg(feature = "emulate")]

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::post;
use payhook_core::{Event, Receiver};
use payhook_test_support::{payhook_emulate, Process};
use payhook_tower::axum::{Received, Webhook};
use payhook_tower::WebhookLayer;

use crate::eventually as wait_until;

/// A running `payhook emulate` process, killed when dropped (the reconcile,
/// faults and trigger tests start theirs through it too).
pub(crate) struct Emulate {
    process: Process,
}

impl Emulate {
    pub(crate) fn start(args: &[&str]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_payhook"));
        command.arg("emulate").args(args);
        Self::spawn(command)
    }

    /// On a free loopback port with the API key `key`, forwarding to `url`,
    /// with `extra` arguments; returns it and its base URL (the listening
    /// line checked).
    pub(crate) fn forwarding_to(url: &str, key: &str, extra: &[&str]) -> (Self, String) {
        let mut command = payhook_emulate(env!("CARGO_BIN_EXE_payhook"), key, url);
        command.args(extra);
        let emulate = Self::spawn(command);
        let base = emulate.listening();
        (emulate, base)
    }

    fn spawn(mut command: Command) -> Self {
        command.env("RUST_LOG", "payhook_emulator=info");
        Self {
            process: Process::spawn("payhook emulate", &mut command),
        }
    }

    fn line(&self) -> String {
        self.process.next_line(Duration::from_secs(30))
    }

    pub(crate) fn stderr(&self) -> String {
        self.process.stderr()
    }

    /// Reads the contract line and returns the base URL.
    pub(crate) fn listening(&self) -> String {
        let line = self.line();
        let addr = line
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("first line is {line:?}"));
        let parsed: std::net::SocketAddr = addr.parse().expect("an address");
        assert_eq!(parsed.ip().to_string(), "127.0.0.1");
        assert_ne!(parsed.port(), 0, "the real port, not 0");
        assert_eq!(line, format!("listening on http://{parsed}"), "exactly that line");
        format!("http://{parsed}")
    }

    /// Reads lines until one starts with `prefix`.
    fn line_starting(&self, prefix: &str) -> String {
        loop {
            let line = self.line();
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.to_owned();
            }
        }
    }

    /// SIGTERM, then the exit code and the rest of stdout.
    fn stop(self) -> (i32, String) {
        let pid = self.process.pid().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let status = self
            .process
            .wait_exit(Duration::from_secs(20))
            .expect("did not stop on SIGTERM");
        let rest = self.process.rest_of_stdout(Duration::from_secs(10));
        (status.code().expect("exited, not killed"), rest.join("\n"))
    }
}

/// A free loopback port for a receiver, bound now and served later.
async fn bind() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let url = format!("http://{}/webhooks", listener.local_addr().expect("addr"));
    (listener, url)
}

type Runs = Arc<Mutex<HashMap<String, (String, usize)>>>;

/// A payhook receiver (axum + `WebhookLayer`) with `secret`, counting handler runs per event id.
fn serve(listener: tokio::net::TcpListener, secret: &str) -> Runs {
    let receiver = Receiver::builder()
        .secret(secret)
        .build()
        .expect("valid receiver");
    let runs: Runs = Arc::default();
    let seen = Arc::clone(&runs);
    let app = axum::Router::new()
        .route(
            "/webhooks",
            post(move |Webhook(event): Webhook<Event>| {
                let seen = Arc::clone(&seen);
                async move {
                    let mut seen = seen.lock().expect("not poisoned");
                    let entry = seen
                        .entry(event.id().to_owned())
                        .or_insert_with(|| (event.event_type().to_owned(), 0));
                    entry.1 += 1;
                    Received
                }
            }),
        )
        .route_layer(WebhookLayer::new(receiver));
    tokio::spawn(async move { axum::serve(listener, app).await });
    runs
}

async fn api(base: &str, key: &str, path: &str, form: Option<&str>) -> (u16, serde_json::Value) {
    let client = reqwest::Client::new();
    let request = match form {
        Some(body) => client
            .post(format!("{base}{path}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.to_owned()),
        None => client.get(format!("{base}{path}")),
    };
    let response = request
        .bearer_auth(key)
        .send()
        .await
        .expect("the emulator answers");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulate_serves_the_api_and_forwards_signed_events_to_a_payhook_receiver() {
    let (listener, url) = bind().await;
    let emulate = Emulate::start(&[
        "--addr",
        "127.0.0.1:0",
        "--key",
        "sk_test_cli",
        "--forward-to",
        &url,
    ]);
    let base = emulate.listening();
    let endpoint = emulate.line_starting("forwarding every event to ");
    assert!(
        endpoint.starts_with(&url) && endpoint.contains("(webhook endpoint we_"),
        "{endpoint}"
    );
    let secret = emulate.line_starting("signing secret: ");
    assert!(secret.starts_with("whsec_"), "{secret}");
    let runs = serve(listener, &secret);

    // The fixed key is the only key.
    let (status, reply) = api(&base, "sk_test_other", "/v1/events", None).await;
    assert_eq!(
        (status, reply["error"]["code"].as_str()),
        (401, Some("api_key_unknown"))
    );

    let (status, intent) = api(
        &base,
        "sk_test_cli",
        "/v1/payment_intents",
        Some("amount=250000&currency=btc"),
    )
    .await;
    assert_eq!(status, 200, "{intent}");
    let id = intent["id"].as_str().expect("id").to_owned();
    let (status, paid) = api(
        &base,
        "sk_test_cli",
        &format!("/v1/test_helpers/payment_intents/{id}/succeed"),
        Some(""),
    )
    .await;
    assert_eq!((status, paid["status"].as_str()), (200, Some("succeeded")));

    wait_until("the receiver handles the event", || {
        !runs.lock().expect("not poisoned").is_empty()
    })
    .await;
    let (_, events) = api(&base, "sk_test_cli", "/v1/events", None).await;
    let event_id = events["data"][0]["id"].as_str().expect("event id").to_owned();
    let handled = runs.lock().expect("not poisoned").clone();
    assert_eq!(
        handled.get(&event_id),
        Some(&("payment_intent.succeeded".to_owned(), 1)),
        "{handled:?}"
    );

    // One log line per attempt: event id, type, endpoint, status, duration — no secret.
    wait_until("the attempt is logged", || emulate.stderr().contains(&event_id)).await;
    let log = emulate.stderr();
    let line = log.lines().find(|l| l.contains(&event_id)).expect("attempt line");
    assert!(
        line.contains("payment_intent.succeeded") && line.contains("we_") && line.contains(&url),
        "{line}"
    );
    assert!(
        line.contains("attempt 1: 200 in ") && line.contains(" ms"),
        "{line}"
    );
    assert!(!log.contains(&secret), "the secret is never logged");
    // stderr is a pipe here, as when it is redirected to a file: no colour
    // codes in the log.
    assert!(
        !log.contains('\x1b'),
        "an escape code in a log that is not a terminal: {log:?}"
    );
    assert!(!emulate.stderr().contains('\x1b'));

    let (code, rest) = emulate.stop();
    assert_eq!(code, 0);
    assert!(rest.contains("stopped"), "{rest}");
    assert!(!rest.contains('\x1b'), "{rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulate_faults_duplicate_and_drop_yet_the_receiver_handles_each_event_once() {
    let (listener, url) = bind().await;
    let emulate = Emulate::start(&[
        "--addr",
        "127.0.0.1:0",
        "--forward-to",
        &url,
        "--duplicates",
        "1.0",
        "--drop-first",
        "--reorder",
        "--seed",
        "3",
    ]);
    let base = emulate.listening();
    let key = emulate.line_starting("api key: any sk_test_… key, for example ");
    assert!(key.starts_with("sk_test_"));
    let secret = emulate.line_starting("signing secret: ");
    let faults = emulate.line_starting("faults: ");
    assert_eq!(faults, "duplicates 1, reorder, drop-first (seed 3)");
    let runs = serve(listener, &secret);

    // Any well-formed test key works without --key.
    for _ in 0..3 {
        let (status, intent) = api(
            &base,
            "sk_test_whatever",
            "/v1/payment_intents",
            Some("amount=7&currency=eth"),
        )
        .await;
        assert_eq!(status, 200, "{intent}");
        let id = intent["id"].as_str().expect("id");
        let path = format!("/v1/test_helpers/payment_intents/{id}/succeed");
        assert_eq!(api(&base, "sk_test_whatever", &path, Some("")).await.0, 200);
    }
    wait_until("three events handled", || {
        runs.lock().expect("not poisoned").len() == 3
    })
    .await;
    // Two deliveries per event (the copy is a delivery of its own), each with its
    // first reply dropped and then acknowledged on a retry.
    wait_until("every copy acknowledged", || {
        emulate.stderr().matches(": 200 in ").count() == 6
    })
    .await;
    let handled = runs.lock().expect("not poisoned").clone();
    assert!(handled.values().all(|(_, n)| *n == 1), "{handled:?}");
    let log = emulate.stderr();
    assert!(
        log.contains("200, reply discarded by the injected fault drop-first (the receiver got the request and answered)"),
        "{log}"
    );
    assert!(log.contains("(duplicate copy 1)"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulate_undeliverable_never_sends_and_the_events_list_shows_what_was_missed() {
    let (listener, url) = bind().await;
    let emulate = Emulate::start(&[
        "--addr",
        "127.0.0.1:0",
        "--forward-to",
        &url,
        "--undeliverable",
        "1",
        "--seed",
        "5",
    ]);
    let base = emulate.listening();
    let key = emulate.line_starting("api key: any sk_test_… key, for example ");
    let secret = emulate.line_starting("signing secret: ");
    assert_eq!(emulate.line_starting("faults: "), "undeliverable 1 (seed 5)");
    let runs = serve(listener, &secret);
    let intent = pay(&base, &key).await;
    wait_until("the first attempt logged", || {
        emulate.stderr().contains(" attempt 1: ")
    })
    .await;
    let log = emulate.stderr();
    assert!(
        log.contains("attempt 1: not sent: the injected fault undeliverable fails every attempt of this event (the receiver got no request)"),
        "{log}"
    );
    assert!(
        runs.lock().expect("not poisoned").is_empty(),
        "nothing reached the receiver"
    );
    let (status, list) = api(&base, &key, "/v1/events?delivery_success=false", None).await;
    assert_eq!(status, 200, "{list}");
    let data = list["data"].as_array().expect("a list");
    assert_eq!(data.len(), 1, "{list}");
    assert_eq!(data[0]["data"]["object"]["id"], intent.as_str());
    let (_, delivered) = api(&base, &key, "/v1/events?delivery_success=true", None).await;
    assert_eq!(delivered["data"], serde_json::json!([]));
}

#[test]
fn emulate_refuses_bad_arguments_with_exit_code_2() {
    for args in [
        &["--key", "sk_live_abc"][..],
        &["--key", "sk_test_"],
        &["--duplicates", "1.5"],
        &["--undeliverable", "2"],
        &["--forward-to", "https://127.0.0.1/webhooks"],
        &["--retry-schedule", "weekly"],
        &["--addr", "not-an-address"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_payhook"))
            .arg("emulate")
            .args(args)
            .output()
            .expect("runs");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(output.stdout.is_empty(), "{args:?}: nothing listens");
    }
    let live = Command::new(env!("CARGO_BIN_EXE_payhook"))
        .args(["emulate", "--key", "sk_live_abc"])
        .output()
        .expect("runs");
    assert!(String::from_utf8_lossy(&live.stderr).contains("test mode only"));

    // A negative number is read as the option's value and refused for what it
    // is, not mistaken for an unknown flag ("unexpected argument '-0'").
    for (args, says) in [
        (&["--duplicates", "-0.5"][..], "must be a probability from 0 to 1"),
        (
            &["--undeliverable", "2"],
            "invalid value '2' for '--undeliverable <P>': must be a probability from 0 to 1",
        ),
        (
            &["--undeliverable", "-0.1"],
            "invalid value '-0.1' for '--undeliverable <P>': must be a probability from 0 to 1",
        ),
        (&["--undeliverable", "NaN"], "must be a probability from 0 to 1"),
        (&["--undeliverable", "often"], "must be a probability from 0 to 1"),
        (&["--delay", "-5"], "invalid value '-5' for '--delay <MS>'"),
        (&["--seed", "-1"], "invalid value '-1' for '--seed <N>'"),
        (
            &["--attempt-timeout", "-1"],
            "invalid value '-1' for '--attempt-timeout <SECS>'",
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_payhook"))
            .arg("emulate")
            .args(args)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn an_address_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_payhook"))
        .args(["emulate", "--addr", &addr])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("could not listen on {addr}")),
        "{stderr}"
    );
}

/// Creates a payment intent and pays it through the test helper; returns the intent id.
async fn pay(base: &str, key: &str) -> String {
    let (status, intent) = api(base, key, "/v1/payment_intents", Some("amount=42&currency=btc")).await;
    assert_eq!(status, 200, "{intent}");
    let id = intent["id"].as_str().expect("id").to_owned();
    let path = format!("/v1/test_helpers/payment_intents/{id}/succeed");
    assert_eq!(api(base, key, &path, Some("")).await.0, 200);
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_secret_signs_every_delivery_across_an_emulator_restart() {
    const FIXED: &str = "whsec_fixed_across_restarts";
    // The receiver starts first, configured once, before any emulator runs.
    let (listener, url) = bind().await;
    let runs = serve(listener, FIXED);
    let dir = std::env::temp_dir().join(format!("payhook-emulate-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let secret_file = dir.join("endpoint.secret");
    std::fs::write(&secret_file, format!("{FIXED}\n")).expect("write the secret file");

    for (round, secret_args) in [
        ["--secret", FIXED],
        ["--secret-file", secret_file.to_str().expect("UTF-8 path")],
    ]
    .into_iter()
    .enumerate()
    {
        let mut args = vec![
            "--addr",
            "127.0.0.1:0",
            "--key",
            "sk_test_fixed",
            "--forward-to",
            &url,
        ];
        args.extend(secret_args);
        let emulate = Emulate::start(&args);
        let base = emulate.listening();
        let said = emulate.line_starting("signing secret: ");
        assert_eq!(
            said, "the one given with --secret",
            "the fixed secret is not printed"
        );
        pay(&base, "sk_test_fixed").await;
        wait_until("the receiver handles the event", || {
            runs.lock().expect("not poisoned").len() == round + 1
        })
        .await;
        // Verified on the first attempt: its log line says 200.
        wait_until("the attempt is logged", || {
            emulate.stderr().contains("attempt 1: 200 in ")
        })
        .await;
        let log = emulate.stderr();
        assert!(!log.contains(FIXED), "the secret is never logged: {log}");
        let (code, rest) = emulate.stop();
        assert_eq!(code, 0, "{rest}");
        assert!(!rest.contains(FIXED));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_fixed_secret_is_refused_without_echoing_it() {
    for (args, says) in [
        (
            &[
                "--forward-to",
                "http://127.0.0.1:9/",
                "--secret",
                "not_a_whsec_value",
            ][..],
            "must start with whsec_",
        ),
        (
            &[
                "--forward-to",
                "http://127.0.0.1:9/",
                "--secret",
                "whsec_has space",
            ],
            "visible ASCII",
        ),
        (&["--secret", "whsec_no_endpoint"], "--forward-to"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_payhook"))
            .arg("emulate")
            .args(args)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        let secret = args[args.len() - 1];
        assert!(!stderr.contains(secret), "the secret is echoed: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}: nothing listens");
    }
}

#[test]
fn a_non_loopback_address_without_a_key_is_refused_before_binding() {
    // A port held by another socket: had the emulator tried to bind, the error
    // would be "could not listen", not the missing key.
    let taken = std::net::TcpListener::bind("0.0.0.0:0").expect("bind");
    let port = taken.local_addr().expect("addr").port().to_string();
    for addr in [
        "0.0.0.0:0".to_owned(),
        format!("0.0.0.0:{port}"),
        "[::]:0".to_owned(),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_payhook"))
            .args(["emulate", "--addr", &addr])
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_ne!(output.status.code(), Some(0), "{addr}: {stderr}");
        assert!(stderr.contains("--key"), "{addr}: {stderr}");
        assert!(stderr.contains("not a loopback address"), "{addr}: {stderr}");
        assert!(!stderr.contains("could not listen"), "{addr}: {stderr}");
        assert!(output.stdout.is_empty(), "{addr}: nothing listens");
    }
    // The default stays on loopback.
    let help = Command::new(env!("CARGO_BIN_EXE_payhook"))
        .args(["emulate", "--help"])
        .output()
        .expect("runs");
    assert!(String::from_utf8_lossy(&help.stdout).contains("[default: 127.0.0.1:12111]"));
}
