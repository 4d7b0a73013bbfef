//! Reconciliation end to end, with real processes: `payhook emulate` makes a
//! share of its events undeliverable (every attempt fails without reaching
//! the receiver), and `examples/inbox_receiver.rs` reconciles against its
//! events list every 2 s. Every event the service created is handled exactly
//! once — the undeliverable ones within two intervals and a second of their
//! creation — across a `kill -9` of the receiver (SQLite), and with two
//! replicas on one PostgreSQL. The test drives and reads the emulator
//! through `payhook::api::Client`, the crate's own client of the service's
//! API, so the client is tried against the real `payhook emulate` process.

use crate::example_process::{payhook_command, Example};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use payhook::api::{ApiKey, Client, EventsQuery, NewPaymentIntent};
use payhook::inbox::sqlx::{self, AnyPool, Row};
use payhook_test_support::{
    any_pool, eventually_async as eventually, fresh_postgres_database, payhook_emulate, sqlite_url, Process,
};

const SECRET: &str = "whsec_reconcile_e2e";
const KEY: &str = "sk_test_reconcile_e2e";
/// The reconciler's interval in these tests.
const INTERVAL_MS: i64 = 2000;
/// Room for the pass's own time (a request and a few inserts) on a loaded
/// machine, beside the documented two intervals and a second.
const PASS_MS: i64 = 1000;

/// `payhook emulate` on a free loopback port, forwarding to `forward_to`.
struct Emulator {
    _process: Process,
    api: String,
}

impl Emulator {
    fn start(forward_to: &str, undeliverable: &str, seed: &str) -> Self {
        let mut command = payhook_emulate(payhook_command(), KEY, forward_to);
        command.args([
            "--secret",
            SECRET,
            "--undeliverable",
            undeliverable,
            "--seed",
            seed,
        ]);
        let process = Process::spawn("payhook emulate", &mut command);
        let first = process.next_line(Duration::from_secs(30));
        let api = first
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("the emulator's first line: {first:?}"))
            .to_owned();
        Self {
            _process: process,
            api,
        }
    }

    /// The crate's own client of the service's API, on the emulator at `api`.
    fn client(api: &str) -> Client {
        Client::new(api, ApiKey::new(KEY).unwrap()).unwrap()
    }

    /// `n` payment intents, each driven to succeeded or failed (one event
    /// each), `pause` apart.
    async fn drive(&self, tag: &str, n: usize, pause: Duration) {
        Self::drive_at(&self.api, tag, n, pause).await;
    }

    /// [`drive`](Self::drive) on the emulator at `api`.
    async fn drive_at(api: &str, tag: &str, n: usize, pause: Duration) {
        let client = Self::client(api);
        for i in 0..n {
            let created = client
                .create_payment_intent(&NewPaymentIntent::new(1500, "btc").metadata("run", tag))
                .await
                .expect("an intent");
            assert_eq!(created.metadata.get("run"), Some(tag));
            let settled = if i % 3 == 0 {
                client.fail_payment_intent(&created.id).await
            } else {
                client.succeed_payment_intent(&created.id, None).await
            };
            settled.expect("the intent settled");
            tokio::time::sleep(pause).await;
        }
    }

    /// Every event the emulator created: id → (created, delivered).
    async fn events(&self) -> BTreeMap<String, (i64, bool)> {
        let client = Self::client(&self.api);
        let mut events = BTreeMap::new();
        let mut all = client.events(EventsQuery::default());
        while let Some(page) = all.next().await {
            for listed in page.expect("a page of the events list").events {
                let created = listed.event.created().expect("a created time");
                events.insert(listed.event.id().to_owned(), (created, false));
            }
        }
        // Which ones a delivery reached.
        let mut delivered = client.events(EventsQuery {
            delivery_success: Some(true),
            ..EventsQuery::default()
        });
        while let Some(page) = delivered.next().await {
            for listed in page.expect("a page of delivered events").events {
                if let Some(entry) = events.get_mut(listed.event.id()) {
                    entry.1 = true;
                }
            }
        }
        events
    }
}

/// A loopback port free now (the receiver binds it next; the emulator
/// forwards to it from its start).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn receiver(port: u16, database: &str, api: &str) -> Example {
    let addr = format!("127.0.0.1:{port}");
    let interval = INTERVAL_MS.to_string();
    Example::start(
        "inbox_receiver",
        &[
            ("PAYHOOK_ADDR", addr.as_str()),
            ("PAYHOOK_SECRET", SECRET),
            ("PAYHOOK_DATABASE_URL", database),
            ("PAYHOOK_API_BASE", api),
            ("PAYHOOK_API_KEY", KEY),
            ("PAYHOOK_RECONCILE_INTERVAL_MS", interval.as_str()),
        ],
    )
}

/// Ledger rows per event id (the handler writes one per event it handles).
async fn ledger(db: &AnyPool) -> BTreeMap<String, i64> {
    match sqlx::query("SELECT event_id, COUNT(*) AS n FROM ledger GROUP BY event_id")
        .fetch_all(db)
        .await
    {
        Ok(rows) => rows
            .iter()
            .map(|row| (row.get::<String, _>("event_id"), row.get::<i64, _>("n")))
            .collect(),
        Err(_) => BTreeMap::new(), // the table is made by the receiver at start
    }
}

