//! Redis killed, frozen, restarted or not there yet, and the credentials in
//! the URL: every store call answers within its timeout, errors never carry the
//! URL, and the same store works again once Redis is back.
//!
//! Each test runs its own `redis-server` on a free loopback port.

use crate::common;

use std::time::{Duration, Instant};

use common::TestServer;
use payhook_core::store::{Claim, ClaimToken, Completion, Store};
use payhook_core::StoreError;
use payhook_redis::{BuildError, RedisStore};

const LEASE: Duration = Duration::from_secs(30);
const RETENTION: Duration = Duration::from_secs(3600);
const TIMEOUT: Duration = Duration::from_millis(500);
/// Scheduling slack on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(500);

fn store_at(url: &str) -> RedisStore {
    RedisStore::builder(url).timeout(TIMEOUT).build().unwrap()
}

async fn claimed(store: &RedisStore, ns: &str, id: &str) -> ClaimToken {
    match store.claim(ns, id, LEASE).await {
        Ok(Claim::Claimed(token)) => token,
        other => panic!("claim {id}: {other:?}"),
    }
}

/// Runs `call`, checks it failed within the timeout, and returns the error.
async fn fails_fast<T: std::fmt::Debug>(
    what: &str,
    call: impl std::future::Future<Output = Result<T, StoreError>>,
) -> StoreError {
    let started = Instant::now();
    let result = call.await;
    let elapsed = started.elapsed();
    assert!(elapsed <= TIMEOUT + SLACK, "{what} took {elapsed:?}");
    result.expect_err(what)
}

/// Every store call fails within the timeout, without naming the server.
async fn all_calls_fail_fast(store: &RedisStore, server: &TestServer, token: ClaimToken) -> Vec<StoreError> {
    let errors = vec![
        fails_fast("claim", store.claim("ns", "evt_new", LEASE)).await,
        fails_fast("renew", store.renew("ns", "evt_1", token, LEASE)).await,
        fails_fast("complete", store.complete("ns", "evt_1", token, RETENTION)).await,
        fails_fast("release", store.release("ns", "evt_1", token)).await,
    ];
    for err in &errors {
        let text = err.to_string();
        assert!(
            !text.contains("127.0.0.1") && !text.contains(&server.port().to_string()),
            "{text}"
        );
    }
    errors
}

