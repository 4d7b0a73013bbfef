//! `payhook inbox` tells where each event came from, run as the real binary
//! on SQLite and PostgreSQL: a reconciled event whose delivery arrived later
//! says so (`show` names the delivery, never "no delivery"; the SOURCE
//! column says "reconciled, delivered later"), an event with a differing
//! copy has a `differing copies:` line, `stats` counts delivered and
//! recovered events apart, and `refused` lists the refused events with their
//! ids and reasons escaped.
#![cfg(feature = "inbox")]

use std::time::{Duration, Instant};

use bytes::Bytes;
use payhook_core::sender::unix_now;
use payhook_core::{sign, Event, Receiver, Secret};
use payhook_inbox::admin::Admin;
use payhook_inbox::reconcile::ListedEvent;
use payhook_inbox::sqlx::{self, AnyPool};
use payhook_inbox::{Inbox, Job};
use payhook_test_support::{on_every_backend, postgres_url, sqlite_url, unique};

use crate::support::inbox::inbox_cli;

const SECRET: &str = "whsec_cli_inbox_sources";

/// Event `id` for `amount`, as the service sends and lists it.
fn body(id: &str, amount: u64) -> String {
    format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","created":1,"data":{{"object":{{"id":"pi_{id}","amount":{amount},"currency":"btc","status":"succeeded"}}}}}}"#
    )
}

async fn deliver(inbox: &Inbox, body: &str) {
    let body = Bytes::from(body.to_owned());
    let mut headers = http::HeaderMap::new();
    let header = sign(&body, &Secret::new(SECRET).unwrap(), unix_now());
    headers.insert("x-service-signature", header.parse().unwrap());
    let reply = inbox.ingest(&headers, body).await;
    assert_eq!(reply.status().as_u16(), 200, "{}", reply.body());
}

/// Runs `payhook inbox show ID` until its output has `wanted`.
async fn show_until(url: &str, namespace: &str, id: &str, wanted: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let run = inbox_cli(url, namespace, &["show", id]);
        assert_eq!(run.code, 0, "{run:?}");
        if run.stdout.contains(wanted) {
            return run.stdout;
        }
        assert!(Instant::now() < deadline, "{id}: never {wanted:?}: {run:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn sources_are_told_honestly(url: String) {
    let namespace = unique("cli-sources");
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(&namespace)
        .poll_interval(Duration::from_millis(20))
        .connect(&url)
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"));
    let workers = inbox.start(|_job: Job| async { Ok(()) });
    let admin = Admin::connect(&url, &namespace).await.unwrap();
    // Stored by the reconciler, as `payhook reconcile` stores it.
    let late = format!("evt_{namespace}_late");
    let listed = body(&late, 5);
    let event = ListedEvent {
        event: Event::from_slice(listed.as_bytes()).unwrap(),
        body: listed.clone(),
    };
    assert_eq!(admin.store_reconciled(&[&event]).await.unwrap(), 1);
    let shown = show_until(&url, &namespace, &late, "source: reconciled").await;
    assert!(shown.contains("no delivery"), "{shown}");
    let run = inbox_cli(&url, &namespace, &["stats"]);
    assert!(run.stdout.contains("delivered: 0\n"), "{run:?}");
    assert!(run.stdout.contains("recovered: 1 "), "{run:?}");
    // Its delivery arrives later; another event gets a differing copy.
    deliver(&inbox, &listed).await;
    let differs = format!("evt_{namespace}_differs");
    deliver(&inbox, &body(&differs, 5)).await;
    deliver(&inbox, &body(&differs, 6)).await;
    let shown = show_until(&url, &namespace, &late, "delivered at").await;
    let source = shown.lines().find(|line| line.starts_with("source: ")).unwrap();
    assert!(source.starts_with("source: reconciled at "), "{shown}");
    assert!(source.contains("deliver"), "{shown}");
    assert!(!shown.contains("no delivery"), "{shown}");
    assert!(
        shown.contains("attempt history (reconciled at "),
        "the history names its delivery too: {shown}"
    );
    let shown = show_until(&url, &namespace, &differs, "differ").await;
    assert!(shown.contains("differing copies: 1 later copy"), "{shown}");
    // The SOURCE column.
    let run = inbox_cli(&url, &namespace, &["list"]);
    let row = run
        .stdout
        .lines()
        .find(|line| line.starts_with(&format!("{late}\t")))
        .unwrap_or_else(|| panic!("{run:?}"));
    assert_eq!(
        row.split('\t').nth(5),
        Some("reconciled, delivered later"),
        "{run:?}"
    );
    let run = inbox_cli(&url, &namespace, &["stats"]);
    assert!(run.stdout.contains("delivered: 2\n"), "{run:?}");
    assert!(run.stdout.contains("recovered: 0 "), "{run:?}");
    workers.shutdown().await;
}

/// `payhook inbox refused` lists the refused events, the id and reason the
/// service sent escaped: no control character reaches the terminal.
async fn refused_events_are_listed_escaped(url: String) {
    let namespace = unique("cli-refused");
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(&namespace)
        .connect(&url)
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"));
    drop(inbox);
    sqlx::any::install_default_drivers();
    let pool = AnyPool::connect(&url).await.unwrap();
    sqlx::query(
        "INSERT INTO payhook_inbox_refused \
         (namespace, refused_key, event_id, source, reason, bytes, first_at, last_at, times) \
         VALUES ($1, 'id:x', $2, 'reconciled', $3, 42, 1000, 2000, 3)",
    )
    .bind(&namespace)
    .bind("evt_\u{1b}[31mred")
    .bind("does not parse: line\nbreak")
    .execute(&pool)
    .await
    .unwrap();
    let run = inbox_cli(&url, &namespace, &["refused"]);
    assert_eq!(run.code, 0, "{run:?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{run:?}");
    assert!(!run.stdout.contains('\u{1b}'), "{run:?}");
    assert!(
        lines[1].starts_with("evt_\\u{1b}[31mred\treconciled\t3\t"),
        "{run:?}"
    );
    assert!(
        lines[1].ends_with("\t42\tdoes not parse: line\\nbreak"),
        "{run:?}"
    );
}

on_every_backend! {
    sqlite: sqlite_url("payhook-cli-sources"), postgres: postgres_url(), worker_threads: 2;
    sources_are_told_honestly,
    refused_events_are_listed_escaped,
}
