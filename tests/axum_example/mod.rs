//! Runs `examples/axum_receiver.rs` as its own process and reads what it prints.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Builds the example once per test binary (a no-op when `cargo test` already
/// built it) and returns its executable, as cargo reports it.
pub fn executable() -> PathBuf {
    static EXECUTABLE: OnceLock<PathBuf> = OnceLock::new();
    EXECUTABLE
        .get_or_init(|| {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let output = Command::new(cargo)
                .args([
                    "build",
                    "--example",
                    "axum_receiver",
                    "--message-format=json-render-diagnostics",
                ])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .stderr(Stdio::inherit())
                .output()
                .expect("run cargo build --example axum_receiver");
            assert!(
                output.status.success(),
                "cargo build --example axum_receiver failed"
            );
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .filter(|message| message["target"]["name"] == "axum_receiver")
                .find_map(|message| message["executable"].as_str().map(PathBuf::from))
                .expect("cargo reports the example's executable")
        })
        .clone()
}

/// A running `axum_receiver` process; killed when dropped.
pub struct Example {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    pub addr: SocketAddr,
}

impl Example {
    /// Starts the example on a free loopback port with `env` set (and every
    /// `PAYHOOK_*` variable not in `env` removed), and waits until it listens.
    pub fn start(env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(executable());
        command
            .env("PAYHOOK_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "info")
            .env_remove("PAYHOOK_SECRET")
            .env_remove("PAYHOOK_REDIS_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (name, value) in env {
            command.env(name, value);
        }
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
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let listening = example.wait_for_line(Duration::from_secs(30), |line| {
            line.starts_with("listening on http://")
        });
        example.addr = listening["listening on http://".len()..]
            .parse()
            .unwrap_or_else(|err| panic!("not an address in {listening:?}: {err}"));
        example
    }

    /// Everything printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits for a line matching `matches`; panics with the output so far if
    /// none comes in time or the process exits.
    pub fn wait_for_line(&mut self, timeout: Duration, matches: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self.lines().into_iter().find(|line| matches(line)) {
                return line;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                // Let the reader thread drain what is left before reporting.
                std::thread::sleep(Duration::from_millis(100));
                panic!(
                    "the example exited ({status}) before printing the expected line; output:\n{}",
                    self.lines().join("\n")
                );
            }
            assert!(
                Instant::now() < deadline,
                "expected line not printed in {timeout:?}; output:\n{}",
                self.lines().join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The webhook URL.
    pub fn url(&self) -> String {
        format!("http://{}/webhooks", self.addr)
    }

    /// POSTs a body with a signature header; returns the status and body.
    pub async fn post(&self, body: impl Into<reqwest::Body>, signature: &str) -> (u16, String) {
        let response = reqwest::Client::new()
            .post(self.url())
            .header("content-type", "application/json")
            .header("x-service-signature", signature)
            .body(body)
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
