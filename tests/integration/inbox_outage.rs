//! The inbox when things break, with `examples/inbox_receiver.rs` as real
//! processes and the inbox's default settings (lease, database deadline):
//!
//! * a process killed (SIGKILL) with handlers asleep: its events are handled
//!   again, each exactly once, within 10 s of the kill — on SQLite by the
//!   process restarted at once, on PostgreSQL by a replica already running;
//! * a handler that runs far longer than the lease keeps its event: 1 attempt;
//! * SQLite write-locked by another connection, and PostgreSQL frozen
//!   (SIGSTOP on every server process), while deliveries arrive at 20 a
//!   second: every reply within the deadline + 1 s, each `200` or `503` with
//!   `Retry-After`; once the database is back, every acknowledged event is
//!   handled exactly once without restarting the app;
//! * PostgreSQL running `synchronous_commit = off` (and a WAL writer that
//!   waits 10 s), stopped with `pg_ctl stop -m immediate` under load: no
//!   acknowledged event lost, none handled twice.
//!
//! Tests that freeze or crash PostgreSQL run on a cluster of their own
//! (`own_postgres`); the others make a database in the shared test server
//! (`PAYHOOK_TEST_DATABASE_URL`, `.ci/start-postgres`). How long the outage
//! lasts, how many crash runs are made and how long the long handler runs:
//! `PAYHOOK_OUTAGE_SECS` (default 8), `PAYHOOK_OUTAGE_RUNS` (default 3) and
//! `PAYHOOK_OUTAGE_HANDLER_MS` (default 12 000); the figures in BENCHMARKS.md
//! were taken with 45, 10 and 40 000.

use crate::example_process;
use crate::own_postgres;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use example_process::Example;
use own_postgres::OwnPostgres;
use payhook::inbox::sqlx::{self, AnyPool, Connection as _, Executor as _, Row};
use payhook::inbox::DEFAULT_DATABASE_TIMEOUT;
use payhook::{sign, Secret};
use payhook_test_support::{
    any_pool, eventually_async as eventually, fresh_postgres_database, on_every_backend, sqlite_url,
};

const SECRET: &str = "whsec_inbox_outage";
const EXAMPLE: &str = "inbox_receiver";

fn outage() -> Duration {
    Duration::from_secs(env_number("PAYHOOK_OUTAGE_SECS").unwrap_or(8))
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|value| value.parse().ok())
}

fn event(id: &str, intent: &str) -> String {
    let created = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","created":{created},"data":{{"object":{{"id":"{intent}","object":"payment_intent","amount":1000,"currency":"eth","status":"succeeded","created":1,"metadata":{{}}}}}}}}"#
    )
}

/// One delivery's reply: status, `Retry-After`, and how long it took.
struct Replied {
    id: String,
    status: u16,
    retry_after: Option<String>,
    took: Duration,
}

async fn post(webhook: &str, id: &str) -> Result<Replied, reqwest::Error> {
    let body = event(id, &format!("pi_{id}"));
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let started = Instant::now();
    let response = reqwest::Client::new()
        .post(webhook)
        .header("content-type", "application/json")
        .header(
            "x-service-signature",
            sign(body.as_bytes(), &Secret::new(SECRET).unwrap(), now),
        )
        .timeout(Duration::from_secs(30))
        .body(body)
        .send()
        .await?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let _ = response.bytes().await?;
    Ok(Replied {
        id: id.to_owned(),
        status,
        retry_after,
        took: started.elapsed(),
    })
}

async fn post_ok(example: &Example, id: &str) {
    let replied = post(&example.url(), id).await.expect("the example answers");
    assert_eq!(replied.status, 200, "delivery of {id}");
}

fn start(url: &str, extra: &[(&str, &str)]) -> Example {
    let mut env = vec![("PAYHOOK_SECRET", SECRET), ("PAYHOOK_DATABASE_URL", url)];
    env.extend_from_slice(extra);
    Example::start(EXAMPLE, &env)
}

/// Ledger rows per event id (the example writes one per handled event, in
/// the transaction of its done mark).
async fn ledger_counts(pool: &AnyPool) -> BTreeMap<String, i64> {
    sqlx::query("SELECT event_id, COUNT(*) AS n FROM ledger GROUP BY event_id")
        .fetch_all(pool)
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get::<String, _>("event_id"), row.get::<i64, _>("n")))
        .collect()
}

