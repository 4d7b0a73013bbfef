//! Shared by the integration tests: running the real `payhook` binary, and a
//! real receiver (axum on a loopback port, calling `payhook_core::Receiver`
//! directly) that records every event its handler ran for.

#![allow(dead_code)] // each test file uses its own part of this module

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Response, StatusCode};
use axum::routing::post;
use axum::Router;
use payhook_core::adapter::Outcome;
use payhook_core::Receiver;

/// What one run of the binary produced.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `payhook` with `args`, feeding `stdin`, and waits for it.
pub fn payhook(args: &[&str], stdin: &[u8]) -> Run {
    payhook_with_env(args, stdin, &[])
}

/// The same, with extra environment variables.
pub fn payhook_with_env(args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_payhook"));
    command
        .args(args)
        .env_remove("PAYHOOK_SECRET")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("the payhook binary runs");
    {
        let mut input = child.stdin.take().expect("stdin is piped");
        // The binary may exit before reading (usage errors): a broken pipe is fine.
        let _ = input.write_all(stdin);
    }
    let output = child.wait_with_output().expect("payhook finishes");
    Run {
        code: output
            .status
            .code()
            .expect("payhook exited normally, not by a signal"),
        stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
    }
}

/// An event the test receiver's handler ran for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled {
    pub id: String,
    pub event_type: String,
    pub amount: Option<u128>,
    pub currency: Option<String>,
}

/// How the test receiver behaves.
#[derive(Debug, Clone)]
pub struct Config {
    pub secret: &'static str,
    /// The signature header, when not the default.
    pub header: Option<&'static str>,
    /// How long every request waits before the receiver looks at it.
    pub request_delay: Duration,
    /// How long the handler takes (only for new events).
    pub handler_delay: Duration,
    /// The handler fails with 500 and releases the claim.
    pub handler_fails: bool,
    /// The receiver skips the timestamp check (no replay guard).
    pub no_timestamp_check: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            secret: SECRET,
            header: None,
            request_delay: Duration::ZERO,
            handler_delay: Duration::ZERO,
            handler_fails: false,
            no_timestamp_check: false,
        }
    }
}

/// The secret the test receiver uses unless told otherwise.
pub const SECRET: &str = "whsec_cli_test_secret";

struct AppState {
    receiver: Receiver,
    config: Config,
    handled: Mutex<Vec<Handled>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    requests: AtomicUsize,
}

/// A receiver listening on `127.0.0.1:<free port>/webhooks` until dropped.
pub struct TestReceiver {
    pub url: String,
    state: Arc<AppState>,
    // Dropped last: shuts the server down.
    _runtime: tokio::runtime::Runtime,
}

impl TestReceiver {
    pub fn start() -> Self {
        Self::with(Config::default())
    }

    pub fn with(config: Config) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("test runtime");
        let mut builder = Receiver::builder().secret(config.secret);
        if let Some(header) = config.header {
            builder = builder.header_name(header);
        }
        if config.no_timestamp_check {
            builder = builder.disable_timestamp_check();
        }
        let state = Arc::new(AppState {
            receiver: builder.build().expect("valid receiver configuration"),
            config,
            handled: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            requests: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/webhooks", post(webhook))
            .with_state(Arc::clone(&state));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind a loopback port");
        let address = listener.local_addr().expect("bound address");
        runtime.spawn(async move {
            axum::serve(listener, app).await.expect("test server runs");
        });
        Self {
            url: format!("http://{address}/webhooks"),
            state,
            _runtime: runtime,
        }
    }

    /// Every event the handler ran for, in order.
    pub fn handled(&self) -> Vec<Handled> {
        self.state.handled.lock().expect("not poisoned").clone()
    }

    /// How many requests arrived.
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// The most requests that were being served at the same moment.
    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }
}

async fn webhook(State(app): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response<Body> {
    app.requests.fetch_add(1, Ordering::SeqCst);
    let now = app.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    app.max_in_flight.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(app.config.request_delay).await;

    let response = match app.receiver.receive(&headers, body).await {
        Outcome::Respond(reply) => reply.into_response(),
        Outcome::Deliver(delivery) => {
            let (event, _body, claim) = delivery.into_parts();
            let pi = event.payment_intent();
            app.handled.lock().expect("not poisoned").push(Handled {
                id: event.id().to_owned(),
                event_type: event.event_type().to_owned(),
                amount: pi.map(|pi| pi.amount),
                currency: pi.map(|pi| pi.currency.clone()),
            });
            tokio::time::sleep(app.config.handler_delay).await;
            if app.config.handler_fails {
                claim.release().await;
                let mut response = Response::new(Body::from("handler failed"));
                *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                response
            } else {
                claim.complete().await.into_response()
            }
        }
    };
    app.in_flight.fetch_sub(1, Ordering::SeqCst);
    response
}

/// The `#n <status> …` reply lines of a `send` run's stdout.
pub fn reply_lines(stdout: &str) -> Vec<&str> {
    stdout.lines().filter(|line| line.starts_with('#')).collect()
}
