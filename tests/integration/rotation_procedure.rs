//! The rotation procedure of the production guide ("Rolling the signing
//! secret"), played with real processes while deliveries flow: the
//! `axum_receiver` example with `PAYHOOK_SECRET_FILE`, `payhook emulate`
//! delivering to it, `payhook endpoints roll-secret` rolling the endpoint's
//! secret with an overlap into the receiver's file, and `kill -HUP`.
//!
//! Roll with an expiry → both secrets accepted → the old one expires → the
//! new one alone; no genuine delivery is refused (no attempt gets `400`, every
//! event is acknowledged at its first attempt), the receiver never restarts,
//! and a delivery signed with the old secret alone is refused at the end.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use payhook::sender::{EventBuilder, SignedDelivery};
use payhook_test_support::{payhook_emulate, Process};
use serde_json::Value;

use crate::example_process::{payhook_command, Example};

const KEY: &str = "sk_test_rotation_procedure";
const OLD: &str = "whsec_rotation_procedure_initial";
/// The roll's overlap: long enough to see both secrets accepted, short
/// enough for a test.
const EXPIRES_IN: u64 = 3;

/// `payhook emulate` forwarding to `url`; killed when dropped.
struct Emulate {
    _process: Process,
    base: String,
    endpoint: String,
}

impl Emulate {
    fn start(url: &str) -> Self {
        let mut command = payhook_emulate(payhook_command(), KEY, url);
        command.args(["--secret", OLD]);
        let process = Process::spawn("payhook emulate", &mut command);
        let timeout = Duration::from_secs(30);
        let base = process.wait_for_line(timeout, |line| line.starts_with("listening on "))
            ["listening on ".len()..]
            .to_owned();
        let endpoint = process.wait_for_line(timeout, |line| line.contains("(webhook endpoint "));
        let endpoint = endpoint
            .split("(webhook endpoint ")
            .nth(1)
            .map(|rest| rest.trim_end_matches(')').to_owned())
            .expect("the endpoint's line names it");
        Self {
            _process: process,
            base,
            endpoint,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, form: &[(&str, &str)]) -> Value {
        let mut request = reqwest::Client::new()
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(KEY);
        if !form.is_empty() {
            let body = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(form)
                .finish();
            request = request
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body);
        }
        let response = request.send().await.expect("the emulator answers");
        assert!(response.status().is_success(), "{path}: {}", response.status());
        serde_json::from_str(&response.text().await.expect("a reply")).expect("JSON")
    }
}

