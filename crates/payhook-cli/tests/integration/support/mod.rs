//! Shared by the integration tests: running the real `payhook` binary, and a
//! real receiver (axum on a loopback port, calling `payhook_core::Receiver`
//! directly) that records every event its handler ran for.

#![allow(dead_code)] // each test file uses its own part of this module

pub mod inbox;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Response, StatusCode};
use axum::routing::post;
use axum::Router;
use payhook_core::adapter::ReceiveOutcome;
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
    /// Serve HTTPS with this certificate chain and key (PEM files) instead of HTTP.
    pub tls: Option<TlsFiles>,
}

/// A server certificate chain and its private key, as PEM files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert_chain: PathBuf,
    pub key: PathBuf,
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
            tls: None,
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
        let scheme = match state.config.tls.clone() {
            None => {
                runtime.spawn(async move {
                    axum::serve(listener, app).await.expect("test server runs");
                });
                "http"
            }
            Some(files) => {
                let listener = TlsListener {
                    tcp: listener,
                    acceptor: tls_acceptor(&files),
                };
                runtime.spawn(async move {
                    axum::serve(listener, app).await.expect("test server runs");
                });
                "https"
            }
        };
        Self {
            url: format!("{scheme}://{address}/webhooks"),
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
        ReceiveOutcome::Respond(reply) => reply.into_response(),
        ReceiveOutcome::Deliver(delivery) => {
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
                claim.settle(StatusCode::INTERNAL_SERVER_ERROR).await;
                let mut response = Response::new(Body::from("handler failed"));
                *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                response
            } else {
                claim.settle(StatusCode::OK).await;
                payhook_core::Reply::received().into_response()
            }
        }
    };
    app.in_flight.fetch_sub(1, Ordering::SeqCst);
    response
}

/// Accepts TCP connections and completes a TLS handshake on each; a failed
/// handshake (a client that does not trust the certificate) is skipped.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((stream, address)) = self.tcp.accept().await else {
                continue;
            };
            if let Ok(tls) = self.acceptor.accept(stream).await {
                return (tls, address);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

fn tls_acceptor(files: &TlsFiles) -> tokio_rustls::TlsAcceptor {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert_chain)
        .expect("certificate file")
        .collect::<Result<_, _>>()
        .expect("PEM certificates");
    let key = PrivateKeyDer::from_pem_file(&files.key).expect("PEM private key");
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("certificate and key match");
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// A throwaway certificate authority and a server certificate it signed for
/// `127.0.0.1`, made with the `openssl` command in `dir`. Returns the CA's
/// certificate (for the client's `SSL_CERT_FILE`) and the server's files.
pub fn make_certificates(dir: &Path) -> (PathBuf, TlsFiles) {
    let openssl = |args: &[&str]| {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("the openssl command is installed (the https tests need it)");
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=payhook test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ]);
    openssl(&ca);
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    openssl(&csr);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .expect("write the extensions file");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    (
        dir.join("ca.pem"),
        TlsFiles {
            cert_chain: dir.join("server.pem"),
            key: dir.join("server.key"),
        },
    )
}

/// A fresh, empty directory for one test's files.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("payhook-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a temp dir");
    dir
}

/// The `#n <status> …` reply lines of a `send` run's stdout.
pub fn reply_lines(stdout: &str) -> Vec<&str> {
    stdout.lines().filter(|line| line.starts_with('#')).collect()
}