/// Each stored event's source and when it was stored (Unix ms).
async fn stored(db: &AnyPool) -> BTreeMap<String, (Option<String>, i64)> {
    sqlx::query("SELECT event_id, source, received_at FROM payhook_inbox")
        .fetch_all(db)
        .await
        .unwrap()
        .iter()
        .map(|row| {
            (
                row.get::<String, _>("event_id"),
                (
                    row.get::<Option<String>, _>("source"),
                    row.get::<i64, _>("received_at"),
                ),
            )
        })
        .collect()
}

/// Waits until every event the emulator created is handled, then checks:
/// each exactly once; the ones no delivery reached stored as reconciled;
/// and those among `timed` within two intervals and a second of their
/// creation, plus a pass's time.
async fn every_event_handled_once(emulator: &Emulator, db: &AnyPool, timed: &BTreeSet<String>) -> usize {
    eventually(
        Duration::from_secs(90),
        "every event the service created handled",
        || async {
            let created = emulator.events().await;
            let handled = ledger(db).await;
            !created.is_empty() && created.keys().all(|id| handled.contains_key(id))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(2 * INTERVAL_MS as u64)).await;
    let created = emulator.events().await;
    let handled = ledger(db).await;
    let twice: Vec<_> = handled.iter().filter(|(_, &n)| n != 1).collect();
    assert!(twice.is_empty(), "handled more than once: {twice:?}");
    let created_ids: BTreeSet<&String> = created.keys().collect();
    let handled_ids: BTreeSet<&String> = handled.keys().collect();
    assert_eq!(
        handled_ids, created_ids,
        "handled events other than the service created"
    );
    let stored = stored(db).await;
    let undelivered: Vec<&String> = created
        .iter()
        .filter(|(_, (_, delivered))| !delivered)
        .map(|(id, _)| id)
        .collect();
    assert!(!undelivered.is_empty(), "the fault made no event undeliverable");
    for id in &undelivered {
        let (source, stored_at) = &stored[*id];
        assert_eq!(source.as_deref(), Some("reconciled"), "{id} was never delivered");
        if timed.contains(*id) {
            let created_ms = created[*id].0 * 1000;
            // `created` is whole seconds: up to a second early.
            let late = stored_at - created_ms;
            assert!(
                late <= 2 * INTERVAL_MS + 1000 + PASS_MS,
                "{id} stored {late} ms after its creation, over two intervals and a second"
            );
        }
    }
    undelivered.len()
}

// Not one test on every backend: SQLite is one process killed and restarted, PostgreSQL two replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_every_created_event_is_handled_once_across_a_sigkill() {
    let database = sqlite_url("payhook-reconcile-e2e");
    let port = free_port();
    let emulator = Emulator::start(&format!("http://127.0.0.1:{port}/webhooks"), "0.3", "11");
    let db = any_pool(&database).await;
    let first = receiver(port, &database, &emulator.api);
    emulator.drive("before", 24, Duration::from_millis(50)).await;
    // Those are timed: each undeliverable one must be stored within two
    // intervals and a second, while this receiver runs.
    let timed: BTreeSet<String> = emulator.events().await.into_keys().collect();
    tokio::time::sleep(Duration::from_millis(2 * INTERVAL_MS as u64 + 1500)).await;
    // Killed mid-run, events being created, delivered and reconciled.
    let driving = {
        let api = emulator.api.clone();
        tokio::spawn(async move { Emulator::drive_at(&api, "killed", 12, Duration::from_millis(50)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(first);
    driving.await.unwrap();
    emulator.drive("while down", 6, Duration::from_millis(20)).await;
    let _second = receiver(port, &database, &emulator.api);
    emulator.drive("after", 12, Duration::from_millis(50)).await;
    let reconciled = every_event_handled_once(&emulator, &db, &timed).await;
    assert!(reconciled >= 5, "only {reconciled} events were undeliverable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_replicas_handle_every_created_event_once() {
    let database = fresh_postgres_database("payhook_rc").await;
    let port = free_port();
    let emulator = Emulator::start(&format!("http://127.0.0.1:{port}/webhooks"), "0.3", "12");
    let db = any_pool(&database).await;
    // Deliveries reach the first; both reconcile, one at a time.
    let _first = receiver(port, &database, &emulator.api);
    let _second = receiver(free_port(), &database, &emulator.api);
    emulator.drive("replicas", 42, Duration::from_millis(40)).await;
    let timed: BTreeSet<String> = emulator.events().await.into_keys().collect();
    let reconciled = every_event_handled_once(&emulator, &db, &timed).await;
    assert!(reconciled >= 5, "only {reconciled} events were undeliverable");
    // One namespace, one turn: a single row, held by one of the two.
    let owners: Vec<Option<String>> = sqlx::query("SELECT owner FROM payhook_inbox_reconciler")
        .fetch_all(&db)
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert!(owners[0].is_some(), "a replica holds the turn");
}
