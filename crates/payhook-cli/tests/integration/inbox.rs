//! `payhook inbox`, run as the real binary against inboxes on SQLite files and
//! on PostgreSQL (`PAYHOOK_TEST_DATABASE_URL`, from `.ci/start-postgres`; the
//! PostgreSQL test fails when it is unset or unreachable). Events are stored
//! and processed by real inbox workers; the command lists them, shows them,
//! brings a dead one back, replays and purges.
#![cfg(feature = "inbox")]

use crate::support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use payhook_core::sender::unix_now;
use payhook_core::{sign, Receiver, Secret};
use payhook_inbox::{HandlerError, Inbox, Job};
use payhook_test_support::unique;
use support::inbox::{inbox_cli, ingest};

const SECRET: &str = "whsec_cli_inbox";

async fn wait_for(url: &str, namespace: &str, id: &str, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let run = inbox_cli(url, namespace, &["show", id]);
        if run.stdout.contains(&format!("state: {state}\n")) {
            return;
        }
        assert!(Instant::now() < deadline, "{id} never became {state}: {run:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn dead_event_is_brought_back(url: String) {
    let namespace = unique("cli");
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(&namespace)
        .max_attempts(2)
        .backoff(Duration::from_millis(50), Duration::from_millis(100))
        .poll_interval(Duration::from_millis(20))
        .connect(&url)
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"));
    let fixed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let switch = std::sync::Arc::clone(&fixed);
    let workers = inbox.start(move |job: Job| {
        let fixed = std::sync::Arc::clone(&switch);
        async move {
            if job.event().event_type() == "payment_intent.failed" && !fixed.load(Ordering::SeqCst) {
                return Err::<(), HandlerError>("the downstream ledger\nis down".into());
            }
            Ok(())
        }
    });
    ingest(&inbox, SECRET, "evt_good", "payment_intent.succeeded").await;
    ingest(&inbox, SECRET, "evt_bad", "payment_intent.failed").await;
    wait_for(&url, &namespace, "evt_bad", "dead").await;
    wait_for(&url, &namespace, "evt_good", "done").await;

    // list: filters by state, type and age.
    let run = inbox_cli(&url, &namespace, &["list", "--state", "dead"]);
    assert_eq!(run.code, 0, "{run:?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{run:?}");
    assert!(
        lines[1].starts_with("evt_bad\tdead\tpayment_intent.failed\t2\t"),
        "{run:?}"
    );
    // The handler's error text stays on one line.
    assert!(lines[1].ends_with("the downstream ledger\\nis down"), "{run:?}");
    let run = inbox_cli(&url, &namespace, &["list", "--type", "payment_intent.succeeded"]);
    assert_eq!(
        run.stdout
            .lines()
            .skip(1)
            .map(|l| l.split('\t').next().unwrap())
            .collect::<Vec<_>>(),
        ["evt_good"]
    );
    let run = inbox_cli(&url, &namespace, &["list", "--older-than", "1h"]);
    assert_eq!(run.stdout.lines().count(), 1, "{run:?}");
    let run = inbox_cli(&url, &namespace, &["list", "--newer-than", "1h"]);
    assert_eq!(run.stdout.lines().count(), 3, "{run:?}");

    // show: attempts, last error, body.
    let run = inbox_cli(&url, &namespace, &["show", "evt_bad"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("attempts: 2\n"), "{run:?}");
    assert!(
        run.stdout
            .contains("last error: the downstream ledger\\nis down\n"),
        "{run:?}"
    );
    assert!(
        run.stdout
            .contains("body:\n  {\n    \"id\": \"evt_bad\",\n    \"type\": \"payment_intent.failed\",\n"),
        "{run:?}"
    );
    // show: every recorded attempt, latest first, and the history's errors
    // on one line each.
    let history = "attempt history (delivered):\n  #2 ";
    let at = run.stdout.find(history).unwrap_or_else(|| panic!("{run:?}"));
    let lines: Vec<&str> = run.stdout[at..].lines().skip(1).take(2).collect();
    assert!(
        lines[0].starts_with("  #2 ") && lines[0].ends_with(" ms, dead: the downstream ledger\\nis down"),
        "{run:?}"
    );
    assert!(
        lines[1].starts_with("  #1 ") && lines[1].ends_with(" ms, failed: the downstream ledger\\nis down"),
        "{run:?}"
    );
    // stats: what the dashboard's overview shows.
    let run = inbox_cli(&url, &namespace, &["stats"]);
    assert_eq!(run.code, 0, "{run:?}");
    let backend = if url.starts_with("sqlite") {
        "SQLite"
    } else {
        "PostgreSQL"
    };
    assert_eq!(
        run.stdout,
        format!(
            "backend: {backend}\npending: 0\nrunning: 0\ndead: 1\ndone: 1\ndelivered: 2\n\
             recovered: 0 (stored by the reconciler, no delivery of them arrived)\noldest pending: none\n\
             last hour: 2 acknowledged (2 first deliveries, 0 duplicates), 1 handled, 2 failed attempt(s)\n"
        ),
        "{run:?}"
    );
    let run = inbox_cli(&url, &namespace, &["show", "evt_missing"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("no event evt_missing"), "{run:?}");

    // Dead stays dead until the command brings it back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    wait_for(&url, &namespace, "evt_bad", "dead").await;
    fixed.store(true, Ordering::SeqCst);
    let run = inbox_cli(&url, &namespace, &["retry", "--dead"]);
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (0, "1 dead event(s) due now\n"),
        "{run:?}"
    );
    wait_for(&url, &namespace, "evt_bad", "done").await;
    let run = inbox_cli(&url, &namespace, &["retry", "evt_bad"]);
    assert_eq!(run.code, 1, "a done event is not retried: {run:?}");

    // replay: done events run again; purge: done events go.
    let run = inbox_cli(&url, &namespace, &["replay", "--since", "1h"]);
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (0, "2 done event(s) due again\n"),
        "{run:?}"
    );
    wait_for(&url, &namespace, "evt_bad", "done").await;
    wait_for(&url, &namespace, "evt_good", "done").await;
    let run = inbox_cli(&url, &namespace, &["show", "evt_good"]);
    assert!(run.stdout.contains("attempts: 2\n"), "replayed once: {run:?}");
    workers.shutdown().await;
    // A time in the future, or one that does not exist, purges nothing.
    for (time, why) in [
        ("2999-01-01T00:00:00Z", "is in the future"),
        ("9223372036854775807", "is in the future"),
        ("2026-02-31", "2026-02 has 28 days"),
    ] {
        let run = inbox_cli(&url, &namespace, &["purge", "--done-before", time, "--yes"]);
        assert_eq!(run.code, 2, "{time}: {run:?}");
        assert!(run.stderr.contains(why), "{time}: {run:?}");
    }
    // Marked done over a second ago, so `0s` (now, in whole seconds) is after.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // Without --yes (and no terminal to ask on): counted, not purged.
    let run = inbox_cli(&url, &namespace, &["purge", "--done-before", "0s"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stdout.starts_with("2 done event(s) marked done before "),
        "{run:?}"
    );
    assert!(run.stderr.contains("run again with --yes"), "{run:?}");
    let run = inbox_cli(&url, &namespace, &["list"]);
    assert_eq!(run.stdout.lines().count(), 3, "nothing purged: {run:?}");
    // Before both were done: nothing to purge, nothing to confirm.
    let run = inbox_cli(&url, &namespace, &["purge", "--done-before", "1h"]);
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (0, "0 done event(s) purged\n"),
        "{run:?}"
    );
    let run = inbox_cli(&url, &namespace, &["purge", "--done-before", "0s", "--yes"]);
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (0, "2 done event(s) purged\n"),
        "{run:?}"
    );
    let run = inbox_cli(&url, &namespace, &["list"]);
    assert_eq!(run.stdout.lines().count(), 1, "{run:?}");
    // Every event purged: the namespace looks unused, which a read only
    // warns about.
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stderr
            .starts_with("warning: the database has no event and no paused type in namespace "),
        "{run:?}"
    );

    // An event type from the request with a line break, a terminal escape and
    // a bidi override is shown escaped: it cannot forge a line or repaint.
    let hostile = r"payment_intent.succeeded\nevt_forged\tdone\u001b[2J\u202e";
    ingest(&inbox, SECRET, "evt_hostile", hostile).await;
    let run = inbox_cli(&url, &namespace, &["list"]);
    assert_eq!(
        run.stdout.lines().count(),
        2,
        "one row for the one event: {run:?}"
    );
    assert!(
        !run.stdout.contains('\u{1b}') && !run.stdout.contains('\u{202e}'),
        "{run:?}"
    );
    assert!(
        run.stdout
            .contains(r"payment_intent.succeeded\nevt_forged\tdone\u{1b}[2J\u{202e}"),
        "{run:?}"
    );
    let run = inbox_cli(&url, &namespace, &["show", "evt_hostile"]);
    assert!(
        run.stdout.contains("type: payment_intent.succeeded\\nevt_forged"),
        "{run:?}"
    );
    assert!(!run.stdout.contains('\u{1b}'), "{run:?}");
}

