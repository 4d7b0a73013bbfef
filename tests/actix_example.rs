//! `cargo run --example actix_receiver` as a user runs it: its own process on a
//! free loopback port, fed genuine, duplicate and forged deliveries over HTTP,
//! judged by its replies and by what it prints.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use payhook::testing::{EventBuilder, SignedDelivery};

const RECEIVED: &str = r#"{"received":true}"#;

/// Builds the example (a no-op when `cargo test` already did) and returns its
/// executable as cargo reports it.
fn executable() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "build",
            "--example",
            "actix_receiver",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run cargo build --example actix_receiver");
    assert!(
        output.status.success(),
        "cargo build --example actix_receiver failed"
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["target"]["name"] == "actix_receiver")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .expect("cargo reports the example's executable")
}

/// The running example; killed when dropped.
struct Example {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    url: String,
}

impl Example {
    fn start(env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(executable());
        command
            .env("PAYHOOK_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .env_remove("PAYHOOK_SECRET")
            .env_remove("PAYHOOK_REDIS_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        command.envs(env.iter().copied());
        let mut child = command.spawn().expect("start the example");
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let mut example = Self {
            child,
            lines,
            url: String::new(),
        };
        let listening = example.wait_for_line(|line| line.starts_with("listening on http://"));
        let addr = listening.trim_start_matches("listening on http://");
        assert!(addr.starts_with("127.0.0.1:"), "{listening}");
        example.url = format!("http://{addr}/webhooks");
        example
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits up to 30 s for a printed line that `matches`.
    fn wait_for_line(&mut self, matches: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(line) = self.lines().into_iter().find(|line| matches(line)) {
                return line;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the example exited ({status}); it printed {:#?}", self.lines());
            }
            assert!(
                Instant::now() < deadline,
                "line not printed in 30 s: {:#?}",
                self.lines()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    async fn post(&self, delivery: &SignedDelivery) -> (u16, String) {
        let response = reqwest::Client::new()
            .post(&self.url)
            .header("content-type", "application/json")
            .header("x-service-signature", &delivery.signature)
            .body(delivery.body.clone())
            .send()
            .await
            .expect("the example answers");
        let status = response.status().as_u16();
        (status, response.text().await.expect("reply body"))
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn handles_a_new_event_once_and_never_prints_handled_otherwise() {
    let secret = "whsec_actix_example_from_env";
    let mut example = Example::start(&[("PAYHOOK_SECRET", secret)]);

    let event = EventBuilder::payment_intent_succeeded();
    let id = event.event_id().to_owned();
    let genuine = SignedDelivery::now(event.to_json(), secret).unwrap();
    assert_eq!(example.post(&genuine).await, (200, RECEIVED.to_owned()));
    assert_eq!(example.post(&genuine).await, (200, RECEIVED.to_owned()));
    let forged = SignedDelivery::now(event.to_json(), "whsec_forger").unwrap();
    let (status, body) = example.post(&forged).await;
    assert_eq!(status, 400);
    assert!(body.starts_with("Webhook Error: no signature matches"), "{body}");

    let handled = format!("handled {id} payment_intent.succeeded");
    example.wait_for_line(|line| line.contains(&handled) && line.contains("INFO"));
    example.wait_for_line(|line| line.contains("duplicate delivery acknowledged") && line.contains(&id));
    example.wait_for_line(|line| line.contains("delivery rejected") && line.contains("no signature matches"));

    let lines = example.lines();
    let handled_lines = lines.iter().filter(|line| line.contains("handled ")).count();
    assert_eq!(
        handled_lines, 1,
        "one `handled` line, for the one new event: {lines:#?}"
    );
    assert!(
        !lines.iter().any(|line| line.contains(secret)),
        "the secret is never printed: {lines:#?}"
    );
    assert!(
        lines.iter().any(|line| line == "dedupe store: in memory"),
        "{lines:#?}"
    );
}

#[tokio::test]
async fn without_payhook_secret_it_prints_and_uses_a_test_secret() {
    let mut example = Example::start(&[]);
    let notice = example.wait_for_line(|line| line.contains("PAYHOOK_SECRET is not set"));
    let secret = notice
        .split_whitespace()
        .find(|word| word.starts_with("whsec_"))
        .unwrap_or_else(|| panic!("no whsec_ secret in {notice:?}"))
        .to_owned();

    let event = EventBuilder::other("customer.created");
    let signed = SignedDelivery::now(event.to_json(), &secret).unwrap();
    assert_eq!(example.post(&signed).await, (200, RECEIVED.to_owned()));
    let handled = format!("handled {} customer.created", event.event_id());
    example.wait_for_line(|line| line.contains(&handled));
}