async fn count_in_state(pool: &AnyPool, state: &str) -> i64 {
    sqlx::query("SELECT COUNT(*) FROM payhook_inbox WHERE state = $1")
        .bind(state)
        .fetch_one(pool)
        .await
        .unwrap()
        .get::<i64, _>(0)
}

/// Six events asleep in 3 s handlers when their process is killed; a second
/// process handles each again within 10 s of the kill: on SQLite, one
/// restarted at once; on PostgreSQL, a replica running before the kill.
async fn killed_process_s_events_are_handled_again_within_10_s(url: String) {
    let url = url.as_str();
    let replica = url.starts_with("postgres");
    let env = [("PAYHOOK_HANDLER_DELAY_MS", "3000")];
    // Enough handlers that all six run at once in the process killed (with 8,
    // a process claims again only once half of them are free); the process
    // that takes them over has the default 8.
    let first = start(url, &[env[0], ("PAYHOOK_INBOX_CONCURRENCY", "16")]);
    let ids: BTreeSet<String> = (0..6).map(|i| format!("evt_kill9_{i}")).collect();
    for id in &ids {
        post_ok(&first, id).await;
    }
    let db = any_pool(url).await;
    eventually(Duration::from_secs(10), "6 events running", || async {
        count_in_state(&db, "running").await == 6
    })
    .await;
    let second = replica.then(|| start(url, &env));
    // The handlers are asleep, their leases renewed at least once.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert!(
        ledger_counts(&db).await.is_empty(),
        "a handler finished before the kill"
    );
    let killed = Instant::now();
    drop(first); // SIGKILL
    let second = second.unwrap_or_else(|| start(url, &env));
    eventually(Duration::from_secs(60), "the 6 events handled again", || async {
        ledger_counts(&db).await.len() == 6
    })
    .await;
    let took = killed.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let counts = ledger_counts(&db).await;
    assert_eq!(counts.keys().cloned().collect::<BTreeSet<_>>(), ids);
    assert!(
        counts.values().all(|&n| n == 1),
        "an event was handled twice: {counts:?}"
    );
    drop(second);
    eprintln!("handled again {took:?} after the kill (replica: {replica})");
    assert!(
        took <= Duration::from_secs(10),
        "the killed process's events took {took:?} to be handled again (target: 10 s)"
    );
}

on_every_backend! {
    sqlite: sqlite_url("payhook-outage"),
    postgres: fresh_postgres_database("payhook_outage").await,
    worker_threads: 2;
    killed_process_s_events_are_handled_again_within_10_s,
}

/// A 12 s handler (`PAYHOOK_OUTAGE_HANDLER_MS`) with the default 5 s lease,
/// two replicas: the lease is renewed while it runs, so neither replica takes
/// the event over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_handler_far_longer_than_the_lease_gets_one_attempt() {
    let url = fresh_postgres_database("payhook_outage").await;
    let delay = env_number("PAYHOOK_OUTAGE_HANDLER_MS")
        .unwrap_or(12_000)
        .to_string();
    let env = [("PAYHOOK_HANDLER_DELAY_MS", delay.as_str())];
    let first = start(&url, &env);
    let second = start(&url, &env);
    post_ok(&first, "evt_long").await;
    let db = any_pool(&url).await;
    eventually(Duration::from_secs(120), "the long handler done", || async {
        ledger_counts(&db).await.len() == 1
    })
    .await;
    let attempts: i64 = sqlx::query("SELECT attempts FROM payhook_inbox WHERE event_id = 'evt_long'")
        .fetch_one(&db)
        .await
        .unwrap()
        .get(0);
    assert_eq!(attempts, 1, "the event was taken over while its handler ran");
    let handled = |example: &Example| {
        example
            .lines()
            .iter()
            .filter(|line| line.starts_with("handled evt_long"))
            .count()
    };
    assert_eq!(handled(&first) + handled(&second), 1);
}

