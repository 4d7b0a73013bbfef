//! Redis servers for the tests: the shared one named by `PAYHOOK_TEST_REDIS_URL`,
//! and private `redis-server` processes that a test may stop, pause and restart.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use payhook_redis::RedisStore;

const HOW_TO_START: &str = "start one with `eval \"$(.ci/start-redis)\"` (it installs redis-server with \
     apt-get if needed and prints the export line), or run `redis-server --bind 127.0.0.1 --port 6390 --save '' \
     --appendonly no --daemonize yes` and `export PAYHOOK_TEST_REDIS_URL=redis://127.0.0.1:6390/`";

/// The URL of the shared test server; fails the test when it is unset or down.
pub fn shared_url() -> String {
    let url = std::env::var("PAYHOOK_TEST_REDIS_URL").unwrap_or_else(|_| {
        panic!("PAYHOOK_TEST_REDIS_URL is not set: the Redis tests need a server; {HOW_TO_START}")
    });
    if let Err(err) = ping(&url) {
        panic!("the Redis server at PAYHOOK_TEST_REDIS_URL does not answer ({err}); {HOW_TO_START}");
    }
    url
}

/// A store on the shared test server.
pub fn shared_store() -> RedisStore {
    RedisStore::new(shared_url()).expect("valid PAYHOOK_TEST_REDIS_URL")
}

/// A plain synchronous connection, for looking at the server from outside the store.
pub fn connection(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .expect("valid URL")
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("Redis reachable")
}

fn ping(url: &str) -> redis::RedisResult<()> {
    let mut conn = redis::Client::open(url)?.get_connection_with_timeout(Duration::from_secs(2))?;
    redis::cmd("PING").query(&mut conn)
}

/// A `redis-server` process of the test's own, on a free loopback port.
/// Killed when dropped.
pub struct TestServer {
    port: u16,
    extra_args: Vec<String>,
    child: Option<Child>,
}

impl TestServer {
    /// Starts a server with persistence off; `extra_args` go to `redis-server`.
    pub fn start(extra_args: &[&str]) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free loopback port")
            .port();
        let mut server = Self {
            port,
            extra_args: extra_args.iter().map(|arg| (*arg).to_owned()).collect(),
            child: None,
        };
        server.start_again();
        server
    }

    /// A port on which nothing listens yet, for a server started later with
    /// [`start_again`](Self::start_again).
    pub fn not_started() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self {
            port,
            extra_args: Vec::new(),
            child: None,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:{port}/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts the server (again) on the same port and waits until it answers.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "server already running");
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(std::env::temp_dir())
            .args(&self.extra_args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("cannot run redis-server ({err}); {HOW_TO_START}"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        // PING without credentials answers NOAUTH on a server with a password,
        // which still shows it is up.
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (SIGKILL: no goodbye to clients) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("server running").id();
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid}");
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.resume();
        }
        self.kill();
    }
}
