//! Two axum replicas of one app sharing one Redis dedupe store, over real HTTP
//! on loopback: concurrent duplicates, a failing replica, a crashed replica,
//! and Redis frozen, killed and restarted under them.
//!
//! The first three tests use the server named by `PAYHOOK_TEST_REDIS_URL`; the
//! outage test runs a `redis-server` of its own so it can stop it.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use payhook::redis::RedisStore;
use payhook::sender::{unique_event_id, EventBuilder, SignedDelivery};
use payhook::store::{Claim, ClaimToken};
use payhook::tower::axum::{Received, Webhook};
use payhook::tower::WebhookLayer;
use payhook::{Receiver, Store};
use payhook_test_support::CapturedLog;

const SECRET: &str = "whsec_replicas";
const RECEIVED: &str = r#"{"received":true}"#;
const HOW_TO_START: &str =
    "start one with `eval \"$(.ci/start-redis)\"` (installs redis-server with apt-get \
     if needed and prints the export line)";

async fn shared_redis_url() -> String {
    let _ = captured_log();
    let url = std::env::var("PAYHOOK_TEST_REDIS_URL").unwrap_or_else(|_| {
        panic!("PAYHOOK_TEST_REDIS_URL is not set: these tests need Redis 7; {HOW_TO_START}")
    });
    if let Err(err) = RedisStore::builder(&url).connect().await {
        panic!("the Redis server at PAYHOOK_TEST_REDIS_URL is not usable ({err}); {HOW_TO_START}");
    }
    url
}

/// What the handlers of both replicas did, shared so tests can count across them.
#[derive(Default)]
struct Ledger {
    /// Event id → the replicas whose handler succeeded for it.
    handled: HashMap<String, Vec<&'static str>>,
    /// Event id → handler runs started, over both replicas.
    started: HashMap<String, usize>,
}

#[derive(Clone)]
struct Replica {
    name: &'static str,
    ledger: Arc<Mutex<Ledger>>,
    /// Event ids this replica's handler fails (500) for.
    fails: Arc<HashSet<String>>,
    handler_delay: Duration,
    /// When set, handlers wait after their delay until the test opens it, so
    /// the test decides what happens before any handler finishes.
    gate: Option<Arc<AtomicBool>>,
}

