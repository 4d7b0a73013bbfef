//! The inbox conformance suite: every test runs against SQLite (a file in a
//! fresh temp dir) and against PostgreSQL (`PAYHOOK_TEST_DATABASE_URL`, started
//! by `.ci/start-postgres`; the PostgreSQL tests fail when it is unset or
//! unreachable). Each test uses its own namespace and tables, so they share one
//! PostgreSQL database safely.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use payhook_core::sender::SignedDelivery;
use payhook_core::Receiver;
use payhook_core::StoreErrorKind;
use payhook_inbox::admin::{Admin, Filter, State, StoredEvent};
use payhook_inbox::sqlx::{self, Row};
use payhook_inbox::{HandlerError, Inbox, InboxError, Job};
use payhook_test_support::{on_every_backend, postgres_url, postgres_url_of, sqlite_url, unique};

use crate::{attempt_record, eventually};

const SECRET: &str = "whsec_conformance";

/// A test's inbox on a database, with its own namespace and ledger table.
struct Setup {
    url: String,
    namespace: String,
    ledger: String,
}

impl Setup {
    fn new(url: String) -> Self {
        let namespace = unique("ns");
        let ledger = format!("ledger_{namespace}");
        Self {
            url,
            namespace,
            ledger,
        }
    }

    async fn inbox(
        &self,
        configure: impl FnOnce(payhook_inbox::InboxBuilder) -> payhook_inbox::InboxBuilder,
    ) -> Inbox {
        let receiver = Receiver::builder().secret(SECRET).build().unwrap();
        let builder = Inbox::builder(receiver)
            .namespace(&self.namespace)
            .backoff(Duration::from_millis(50), Duration::from_millis(200))
            .poll_interval(Duration::from_millis(20));
        let inbox = configure(builder)
            .connect(&self.url)
            .await
            .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"));
        sqlx::query(&format!(
            "CREATE TABLE IF NOT EXISTS {} (event_id TEXT, note TEXT)",
            self.ledger
        ))
        .execute(inbox.pool())
        .await
        .unwrap();
        inbox
    }

    async fn admin(&self) -> Admin {
        Admin::connect(&self.url, &self.namespace).await.unwrap()
    }

    async fn ledger(&self, inbox: &Inbox) -> Vec<(String, String)> {
        sqlx::query(&format!("SELECT event_id, note FROM {}", self.ledger))
            .fetch_all(inbox.pool())
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get::<String, _>(0), row.get::<String, _>(1)))
            .collect()
    }
}

fn event(id: &str, intent: &str, created: i64) -> Bytes {
    Bytes::from(format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","created":{created},"data":{{"object":{{"id":"{intent}","object":"payment_intent","amount":100,"currency":"btc","status":"succeeded","created":1}}}}}}"#
    ))
}

fn signed(body: &Bytes) -> http::HeaderMap {
    SignedDelivery::now(body.clone(), SECRET).unwrap().headers()
}

