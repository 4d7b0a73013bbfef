//! `examples/inbox_receiver.rs` as real processes on real databases: SIGKILL
//! in the middle of handlers and of deliveries, two and four replicas on one
//! PostgreSQL (two of the four killed mid-run), retries, dead events revived
//! with the `payhook` command, and PostgreSQL going away and coming back.
//!
//! PostgreSQL comes from `PAYHOOK_TEST_DATABASE_URL` (`.ci/start-postgres`);
//! each test makes its own database in it. Tests that need it fail when it is
//! unset or unreachable.

// Shared with the other example tests; this file uses part of it.
use crate::example_process;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use example_process::{payhook_command, Example};
use payhook::inbox::sqlx::{self, AnyPool, Row};
use payhook::{sign, Secret};
use payhook_test_support::{
    any_pool, eventually_async as eventually, fresh_postgres_database, on_every_backend, sqlite_url,
};

const SECRET: &str = "whsec_inbox_process";
const EXAMPLE: &str = "inbox_receiver";

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn event(id: &str, intent: &str, created: u64, fail_attempts: Option<u32>) -> String {
    let metadata = fail_attempts.map_or(String::new(), |n| format!(r#""fail_attempts":"{n}""#));
    event_with_metadata(id, intent, created, &metadata)
}

/// An event whose payment intent's metadata is `metadata` (JSON members).
fn event_with_metadata(id: &str, intent: &str, created: u64, metadata: &str) -> String {
    format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","created":{created},"data":{{"object":{{"id":"{intent}","object":"payment_intent","amount":123456789012345678901234567890,"currency":"eth","status":"succeeded","created":1,"metadata":{{{metadata}}}}}}}}}"#
    )
}

/// `payhook inbox show ID` on the inbox at `url`: its exit code and output.
fn inbox_show(url: &str, id: &str) -> (i32, String) {
    let output = Command::new(payhook_command())
        .args(["inbox", "--database-url", url, "show", id])
        .env_remove("PAYHOOK_DATABASE_URL")
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

fn signature(body: &str) -> String {
    sign(body.as_bytes(), &Secret::new(SECRET).unwrap(), unix_now())
}

async fn post(url: &str, body: &str) -> Result<(u16, String), reqwest::Error> {
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("x-service-signature", signature(body))
        .timeout(Duration::from_secs(20))
        .body(body.to_owned())
        .send()
        .await?;
    let status = response.status().as_u16();
    Ok((status, response.text().await?))
}

async fn post_ok(example: &Example, body: &str) {
    let (status, reply) = post(&example.url(), body).await.expect("the example answers");
    assert_eq!((status, reply.as_str()), (200, r#"{"received":true}"#));
}

fn start(url: &str, extra: &[(&str, &str)]) -> Example {
    let mut env = vec![("PAYHOOK_SECRET", SECRET), ("PAYHOOK_DATABASE_URL", url)];
    env.extend_from_slice(extra);
    Example::start(EXAMPLE, &env)
}

/// Ledger rows per event id.
async fn ledger_counts(pool: &AnyPool) -> BTreeMap<String, i64> {
    sqlx::query("SELECT event_id, COUNT(*) AS n FROM ledger GROUP BY event_id")
        .fetch_all(pool)
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get::<String, _>("event_id"), row.get::<i64, _>("n")))
        .collect()
}

/// After a pause for stragglers: the ledger holds exactly the `expected`
/// events, each once (by id, so one applied twice and another lost fails).
async fn assert_each_applied_once(pool: &AnyPool, expected: &BTreeSet<String>) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let counts = ledger_counts(pool).await;
    assert!(
        counts.values().all(|&n| n == 1),
        "an event was applied twice: {counts:?}"
    );
    let applied: BTreeSet<String> = counts.into_keys().collect();
    assert_eq!(&applied, expected, "the ledger holds other events than were sent");
}

async fn sigkill_mid_handlers_then_restart_applies_each_event_once(url: String) {
    let env = [
        ("PAYHOOK_HANDLER_DELAY_MS", "150"),
        ("PAYHOOK_INBOX_LEASE_MS", "1500"),
    ];
    let mut first = start(&url, &env);
    let webhook = first.url();
    // Deliveries keep coming while the process is killed: whatever got 200
    // must end up in the ledger exactly once.
    let poster = tokio::spawn(async move {
        let mut acked = BTreeSet::new();
        for i in 0..120 {
            let id = format!("evt_kill_{i:03}");
            let body = event(&id, &format!("pi_kill_{}", i % 7), 1000 + i, None);
            match post(&webhook, &body).await {
                Ok((200, _)) => {
                    acked.insert(id);
                }
                Ok((status, reply)) => panic!("unexpected reply {status} {reply}"),
                Err(_) => break, // the process is gone
            }
        }
        acked
    });
    first.wait_for_lines(Duration::from_secs(30), 10, |line| line.starts_with("handled "));
    drop(first); // SIGKILL, handlers running and deliveries in flight
    let acked = poster.await.unwrap();
    assert!(acked.len() >= 10, "{} acknowledged", acked.len());

    let second = start(&url, &env);
    // The sender's retries of what was not acknowledged.
    for i in 0..120 {
        let id = format!("evt_kill_{i:03}");
        if !acked.contains(&id) {
            post_ok(
                &second,
                &event(&id, &format!("pi_kill_{}", i % 7), 1000 + i, None),
            )
            .await;
        }
    }
    let db = any_pool(&url).await;
    eventually(
        Duration::from_secs(120),
        "all 120 events in the ledger",
        || async { ledger_counts(&db).await.len() == 120 },
    )
    .await;
    let expected = (0..120).map(|i| format!("evt_kill_{i:03}")).collect();
    assert_each_applied_once(&db, &expected).await;
    assert!(acked.is_subset(&expected));
}

/// An event whose handler aborts the process, with a supervisor restarting
/// it after each crash: its first crash is not counted (nothing was written
/// before its handler ran: it comes back a suspect), each later one is, so
/// it is taken up at most max-attempts + 1 times, then it is dead (so says
/// `payhook inbox show`), and the other events keep flowing.
async fn crash_loop_ends_dead(url: String) {
    let env = [
        ("PAYHOOK_INBOX_MAX_ATTEMPTS", "3"),
        ("PAYHOOK_INBOX_LEASE_MS", "1000"),
        ("PAYHOOK_INBOX_BACKOFF_MS", "100"),
    ];
    let mut example = start(&url, &env);
    // The worker may take the event up and abort before the reply is written
    // (the sender would deliver again and get 200): stored either way.
    let crash = event_with_metadata("evt_crash", "pi_crash", 1, r#""crash":"abort""#);
    if let Ok(reply) = post(&example.url(), &crash).await {
        assert_eq!(reply, (200, r#"{"received":true}"#.to_owned()));
    }
    let db = any_pool(&url).await;
    let state = |db: AnyPool| async move {
        sqlx::query("SELECT state FROM payhook_inbox WHERE event_id = 'evt_crash'")
            .fetch_one(&db)
            .await
            .unwrap()
            .get::<String, _>(0)
    };
    let mut crashes = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while state(db.clone()).await != "dead" {
        assert!(
            Instant::now() < deadline,
            "the event never became dead after {crashes} crash(es)"
        );
        if let Some(status) = example.wait_exit(Duration::from_millis(100)) {
            assert!(!status.success(), "the example exited by itself: {status}");
            crashes += 1;
            assert!(crashes <= 4, "the event crashed the process a fifth time");
            // The supervisor restarts it.
            example = start(&url, &env);
        }
    }
    assert_eq!(
        crashes, 4,
        "the uncounted first run and each of the 3 attempts crashed the process once"
    );
    let (code, shown) = inbox_show(&url, "evt_crash");
    assert_eq!(code, 0, "{shown}");
    assert!(shown.lines().any(|line| line == "state: dead"), "{shown}");
    assert!(shown.lines().any(|line| line == "attempts: 3"), "{shown}");
    assert!(
        shown.contains("the worker stopped while handling it (attempt 3 of 3)"),
        "{shown}"
    );
    // Each crashed attempt is in the record, found by the claim that took the
    // event back.
    for attempt in 1..=3 {
        assert!(
            shown
                .lines()
                .any(|line| line.starts_with(&format!("  #{attempt} ")) && line.contains(" interrupted: ")),
            "{shown}"
        );
    }
    // The process that found it dead keeps running, and handles the others.
    post_ok(&example, &event("evt_after_crash", "pi_other", 2, None)).await;
    let handled = example.wait_for_line(Duration::from_secs(30), |line| line.starts_with("handled "));
    assert_eq!(handled, "handled evt_after_crash payment_intent.succeeded");
    assert!(example.wait_exit(Duration::from_millis(500)).is_none());
    let ledger = ledger_counts(&db).await;
    assert_eq!(ledger, BTreeMap::from([("evt_after_crash".to_owned(), 1)]));
}

/// 300 concurrent deliveries to the example, 30 of them poison (a NUL in the
/// id, type or intent id, or an id of 3 000 characters): the 30 get 400
/// naming the field, the 270 others all 200 and each lands in the ledger once.
async fn poison_among_concurrent_deliveries_fails_alone(url: String) {
    let example = start(&url, &[]);
    let webhook = example.url();
    let long = "x".repeat(3000);
    let mut tasks = Vec::new();
    for i in 0..300 {
        let (webhook, long) = (webhook.clone(), long.clone());
        tasks.push(tokio::spawn(async move {
            let (body, field) = match (i % 10, (i / 10) % 4) {
                (0, 0) => (
                    event(&format!("evt_p\\u0000{i}"), &format!("pi_p{i}"), 1, None),
                    Some("id contains a NUL"),
                ),
                (0, 1) => (
                    event(&format!("evt_{long}{i}"), &format!("pi_p{i}"), 1, None),
                    Some("id is longer than 255 bytes"),
                ),
                (0, 2) => (
                    event(&format!("evt_t{i}"), &format!("pi_p{i}"), 1, None)
                        .replace("payment_intent.succeeded", "payment_intent.\\u0000"),
                    Some("type contains a NUL"),
                ),
                (0, _) => (
                    event(&format!("evt_i{i}"), &format!("pi_\\u0000{i}"), 1, None),
                    Some("data.object.id contains a NUL"),
                ),
                _ => (
                    event(&format!("evt_good_{i:03}"), &format!("pi_p{i}"), 1, None),
                    None,
                ),
            };
            let reply = post(&webhook, &body).await.expect("the example answers");
            (i, reply, field)
        }));
    }
    for task in tasks {
        let (i, (status, reply), field) = task.await.unwrap();
        match field {
            None => assert_eq!(
                (status, reply.as_str()),
                (200, r#"{"received":true}"#),
                "delivery {i}"
            ),
            Some(field) => {
                assert_eq!(status, 400, "delivery {i}: {reply}");
                assert!(reply.starts_with("Webhook Error: invalid payload: "), "{reply}");
                assert!(reply.contains(field), "delivery {i}: {reply}");
            }
        }
    }
    let db = any_pool(&url).await;
    eventually(Duration::from_secs(60), "270 events in the ledger", || async {
        ledger_counts(&db).await.len() == 270
    })
    .await;
    let expected = (0..300)
        .filter(|i| i % 10 != 0)
        .map(|i| format!("evt_good_{i:03}"))
        .collect();
    assert_each_applied_once(&db, &expected).await;
}

on_every_backend! {
    sqlite: sqlite_url("payhook-inbox-process"),
    postgres: fresh_postgres_database("payhook_t").await,
    worker_threads: 2;
    sigkill_mid_handlers_then_restart_applies_each_event_once,
    poison_among_concurrent_deliveries_fails_alone,
    crash_loop_ends_dead,
}

/// `payhook inbox` on a mistyped path: a clear error, exit 2, and no file
/// made; on a running event, `show` and `list` say when its lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_commands_read_without_creating_and_show_leases() {
    let url = sqlite_url("payhook-inbox-process");
    let missing = format!("{}.typo", url);
    let output = Command::new(payhook_command())
        .args(["inbox", "--database-url", &missing, "list"])
        .env_remove("PAYHOOK_DATABASE_URL")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no database file"), "{stderr}");
    assert!(!std::path::Path::new(missing.trim_start_matches("sqlite://")).exists());

    let example = start(
        &url,
        &[
            ("PAYHOOK_HANDLER_DELAY_MS", "4000"),
            ("PAYHOOK_INBOX_LEASE_MS", "60000"),
        ],
    );
    post_ok(&example, &event("evt_slow", "pi_slow", 1, None)).await;
    let db = any_pool(&url).await;
    eventually(Duration::from_secs(10), "the event running", || async {
        sqlx::query("SELECT state FROM payhook_inbox WHERE event_id = 'evt_slow'")
            .fetch_one(&db)
            .await
            .unwrap()
            .get::<String, _>(0)
            == "running"
    })
    .await;
    let (code, shown) = inbox_show(&url, "evt_slow");
    assert_eq!(code, 0, "{shown}");
    assert!(
        shown.lines().any(|line| line.starts_with("lease: expires in ")),
        "{shown}"
    );
    let output = Command::new(payhook_command())
        .args(["inbox", "--database-url", &url, "list"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&output.stdout);
    assert!(listed.contains("\trunning (expires in "), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_postgres_apply_once_in_order() {
    let url = fresh_postgres_database("payhook_t").await;
    let env = [("PAYHOOK_HANDLER_DELAY_MS", "30")];
    let a = start(&url, &env);
    let b = start(&url, &env);
    // 10 intents × 8 events, created in order, delivered alternately to both
    // replicas, and every event delivered twice (once to each).
    let mut tasks = Vec::new();
    for intent in 0..10 {
        let (a_url, b_url) = (a.url(), b.url());
        tasks.push(tokio::spawn(async move {
            for step in 0..8u64 {
                let body = event(
                    &format!("evt_rep_{intent}_{step}"),
                    &format!("pi_rep_{intent}"),
                    5000 + step,
                    None,
                );
                for target in [&a_url, &b_url] {
                    let (status, _) = post(target, &body).await.unwrap();
                    assert_eq!(status, 200);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let db = any_pool(&url).await;
    eventually(Duration::from_secs(60), "80 events in the ledger", || async {
        ledger_counts(&db).await.len() == 80
    })
    .await;
    let expected = (0..10)
        .flat_map(|intent| (0..8).map(move |step| format!("evt_rep_{intent}_{step}")))
        .collect();
    assert_each_applied_once(&db, &expected).await;
    // Both replicas worked.
    let handled_by = |example: &Example| {
        example
            .lines()
            .iter()
            .filter(|l| l.starts_with("handled "))
            .count()
    };
    assert!(
        handled_by(&a) > 0 && handled_by(&b) > 0,
        "a: {}, b: {}",
        handled_by(&a),
        handled_by(&b)
    );
    assert_applied_in_order(&db, 8).await;
}

/// Each intent's events (`evt_…_{intent}_{step}`, steps `0..steps`) were
/// applied in step order: compared by each ledger row's inserting
/// transaction id (events of one intent never overlap, so a later one starts
/// after the earlier one committed).
async fn assert_applied_in_order(db: &AnyPool, steps: u64) {
    let rows = sqlx::query("SELECT event_id, xmin::text AS tx FROM ledger")
        .fetch_all(db)
        .await
        .unwrap();
    let mut per_intent: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for row in rows {
        let id: String = row.get("event_id");
        let tx: u64 = row.get::<String, _>("tx").parse().unwrap();
        let mut parts = id.rsplitn(2, '_');
        let step: u64 = parts.next().unwrap().parse().unwrap();
        per_intent
            .entry(parts.next().unwrap().to_owned())
            .or_default()
            .push((tx, step));
    }
    for (intent, mut applied) in per_intent {
        applied.sort();
        let order: Vec<u64> = applied.iter().map(|(_, step)| *step).collect();
        assert_eq!(
            order,
            (0..steps).collect::<Vec<_>>(),
            "{intent} applied out of order"
        );
    }
}

/// Four replicas on one PostgreSQL; two are killed with SIGKILL while their
/// handlers run and deliveries keep coming. Senders whose replica is gone
/// deliver to the next one (as a load balancer would). Every event ends up
/// applied exactly once, each intent's events in order, and the events the
/// killed replicas held are taken over by the survivors once their leases
/// run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_replicas_on_postgres_apply_once_in_order_through_sigkill() {
    const INTENTS: usize = 12;
    const STEPS: u64 = 10;
    let url = fresh_postgres_database("payhook_t").await;
    let env = [
        ("PAYHOOK_HANDLER_DELAY_MS", "100"),
        ("PAYHOOK_INBOX_LEASE_MS", "1500"),
    ];
    let mut replicas: Vec<Option<Example>> = (0..4).map(|_| Some(start(&url, &env))).collect();
    let urls: Vec<String> = replicas.iter().flatten().map(Example::url).collect();
    let mut senders = Vec::new();
    for intent in 0..INTENTS {
        let urls = urls.clone();
        senders.push(tokio::spawn(async move {
            for step in 0..STEPS {
                let body = event(
                    &format!("evt_four_{intent}_{step}"),
                    &format!("pi_four_{intent}"),
                    7000 + step,
                    None,
                );
                let mut target = (intent + step as usize) % urls.len();
                let mut tries = 0;
                loop {
                    match post(&urls[target], &body).await {
                        Ok((200, _)) => break,
                        Ok((status, reply)) => panic!("unexpected reply {status} {reply}"),
                        Err(_) => {
                            // That replica is gone: the next one.
                            tries += 1;
                            assert!(tries < 40, "no replica accepted {intent}/{step}");
                            target = (target + 1) % urls.len();
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }
    // Kill replicas 1 and 3 once each has handled a few events.
    let mut handled_before_kill = 0;
    for index in [1, 3] {
        let mut replica = replicas[index].take().unwrap();
        handled_before_kill += replica
            .wait_for_lines(Duration::from_secs(60), 3, |line| line.starts_with("handled "))
            .len();
        drop(replica); // SIGKILL, mid-run
    }
    for sender in senders {
        sender.await.unwrap();
    }
    let db = any_pool(&url).await;
    let total = INTENTS * STEPS as usize;
    eventually(Duration::from_secs(120), "every event in the ledger", || async {
        ledger_counts(&db).await.len() == total
    })
    .await;
    let expected = (0..INTENTS)
        .flat_map(|intent| (0..STEPS).map(move |step| format!("evt_four_{intent}_{step}")))
        .collect();
    assert_each_applied_once(&db, &expected).await;
    assert_applied_in_order(&db, STEPS).await;
    assert!(handled_before_kill >= 6);
    // The survivors worked too.
    for replica in replicas.iter().flatten() {
        let handled = replica
            .lines()
            .iter()
            .filter(|line| line.starts_with("handled "))
            .count();
        assert!(handled > 0, "a surviving replica handled nothing");
    }
    // Some event was held by a killed replica and was taken over: it came
    // back a suspect (uncounted: it may only have waited).
    let taken_over: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM payhook_inbox WHERE event_id LIKE 'evt_four_%' AND suspect > 0",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert!(taken_over > 0, "no event was taken over from a killed replica");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_twice_then_succeeds_with_one_row() {
    let url = sqlite_url("payhook-inbox-process");
    let mut example = start(&url, &[("PAYHOOK_INBOX_BACKOFF_MS", "100")]);
    post_ok(&example, &event("evt_twice", "pi_twice", 1, Some(2))).await;
    let handled = example.wait_for_line(Duration::from_secs(30), |line| line.starts_with("handled "));
    assert_eq!(handled, "handled evt_twice payment_intent.succeeded");
    let db = any_pool(&url).await;
    let row = sqlx::query("SELECT event_type, amount FROM ledger WHERE event_id = 'evt_twice'")
        .fetch_all(&db)
        .await
        .unwrap();
    assert_eq!(row.len(), 1, "failed attempts must leave no row");
    assert_eq!(
        row[0].get::<String, _>("amount"),
        "123456789012345678901234567890"
    );
    let attempts: i64 = sqlx::query("SELECT attempts FROM payhook_inbox WHERE event_id = 'evt_twice'")
        .fetch_one(&db)
        .await
        .unwrap()
        .get(0);
    assert_eq!(attempts, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handled_line_escapes_the_event_id() {
    let url = sqlite_url("payhook-inbox-process");
    let mut example = start(&url, &[]);
    // A (signed) id holding a newline and a forged second line.
    let id = "evt_nl\\nhandled evt_forged payment_intent.succeeded";
    post_ok(&example, &event(id, "pi_nl", 1, None)).await;
    let handled = example.wait_for_line(Duration::from_secs(30), |line| line.starts_with("handled "));
    assert_eq!(
        handled,
        r"handled evt_nl\nhandled evt_forged payment_intent.succeeded payment_intent.succeeded"
    );
    let db = any_pool(&url).await;
    let stored: String = sqlx::query("SELECT event_id FROM ledger")
        .fetch_one(&db)
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, "evt_nl\nhandled evt_forged payment_intent.succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_to_start_without_a_secret() {
    let output = example_process::command(
        EXAMPLE,
        &[("PAYHOOK_DATABASE_URL", &sqlite_url("payhook-inbox-process"))],
    )
    .output()
    .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("PAYHOOK_SECRET is required"), "{stderr}");
    assert!(!String::from_utf8_lossy(&output.stdout).contains("listening on"));
}

/// A PostgreSQL cluster of this test's own, so it can be stopped and started.
struct OwnCluster {
    env: BTreeMap<String, String>,
}

impl OwnCluster {
    fn start() -> Self {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/start-postgres");
        let output = Command::new("bash").arg(script).output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let env = String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| line.strip_prefix("export "))
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Self { env }
    }

    fn pg_ctl(&self, args: &[&str]) {
        let bin = format!("{}/pg_ctl", self.env["PAYHOOK_TEST_PG_BIN"]);
        let data = format!("{}/data", self.env["PAYHOOK_TEST_PG_DIR"]);
        let as_root = running_as_root();
        let mut command = if as_root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", &bin]);
            c
        } else {
            Command::new(&bin)
        };
        let status = command.args(["-D", &data]).args(args).status().unwrap();
        assert!(status.success(), "pg_ctl {args:?}");
    }

    fn stop(&self) {
        self.pg_ctl(&["stop", "-m", "fast", "-w"]);
    }

    fn restart(&self) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off",
            self.env["PAYHOOK_TEST_PG_PORT"], self.env["PAYHOOK_TEST_PG_DIR"]
        );
        let log = format!("{}/postgres.log", self.env["PAYHOOK_TEST_PG_DIR"]);
        self.pg_ctl(&["start", "-w", "-l", &log, "-o", &options]);
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let bin = format!("{}/pg_ctl", self.env["PAYHOOK_TEST_PG_BIN"]);
        let data = format!("{}/data", self.env["PAYHOOK_TEST_PG_DIR"]);
        let mut command = if running_as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", &bin]);
            c
        } else {
            Command::new(&bin)
        };
        let _ = command.args(["-D", &data, "stop", "-m", "immediate"]).status();
        let _ = std::fs::remove_dir_all(&self.env["PAYHOOK_TEST_PG_DIR"]);
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_down_answers_503_then_resumes() {
    let cluster = OwnCluster::start();
    let url = cluster.env["PAYHOOK_TEST_DATABASE_URL"].clone();
    let mut example = start(
        &url,
        &[
            ("PAYHOOK_HANDLER_DELAY_MS", "2000"),
            ("PAYHOOK_INBOX_LEASE_MS", "2000"),
        ],
    );
    // Acknowledged, then the database goes away while its handler sleeps.
    post_ok(&example, &event("evt_before", "pi_down_1", 1, None)).await;
    cluster.stop();
    let (status, reply) = post(&example.url(), &event("evt_during", "pi_down_2", 1, None))
        .await
        .unwrap();
    assert_eq!(status, 503, "{reply}");
    assert!(reply.starts_with("Webhook Error: "), "{reply}");
    cluster.restart();
    // The 503 acknowledged nothing: that delivery was not stored.
    let db = any_pool(&url).await;
    let stored: Vec<String> = sqlx::query("SELECT event_id FROM payhook_inbox")
        .fetch_all(&db)
        .await
        .unwrap()
        .iter()
        .map(|row| row.get::<String, _>("event_id"))
        .collect();
    assert_eq!(stored, ["evt_before"], "only the acknowledged event is stored");
    // The sender retries what got 503; what was acknowledged is still there.
    post_ok(&example, &event("evt_during", "pi_down_2", 1, None)).await;
    let handled = example.wait_for_lines(Duration::from_secs(60), 2, |line| line.starts_with("handled "));
    assert_eq!(
        handled.into_iter().collect::<BTreeSet<_>>(),
        BTreeSet::from([
            "handled evt_before payment_intent.succeeded".to_owned(),
            "handled evt_during payment_intent.succeeded".to_owned()
        ])
    );
    let counts = ledger_counts(&db).await;
    assert_eq!(
        counts,
        BTreeMap::from([("evt_before".to_owned(), 1), ("evt_during".to_owned(), 1)])
    );
}
