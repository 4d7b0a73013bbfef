//! What the store costs and leaves behind in Redis: round trips per delivery,
//! read from the server's own command counters, and the key layout.
//!
//! Runs against a private `redis-server` so no other test's commands are counted.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::TestServer;
use payhook_core::store::{Claim, ClaimToken, Completion, Store};
use payhook_redis::RedisStore;

const LEASE: Duration = Duration::from_secs(30);
const RETENTION: Duration = Duration::from_secs(3600);

/// `INFO commandstats` as command name → calls, leaving out the observer's own
/// `INFO`, `CONFIG RESETSTAT` and `ECHO`. Redis counts the commands a script runs too.
fn command_calls(conn: &mut redis::Connection) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split(',').find_map(|s| s.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().unwrap()))
        })
        .filter(|(name, _)| !["info", "config|resetstat", "echo"].contains(&name.as_str()))
        .collect()
}

fn reset_stats(conn: &mut redis::Connection) {
    redis::cmd("CONFIG").arg("RESETSTAT").query::<()>(conn).unwrap();
}

/// `redis-cli monitor`: every command the server runs, one line each, marked
/// with the client's address or `lua` for commands a script runs.
struct Monitor {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    /// `[db address]` of the observer connection, whose commands are not counted.
    observer_tag: String,
}

impl Monitor {
    fn start(port: u16, observer: &mut redis::Connection) -> Self {
        let info: String = redis::cmd("CLIENT").arg("INFO").query(observer).unwrap();
        let addr = info
            .split_whitespace()
            .find_map(|field| field.strip_prefix("addr="))
            .expect("CLIENT INFO has addr");
        let observer_tag = format!(" {addr}] ");
        let mut child = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "monitor"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("redis-cli (installed with redis-server)");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let first = lines
            .recv_timeout(Duration::from_secs(5))
            .expect("MONITOR answers");
        assert_eq!(first, "OK");
        Self {
            child,
            lines,
            observer_tag,
        }
    }