fn hangup(example: &Example) {
    let status = Command::new("kill")
        .args(["-HUP", &example.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
}

/// Rewrites the secret file as a deploy tool would: a new file moved over it.
fn rewrite(path: &Path, text: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, text).unwrap();
    std::fs::rename(&next, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rolled_with_an_overlap_loses_no_delivery() {
    let dir = std::env::temp_dir().join(payhook_test_support::unique("payhook-rotation-procedure"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("webhook-secrets");
    std::fs::write(&file, format!("{OLD}\n")).unwrap();
    let mut receiver = Example::start(
        "axum_receiver",
        &[("PAYHOOK_SECRET_FILE", file.to_str().unwrap())],
    );
    let pid = receiver.pid();
    let emulate = Arc::new(Emulate::start(&receiver.url()));

    // Deliveries flow the whole time: a payment every 100 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let flow = {
        let (emulate, stop) = (Arc::clone(&emulate), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut events = 0;
            while !stop.load(Ordering::SeqCst) {
                let intent = emulate
                    .call(
                        reqwest::Method::POST,
                        "/v1/payment_intents",
                        &[("amount", "250000"), ("currency", "btc")],
                    )
                    .await;
                let id = intent["id"].as_str().unwrap().to_owned();
                emulate
                    .call(
                        reqwest::Method::POST,
                        &format!("/v1/test_helpers/payment_intents/{id}/succeed"),
                        &[],
                    )
                    .await;
                events += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            events
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    // 1. Roll with an overlap; the new secret goes into the receiver's file.
    let expires_in = EXPIRES_IN.to_string();
    let rolled = Command::new(payhook_command())
        .args([
            "endpoints",
            "roll-secret",
            &emulate.endpoint,
            "--expires-in",
            &expires_in,
        ])
        .args([
            "--secret-file",
            file.to_str().unwrap(),
            "--api",
            &emulate.base,
            "--key",
            KEY,
        ])
        .output()
        .expect("payhook runs");
    let stdout = String::from_utf8_lossy(&rolled.stdout).into_owned();
    assert!(
        rolled.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&rolled.stderr)
    );
    let rolled_at = Instant::now();
    assert!(
        stdout.contains("the previous secret keeps signing beside it until"),
        "{stdout}"
    );
    assert!(stdout.contains("(2 secret(s) listed)"), "{stdout}");
    let listed = std::fs::read_to_string(&file).unwrap();
    let new = listed
        .lines()
        .nth(1)
        .expect("the new secret on the second line")
        .to_owned();
    assert!(new.starts_with("whsec_") && new != OLD);
    assert!(!stdout.contains(&new), "the new secret was printed: {stdout}");

    // 2. Both accepted: the receiver reloads its file.
    hangup(&receiver);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let now = || SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), &new).unwrap();
    let delivery = now();
    assert_eq!(receiver.post(delivery.body, &delivery.signature).await.0, 200);

    // 3. The old secret expires at the emulator; then the new one alone.
    let expired = Duration::from_secs(EXPIRES_IN + 1);
    tokio::time::sleep(expired.saturating_sub(rolled_at.elapsed())).await;
    rewrite(&file, &format!("{new}\n"));
    hangup(&receiver);
    tokio::time::sleep(Duration::from_millis(1500)).await;

    stop.store(true, Ordering::SeqCst);
    let events = flow.await.unwrap();
    assert!(events >= 30, "only {events} events flowed");

    // Every event acknowledged, none ever refused.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let pending = emulate
            .call(
                reqwest::Method::GET,
                "/v1/events?delivery_success=false&limit=100",
                &[],
            )
            .await;
        if pending["data"].as_array().is_some_and(Vec::is_empty) {
            break;
        }
        assert!(Instant::now() < deadline, "events not acknowledged: {pending}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut ids = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut path = "/v1/events?limit=100".to_owned();
        if let Some(after) = &after {
            path.push_str(&format!("&starting_after={after}"));
        }
        let page = emulate.call(reqwest::Method::GET, &path, &[]).await;
        let data = page["data"].as_array().unwrap();
        ids.extend(data.iter().map(|event| event["id"].as_str().unwrap().to_owned()));
        if page["has_more"] != true {
            break;
        }
        after = ids.last().cloned();
    }
    assert_eq!(ids.len(), events, "one event per payment");
    let (mut overlapped, mut single) = (0, 0);
    for id in &ids {
        let attempts = emulate
            .call(
                reqwest::Method::GET,
                &format!("/v1/events/{id}/delivery_attempts"),
                &[],
            )
            .await;
        let attempts = attempts["data"].as_array().unwrap();
        assert_eq!(attempts.len(), 1, "{id} needed a retry: {attempts:#?}");
        assert_eq!(attempts[0]["status"], 200, "{id}: {:#?}", attempts[0]);
        match attempts[0]["signatures"].as_u64() {
            Some(2) => overlapped += 1,
            _ => single += 1,
        }
    }
    assert!(overlapped > 0, "no delivery was signed during the overlap");
    assert!(single > 0);

    // The new secret alone now: the old one is refused, with no restart.
    let stale = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), OLD).unwrap();
    assert_eq!(receiver.post(stale.body, &stale.signature).await.0, 400);
    let delivery = now();
    assert_eq!(receiver.post(delivery.body, &delivery.signature).await.0, 200);
    assert!(receiver.running());
    assert_eq!(receiver.pid(), pid);
}