async fn handle(State(replica): State<Replica>, Webhook(event): Webhook) -> Result<Received, StatusCode> {
    let id = event.id().to_owned();
    *replica
        .ledger
        .lock()
        .unwrap()
        .started
        .entry(id.clone())
        .or_default() += 1;
    tokio::time::sleep(replica.handler_delay).await;
    if let Some(gate) = &replica.gate {
        while !gate.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    if replica.fails.contains(&id) {
        return Err(StatusCode::INTERNAL_SERVER_ERROR);
    }
    replica
        .ledger
        .lock()
        .unwrap()
        .handled
        .entry(id)
        .or_default()
        .push(replica.name);
    Ok(Received)
}

/// Settings both replicas of one test share.
struct AppConfig {
    redis_url: String,
    prefix: String,
    lease: Duration,
    store_timeout: Duration,
    handler_delay: Duration,
    gate: Option<Arc<AtomicBool>>,
}

impl AppConfig {
    fn new(redis_url: String) -> Self {
        Self {
            redis_url,
            // Each test its own keys on the shared server.
            prefix: format!("replicas-{}", ClaimToken::random()),
            lease: Duration::from_secs(30),
            store_timeout: Duration::from_millis(500),
            handler_delay: Duration::from_millis(50),
            gate: None,
        }
    }

    /// A store as each replica builds it: its own connection to the shared Redis.
    fn store(&self) -> RedisStore {
        RedisStore::builder(&self.redis_url)
            .prefix(&self.prefix)
            .timeout(self.store_timeout)
            .build()
            .unwrap()
    }

    /// Starts one replica on a loopback port; returns its webhook URL.
    async fn start_replica(
        &self,
        name: &'static str,
        ledger: &Arc<Mutex<Ledger>>,
        fails: &[&str],
    ) -> (String, tokio::task::JoinHandle<()>) {
        let receiver = Receiver::builder()
            .secret(SECRET)
            .store(self.store())
            .namespace("shop")
            .lease(self.lease)
            .build()
            .unwrap();
        let state = Replica {
            name,
            ledger: Arc::clone(ledger),
            fails: Arc::new(fails.iter().map(|id| (*id).to_owned()).collect()),
            handler_delay: self.handler_delay,
            gate: self.gate.clone(),
        };
        let app = Router::new()
            .route("/webhooks", post(handle))
            .route_layer(WebhookLayer::new(receiver))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        (format!("http://{addr}/webhooks"), server)
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn deliver(client: &reqwest::Client, url: &str, delivery: &SignedDelivery) -> (u16, String) {
    let response = client
        .post(url)
        .header("x-service-signature", &delivery.signature)
        .header("content-type", "application/json")
        .body(delivery.body.clone())
        .send()
        .await
        .unwrap_or_else(|err| panic!("POST {url}: {err}"));
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

fn new_delivery() -> (String, SignedDelivery) {
    let event = EventBuilder::payment_intent_succeeded().id(unique_event_id());
    let delivery = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    (event.event_id().to_owned(), delivery)
}

fn count(ledger: &Mutex<Ledger>, id: &str) -> (usize, usize) {
    let ledger = ledger.lock().unwrap();
    (
        ledger.started.get(id).copied().unwrap_or(0),
        ledger.handled.get(id).map_or(0, Vec::len),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deliveries_over_both_replicas_run_the_handler_once() {
    let mut config = AppConfig::new(shared_redis_url().await);
    // Long enough that the concurrent duplicates overlap the one that runs.
    config.handler_delay = Duration::from_millis(300);
    let ledger = Arc::default();
    let (a, _) = config.start_replica("a", &ledger, &[]).await;
    let (b, _) = config.start_replica("b", &ledger, &[]).await;
    let (id, delivery) = new_delivery();
    let client = client();
    let delivery = Arc::new(delivery);

    let requests: Vec<_> = (0..100)
        .map(|n| {
            let (client, delivery) = (client.clone(), Arc::clone(&delivery));
            let url = if n % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move { deliver(&client, &url, &delivery).await })
        })
        .collect();
    let mut statuses = HashMap::<u16, usize>::new();
    for request in requests {
        let (status, body) = request.await.unwrap();
        match status {
            200 => assert_eq!(body, RECEIVED),
            409 => assert!(
                body.starts_with("Webhook Error: ") && body.contains(&id),
                "{body}"
            ),
            other => panic!("unexpected {other}: {body}"),
        }
        *statuses.entry(status).or_default() += 1;
    }
    assert_eq!(
        count(&ledger, &id),
        (1, 1),
        "handler runs over both replicas; replies {statuses:?}"
    );
    assert!(statuses.get(&200) >= Some(&1), "{statuses:?}");
    assert!(
        statuses.get(&409) >= Some(&1),
        "the deliveries overlapped: {statuses:?}"
    );

    // A later retry, on either replica, is a duplicate.
    for url in [&a, &b] {
        assert_eq!(deliver(&client, url, &delivery).await, (200, RECEIVED.to_owned()));
    }
    assert_eq!(count(&ledger, &id), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_on_one_replica_is_handled_on_the_other() {
    let config = AppConfig::new(shared_redis_url().await);
    let ledger = Arc::default();
    let (id, delivery) = new_delivery();
    let (a, _) = config.start_replica("a", &ledger, &[id.as_str()]).await;
    let (b, _) = config.start_replica("b", &ledger, &[]).await;
    let client = client();

    let (status, _) = deliver(&client, &a, &delivery).await;
    assert_eq!(status, 500, "replica a's handler fails");
    assert_eq!(count(&ledger, &id), (1, 0));
    // The sender retries; the load balancer picks replica b, which handles it.
    assert_eq!(deliver(&client, &b, &delivery).await, (200, RECEIVED.to_owned()));
    assert_eq!(count(&ledger, &id), (2, 1));
    assert_eq!(ledger.lock().unwrap().handled[&id], ["b"]);
    // Handled now: replica a acknowledges without running its handler.
    assert_eq!(deliver(&client, &a, &delivery).await, (200, RECEIVED.to_owned()));
    assert_eq!(count(&ledger, &id), (2, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_replicas_claim_ends_with_its_lease() {
    let mut config = AppConfig::new(shared_redis_url().await);
    config.lease = Duration::from_secs(1);
    let ledger = Arc::default();
    let (b, _) = config.start_replica("b", &ledger, &[]).await;
    let (id, delivery) = new_delivery();
    let client = client();

    // Replica a claimed the event and died before settling it: the claim is in
    // Redis with a's lease, and nobody will complete or release it.
    let crashed = config.store();
    let claim = crashed.claim("shop", &id, config.lease).await.unwrap();
    assert!(matches!(claim, Claim::Claimed(_)), "{claim:?}");

    let (status, body) = deliver(&client, &b, &delivery).await;
    assert_eq!(status, 409, "in flight on the crashed replica: {body}");
    assert_eq!(count(&ledger, &id), (0, 0));

    tokio::time::sleep(config.lease + Duration::from_millis(300)).await;
    assert_eq!(deliver(&client, &b, &delivery).await, (200, RECEIVED.to_owned()));
    assert_eq!(count(&ledger, &id), (1, 1));
    assert_eq!(deliver(&client, &b, &delivery).await, (200, RECEIVED.to_owned()));
    assert_eq!(count(&ledger, &id), (1, 1));
}

/// A `redis-server` of this test's own, with an append-only file so a restart
/// keeps the handled ids, on a free loopback port. Killed when dropped.
struct OwnRedis {
    port: u16,
    dir: std::path::PathBuf,
    child: Option<Child>,
}

impl OwnRedis {
    fn start() -> Self {
        let _ = captured_log();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("payhook-replicas-redis-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut redis = Self {
            port,
            dir,
            child: None,
        };
        redis.start_again();
        redis
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn start_again(&mut self) {
        let child = Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &self.port.to_string(),
                "--save",
                "",
            ])
            .args(["--appendonly", "yes", "--appendfsync", "always", "--dir"])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("cannot run redis-server ({err}); {HOW_TO_START}"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        // Answering TCP is enough: Redis loads the append-only file before it
        // accepts connections.
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().unwrap().id().to_string();
        assert!(Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap()
            .success());
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.signal("-CONT");
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Posts `delivery` to each replica and checks each answers 503 quickly.
async fn both_answer_503(client: &reqwest::Client, replicas: [&str; 2], delivery: &SignedDelivery) {
    for url in replicas {
        let started = Instant::now();
        let (status, body) = deliver(client, url, delivery).await;
        assert_eq!(status, 503, "{body}");
        assert!(
            body.starts_with("Webhook Error: dedupe store unavailable: "),
            "{body}"
        );
        assert!(
            !body.contains("127.0.0.1") && !body.contains("redis://"),
            "{body}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_frozen_killed_and_restarted_under_the_replicas() {
    let mut redis = OwnRedis::start();
    let config = AppConfig::new(redis.url());
    let ledger = Arc::default();
    let (a, server_a) = config.start_replica("a", &ledger, &[]).await;
    let (b, server_b) = config.start_replica("b", &ledger, &[]).await;
    let client = client();

    let (before, before_delivery) = new_delivery();
    assert_eq!(
        deliver(&client, &a, &before_delivery).await,
        (200, RECEIVED.to_owned())
    );

    // Frozen: every delivery times out into a 503; none is handled or marked.
    redis.signal("-STOP");
    let (frozen, frozen_delivery) = new_delivery();
    both_answer_503(&client, [&a, &b], &frozen_delivery).await;
    redis.signal("-CONT");
    // The claims that timed out reached Redis on the thaw and were given back
    // at once, so the sender's retry is handled (not refused as in flight).
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let (status, body) = deliver(&client, &b, &frozen_delivery).await;
        if status == 200 {
            break;
        }
        assert!(status == 409 || status == 503, "{status} {body}");
        assert!(Instant::now() < deadline, "still {status} after the thaw: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(count(&ledger, &frozen), (1, 1));

    // Killed: 503 at once from both replicas, no handler runs, no panic.
    redis.kill();
    let (during, during_delivery) = new_delivery();
    both_answer_503(&client, [&a, &b], &during_delivery).await;
    both_answer_503(&client, [&a, &b], &before_delivery).await;
    assert_eq!(count(&ledger, &during), (0, 0));
    assert!(
        !server_a.is_finished() && !server_b.is_finished(),
        "both replicas still serve"
    );

    // Restarted: deliveries are handled again, with no restart of the app; the
    // ids handled before survive in the append-only file.
    redis.start_again();
    assert_eq!(
        deliver(&client, &a, &during_delivery).await,
        (200, RECEIVED.to_owned())
    );
    assert_eq!(count(&ledger, &during), (1, 1));
    assert_eq!(
        deliver(&client, &b, &during_delivery).await,
        (200, RECEIVED.to_owned())
    );
    assert_eq!(
        deliver(&client, &b, &before_delivery).await,
        (200, RECEIVED.to_owned())
    );
    assert_eq!(count(&ledger, &during), (1, 1));
    assert_eq!(count(&ledger, &before), (1, 1));
}

/// payhook's ERROR lines in this test binary from now on, as plain text, for the
/// tests that check what was logged about their own event ids.
///
/// Every test installs the capture before anything else (`shared_redis_url`
/// and `OwnRedis::start` call this), so that no test creates spans while
/// another installs the subscriber: one run logged a failed delivery's lines
/// without its `delivery` span, so without its event id, when the subscriber
/// came while the other tests were already delivering.
fn captured_log() -> &'static CapturedLog {
    &crate::captured().payhook_errors
}

fn log_lines_about(log: &CapturedLog, id: &str) -> Vec<String> {
    log.lines(|line| line.contains(id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_while_handlers_run_still_acknowledges_success_and_keeps_the_failure_retryable() {
    let log = captured_log();
    let mut redis = OwnRedis::start();
    let mut config = AppConfig::new(redis.url());
    config.lease = Duration::from_secs(5);
    config.handler_delay = Duration::from_millis(700);
    // The handlers finish only after Redis is dead, however late this test
    // gets to kill it on a loaded machine: the failure must meet a dead store.
    let redis_dead = Arc::new(AtomicBool::new(false));
    config.gate = Some(Arc::clone(&redis_dead));
    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let (succeeds, succeeds_delivery) = new_delivery();
    let (fails, fails_delivery) = new_delivery();
    let (a, _) = config.start_replica("a", &ledger, &[]).await;
    let (b, _) = config.start_replica("b", &ledger, &[fails.as_str()]).await;
    let client = client();

    let on_a = tokio::spawn({
        let (client, a, delivery) = (client.clone(), a.clone(), succeeds_delivery.clone());
        async move { deliver(&client, &a, &delivery).await }
    });
    let on_b = tokio::spawn({
        let (client, b, delivery) = (client.clone(), b.clone(), fails_delivery.clone());
        async move { deliver(&client, &b, &delivery).await }
    });
    // Both claimed, both handlers running: Redis dies under them.
    let deadline = Instant::now() + Duration::from_secs(5);
    while count(&ledger, &succeeds).0 == 0 || count(&ledger, &fails).0 == 0 {
        assert!(Instant::now() < deadline, "the handlers never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    redis.kill();
    redis_dead.store(true, Ordering::Release);

    // The handler succeeded, so the delivery is acknowledged although the event
    // could not be marked done: a 503 would make the sender run it again.
    assert_eq!(on_a.await.unwrap(), (200, RECEIVED.to_owned()));
    assert_eq!(count(&ledger, &succeeds), (1, 1));
    // The failing handler's own status goes back, whatever the store did.
    assert_eq!(on_b.await.unwrap().0, 500);
    let wait_for_line = |id: &str, text: &str| {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let lines = log_lines_about(log, id);
            if let Some(line) = lines.iter().find(|line| line.contains(text)) {
                return line.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no {text:?} line about {id}: {lines:#?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let line = wait_for_line(
        &succeeds,
        "handler succeeded but the event could not be marked done; acknowledging anyway",
    );
    assert!(line.contains("ERROR"), "{line}");
    let line = wait_for_line(
        &fails,
        "claim could not be released; a retry is refused until the lease runs out",
    );
    assert!(line.contains("ERROR"), "{line}");

    // Redis back (its append-only file kept the claim that was never released):
    // the failed event's retry is refused while that claim lasts, then handled.
    redis.start_again();
    let (status, body) = deliver(&client, &a, &fails_delivery).await;
    assert_eq!(status, 409, "the unreleased claim is still in Redis: {body}");
    let deadline = Instant::now() + config.lease + Duration::from_secs(3);
    loop {
        let (status, body) = deliver(&client, &a, &fails_delivery).await;
        if status == 200 {
            break;
        }
        assert!(status == 409 || status == 503, "{status} {body}");
        assert!(
            Instant::now() < deadline,
            "still {status} after the lease: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(count(&ledger, &fails), (2, 1));
    assert_eq!(ledger.lock().unwrap().handled[&fails], ["a"]);
}