/// Calls `claim` until it succeeds (each failure within the timeout); returns
/// how many failed first.
async fn failures_until_claimed(store: &RedisStore, id: &str, within: Duration) -> (usize, ClaimToken) {
    let deadline = Instant::now() + within;
    let mut failures = 0;
    loop {
        let started = Instant::now();
        match store.claim("ns", id, LEASE).await {
            Ok(Claim::Claimed(token)) => return (failures, token),
            Ok(other) => panic!("claim {id}: {other:?}"),
            Err(err) => {
                assert!(
                    started.elapsed() <= TIMEOUT + SLACK,
                    "{err} after {:?}",
                    started.elapsed()
                );
                failures += 1;
                assert!(Instant::now() < deadline, "still failing after {within:?}: {err}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_then_restarted() {
    let mut server = TestServer::start(&[]);
    let store = store_at(&server.url());
    let token = claimed(&store, "ns", "evt_1").await;

    server.kill();
    let errors = all_calls_fail_fast(&store, &server, token).await;
    assert!(
        errors
            .iter()
            .all(|e| e.to_string().contains("refused") || e.to_string().contains("lost")),
        "{errors:?}"
    );
    // Many deliveries at once while Redis is down: all answered, none hang.
    let started = Instant::now();
    let calls: Vec<_> = (0..32)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move { store.claim("ns", &format!("evt_burst_{n}"), LEASE).await })
        })
        .collect();
    for call in calls {
        assert!(call.await.expect("no panic").is_err());
    }
    assert!(started.elapsed() <= TIMEOUT + SLACK, "{:?}", started.elapsed());

    // Back (empty: persistence is off): the same store value works again, and
    // the first call after the restart already succeeds.
    server.start_again();
    let (failures, token) = failures_until_claimed(&store, "evt_1", Duration::from_secs(5)).await;
    assert_eq!(failures, 0, "calls failed after Redis was back");
    assert_eq!(
        store.complete("ns", "evt_1", token, RETENTION).await.unwrap(),
        Completion::Completed
    );
    assert_eq!(store.claim("ns", "evt_1", LEASE).await.unwrap(), Claim::Done);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_between_claim_and_complete() {
    let mut server = TestServer::start(&[]);
    let store = store_at(&server.url());
    let token = claimed(&store, "ns", "evt_1").await;
    // The connection the claim used is dead after this; complete must not
    // fail because of it.
    server.kill();
    server.start_again();
    assert_eq!(
        store.complete("ns", "evt_1", token, RETENTION).await.unwrap(),
        Completion::Completed
    );
    assert_eq!(store.claim("ns", "evt_1", LEASE).await.unwrap(), Claim::Done);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_server_times_out() {
    let server = TestServer::start(&[]);
    let store = store_at(&server.url());
    let token = claimed(&store, "ns", "evt_1").await;

    server.pause();
    let errors = all_calls_fail_fast(&store, &server, token).await;
    for err in &errors {
        assert_eq!(err.to_string(), "Redis did not answer within 500 ms");
        assert_eq!(err.kind(), payhook_core::StoreErrorKind::TimedOut);
    }
    server.resume();
    // The claim that timed out reached Redis once it thawed and took evt_new;
    // the store gave it back at once, so the sender's retry is handled now
    // rather than refused as in flight for the whole lease.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        match store.claim("ns", "evt_new", LEASE).await {
            Ok(Claim::Claimed(_)) => break,
            Ok(Claim::InFlight) | Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            other => panic!("evt_new after the thaw: {other:?}"),
        }
    }
    // The complete that timed out ran on the thaw as well: evt_1 is done, and
    // the release after it, finding no claim of its token, changed nothing.
    assert_eq!(store.claim("ns", "evt_1", LEASE).await.unwrap(), Claim::Done);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_at_start_then_up() {
    let mut server = TestServer::not_started();
    // Building needs no server: the app starts and answers 503 meanwhile.
    let store = store_at(&server.url());
    fails_fast("claim", store.claim("ns", "evt_1", LEASE)).await;
    fails_fast("ping", store.ping()).await;
    let err = RedisStore::builder(server.url())
        .timeout(TIMEOUT)
        .connect()
        .await
        .expect_err("connect to a server that is down");
    assert!(matches!(err, BuildError::Unavailable(_)), "{err}");

    server.start_again();
    let (failures, token) = failures_until_claimed(&store, "evt_1", Duration::from_secs(5)).await;
    assert_eq!(failures, 0);
    assert_eq!(
        store.complete("ns", "evt_1", token, RETENTION).await.unwrap(),
        Completion::Completed
    );
    store.ping().await.unwrap();
    RedisStore::builder(server.url()).connect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_and_database_from_the_url() {
    const PASSWORD: &str = "s3cret-Pa55word";
    let server = TestServer::start(&["--requirepass", PASSWORD]);
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}/3", server.port());
    let store = RedisStore::builder(&url)
        .timeout(TIMEOUT)
        .connect()
        .await
        .unwrap();
    let token = claimed(&store, "ns", "evt_1").await;
    assert_eq!(
        store.complete("ns", "evt_1", token, RETENTION).await.unwrap(),
        Completion::Completed
    );

    // The key went to database 3.
    let mut conn = common::connection(&url);
    let value: Option<String> = redis::cmd("GET")
        .arg("payhook:ns:evt_1")
        .query(&mut conn)
        .unwrap();
    assert_eq!(value.as_deref(), Some("done"));
    redis::cmd("SELECT").arg(0).query::<()>(&mut conn).unwrap();
    let value: Option<String> = redis::cmd("GET")
        .arg("payhook:ns:evt_1")
        .query(&mut conn)
        .unwrap();
    assert_eq!(value, None);

    // Wrong or missing credentials: errors that say so without echoing them.
    let wrong = format!("redis://:not-{PASSWORD}@127.0.0.1:{}/3", server.port());
    let missing = format!("redis://127.0.0.1:{}/3", server.port());
    for url in [wrong, missing] {
        let store = store_at(&url);
        let err = fails_fast("claim", store.claim("ns", "evt_2", LEASE)).await;
        assert_eq!(err.kind(), payhook_core::StoreErrorKind::Refused);
        let err = err.to_string();
        assert!(!err.contains(PASSWORD) && !err.contains("127.0.0.1"), "{err}");
        assert!(err.starts_with("Redis rejected the credentials"), "{err}");
        let err = RedisStore::builder(&url)
            .timeout(TIMEOUT)
            .connect()
            .await
            .unwrap_err()
            .to_string();
        assert!(!err.contains(PASSWORD) && !err.contains("127.0.0.1"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_checks_the_store_can_run_its_commands() {
    let server = TestServer::start(&[]);
    let mut admin = common::connection(&server.url());
    redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "noscripts",
            "on",
            ">noscripts-pw",
            "~*",
            "+@all",
            "-eval",
        ])
        .query::<()>(&mut admin)
        .unwrap();
    let url = format!("redis://noscripts:noscripts-pw@127.0.0.1:{}/", server.port());
    let err = RedisStore::builder(&url)
        .timeout(TIMEOUT)
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, BuildError::Unsupported(_)), "{err}");
    let text = err.to_string();
    assert!(text.contains("NOPERM") && text.contains("EVAL"), "{text}");
    assert!(!text.contains("noscripts-pw"), "{text}");

    // The check's claim, which it could not release, expires within a second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut admin).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    // A user with the commands passes the check, which leaves no key behind.
    RedisStore::builder(server.url()).connect().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut admin).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}