/// `inbox show` writes an id with a bidi override and a line separator by the
/// same rule as the dashboard, and a 1 MB body nested 500 000 levels deep as
/// a bounded layout with a line saying how much was left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_escapes_request_values_and_bounds_the_body() {
    let dir = std::env::temp_dir().join(unique("payhook-cli-deep"));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("inbox.db").display());
    let namespace = unique("cli-deep");
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(&namespace)
        .connect(&url)
        .await
        .unwrap();
    let id = "evt_\u{202e}gnp.exe\u{2028}x";
    let depth = 500_000;
    let body = Bytes::from(format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","created":1,"data":{{"object":{{"id":"pi_deep","amount":5,"currency":"usd","status":"x"}}}},"nested":{}{}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    ));
    let mut headers = http::HeaderMap::new();
    let header = sign(&body, &Secret::new(SECRET).unwrap(), unix_now());
    headers.insert("x-service-signature", header.parse().unwrap());
    assert_eq!(inbox.ingest(&headers, body).await.status().as_u16(), 200);
    let run = inbox_cli(&url, &namespace, &["show", id]);
    assert!(
        run.stdout.contains("event: evt_\\u{202e}gnp.exe\\u{2028}x\n"),
        "{}",
        &run.stdout[..2000]
    );
    assert!(run.stdout.contains("\"id\": \"evt_\\u202egnp.exe\\u2028x\""));
    assert!(!run.stdout.contains('\u{202e}') && !run.stdout.contains('\u{2028}'));
    assert!(run.stdout.len() < 300 * 1024, "{} bytes", run.stdout.len());
    assert!(
        run.stdout.lines().any(|line| line.starts_with("body cut: ")
            && line.ends_with(" more bytes not shown (the whole body is in the database)")),
        "{}",
        &run.stdout[run.stdout.len() - 300..]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_dead_event_is_brought_back() {
    let dir = std::env::temp_dir().join(unique("payhook-cli-inbox"));
    std::fs::create_dir_all(&dir).unwrap();
    dead_event_is_brought_back(format!("sqlite://{}", dir.join("inbox.db").display())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_dead_event_is_brought_back() {
    let url = payhook_test_support::postgres_url();
    dead_event_is_brought_back(url).await;
}

#[test]
fn bad_arguments_are_usage_errors_and_hide_the_url() {
    let run = inbox_cli("postgres://user:hunter2@127.0.0.1:1/db", "payhook", &["list"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        !run.stderr.contains("hunter2") && !run.stdout.contains("hunter2"),
        "{run:?}"
    );
    let run = inbox_cli("mysql://x", "payhook", &["list"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("unsupported database URL"), "{run:?}");
    let run = inbox_cli("sqlite://unused.db", "payhook", &["list", "--state", "lost"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("pending, running, dead or done"), "{run:?}");
    let run = inbox_cli(
        "sqlite://unused.db",
        "payhook",
        &["replay", "--since", "last tuesday"],
    );
    assert_eq!(run.code, 2, "{run:?}");
    let run = inbox_cli("sqlite://unused.db", "payhook", &["retry"]);
    assert_eq!(run.code, 2, "{run:?}");
}