async fn ingest_ok(inbox: &Inbox, body: &Bytes) {
    let reply = inbox.ingest(&signed(body), body.clone()).await;
    assert_eq!(reply.status().as_u16(), 200, "{}", reply.body());
    assert_eq!(reply.body(), r#"{"received":true}"#);
}

/// The events of the test's namespace in `state`.
async fn in_state(admin: &Admin, state: State) -> Vec<StoredEvent> {
    admin
        .list(&Filter {
            state: Some(state),
            ..Filter::default()
        })
        .await
        .unwrap()
}

async fn state_of(admin: &Admin, id: &str) -> String {
    admin.show(id).await.unwrap().state.to_string()
}

/// Writes one ledger row through the job's transaction.
async fn write_ledger(job: &Job, table: &str, note: &str) -> Result<(), HandlerError> {
    let mut tx = job.transaction().await?;
    sqlx::query(&format!("INSERT INTO {table} (event_id, note) VALUES ($1, $2)"))
        .bind(job.event().id())
        .bind(note)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

// ---------------------------------------------------------------------------

async fn ingest_verifies_first_and_dedupes(url: String) {
    let setup = Setup::new(url);
    let inbox = setup.inbox(|b| b).await;
    let admin = setup.admin().await;
    let body = event("evt_a", "pi_a", 10);

    // Unsigned and wrongly signed deliveries write nothing.
    let reply = inbox.ingest(&http::HeaderMap::new(), body.clone()).await;
    assert_eq!(reply.status().as_u16(), 400);
    assert!(reply
        .body()
        .starts_with("Webhook Error: missing x-service-signature"));
    let mut forged = signed(&body);
    let tampered = Bytes::from(
        body.iter()
            .copied()
            .map(|b| if b == b'1' { b'9' } else { b })
            .collect::<Vec<_>>(),
    );
    let reply = inbox.ingest(&forged, tampered).await;
    assert_eq!(reply.status().as_u16(), 400);
    forged.clear();
    // A signed body that is not an event writes nothing either.
    let junk = Bytes::from_static(br#"{"no":"id"}"#);
    let reply = inbox.ingest(&signed(&junk), junk).await;
    assert_eq!(reply.status().as_u16(), 400);
    assert!(admin.list(&Filter::default()).await.unwrap().is_empty());

    // New and duplicate alike get 200; one row.
    ingest_ok(&inbox, &body).await;
    ingest_ok(&inbox, &body).await;
    let rows = admin.list(&Filter::default()).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].event_id, "evt_a");
    assert_eq!(rows[0].intent_id.as_deref(), Some("pi_a"));
    assert_eq!(rows[0].created, 10);
    assert_eq!(rows[0].state, State::Pending);
    assert_eq!(
        admin.show("evt_a").await.unwrap().body.as_deref(),
        Some(std::str::from_utf8(&body).unwrap())
    );

    // Many concurrent deliveries of the same few events: still one row each.
    let mut tasks = Vec::new();
    for i in 0..40 {
        let inbox = inbox.clone();
        tasks.push(tokio::spawn(async move {
            let body = event(&format!("evt_c{}", i % 5), &format!("pi_c{i}"), 1);
            ingest_ok(&inbox, &body).await;
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let rows = admin.list(&Filter::default()).await.unwrap();
    assert_eq!(rows.len(), 6);
    let mut ids: Vec<&str> = rows.iter().map(|row| row.event_id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["evt_a", "evt_c0", "evt_c1", "evt_c2", "evt_c3", "evt_c4"]);

    // A state this version does not know (a newer one wrote it) fails the
    // read with an error naming it, never a panic or another state; the
    // counts by state leave it out.
    sqlx::query("UPDATE payhook_inbox SET state = 'finished' WHERE namespace = $1 AND event_id = 'evt_a'")
        .bind(&setup.namespace)
        .execute(inbox.pool())
        .await
        .unwrap();
    let err = admin.show("evt_a").await.unwrap_err().to_string();
    assert!(
        err.contains("the stored state \"finished\" is not one this version of payhook knows"),
        "{err}"
    );
    assert!(admin.list(&Filter::default()).await.is_err());
    let stats = admin.stats().await.unwrap();
    assert_eq!(stats.counts().map(|(_, n)| n).sum::<i64>(), 5);
}

async fn concurrent_ingests_store_every_column(url: String) {
    let setup = Setup::new(url);
    let inbox = setup.inbox(|b| b).await;
    let admin = setup.admin().await;
    // Concurrent deliveries are written many to a statement: a burst of 37
    // events, each delivered twice at once, half of them about no payment
    // intent (a NULL column), must come out exactly as sent, one row each.
    let body_of = |i: usize| {
        if i % 2 == 0 {
            event(&format!("evt_b{i}"), &format!("pi_b{i}"), i as i64)
        } else {
            Bytes::from(format!(
                r#"{{"id":"evt_b{i}","type":"customer.created","created":{i},"data":{{"object":{{"id":"cus_{i}"}}}}}}"#
            ))
        }
    };
    let mut tasks = Vec::new();
    for i in 0..74 {
        let (inbox, body) = (inbox.clone(), body_of(i % 37));
        tasks.push(tokio::spawn(async move { ingest_ok(&inbox, &body).await }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let rows = admin.list(&Filter::default()).await.unwrap();
    assert_eq!(rows.len(), 37);
    for i in 0..37 {
        let id = format!("evt_b{i}");
        let shown = admin.show(&id).await.unwrap();
        assert_eq!(
            shown.body.as_deref(),
            Some(std::str::from_utf8(&body_of(i)).unwrap())
        );
        assert_eq!(shown.created, i as i64);
        assert_eq!(shown.state, State::Pending);
        if i % 2 == 0 {
            assert_eq!(shown.event_type, "payment_intent.succeeded");
            assert_eq!(shown.intent_id, Some(format!("pi_b{i}")));
        } else {
            assert_eq!(shown.event_type, "customer.created");
            assert_eq!(shown.intent_id, None);
        }
        assert_eq!(shown.due_at, shown.received_at);
    }
}

async fn handler_writes_commit_with_the_mark(url: String) {
    let setup = Setup::new(url);
    let inbox = setup.inbox(|b| b).await;
    let admin = setup.admin().await;
    for i in 0..20 {
        ingest_ok(&inbox, &event(&format!("evt_{i}"), &format!("pi_{i}"), 1)).await;
    }
    ingest_ok(&inbox, &event("evt_notx", "pi_notx", 1)).await;
    let table = setup.ledger.clone();
    let workers = inbox.start(move |job: Job| {
        let table = table.clone();
        async move {
            if job.event().id() == "evt_notx" {
                return Ok(()); // never opens the transaction: still marked done
            }
            write_ledger(&job, &table, "ok").await
        }
    });
    eventually("all done", || async {
        in_state(&admin, State::Done).await.len() == 21
    })
    .await;
    workers.shutdown().await;
    let ledger = setup.ledger(&inbox).await;
    assert_eq!(ledger.len(), 20);
    // Each event once, by id (a count alone would pass with one twice and one lost).
    let mut ids: Vec<String> = ledger.iter().map(|(id, _)| id.clone()).collect();
    ids.sort();
    let mut expected: Vec<String> = (0..20).map(|i| format!("evt_{i}")).collect();
    expected.sort();
    assert_eq!(ids, expected);
    let shown = admin.show("evt_3").await.unwrap();
    assert_eq!(shown.attempts, 1);
    assert!(shown.done_at.is_some());
    // A repeat of a done event is acknowledged and not run again, even with
    // workers running: a later event is handled, the repeat is not.
    ingest_ok(&inbox, &event("evt_3", "pi_3", 1)).await;
    assert_eq!(state_of(&admin, "evt_3").await, "done");
    ingest_ok(&inbox, &event("evt_after", "pi_after", 1)).await;
    let table = setup.ledger.clone();
    let workers = inbox.start(move |job: Job| {
        let table = table.clone();
        async move { write_ledger(&job, &table, "again").await }
    });
    eventually("the later event done", || async {
        state_of(&admin, "evt_after").await == "done"
    })
    .await;
    workers.shutdown().await;
    let mut ledger = setup.ledger(&inbox).await;
    ledger.retain(|(_, note)| note == "again");
    assert_eq!(ledger, [("evt_after".to_owned(), "again".to_owned())]);
    assert_eq!(admin.show("evt_3").await.unwrap().attempts, 1);
}

async fn failures_retry_then_succeed_and_roll_back(url: String) {
    let setup = Setup::new(url);
    let inbox = setup.inbox(|b| b.max_attempts(5)).await;
    let admin = setup.admin().await;
    ingest_ok(&inbox, &event("evt_flaky", "pi_f", 1)).await;
    ingest_ok(&inbox, &event("evt_panic", "pi_p", 1)).await;
    let table = setup.ledger.clone();
    let workers = inbox.start(move |job: Job| {
        let table = table.clone();
        async move {
            // The row is written, then the attempt fails: the row must vanish.
            write_ledger(&job, &table, &format!("attempt {}", job.attempt())).await?;
            if job.attempt() <= 2 {
                if job.event().id() == "evt_panic" {
                    panic!("boom on attempt {}", job.attempt());
                }
                return Err(format!("failing attempt {}", job.attempt()).into());
            }
            Ok(())
        }
    });
    eventually("both done", || async {
        state_of(&admin, "evt_flaky").await == "done" && state_of(&admin, "evt_panic").await == "done"
    })
    .await;
    workers.shutdown().await;
    let mut ledger = setup.ledger(&inbox).await;
    ledger.sort();
    assert_eq!(
        ledger,
        vec![
            ("evt_flaky".to_owned(), "attempt 3".to_owned()),
            ("evt_panic".to_owned(), "attempt 3".to_owned())
        ]
    );
    // Done clears the last error; the attempt history stays.
    let flaky = admin.show("evt_flaky").await.unwrap();
    assert_eq!(flaky.attempts, 3);
    assert_eq!(flaky.last_error, None);
    assert!(flaky.last_attempt_at.is_some());
    let panicked = admin.show("evt_panic").await.unwrap();
    assert_eq!(panicked.attempts, 3);
    assert_eq!(panicked.last_error, None);
}

async fn dead_after_last_attempt_then_retry(url: String) {
    let setup = Setup::new(url);
    let inbox = setup.inbox(|b| b.max_attempts(2)).await;
    let admin = setup.admin().await;
    ingest_ok(&inbox, &event("evt_dead", "pi_d", 1)).await;
    let table = setup.ledger.clone();
    let workers = inbox.start(move |job: Job| {
        let table = table.clone();
        async move {
            write_ledger(&job, &table, "x").await?;
            if job.attempt() <= 2 {
                return Err("not yet".into());
            }
            Ok(())
        }
    });
    eventually("dead", || async { state_of(&admin, "evt_dead").await == "dead" }).await;
    // Dead stays dead: no further attempts.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let dead = admin.show("evt_dead").await.unwrap();
    assert_eq!((dead.state.as_str(), dead.attempts), ("dead", 2));
    assert_eq!(dead.last_error.as_deref(), Some("not yet"));
    let listed = in_state(&admin, State::Dead).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].event_id, "evt_dead");
    assert!(setup.ledger(&inbox).await.is_empty());

    assert_eq!(admin.retry_dead().await.unwrap(), 1);
    eventually("done after retry", || async {
        state_of(&admin, "evt_dead").await == "done"
    })
    .await;
    assert_eq!(setup.ledger(&inbox).await.len(), 1);
    assert!(matches!(
        admin.retry("evt_dead").await,
        Err(InboxError::NotFound(_))
    ));

    // Replay makes done events run again, explicitly; purge removes done rows.
    assert_eq!(admin.replay_since(0).await.unwrap(), 1);
    eventually("done after replay", || async {
        state_of(&admin, "evt_dead").await == "done"
    })
    .await;
    assert_eq!(setup.ledger(&inbox).await.len(), 2);
    workers.shutdown().await;
    assert_eq!(admin.purge_done_before(i64::MAX).await.unwrap().events, 1);
    assert!(matches!(
        admin.show("evt_dead").await,
        Err(InboxError::NotFound(_))
    ));
}

async fn one_intent_runs_in_created_order_never_concurrently(url: String) {
    let setup = Setup::new(url);
    let inbox = setup.inbox(|b| b.concurrency(8)).await;
    let admin = setup.admin().await;
    // A reversed pair (the later event arrives first), and a longer shuffled run.
    ingest_ok(&inbox, &event("evt_second", "pi_pair", 200)).await;
    ingest_ok(&inbox, &event("evt_first", "pi_pair", 100)).await;
    for created in [5, 3, 9, 1, 7, 2, 8, 4, 6] {
        ingest_ok(&inbox, &event(&format!("evt_run{created}"), "pi_run", created)).await;
        ingest_ok(
            &inbox,
            &event(&format!("evt_other{created}"), &format!("pi_o{created}"), created),
        )
        .await;
    }
    let order: Arc<Mutex<HashMap<String, Vec<i64>>>> = Arc::default();
    let running: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let overlap = Arc::new(AtomicUsize::new(0));
    let (o, r, v) = (Arc::clone(&order), Arc::clone(&running), Arc::clone(&overlap));
    let workers = inbox.start(move |job: Job| {
        let (order, running, overlap) = (Arc::clone(&o), Arc::clone(&r), Arc::clone(&v));
        async move {
            let intent = job.event().payment_intent().unwrap().id.clone();
            {
                let mut running = running.lock().unwrap();
                let now = running.entry(intent.clone()).or_default();
                *now += 1;
                if *now > 1 {
                    overlap.fetch_add(1, Ordering::Relaxed);
                }
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
            order
                .lock()
                .unwrap()
                .entry(intent.clone())
                .or_default()
                .push(job.event().created().unwrap());
            *running.lock().unwrap().get_mut(&intent).unwrap() -= 1;
            Ok(())
        }
    });
    eventually("all done", || async {
        in_state(&admin, State::Done).await.len() == 20
    })
    .await;
    workers.shutdown().await;
    let order = order.lock().unwrap();
    assert_eq!(order["pi_pair"], vec![100, 200]);
    assert_eq!(order["pi_run"], (1..=9).collect::<Vec<_>>());
    assert_eq!(
        overlap.load(Ordering::Relaxed),
        0,
        "two events of one intent ran at once"
    );
}

/// Only an intent's first waiting event may be claimed, and a claim reads
/// the first due events before the rest of the queue (on PostgreSQL a window
/// of at least 64: see the queue's docs). With 100 events of one intent ahead
/// in the queue and that intent's first event still running, an event of
/// another intent behind them is claimed and handled all the same.
async fn an_event_behind_a_held_intents_backlog_is_claimed(url: String) {
    let setup = Setup::new(url);
    let inbox = setup.inbox(|b| b.concurrency(2)).await;
    let admin = setup.admin().await;
    for created in 1..=100 {
        ingest_ok(&inbox, &event(&format!("evt_held{created}"), "pi_held", created)).await;
    }
    ingest_ok(&inbox, &event("evt_free", "pi_free", 1)).await;
    let release = Arc::new(tokio::sync::Notify::new());
    let handled: Arc<Mutex<Vec<String>>> = Arc::default();
    let (r, h) = (Arc::clone(&release), Arc::clone(&handled));
    let workers = inbox.start(move |job: Job| {
        let (release, handled) = (Arc::clone(&r), Arc::clone(&h));
        async move {
            let id = job.event().id().to_owned();
            if id == "evt_held1" {
                release.notified().await;
            }
            handled.lock().unwrap().push(id);
            Ok(())
        }
    });
    eventually(
        "the other intent's event handled while the held one runs",
        || async { handled.lock().unwrap().iter().any(|id| id == "evt_free") },
    )
    .await;
    assert!(
        !handled
            .lock()
            .unwrap()
            .iter()
            .any(|id| id.starts_with("evt_held")),
        "an event of the held intent ran before its first one ended"
    );
    release.notify_one();
    eventually("every event done", || async {
        in_state(&admin, State::Done).await.len() == 101
    })
    .await;
    workers.shutdown().await;
    let handled = handled.lock().unwrap();
    let held: Vec<&String> = handled.iter().filter(|id| id.starts_with("evt_held")).collect();
    let in_order: Vec<String> = (1..=100).map(|created| format!("evt_held{created}")).collect();
    assert_eq!(held, in_order.iter().collect::<Vec<_>>());
}

/// A claim that finds fewer events in its window than it has handlers free
/// reads the rest of the queue (on PostgreSQL; SQLite's claim reads it
/// all): with two intents' 200 events ahead in the queue, a claim finds at
/// most their two first events there, and the third handler takes an event
/// of another intent behind them at once, not after the two intents' events
/// have run down.
async fn a_free_handler_takes_an_event_from_beyond_the_window(url: String) {
    let setup = Setup::new(url);
    let inbox = setup.inbox(|b| b.concurrency(3)).await;
    let admin = setup.admin().await;
    for created in 1..=100 {
        for intent in ["pi_a", "pi_b"] {
            ingest_ok(
                &inbox,
                &event(&format!("evt_{intent}_{created}"), intent, created),
            )
            .await;
        }
    }
    ingest_ok(&inbox, &event("evt_free", "pi_free", 1)).await;
    let handled: Arc<Mutex<Vec<String>>> = Arc::default();
    let h = Arc::clone(&handled);
    let workers = inbox.start(move |job: Job| {
        let handled = Arc::clone(&h);
        async move {
            let id = job.event().id().to_owned();
            if id != "evt_free" {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            handled.lock().unwrap().push(id);
            Ok(())
        }
    });
    eventually("every event done", || async {
        in_state(&admin, State::Done).await.len() == 201
    })
    .await;
    workers.shutdown().await;
    let handled = handled.lock().unwrap();
    let free_at = handled.iter().position(|id| id == "evt_free").unwrap();
    assert!(
        free_at < 20,
        "the event beyond the window waited for {free_at} events of the two busy intents"
    );
}

async fn lost_lease_rolls_back_the_late_commit(url: String) {
    let setup = Setup::new(url);
    // A long lease: no renewal happens during the test, so the take-over below
    // is the only thing that moves the lease. One handler at a time: the
    // stalled one keeps this process from claiming the event again itself.
    let slow = setup
        .inbox(|b| b.lease(Duration::from_secs(60)).concurrency(1))
        .await;
    let admin = setup.admin().await;
    ingest_ok(&slow, &event("evt_lease", "pi_l", 1)).await;

    let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
    let started_tx = Arc::new(Mutex::new(Some(started_tx)));
    let (go_tx, go) = tokio::sync::watch::channel(false);
    let outcome: Arc<Mutex<Option<String>>> = Arc::default();
    let (table, out) = (setup.ledger.clone(), Arc::clone(&outcome));
    let slow_workers = slow.start(move |job: Job| {
        let (table, out, started_tx, mut go) = (
            table.clone(),
            Arc::clone(&out),
            Arc::clone(&started_tx),
            go.clone(),
        );
        async move {
            if let Some(tx) = started_tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
            let _ = go.wait_for(|go| *go).await;
            let result = write_ledger(&job, &table, "slow").await;
            *out.lock().unwrap() = Some(match &result {
                Ok(()) => "committed".to_owned(),
                Err(err) => err.to_string(),
            });
            result
        }
    });
    started.await.unwrap();
    // The slow worker stalls past its lease (as a paused process would): make
    // the lease run out, and let a second worker take the event over.
    sqlx::query("UPDATE payhook_inbox SET lease_until = 0 WHERE namespace = $1 AND event_id = 'evt_lease'")
        .bind(&setup.namespace)
        .execute(slow.pool())
        .await
        .unwrap();
    let fast = setup.inbox(|b| b).await;
    let table = setup.ledger.clone();
    let fast_workers = fast.start(move |job: Job| {
        let table = table.clone();
        async move { write_ledger(&job, &table, "fast").await }
    });
    eventually("taken over and done", || async {
        state_of(&admin, "evt_lease").await == "done"
    })
    .await;
    go_tx.send(true).unwrap();
    eventually("slow attempt finished", || async {
        outcome.lock().unwrap().is_some()
    })
    .await;
    slow_workers.shutdown().await;
    fast_workers.shutdown().await;
    let outcome = outcome.lock().unwrap().clone().unwrap();
    assert!(outcome.contains("lease on event evt_lease was lost"), "{outcome}");
    assert_eq!(
        setup.ledger(&slow).await,
        vec![("evt_lease".to_owned(), "fast".to_owned())]
    );
    // The stalled attempt was never counted (nothing is written before a
    // handler runs, and its end could not commit): the worker that took the
    // event over ran it as a suspect's first counted attempt.
    let shown = admin.show("evt_lease").await.unwrap();
    assert_eq!((shown.state.as_str(), shown.attempts), ("done", 1));
    // The late worker recorded nothing: the one attempt in the record is the
    // one that ended (a record of the lost one under the same number would
    // have hidden it).
    assert_eq!(
        attempt_record(&admin, "evt_lease").await,
        [(1, "done".to_owned())]
    );
}

async fn lost_lease_voids_the_late_mark_of_a_handler_without_transaction(url: String) {
    let setup = Setup::new(url);
    // As above, but neither handler opens its transaction: their done marks
    // are written in batches, and the stalled worker's mark must still be
    // refused while the event belongs to the worker that took it over.
    let slow = setup
        .inbox(|b| b.lease(Duration::from_secs(60)).concurrency(1))
        .await;
    let admin = setup.admin().await;
    ingest_ok(&slow, &event("evt_mark", "pi_m", 1)).await;

    let gate = |started: tokio::sync::oneshot::Sender<()>, go: tokio::sync::watch::Receiver<bool>| {
        let started = Arc::new(Mutex::new(Some(started)));
        move |_job: Job| {
            let (started, mut go) = (Arc::clone(&started), go.clone());
            async move {
                if let Some(tx) = started.lock().unwrap().take() {
                    let _ = tx.send(());
                }
                let _ = go.wait_for(|go| *go).await;
                Ok::<(), HandlerError>(())
            }
        }
    };
    let (slow_started_tx, slow_started) = tokio::sync::oneshot::channel();
    let (slow_go, slow_wait) = tokio::sync::watch::channel(false);
    let slow_workers = slow.start(gate(slow_started_tx, slow_wait));
    slow_started.await.unwrap();
    sqlx::query("UPDATE payhook_inbox SET lease_until = 0 WHERE namespace = $1 AND event_id = 'evt_mark'")
        .bind(&setup.namespace)
        .execute(slow.pool())
        .await
        .unwrap();
    let fast = setup.inbox(|b| b).await;
    let (fast_started_tx, fast_started) = tokio::sync::oneshot::channel();
    let (fast_go, fast_wait) = tokio::sync::watch::channel(false);
    let fast_workers = fast.start(gate(fast_started_tx, fast_wait));
    fast_started.await.unwrap();

    // The stalled handler returns Ok now; shutdown waits until its mark has
    // been tried. The event is the other worker's: still running, not done.
    slow_go.send(true).unwrap();
    slow_workers.shutdown().await;
    let shown = admin.show("evt_mark").await.unwrap();
    assert_eq!((shown.state.as_str(), shown.attempts), ("running", 1));

    fast_go.send(true).unwrap();
    eventually("done by the worker that took it over", || async {
        state_of(&admin, "evt_mark").await == "done"
    })
    .await;
    fast_workers.shutdown().await;
    // Only the attempt that ended is counted.
    let shown = admin.show("evt_mark").await.unwrap();
    assert_eq!((shown.state.as_str(), shown.attempts), ("done", 1));
    assert_eq!(attempt_record(&admin, "evt_mark").await, [(1, "done".to_owned())]);
}

/// What cannot work is a clear error on the database the test is given,
/// naming no password: an unsupported scheme is named; a setting out of range
/// is refused before the database is opened (on SQLite, no file is created);
/// and a database that cannot be opened is a database error of the kind that
/// says why. On SQLite: a file in a directory that does not exist (refused,
/// and the directory is not created). On PostgreSQL: a database the given
/// server does not have (refused by the server, which names it), and a port
/// nothing listens on (unavailable or timed out: worth retrying).
async fn unreachable_database_is_a_clear_error(url: String) {
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let err = Inbox::connect(receiver.clone(), "mysql://localhost/db")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("unsupported database URL"), "{err}");
    let err = Inbox::builder(receiver.clone())
        .max_attempts(0)
        .connect(&url)
        .await
        .unwrap_err();
    assert!(
        matches!(err, InboxError::InvalidSetting(_)) && err.to_string().contains("max_attempts"),
        "{err}"
    );
    if let Some(path) = url.strip_prefix("sqlite://") {
        let path = std::path::Path::new(path);
        assert!(!path.exists(), "a refused setting created {}", path.display());
        let missing_dir = path.parent().unwrap().join(unique("missing"));
        let missing = format!("sqlite://{}", missing_dir.join("inbox.db").display());
        let err = Inbox::connect(receiver, &missing).await.unwrap_err();
        assert!(matches!(err, InboxError::Database(_)), "{err}");
        assert_eq!(err.kind(), StoreErrorKind::Refused, "{err}");
        assert!(err.to_string().contains("unable to open database file"), "{err}");
        assert!(!missing_dir.exists(), "{} was created", missing_dir.display());
    } else {
        let database = unique("payhook_absent");
        let err = Inbox::builder(receiver.clone())
            .acquire_timeout(Duration::from_secs(5))
            .connect(&postgres_url_of(&database))
            .await
            .unwrap_err();
        assert!(matches!(err, InboxError::Database(_)), "{err}");
        assert_eq!(err.kind(), StoreErrorKind::Refused, "{err}");
        assert!(
            err.to_string()
                .contains(&format!("database \"{database}\" does not exist")),
            "{err}"
        );
        // Nothing listens on port 1: connecting fails, and the error holds no password.
        let err = Inbox::builder(receiver)
            .acquire_timeout(Duration::from_secs(2))
            .connect("postgres://user:hunter2@127.0.0.1:1/db")
            .await
            .unwrap_err();
        assert!(matches!(err, InboxError::Database(_)), "{err}");
        // Worth retrying, unlike the refusals above: the pool waits out its
        // acquire timeout for a server that may come up.
        assert!(
            matches!(err.kind(), StoreErrorKind::Unavailable | StoreErrorKind::TimedOut),
            "{err}"
        );
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}

/// What no backend can store — NUL in the id, type or intent id, or an id
/// longer than MAX_ID_BYTES — is refused at intake with 400 naming the field,
/// the same on both backends, and never fails the deliveries beside it.
async fn poison_events_are_refused_alone(url: String) {
    let setup = Setup::new(url);
    let inbox = setup.inbox(|b| b).await;
    let admin = setup.admin().await;
    let long_id = format!("evt_{}", "x".repeat(3000));
    let mut tasks = Vec::new();
    for i in 0..300 {
        let inbox = inbox.clone();
        let long_id = long_id.clone();
        tasks.push(tokio::spawn(async move {
            let (body, field) = match i % 10 {
                0 => match (i / 10) % 4 {
                    0 => (
                        event(&format!("evt_nul\\u0000{i}"), &format!("pi_{i}"), 1),
                        Some("id contains a NUL"),
                    ),
                    1 => (
                        event(&format!("{long_id}{i}"), &format!("pi_{i}"), 1),
                        Some("id is longer than 255 bytes"),
                    ),
                    2 => (
                        Bytes::from(
                            String::from_utf8(event(&format!("evt_t{i}"), &format!("pi_{i}"), 1).to_vec())
                                .unwrap()
                                .replace("payment_intent.succeeded", "payment_intent.succ\\u0000eeded"),
                        ),
                        Some("type contains a NUL"),
                    ),
                    _ => (
                        event(&format!("evt_pi{i}"), &format!("pi_\\u0000{i}"), 1),
                        Some("data.object.id contains a NUL"),
                    ),
                },
                _ => (event(&format!("evt_ok{i}"), &format!("pi_{i}"), 1), None),
            };
            let reply = inbox.ingest(&signed(&body), body.clone()).await;
            (i, reply.status().as_u16(), reply.body().to_owned(), field)
        }));
    }
    let mut good = 0;
    for task in tasks {
        let (i, status, body, field) = task.await.unwrap();
        match field {
            None => {
                assert_eq!(
                    (status, body.as_str()),
                    (200, r#"{"received":true}"#),
                    "delivery {i}"
                );
                good += 1;
            }
            Some(field) => {
                assert_eq!(status, 400, "delivery {i}: {body}");
                assert!(body.starts_with("Webhook Error: invalid payload: "), "{body}");
                assert!(body.contains(field), "delivery {i}: {body} should name {field}");
            }
        }
    }
    assert_eq!(good, 270);
    let stored = admin
        .list(&Filter {
            limit: Some(1000),
            ..Filter::default()
        })
        .await
        .unwrap();
    assert_eq!(stored.len(), 270);
    assert!(stored.iter().all(|event| event.event_id.starts_with("evt_ok")));
    // An id of exactly the limit is stored.
    let at_limit = format!("evt_{}", "y".repeat(payhook_inbox::MAX_ID_BYTES - 4));
    ingest_ok(&inbox, &event(&at_limit, "pi_limit", 1)).await;
}

/// A row the database itself refuses (here a trigger) fails its own delivery
/// with a 503 that names no database internals; the batch it shared a
/// statement with is written row by row, so every other delivery gets 200.
async fn a_row_the_database_refuses_fails_alone_with_a_plain_503(url: String) {
    let setup = Setup::new(url.clone());
    let inbox = setup.inbox(|b| b).await;
    let postgres = url.starts_with("postgres");
    let trigger = format!("refuse_{}", setup.namespace);
    if postgres {
        sqlx::query(&format!(
            "CREATE FUNCTION {trigger}() RETURNS trigger AS $$ BEGIN \
               IF NEW.event_id LIKE 'evt_refused%' THEN \
                 RAISE EXCEPTION 'refused in payhook_inbox_namespace_event_id_key by the test trigger'; \
               END IF; RETURN NEW; END $$ LANGUAGE plpgsql"
        ))
        .execute(inbox.pool())
        .await
        .unwrap();
        sqlx::query(&format!(
            "CREATE TRIGGER {trigger} BEFORE INSERT ON payhook_inbox FOR EACH ROW \
             WHEN (NEW.namespace = '{}') EXECUTE FUNCTION {trigger}()",
            setup.namespace
        ))
        .execute(inbox.pool())
        .await
        .unwrap();
    } else {
        sqlx::query(&format!(
            "CREATE TRIGGER {trigger} BEFORE INSERT ON payhook_inbox \
             WHEN NEW.namespace = '{}' AND NEW.event_id LIKE 'evt_refused%' \
             BEGIN SELECT RAISE(ABORT, 'refused in payhook_inbox_namespace_event_id_key by the test trigger'); END",
            setup.namespace
        ))
        .execute(inbox.pool())
        .await
        .unwrap();
    }
    let mut tasks = Vec::new();
    for i in 0..200 {
        let inbox = inbox.clone();
        tasks.push(tokio::spawn(async move {
            let id = if i % 10 == 3 {
                format!("evt_refused{i}")
            } else {
                format!("evt_fine{i}")
            };
            let body = event(&id, &format!("pi_{i}"), 1);
            let reply = inbox.ingest(&signed(&body), body.clone()).await;
            (id, reply.status().as_u16(), reply.body().to_owned())
        }));
    }
    let mut refused = 0;
    for task in tasks {
        let (id, status, body) = task.await.unwrap();
        if id.starts_with("evt_refused") {
            refused += 1;
            assert_eq!(status, 503, "{id}: {body}");
            assert_eq!(
                body,
                "Webhook Error: inbox database unavailable: the database refused the write"
            );
        } else {
            assert_eq!((status, body.as_str()), (200, r#"{"received":true}"#), "{id}");
        }
    }
    assert_eq!(refused, 20);
    let stored = setup
        .admin()
        .await
        .list(&Filter {
            limit: Some(1000),
            ..Filter::default()
        })
        .await
        .unwrap();
    assert_eq!(stored.len(), 180);
    let drop = format!(
        "DROP TRIGGER {trigger}{}",
        if postgres { " ON payhook_inbox" } else { "" }
    );
    sqlx::query(&drop).execute(inbox.pool()).await.unwrap();
}

/// A claim whose lease ran out on a suspect's last attempt (counted by its
/// start mark; the worker died) makes it dead with a message saying so; one
/// with attempts left is taken up again; `wait_idle` returns once nothing is
/// waiting.
async fn an_expired_last_attempt_is_dead_and_wait_idle_waits(url: String) {
    let setup = Setup::new(url);
    let inbox = setup.inbox(|b| b.max_attempts(2)).await;
    let admin = setup.admin().await;
    for id in ["evt_died_last", "evt_died_first", "evt_fresh"] {
        ingest_ok(&inbox, &event(id, &format!("pi_{id}"), 1)).await;
    }
    // Two suspects' attempts, counted, cut short by a worker that died: one
    // on its last attempt.
    for (id, attempts) in [("evt_died_last", 2), ("evt_died_first", 1)] {
        sqlx::query(
            "UPDATE payhook_inbox SET state = 'running', attempts = $1, lease_token = 7, lease_until = 1, suspect = 2 \
             WHERE namespace = $2 AND event_id = $3",
        )
        .bind(attempts)
        .bind(&setup.namespace)
        .bind(id)
        .execute(inbox.pool())
        .await
        .unwrap();
    }
    let running = admin.show("evt_died_last").await.unwrap();
    assert_eq!(
        running.lease_until,
        Some(1),
        "show reports when the lease runs out"
    );
    assert!(matches!(
        inbox.wait_idle(Duration::from_millis(50)).await,
        Err(InboxError::NotIdle(3))
    ));
    let table = setup.ledger.clone();
    let workers = inbox.start(move |job: Job| {
        let table = table.clone();
        async move { write_ledger(&job, &table, "ok").await }
    });
    inbox.wait_idle(Duration::from_secs(20)).await.unwrap();
    workers.shutdown().await;
    let dead = admin.show("evt_died_last").await.unwrap();
    assert_eq!((dead.state.as_str(), dead.attempts), ("dead", 2));
    assert_eq!(
        dead.last_error.as_deref(),
        Some("the worker stopped while handling it (attempt 2 of 2)")
    );
    assert_eq!(dead.lease_until, None);
    let again = admin.show("evt_died_first").await.unwrap();
    assert_eq!((again.state.as_str(), again.attempts), ("done", 2));
    let mut ledger = setup.ledger(&inbox).await;
    ledger.sort();
    assert_eq!(
        ledger,
        vec![
            ("evt_died_first".to_owned(), "ok".to_owned()),
            ("evt_fresh".to_owned(), "ok".to_owned())
        ]
    );
}

/// Done events older than the retention are purged, in batches; younger done
/// events and events in every other state stay.
async fn retention_purges_old_done_events_only(url: String) {
    // More old done rows than two purge batches (1 000 rows on PostgreSQL,
    // 25 on SQLite), so the purge goes on past a full batch; on SQLite no
    // more, as its batches rest 99 times their time (a second for ten).
    let old: usize = if url.starts_with("sqlite") { 240 } else { 2400 };
    let setup = Setup::new(url);
    let inbox = setup.inbox(|b| b.retention(Duration::from_secs(3600))).await;
    let admin = setup.admin().await;
    let ids: Vec<String> = (0..old + 100).map(|i| format!("evt_r{i:04}")).collect();
    let mut tasks = Vec::new();
    for chunk in ids.chunks(ids.len().div_ceil(10)) {
        let (inbox, chunk) = (inbox.clone(), chunk.to_vec());
        tasks.push(tokio::spawn(async move {
            for id in chunk {
                ingest_ok(&inbox, &event(&id, &format!("pi_{id}"), 1)).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let hour_ago = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64 - 3_700_000;
    // The old done rows (received, then done, an hour ago), one young done
    // row (received an hour ago, done within the retention), and old rows
    // in the other states.
    let first_kept = format!("evt_r{old:04}");
    sqlx::query("UPDATE payhook_inbox SET state = 'done', done_at = $1, received_at = $1 WHERE namespace = $2 AND event_id < $3")
        .bind(hour_ago)
        .bind(&setup.namespace)
        .bind(&first_kept)
        .execute(inbox.pool())
        .await
        .unwrap();
    let kept: Vec<(String, &str)> = ["done", "dead", "running"]
        .into_iter()
        .enumerate()
        .map(|(at, state)| (format!("evt_r{:04}", old + at), state))
        .collect();
    for (id, state) in &kept {
        sqlx::query("UPDATE payhook_inbox SET state = $1, done_at = $2, received_at = $3, lease_until = $4 WHERE namespace = $5 AND event_id = $6")
            .bind(*state)
            .bind((*state == "done").then(|| hour_ago + 200_000))
            .bind(hour_ago)
            .bind(i64::MAX)
            .bind(&setup.namespace)
            .bind(id)
            .execute(inbox.pool())
            .await
            .unwrap();
    }
    let old_done = || async {
        admin
            .list(&Filter {
                state: Some(State::Done),
                limit: Some(10_000),
                ..Filter::default()
            })
            .await
            .unwrap()
            .iter()
            .filter(|event| event.event_id < first_kept)
            .count()
    };
    assert_eq!(old_done().await, old);
    let workers = inbox.start(|_job: Job| async { Ok(()) });
    eventually("old done rows purged", || async { old_done().await == 0 }).await;
    workers.shutdown().await;
    let left: Vec<(String, String)> = admin
        .list(&Filter {
            limit: Some(10_000),
            ..Filter::default()
        })
        .await
        .unwrap()
        .into_iter()
        .filter(|event| event.event_id <= kept[2].0)
        .map(|event| (event.event_id, event.state.to_string()))
        .collect();
    let mut left = left;
    left.sort();
    let kept: Vec<(String, String)> = kept
        .into_iter()
        .map(|(id, state)| (id, state.to_owned()))
        .collect();
    assert_eq!(left, kept);
}

/// The overview's counts (`Admin::stats`), which the database keeps in a
/// tally as events change rather than counting the history, against the
/// events themselves after each kind of write: intake (new and repeated
/// deliveries), handling, failing to dead, retry, replay, the retention
/// purge and a bulk purge.
async fn stats_are_the_exact_counts_after_every_kind_of_write(url: String) {
    async fn exact(inbox: &Inbox, namespace: &str) -> Vec<(State, i64)> {
        let rows =
            sqlx::query("SELECT state, COUNT(*) AS n FROM payhook_inbox WHERE namespace = $1 GROUP BY state")
                .bind(namespace)
                .fetch_all(inbox.pool())
                .await
                .unwrap();
        let mut counts: HashMap<String, i64> = rows
            .iter()
            .map(|row| (row.get::<String, _>("state"), row.get::<i64, _>("n")))
            .collect();
        State::ALL
            .iter()
            .map(|&state| (state, counts.remove(state.as_str()).unwrap_or(0)))
            .collect()
    }
    async fn check(admin: &Admin, inbox: &Inbox, namespace: &str, after: &str) -> Vec<(State, i64)> {
        let counted = exact(inbox, namespace).await;
        let stats = admin.stats().await.unwrap();
        let shown: Vec<(State, i64)> = stats.counts().collect();
        assert_eq!(shown, counted, "the overview's counts after {after}");
        counted
    }

    let setup = Setup::new(url);
    let inbox = setup.inbox(|b| b.max_attempts(1)).await;
    let admin = setup.admin().await;
    let namespace = setup.namespace.clone();
    // Another namespace's events on the same tables count only there.
    let other = Setup {
        namespace: unique("ns_other"),
        ..Setup::new(setup.url.clone())
    };
    let other_inbox = other.inbox(|b| b).await;
    ingest_ok(&other_inbox, &event("evt_elsewhere", "pi_elsewhere", 1)).await;

    for i in 0..12 {
        ingest_ok(
            &inbox,
            &event(&format!("evt_tally_{i:02}"), &format!("pi_tally_{i}"), 1),
        )
        .await;
    }
    // A repeated delivery stores nothing more.
    ingest_ok(&inbox, &event("evt_tally_00", "pi_tally_0", 1)).await;
    let counted = check(&admin, &inbox, &namespace, "intake").await;
    assert_eq!(counted[0], (State::Pending, 12));

    let workers = inbox.start(|job: Job| async move {
        if job.event().id() < "evt_tally_03" {
            return Err("refused".into());
        }
        Ok(())
    });
    inbox.wait_idle(Duration::from_secs(20)).await.unwrap();
    workers.shutdown().await;
    let counted = check(&admin, &inbox, &namespace, "handling").await;
    assert_eq!((counted[2], counted[3]), ((State::Dead, 3), (State::Done, 9)));

    admin.retry("evt_tally_00").await.unwrap();
    check(&admin, &inbox, &namespace, "a retry").await;
    assert_eq!(admin.replay_since(0).await.unwrap(), 9);
    check(&admin, &inbox, &namespace, "a replay").await;
    let workers = inbox.start(|_job: Job| async { Ok(()) });
    inbox.wait_idle(Duration::from_secs(20)).await.unwrap();
    workers.shutdown().await;
    let counted = check(&admin, &inbox, &namespace, "handling again").await;
    assert_eq!((counted[2], counted[3]), ((State::Dead, 2), (State::Done, 10)));

    let purged = admin.purge_done_before(i64::MAX / 2).await.unwrap();
    assert_eq!(purged.events, 10);
    check(&admin, &inbox, &namespace, "the retention purge").await;
    let everything = payhook_inbox::admin::Selection::default();
    let count = admin
        .bulk_count(payhook_inbox::admin::BulkAction::Purge, &everything, None)
        .await
        .unwrap();
    admin
        .bulk_run(payhook_inbox::admin::BulkAction::Purge, &everything, &count)
        .await
        .unwrap();
    let counted = check(&admin, &inbox, &namespace, "a bulk purge").await;
    assert!(counted.iter().all(|&(_, n)| n == 0), "{counted:?}");

    let elsewhere = Admin::connect(&setup.url, &other.namespace).await.unwrap();
    check(
        &elsewhere,
        &other_inbox,
        &other.namespace,
        "writes in another namespace",
    )
    .await;
    assert_eq!(elsewhere.stats().await.unwrap().count(State::Pending), 1);
}

on_every_backend!(
    sqlite: sqlite_url("payhook-inbox-test"), postgres: postgres_url(), worker_threads: 4;
    ingest_verifies_first_and_dedupes,
    concurrent_ingests_store_every_column,
    handler_writes_commit_with_the_mark,
    failures_retry_then_succeed_and_roll_back,
    dead_after_last_attempt_then_retry,
    one_intent_runs_in_created_order_never_concurrently,
    an_event_behind_a_held_intents_backlog_is_claimed,
    a_free_handler_takes_an_event_from_beyond_the_window,
    lost_lease_rolls_back_the_late_commit,
    lost_lease_voids_the_late_mark_of_a_handler_without_transaction,
    unreachable_database_is_a_clear_error,
    stats_are_the_exact_counts_after_every_kind_of_write,
    poison_events_are_refused_alone,
    a_row_the_database_refuses_fails_alone_with_a_plain_503,
    an_expired_last_attempt_is_dead_and_wait_idle_waits,
    retention_purges_old_done_events_only,
);

/// SQLite connections keep the page cache the builder set (default 256 KiB),
/// which bounds the memory each pooled connection grows to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_page_cache_is_bounded_as_configured() {
    let setup = Setup::new(sqlite_url("payhook-inbox-test"));
    let inbox = setup.inbox(|b| b).await;
    let default: i64 = sqlx::query_scalar("PRAGMA cache_size")
        .fetch_one(inbox.pool())
        .await
        .unwrap();
    assert_eq!(default, -i64::from(payhook_inbox::DEFAULT_SQLITE_CACHE_KIB));
    let inbox = setup.inbox(|b| b.sqlite_page_cache(4096)).await;
    let configured: i64 = sqlx::query_scalar("PRAGMA cache_size")
        .fetch_one(inbox.pool())
        .await
        .unwrap();
    assert_eq!(configured, -4096);
}

/// Settings that would overflow a deadline later, and URLs that cannot be
/// parsed, are refused by `connect` with a clear error (holding no password)
/// rather than panicking a worker or the pool afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_settings_and_malformed_urls_are_clear_errors() {
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let url = sqlite_url("payhook-inbox-test");
    type Configure = fn(payhook_inbox::InboxBuilder) -> payhook_inbox::InboxBuilder;
    let cases: [(&str, Configure); 10] = [
        // The receiver's own bounds: 1 s at least for both.
        ("lease must be at least 1 s", |b| {
            b.lease(Duration::from_millis(999))
        }),
        ("retention must be at least 1 second", |b| {
            b.retention(Duration::from_millis(999))
        }),
        ("acquire timeout", |b| {
            b.skip_migrations().acquire_timeout(Duration::ZERO)
        }),
        ("concurrency", |b| b.concurrency(usize::MAX)),
        ("lease", |b| b.lease(Duration::MAX)),
        ("retention", |b| b.retention(Duration::MAX)),
        ("backoff", |b| b.backoff(Duration::from_secs(1), Duration::MAX)),
        ("backoff", |b| b.backoff(Duration::MAX, Duration::MAX)),
        ("poll interval", |b| b.poll_interval(Duration::MAX)),
        ("acquire timeout", |b| b.acquire_timeout(Duration::MAX)),
    ];
    for (setting, configure) in cases {
        let err = configure(Inbox::builder(receiver.clone()))
            .connect(&url)
            .await
            .unwrap_err();
        assert!(matches!(err, InboxError::InvalidSetting(_)), "{setting}: {err}");
        assert!(err.to_string().contains(setting), "{setting}: {err}");
    }
    let err = Inbox::builder(receiver.clone())
        .concurrency(0)
        .connect(&url)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("concurrency"), "{err}");
    // SQLite would silently read this cache size as 0.
    let err = Inbox::builder(receiver.clone())
        .sqlite_page_cache(u32::MAX)
        .connect(&url)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("sqlite page cache"), "{err}");
    for malformed in [
        "sqlite",
        "",
        "postgres://user:hunter2@127.0.0.1:notaport/db",
        "postgres://user:hunter2@[::1/db",
    ] {
        let err = Inbox::connect(receiver.clone(), malformed).await.unwrap_err();
        assert!(matches!(err, InboxError::UnsupportedUrl(_)), "{malformed}: {err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
    // Accepted at the edge of the range: a century-long retention is fine.
    let inbox = Inbox::builder(receiver)
        .retention(Duration::from_secs(100 * 365 * 24 * 3600))
        .connect(&url)
        .await
        .unwrap();
    drop(inbox);
}