    /// Requests that arrived from the store until `marker` (sent with `ECHO` by
    /// `observer`): the observer's and script-internal commands left out.
    fn client_requests_until(&self, observer: &mut redis::Connection, marker: &str) -> Vec<String> {
        redis::cmd("ECHO").arg(marker).query::<String>(observer).unwrap();
        let mut requests = Vec::new();
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(5))
                .expect("monitor line");
            if line.contains(marker) {
                return requests;
            }
            if !line.contains(" lua] ") && !line.contains(&self.observer_tag) {
                requests.push(line);
            }
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn claimed(store: &RedisStore, ns: &str, id: &str) -> ClaimToken {
    match store.claim(ns, id, LEASE).await.unwrap() {
        Claim::Claimed(token) => token,
        other => panic!("claim {id}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_delivery_costs_two_round_trips() {
    const CYCLES: u64 = 50;
    let server = TestServer::start(&[]);
    let store = RedisStore::new(server.url()).unwrap();
    let mut observer = common::connection(&server.url());

    // Warm up: the first call connects (HELLO/CLIENT SETINFO) and the first
    // complete loads its script; neither happens per delivery.
    let token = claimed(&store, "warm", "evt_0").await;
    assert_eq!(
        store.complete("warm", "evt_0", token, RETENTION).await.unwrap(),
        Completion::Completed
    );
    let token = claimed(&store, "warm", "evt_1").await;
    assert!(store.release("warm", "evt_1", token).await.unwrap());

    // Counted twice: each request as the server receives it (MONITOR), and the
    // server's command counters.
    let monitor = Monitor::start(server.port(), &mut observer);
    reset_stats(&mut observer);
    for n in 0..CYCLES {
        let id = format!("evt_{n}");
        let token = claimed(&store, "rt", &id).await;
        assert_eq!(
            store.complete("rt", &id, token, RETENTION).await.unwrap(),
            Completion::Completed
        );
    }
    let requests = monitor.client_requests_until(&mut observer, "end-of-success-path");
    assert_eq!(requests.len() as u64, 2 * CYCLES, "{requests:#?}");
    assert!(
        requests.iter().step_by(2).all(|r| r.contains(r#""SET""#)),
        "{requests:#?}"
    );
    assert!(
        requests
            .iter()
            .skip(1)
            .step_by(2)
            .all(|r| r.contains(r#""EVAL""#)),
        "{requests:#?}"
    );
    // One SET per claim; per complete one EVAL whose script runs GET and SET.
    assert_eq!(
        command_calls(&mut observer),
        BTreeMap::from([
            ("eval".to_owned(), CYCLES),
            ("get".to_owned(), CYCLES),
            ("set".to_owned(), 2 * CYCLES),
        ])
    );

    // A duplicate delivery: one round trip, nothing written.
    reset_stats(&mut observer);
    for n in 0..CYCLES {
        assert_eq!(
            store.claim("rt", &format!("evt_{n}"), LEASE).await.unwrap(),
            Claim::Done
        );
    }
    let requests = monitor.client_requests_until(&mut observer, "end-of-duplicates");
    assert_eq!(requests.len() as u64, CYCLES, "{requests:#?}");
    assert_eq!(
        command_calls(&mut observer),
        BTreeMap::from([("set".to_owned(), CYCLES)])
    );

    // A failed handler: claim and release, two round trips.
    for n in 0..CYCLES {
        let id = format!("evt_failed_{n}");
        let token = claimed(&store, "rt", &id).await;
        assert!(store.release("rt", &id, token).await.unwrap());
    }
    let requests = monitor.client_requests_until(&mut observer, "end-of-failures");
    assert_eq!(requests.len() as u64, 2 * CYCLES, "{requests:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_values_and_expiries() {
    let url = common::shared_url();
    let prefix = format!("layout-{}", ClaimToken::random());
    let store = RedisStore::builder(&url).prefix(&prefix).build().unwrap();
    let mut conn = common::connection(&url);
    let get = |conn: &mut redis::Connection, key: &str| -> (Option<String>, i64) {
        let value = redis::cmd("GET").arg(key).query(conn).unwrap();
        let pttl = redis::cmd("PTTL").arg(key).query(conn).unwrap();
        (value, pttl)
    };

    let token = claimed(&store, "orders", "evt_1").await;
    let key = format!("{prefix}:orders:evt_1");
    let (value, pttl) = get(&mut conn, &key);
    assert_eq!(
        value,
        Some(token.to_string()),
        "an in-flight key holds its claim token"
    );
    assert!(pttl > 25_000 && pttl <= 30_000, "lease as expiry: {pttl} ms");

    assert_eq!(
        store.complete("orders", "evt_1", token, RETENTION).await.unwrap(),
        Completion::Completed
    );
    let (value, pttl) = get(&mut conn, &key);
    assert_eq!(value.as_deref(), Some("done"));
    assert!(
        pttl > 3_590_000 && pttl <= 3_600_000,
        "retention as expiry: {pttl} ms"
    );

    // A colon in the namespace is encoded, one in the id is not.
    let _ = claimed(&store, "a:b", "c:d").await;
    let (value, _) = get(&mut conn, &format!("{prefix}:a%3Ab:c:d"));
    assert!(value.is_some(), "namespace `a:b` is stored as `a%3Ab`");

    // A released claim leaves no key behind.
    let token = claimed(&store, "orders", "evt_2").await;
    assert!(store.release("orders", "evt_2", token).await.unwrap());
    assert_eq!(get(&mut conn, &format!("{prefix}:orders:evt_2")), (None, -2));

    // Completing after the key vanished (the lease ran out, nobody took the
    // event over) still marks the event done.
    let token = claimed(&store, "orders", "evt_3").await;
    redis::cmd("DEL")
        .arg(format!("{prefix}:orders:evt_3"))
        .query::<()>(&mut conn)
        .unwrap();
    assert_eq!(
        store.complete("orders", "evt_3", token, RETENTION).await.unwrap(),
        Completion::Completed
    );
    assert_eq!(store.claim("orders", "evt_3", LEASE).await.unwrap(), Claim::Done);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefixes_keep_stores_apart() {
    let url = common::shared_url();
    let base = format!("prefix-{}", ClaimToken::random());
    let one = RedisStore::builder(&url)
        .prefix(format!("{base}-one"))
        .build()
        .unwrap();
    let two = RedisStore::builder(&url)
        .prefix(format!("{base}-two"))
        .build()
        .unwrap();
    let token = claimed(&one, "ns", "evt_1").await;
    assert_eq!(
        one.complete("ns", "evt_1", token, RETENTION).await.unwrap(),
        Completion::Completed
    );
    assert_eq!(one.claim("ns", "evt_1", LEASE).await.unwrap(), Claim::Done);
    let _ = claimed(&two, "ns", "evt_1").await;
}

/// A huge call timeout is a valid setting: calls still run and answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_timeout_works() {
    let url = common::shared_url();
    for timeout in [Duration::MAX, Duration::from_secs(u64::MAX)] {
        let store = RedisStore::builder(&url).timeout(timeout).build().unwrap();
        let ns = format!("huge-timeout-{}", ClaimToken::random());
        let token = claimed(&store, &ns, "evt_1").await;
        assert!(store.renew(&ns, "evt_1", token, LEASE).await.unwrap());
        assert_eq!(
            store.complete(&ns, "evt_1", token, RETENTION).await.unwrap(),
            Completion::Completed
        );
        assert_eq!(store.claim(&ns, "evt_1", LEASE).await.unwrap(), Claim::Done);
    }
}