/// Deliveries at 20 a second for `during`, each its own request; every
/// reply, in order of sending.
async fn deliver_at_20_per_second(example: &Example, prefix: &str, during: Duration) -> Vec<Replied> {
    let webhook = example.url();
    let mut sent = Vec::new();
    let started = Instant::now();
    let mut every = tokio::time::interval(Duration::from_millis(50));
    let mut i = 0;
    while started.elapsed() < during {
        every.tick().await;
        let (webhook, id) = (webhook.clone(), format!("{prefix}_{i:04}"));
        sent.push(tokio::spawn(async move {
            post(&webhook, &id).await.expect("the example answers")
        }));
        i += 1;
    }
    let mut replies = Vec::new();
    for reply in sent {
        replies.push(reply.await.unwrap());
    }
    replies
}

/// Every reply came within the deadline + 1 s, each `200`, or `503` with
/// `Retry-After`; some were each. Returns the ids acknowledged and refused.
fn assert_bounded(replies: &[Replied]) -> (BTreeSet<String>, BTreeSet<String>) {
    let bound = DEFAULT_DATABASE_TIMEOUT + Duration::from_secs(1);
    let slowest = replies.iter().map(|reply| reply.took).max().unwrap_or_default();
    let mut acked = BTreeSet::new();
    let mut refused = BTreeSet::new();
    for reply in replies {
        assert!(
            reply.took <= bound,
            "{} took {:?} (bound {bound:?})",
            reply.id,
            reply.took
        );
        match reply.status {
            200 => {
                acked.insert(reply.id.clone());
            }
            503 => {
                assert_eq!(reply.retry_after.as_deref(), Some("5"), "{}", reply.id);
                refused.insert(reply.id.clone());
            }
            status => panic!("{} got {status}", reply.id),
        }
    }
    eprintln!(
        "{} deliveries: {} acknowledged, {} refused with 503, slowest reply {slowest:?}",
        replies.len(),
        acked.len(),
        refused.len()
    );
    assert!(!refused.is_empty(), "no delivery was refused during the outage");
    (acked, refused)
}

