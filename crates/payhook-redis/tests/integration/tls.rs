//! `rediss://` (feature `tls`) against a TLS-only `redis-server` with a
//! certificate from a throwaway CA, made with the `openssl` command.
//!
//! The CA is trusted through `SSL_CERT_FILE`, which the platform certificate
//! loader reads; the tests here take turns (one lock), so changing the
//! variable races with nothing: no other test of this binary reads it (they
//! speak plain `redis://` to `127.0.0.1`, an address, not a name to look up).
#![cfg(feature = "tls")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use payhook_core::store::{Claim, Completion, Store};
use payhook_redis::{BuildError, RedisStore};

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl command");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA, a certificate for 127.0.0.1 signed by it, and another CA that signed nothing.
fn certificates(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for ca in ["ca", "other-ca"] {
        let (key, crt, subj) = (
            format!("{ca}.key"),
            format!("{ca}.crt"),
            format!("/CN=payhook test {ca}"),
        );
        let mut args = vec![
            "req", "-x509", "-days", "1", "-subj", &subj, "-keyout", &key, "-out", &crt,
        ];
        args.extend(ec);
        openssl(dir, &args);
    }
    let mut args = vec![
        "req",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ];
    args.extend(ec);
    openssl(dir, &args);
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "san.ext",
            "-out",
            "server.crt",
        ],
    );
}

struct TlsServer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Serialises the tests: each points `SSL_CERT_FILE` at its own CA.
static CERT_FILE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl TlsServer {
    /// A TLS-only `redis-server` on a free loopback port with a certificate
    /// for 127.0.0.1; `extra_args` go to `redis-server`.
    fn start(extra_args: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("payhook-redis-tls-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        certificates(&dir);
        let child = Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
            ])
            .args(["--tls-cert-file", "server.crt", "--tls-key-file", "server.key"])
            .args(["--tls-ca-cert-file", "ca.crt", "--tls-auth-clients", "no"])
            .args(["--save", "", "--appendonly", "no", "--dir", "."])
            .args(extra_args)
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (run .ci/start-redis to install it)");
        let server = TlsServer { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.port)
    }

    /// Whether an `openssl s_client` handshake with only `protocol` allowed
    /// (`-tls1_2`, `-tls1_3`) succeeds.
    fn accepts(&self, protocol: &str) -> bool {
        Command::new("openssl")
            .args([
                "s_client",
                "-connect",
                &format!("127.0.0.1:{}", self.port),
                protocol,
            ])
            .args(["-CAfile", "ca.crt", "-verify_return_error"])
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("the openssl command")
            .success()
    }
}

/// Claims and completes one id over the store: it works end to end.
async fn round_trip(store: &RedisStore) {
    let Claim::Claimed(token) = store
        .claim("tls", "evt_1", Duration::from_secs(30))
        .await
        .unwrap()
    else {
        panic!("a new id is claimed");
    };
    assert_eq!(
        store
            .complete("tls", "evt_1", token, Duration::from_secs(60))
            .await
            .unwrap(),
        Completion::Completed
    );
    assert_eq!(
        store
            .claim("tls", "evt_1", Duration::from_secs(30))
            .await
            .unwrap(),
        Claim::Done
    );
}

/// Some managed Redis services speak TLS 1.2 only: `rediss://` must reach them
/// (rustls' `tls12` feature; without it the handshake fails with
/// `ProtocolVersion`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_to_a_server_that_speaks_only_tls_1_2() {
    let _turn = CERT_FILE.lock().await;
    let server = TlsServer::start(&["--tls-protocols", "TLSv1.2"]);
    assert!(server.accepts("-tls1_2"), "the server speaks TLS 1.2");
    assert!(!server.accepts("-tls1_3"), "the server refuses TLS 1.3");
    std::env::set_var("SSL_CERT_FILE", server.dir.join("ca.crt"));
    let store = RedisStore::builder(server.url())
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("a TLS 1.2 handshake");
    round_trip(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_url_with_a_trusted_certificate() {
    let _turn = CERT_FILE.lock().await;
    let server = TlsServer::start(&[]);
    let url = server.url();

    // A certificate nobody trusts: refused, without the URL in the error.
    std::env::set_var("SSL_CERT_FILE", server.dir.join("other-ca.crt"));
    let err = RedisStore::builder(&url)
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect_err("an untrusted certificate");
    assert!(matches!(err, BuildError::Unavailable(_)), "{err}");
    let message = err.to_string();
    assert!(message.contains("certificate"), "{message}");
    assert!(!message.contains("127.0.0.1"), "{message}");

    // Its CA trusted: the store works over TLS.
    std::env::set_var("SSL_CERT_FILE", server.dir.join("ca.crt"));
    let store = RedisStore::builder(&url)
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    round_trip(&store).await;
    // TLS 1.3 is what this server negotiates by default.
    assert!(server.accepts("-tls1_3"));
}
