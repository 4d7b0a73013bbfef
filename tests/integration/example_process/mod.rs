//! Runs a receiver example (`examples/<name>.rs`) as its own process, the way
//! `cargo run --example <name>` does, and reads what it prints.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use payhook_test_support::Process;

/// How long an example may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Builds the example once per test binary (a no-op when `cargo test` already
/// built it) and returns its executable, as cargo reports it.
pub fn executable(example: &str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    // Held while building: cargo would serialize concurrent builds on its own
    // lock anyway, and the second caller for a name then finds it built.
    let mut built = BUILT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(path) = built.get(example) {
        return path.clone();
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "build",
            "--example",
            example,
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|err| panic!("run cargo build --example {example}: {err}"));
    assert!(output.status.success(), "cargo build --example {example} failed");
    let path = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["target"]["name"] == example)
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo reports the executable of example {example}"));
    built.insert(example.to_owned(), path.clone());
    path
}

/// The example's command, to listen on a free loopback port with plain `info`
/// logs, with `env` set and every other `PAYHOOK_*` setting removed.
pub fn command(example: &str, env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(executable(example));
    command
        .env("PAYHOOK_ADDR", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env_remove("PAYHOOK_SECRET")
        .env_remove("PAYHOOK_SECRET_FILE")
        .env_remove("PAYHOOK_SCHEME")
        .env_remove("PAYHOOK_PUBLIC_KEYS")
        .env_remove("PAYHOOK_REDIS_URL")
        .env_remove("PAYHOOK_ALLOWED_IPS")
        .env_remove("PAYHOOK_TRUSTED_PROXIES")
        .env_remove("PAYHOOK_DATABASE_URL")
        .env_remove("PAYHOOK_DASHBOARD_TOKEN")
        .stdin(Stdio::null());
    command.envs(env.iter().copied());
    command
}

/// The `payhook` command, built once per test binary.
pub fn payhook_command() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let output = Command::new(cargo)
                .args([
                    "build",
                    "-p",
                    "payhook-cli",
                    "--bin",
                    "payhook",
                    "--message-format=json-render-diagnostics",
                ])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .stderr(std::process::Stdio::inherit())
                .output()
                .expect("run cargo build -p payhook-cli");
            assert!(output.status.success(), "cargo build -p payhook-cli failed");
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .filter(|message| message["target"]["name"] == "payhook")
                .find_map(|message| message["executable"].as_str().map(std::path::PathBuf::from))
                .expect("cargo reports the payhook executable")
        })
        .clone()
}

/// A running example; killed when dropped.
pub struct Example {
    process: Process,
    pub addr: SocketAddr,
}

impl Example {
    /// Starts `example` (see [`command`]) and waits until it prints
    /// `listening on http://ADDR` with a loopback address.
    pub fn start(example: &str, env: &[(&str, &str)]) -> Self {
        let process = Process::spawn(&format!("example {example}"), &mut command(example, env));
        let listening = process.wait_for_line(START_TIMEOUT, |line| line.starts_with("listening on http://"));
        let addr: SocketAddr = listening["listening on http://".len()..]
            .parse()
            .unwrap_or_else(|err| panic!("not an address in {listening:?}: {err}"));
        assert_eq!(addr.ip(), Ipv4Addr::LOCALHOST, "{listening}");
        Self { process, addr }
    }

    /// The process id (for `kill -HUP`).
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.process.running()
    }

    /// Everything printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.process.lines()
    }

    /// Waits for a line matching `matches`; panics with the output so far if
    /// none comes in time or the process exits.
    pub fn wait_for_line(&mut self, timeout: Duration, matches: impl Fn(&str) -> bool) -> String {
        self.process.wait_for_line(timeout, matches)
    }

    /// Waits until `count` lines match `matches`, and returns them; panics with
    /// the output so far if they do not come in time or the process exits.
    pub fn wait_for_lines(
        &mut self,
        timeout: Duration,
        count: usize,
        matches: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        self.process.wait_for_lines(timeout, count, matches)
    }

    /// Waits until the process exits by itself (it is not killed); its exit
    /// status, or `None` when it still runs after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        self.process.wait_exit(timeout)
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

    /// POSTs a body with these headers (a Standard Webhooks delivery's);
    /// returns the status and body.
    pub async fn post_with(&self, body: impl Into<reqwest::Body>, headers: http::HeaderMap) -> (u16, String) {
        let response = reqwest::Client::new()
            .post(self.url())
            .header("content-type", "application/json")
            .headers(headers)
            .body(body)
            .send()
            .await
            .expect("the example answers");
        let status = response.status().as_u16();
        (status, response.text().await.expect("reply body"))
    }

    /// POSTs a request head declaring a `Content-Length` of `declared` bytes,
    /// and none of them, as a sender of an oversized body has when the
    /// receiver answers `413` from the declared length and closes; returns the
    /// status. (Writing the whole body would race that early reply: the write
    /// may fail with a broken pipe before the reply is read.)
    pub fn post_declaring(&self, declared: usize, signature: &str) -> u16 {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(self.addr).expect("the example listens");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(
            stream,
            "POST /webhooks HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             x-service-signature: {signature}\r\ncontent-length: {declared}\r\n\r\n",
            self.addr
        )
        .expect("request head");
        let mut reply = Vec::new();
        let mut chunk = [0u8; 1024];
        while !reply.windows(4).any(|end| end == b"\r\n\r\n") {
            let read = stream.read(&mut chunk).expect("the example answers");
            if read == 0 {
                break;
            }
            reply.extend_from_slice(&chunk[..read]);
        }
        let head = String::from_utf8_lossy(&reply);
        head.split(' ')
            .nth(1)
            .and_then(|status| status.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP reply: {head:?}"))
    }
}

/// Runs the case `$case(example: &str)` against each example named, as the
/// tests `$case::<example>`; with no names, against the three receiver
/// examples (`axum_receiver`, `actix_receiver`, `inbox_receiver`).
macro_rules! for_each_receiver {
    ($case:ident) => {
        $crate::example_process::for_each_receiver!($case: axum_receiver, actix_receiver, inbox_receiver);
    };
    ($case:ident: $($example:ident),+ $(,)?) => {
        mod $case {
            $(
                #[tokio::test]
                async fn $example() {
                    super::$case(stringify!($example)).await
                }
            )+
        }
    };
}
pub(crate) use for_each_receiver;