/// After an outage: every acknowledged event is handled exactly once by the
/// same process, and so is every refused one once the sender delivers it again.
async fn assert_recovered(
    example: &Example,
    db: &AnyPool,
    acked: BTreeSet<String>,
    refused: BTreeSet<String>,
) {
    let mut expected = acked.clone();
    for id in &refused {
        post_ok(example, id).await; // the sender's retry
        expected.insert(id.clone());
    }
    eventually(Duration::from_secs(60), "every event handled", || async {
        let handled: BTreeSet<String> = ledger_counts(db).await.into_keys().collect();
        expected.is_subset(&handled)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let counts = ledger_counts(db).await;
    assert!(
        counts.values().all(|&n| n == 1),
        "an event was handled twice: {counts:?}"
    );
    let handled: BTreeSet<String> = counts.into_keys().collect();
    assert_eq!(handled, expected);
}

// Not one test on every backend: each database is made unavailable its own way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_write_locked_by_another_process_bounds_every_reply_and_recovers() {
    let url = sqlite_url("payhook-outage");
    let example = start(&url, &[]);
    post_ok(&example, "evt_locked_before").await;
    let locker_url = format!("{url}?mode=rw");
    let (locked, is_locked) = tokio::sync::oneshot::channel();
    let during = outage();
    // The locker connects before any pool of this test: it installs the
    // drivers itself rather than count on another test to have done it.
    sqlx::any::install_default_drivers();
    let locker = tokio::spawn(async move {
        let mut conn = sqlx::AnyConnection::connect(&locker_url).await.unwrap();
        conn.execute("BEGIN IMMEDIATE").await.unwrap();
        let _ = locked.send(());
        tokio::time::sleep(during).await;
        conn.execute("ROLLBACK").await.unwrap();
    });
    is_locked.await.unwrap();
    let replies = deliver_at_20_per_second(&example, "evt_locked", during + Duration::from_secs(3)).await;
    locker.await.unwrap();
    let (mut acked, refused) = assert_bounded(&replies);
    acked.insert("evt_locked_before".to_owned());
    let db = any_pool(&url).await;
    assert_recovered(&example, &db, acked, refused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_frozen_with_sigstop_bounds_every_reply_and_recovers() {
    let server = OwnPostgres::start();
    let example = start(&server.url, &[]);
    post_ok(&example, "evt_frozen_before").await;
    let during = outage();
    let deliveries = deliver_at_20_per_second(&example, "evt_frozen", during + Duration::from_secs(3));
    let freeze = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        server.signal("STOP");
        tokio::time::sleep(during).await;
        server.signal("CONT");
    };
    let (replies, ()) = tokio::join!(deliveries, freeze);
    let (mut acked, refused) = assert_bounded(&replies);
    acked.insert("evt_frozen_before".to_owned());
    let db = any_pool(&server.url).await;
    assert_recovered(&example, &db, acked, refused).await;
}

/// `synchronous_commit = off` on the server, its WAL writer waiting 10 s:
/// an immediate stop loses every commit of the last 10 s that was not made
/// synchronous. Under load, each run stops the server mid-delivery and
/// starts it again; no acknowledged event is missing afterwards, and at the
/// end every stored event is handled exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_synchronous_commit_off_immediate_stop_loses_no_acknowledged_event() {
    let server = OwnPostgres::start();
    {
        let db = any_pool(&server.url).await;
        db.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
            .await
            .unwrap();
        db.execute("SELECT pg_reload_conf()").await.unwrap();
        db.close().await;
    }
    // Handlers slower than the deliveries, so that many acknowledged events
    // are still waiting (their intake commits the newest) at each stop.
    let example = start(&server.url, &[("PAYHOOK_HANDLER_DELAY_MS", "50")]);
    let runs = env_number("PAYHOOK_OUTAGE_RUNS").unwrap_or(3);
    let mut all_acked = BTreeSet::new();
    for run in 0..runs {
        let stop = Arc::new(AtomicBool::new(false));
        let mut posters = Vec::new();
        for poster in 0..4 {
            let (webhook, stop) = (example.url(), Arc::clone(&stop));
            posters.push(tokio::spawn(async move {
                let mut acked = Vec::new();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let id = format!("evt_sync_{run}_{poster}_{i:05}");
                    if let Ok(reply) = post(&webhook, &id).await {
                        if reply.status == 200 {
                            acked.push(id);
                        }
                    }
                    i += 1;
                }
                acked
            }));
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        server.stop_immediate();
        stop.store(true, Ordering::Relaxed);
        let mut acked = BTreeSet::new();
        for poster in posters {
            acked.extend(poster.await.unwrap());
        }
        server.restart();
        let db = any_pool(&server.url).await;
        let stored: BTreeSet<String> = sqlx::query("SELECT event_id FROM payhook_inbox")
            .fetch_all(&db)
            .await
            .unwrap()
            .iter()
            .map(|row| row.get::<String, _>(0))
            .collect();
        let lost: Vec<&String> = acked.difference(&stored).collect();
        eprintln!("run {run}: {} acknowledged, {} lost", acked.len(), lost.len());
        assert!(acked.len() >= 10, "run {run}: only {} acknowledged", acked.len());
        assert!(lost.is_empty(), "run {run}: acknowledged but lost: {lost:?}");
        db.close().await;
        all_acked.extend(acked);
    }
    let db = any_pool(&server.url).await;
    eventually(Duration::from_secs(300), "every stored event handled", || async {
        count_in_state(&db, "done").await
            == sqlx::query("SELECT COUNT(*) FROM payhook_inbox")
                .fetch_one(&db)
                .await
                .unwrap()
                .get::<i64, _>(0)
    })
    .await;
    let counts = ledger_counts(&db).await;
    assert!(
        counts.values().all(|&n| n == 1),
        "an event's effect was committed twice"
    );
    let handled: BTreeSet<String> = counts.keys().cloned().collect();
    assert!(all_acked.is_subset(&handled));
    // Each "handled" line follows its commit: a done mark lost in a crash
    // would run the handler, and print, a second time.
    let mut printed: BTreeMap<String, usize> = BTreeMap::new();
    for line in example.lines() {
        if let Some(id) = line
            .strip_prefix("handled ")
            .and_then(|rest| rest.split(' ').next())
        {
            *printed.entry(id.to_owned()).or_default() += 1;
        }
    }
    let twice: Vec<_> = printed.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "handled twice: {twice:?}");
}
