//! Operating an inbox: the admin operations never create or change a database,
//! a SQLite file deleted or replaced under a running inbox is noticed, and on
//! PostgreSQL a replica's new event wakes the others' workers at once, unless
//! its own workers take it at their next claim, a purge never deletes an
//! event replayed while it waits for the event's row, and the retention
//! purge rests a hundredth of the time between its batches.
//!
//! PostgreSQL comes from `PAYHOOK_TEST_DATABASE_URL` (`.ci/start-postgres`);
//! the PostgreSQL test fails when it is unset or unreachable.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use payhook_core::sender::SignedDelivery;
use payhook_core::Receiver;
use payhook_inbox::admin::Admin;
use payhook_inbox::sqlx::{self, Row};
use payhook_inbox::{Inbox, InboxError, Job};
use payhook_test_support::unique;

const SECRET: &str = "whsec_operations";

fn temp_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique("payhook-operations"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn receiver() -> Receiver {
    Receiver::builder().secret(SECRET).build().unwrap()
}

fn delivery(id: &str) -> (http::HeaderMap, Bytes) {
    let body = Bytes::from(format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","created":1,"data":{{"object":{{"id":"pi_{id}","object":"payment_intent","amount":1,"currency":"eth","status":"succeeded","created":1}}}}}}"#
    ));
    let delivery = SignedDelivery::now(body, SECRET).unwrap();
    (delivery.headers(), delivery.body)
}

#[tokio::test]
async fn admin_refuses_a_missing_file_and_creates_nothing() {
    let dir = temp_dir();
    let path = dir.join("mistyped.db");
    let err = Admin::connect(&format!("sqlite://{}", path.display()), "payhook")
        .await
        .unwrap_err();
    assert!(matches!(err, InboxError::NoInbox(_)), "{err}");
    assert!(err.to_string().contains("no database file"), "{err}");
    assert!(!path.exists(), "a read-only command created the file");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn admin_on_a_file_that_is_not_a_database_fails_at_once() {
    let dir = temp_dir();
    let path = dir.join("notes.txt");
    std::fs::write(&path, "these are not the pages you are looking for\n".repeat(200)).unwrap();
    let started = Instant::now();
    let err = Admin::connect(&format!("sqlite://{}", path.display()), "payhook")
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("not a database"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn admin_on_a_database_without_an_inbox_changes_nothing() {
    let dir = temp_dir();
    let url = format!("sqlite://{}", dir.join("app.db").display());
    let app = payhook_test_support::any_pool(&url).await;
    sqlx::query("CREATE TABLE orders (id TEXT)")
        .execute(&app)
        .await
        .unwrap();
    let err = Admin::connect(&url, "payhook").await.unwrap_err();
    assert!(matches!(err, InboxError::NoInbox(_)), "{err}");
    assert!(err.to_string().contains("no payhook_inbox table"), "{err}");
    let tables: Vec<String> = sqlx::query("SELECT name FROM sqlite_master WHERE type = 'table'")
        .fetch_all(&app)
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(tables, ["orders"]);
    let journal: String = sqlx::query("PRAGMA journal_mode")
        .fetch_one(&app)
        .await
        .unwrap()
        .get(0);
    assert_eq!(journal, "delete", "a read-only command switched the file to WAL");
    app.close().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_deleted_or_replaced_under_the_inbox_answers_503() {
    for replace in [false, true] {
        let dir = temp_dir();
        let path = dir.join("inbox.db");
        let inbox = Inbox::connect(receiver(), &format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        let (headers, body) = delivery("evt_before");
        assert_eq!(inbox.ingest(&headers, body).await.status().as_u16(), 200);
        if replace {
            let other = dir.join("other.db");
            std::fs::write(&other, b"").unwrap();
            std::fs::rename(&other, &path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
        let (headers, body) = delivery("evt_after");
        let reply = inbox.ingest(&headers, body).await;
        assert_eq!(reply.status().as_u16(), 503, "{}", reply.body());
        let expected = if replace { "replaced" } else { "deleted" };
        assert!(
            reply.body().ends_with(&format!("its SQLite file was {expected}")),
            "{}",
            reply.body()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Two replicas on one PostgreSQL database, polling only every 5 s: an event
/// stored by A starts on B well within a second (B's workers are woken by
/// `NOTIFY`), for B built from a URL and from the app's own pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_replicas_wake_each_other() {
    let url = payhook_test_support::postgres_url();
    for typed in [false, true] {
        let namespace = unique("wake");
        let builder = || {
            Inbox::builder(receiver())
                .namespace(&namespace)
                .poll_interval(Duration::from_secs(5))
        };
        let a = builder().connect(&url).await.unwrap();
        let started: Arc<Mutex<Option<Instant>>> = Arc::default();
        let seen = Arc::clone(&started);
        let handler = move || {
            let seen = Arc::clone(&seen);
            move || {
                seen.lock().unwrap().get_or_insert_with(Instant::now);
            }
        };
        let workers = if typed {
            let pool = sqlx::PgPool::connect(&url).await.unwrap();
            let b = builder().from_pool(pool).await.unwrap();
            let mark = handler();
            b.start(move |_job: Job<sqlx::Postgres>| {
                mark();
                async { Ok(()) }
            })
        } else {
            let b = builder().connect(&url).await.unwrap();
            let mark = handler();
            b.start(move |_job: Job| {
                mark();
                async { Ok(()) }
            })
        };
        // B has looked once and now sleeps for its 5 s poll.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (headers, body) = delivery(&unique("evt_wake"));
        let stored_at = Instant::now();
        assert_eq!(a.ingest(&headers, body).await.status().as_u16(), 200);
        let deadline = stored_at + Duration::from_secs(3);
        let latency = loop {
            if let Some(at) = *started.lock().unwrap() {
                break at.duration_since(stored_at);
            }
            assert!(
                Instant::now() < deadline,
                "replica B did not start the event (typed: {typed})"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert!(
            latency < Duration::from_millis(1000),
            "B started the event {latency:?} after A stored it (typed: {typed})"
        );
        workers.shutdown().await;
    }
}

/// An event that started: its id, the replica that ran it, when.
type Start = (String, &'static str, Instant);

/// A replica wakes the others only for the events its own workers will not
/// take at their next claim: A (one handler) stores an event while its
/// handler is free and runs it itself, with no `NOTIFY`; A then stores
/// another while that handler is busy, and B, polling only every 5 s, is
/// woken and starts it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_replica_wakes_the_others_for_what_it_will_not_take_itself() {
    let url = payhook_test_support::postgres_url();
    let namespace = unique("room");
    let builder = || {
        Inbox::builder(receiver())
            .namespace(&namespace)
            .poll_interval(Duration::from_secs(5))
    };
    let mut listener = sqlx::postgres::PgListener::connect(&url).await.unwrap();
    listener.listen("payhook_inbox").await.unwrap();
    let release = Arc::new(tokio::sync::Notify::new());
    let started: Arc<Mutex<Vec<Start>>> = Arc::default();
    let replica = |name: &'static str| {
        let (started, release) = (Arc::clone(&started), Arc::clone(&release));
        move |job: Job| {
            let (started, release) = (Arc::clone(&started), Arc::clone(&release));
            async move {
                let id = job.event().id().to_owned();
                started.lock().unwrap().push((id.clone(), name, Instant::now()));
                if id.starts_with("evt_busy") {
                    release.notified().await;
                }
                Ok(())
            }
        }
    };
    let a = builder().concurrency(1).connect(&url).await.unwrap();
    let a_workers = a.start(replica("A"));
    let b_workers = builder().connect(&url).await.unwrap().start(replica("B"));
    // Both have looked once and now sleep for their 5 s poll.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let starts = |id: String| {
        let started = Arc::clone(&started);
        async move {
            let deadline = Instant::now() + Duration::from_secs(3);
            loop {
                let found = started
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|(seen, _, _)| *seen == id)
                    .map(|(_, by, at)| (*by, *at));
                if let Some(found) = found {
                    return found;
                }
                assert!(Instant::now() < deadline, "{id} did not start");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let own = unique("evt_busy");
    let (headers, body) = delivery(&own);
    assert_eq!(a.ingest(&headers, body).await.status().as_u16(), 200);
    assert_eq!(starts(own).await.0, "A", "A's free handler takes its own event");
    let woken = tokio::time::timeout(Duration::from_millis(300), async {
        loop {
            let notification = listener.recv().await.unwrap();
            if notification.payload() == namespace {
                return;
            }
        }
    })
    .await;
    assert!(
        woken.is_err(),
        "A woke the other replicas for an event its free handler took"
    );
    let other = unique("evt_other");
    let (headers, body) = delivery(&other);
    let stored_at = Instant::now();
    assert_eq!(a.ingest(&headers, body).await.status().as_u16(), 200);
    let (by, at) = starts(other).await;
    assert_eq!(by, "B", "the event A's busy handler could not take");
    assert!(
        at.duration_since(stored_at) < Duration::from_millis(1000),
        "B started it {:?} after A stored it",
        at.duration_since(stored_at)
    );
    release.notify_waiters();
    b_workers.shutdown().await;
    a_workers.shutdown().await;
}

/// The inbox takes its namespace, lease and retention from the receiver unless
/// the builder overrides them, and refuses a receiver with its own dedupe
/// store (the inbox's table is the store; that one would be ignored).
#[tokio::test]
async fn settings_come_from_the_receiver_and_a_custom_store_is_refused() {
    let dir = temp_dir();
    let url = format!("sqlite://{}", dir.join("inbox.db").display());
    let receiver = Receiver::builder()
        .secret(SECRET)
        .namespace("shop")
        .lease(Duration::from_secs(7))
        .retention(Duration::from_secs(3600))
        .build()
        .unwrap();
    let inbox = Inbox::connect(receiver.clone(), &url).await.unwrap();
    assert_eq!(inbox.namespace(), "shop");
    let debug = format!("{inbox:?}");
    assert!(
        debug.contains("lease: 7s") && debug.contains("retention: 3600s"),
        "{debug}"
    );
    let overridden = Inbox::builder(receiver)
        .namespace("other")
        .lease(Duration::from_secs(9))
        .connect(&url)
        .await
        .unwrap();
    assert_eq!(overridden.namespace(), "other");
    assert!(format!("{overridden:?}").contains("lease: 9s"));

    let with_store = Receiver::builder()
        .secret(SECRET)
        .namespace("shop")
        .store(payhook_core::MemoryStore::new())
        .build()
        .unwrap();
    let err = Inbox::connect(with_store, &url).await.unwrap_err();
    assert!(matches!(err, InboxError::InvalidSetting(_)), "{err}");
    assert!(err.to_string().contains("dedupe store"), "{err}");
    // A setting for URL-built inboxes is refused on the app's own pool, not ignored.
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let err = Inbox::builder(self::receiver())
        .acquire_timeout(Duration::from_secs(1))
        .from_pool(pool)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("set them on the pool"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The admin operations on the app's own pool, beside an inbox on that pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_works_on_the_apps_own_pool() {
    let dir = temp_dir();
    let url = format!("sqlite://{}?mode=rwc", dir.join("app.db").display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let err = Admin::from_pool(pool.clone(), "payhook").await.unwrap_err();
    assert!(matches!(err, InboxError::NoInbox(_)), "{err}");
    let inbox = Inbox::from_pool(receiver(), pool.clone()).await.unwrap();
    let (headers, body) = delivery("evt_pool");
    assert_eq!(inbox.ingest(&headers, body).await.status().as_u16(), 200);
    let admin = Admin::from_pool(pool, "payhook").await.unwrap();
    let shown = admin.show("evt_pool").await.unwrap();
    assert_eq!((shown.state.as_str(), shown.attempts), ("pending", 0));
    assert_eq!(admin.list(&Default::default()).await.unwrap().len(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A done event replayed while a purge waits for its row is kept: the purge
/// picked it while it was done, then waited for the replay's row lock, and
/// must recheck that the row it then meets is still done and old enough
/// rather than delete the event the replay has just made pending (its
/// handler would never run again and its id would be forgotten).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_purge_keeps_an_event_replayed_while_it_waits_for_the_row() {
    let url = payhook_test_support::postgres_url();
    let namespace = unique("purge_race");
    let inbox = Inbox::builder(receiver())
        .namespace(&namespace)
        .connect(&url)
        .await
        .unwrap();
    drop(inbox);
    let admin = Admin::connect(&url, &namespace).await.unwrap();
    let raw = sqlx::PgPool::connect(&url).await.unwrap();
    let now = crate::now_ms();
    let old = now - 2 * 3600 * 1000;
    for id in ["evt_replayed", "evt_old"] {
        sqlx::query(
            "INSERT INTO payhook_inbox (namespace, event_id, event_type, created, body, received_at, \
             state, attempts, due_at, done_at) \
             VALUES ($1, $2, 'payment_intent.succeeded', 1, '{}', $3, 'done', 1, $3, $3)",
        )
        .bind(&namespace)
        .bind(id)
        .bind(old)
        .execute(&raw)
        .await
        .unwrap();
    }

    // The replay's change, held uncommitted.
    let mut replay = raw.begin().await.unwrap();
    sqlx::query(
        "UPDATE payhook_inbox SET state = 'pending', due_at = $3, done_at = NULL \
         WHERE namespace = $1 AND event_id = $2 AND state = 'done'",
    )
    .bind(&namespace)
    .bind("evt_replayed")
    .bind(now)
    .execute(&mut *replay)
    .await
    .unwrap();

    let purge = tokio::spawn(async move { admin.purge_done_before(now - 3600 * 1000).await });
    // Wait until the purge's delete waits for the replayed row's lock.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: i64 = sqlx::query(
            "SELECT COUNT(*) FROM pg_locks l JOIN pg_locks held ON held.transactionid = l.transactionid \
             AND held.granted AND NOT l.granted WHERE held.pid = $1",
        )
        .bind(
            sqlx::query("SELECT pg_backend_pid()")
                .fetch_one(&mut *replay)
                .await
                .unwrap()
                .get::<i32, _>(0),
        )
        .fetch_one(&raw)
        .await
        .unwrap()
        .get(0);
        if waiting > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the purge never waited for the replayed row"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    replay.commit().await.unwrap();

    let purged = purge.await.unwrap().unwrap();
    let left: Vec<(String, String)> =
        sqlx::query_as("SELECT event_id, state FROM payhook_inbox WHERE namespace = $1 ORDER BY event_id")
            .bind(&namespace)
            .fetch_all(&raw)
            .await
            .unwrap();
    assert_eq!(
        left,
        [("evt_replayed".to_owned(), "pending".to_owned())],
        "the purge deleted the event replayed while it waited"
    );
    assert_eq!(purged.events, 1);
}

/// The retention purge works about a hundredth of the time: after a batch of
/// 1 000 old done rows (milliseconds of statement) it rests 99 times as long,
/// so the next batch does not come for at least 300 ms; at the operator's
/// pace (four times the batch) it would come within tens of milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_the_retention_purge_rests_a_hundredth_of_the_time() {
    let url = payhook_test_support::postgres_url();
    let namespace = unique("purge_pace");
    let inbox = Inbox::builder(receiver())
        .namespace(&namespace)
        .retention(Duration::from_secs(3600))
        .connect(&url)
        .await
        .unwrap();
    let raw = sqlx::PgPool::connect(&url).await.unwrap();
    let old = crate::now_ms() - 2 * 3600 * 1000;
    sqlx::query(
        "INSERT INTO payhook_inbox (namespace, event_id, event_type, created, body, received_at, \
         state, attempts, due_at, done_at) \
         SELECT $1, 'evt_old' || g, 'payment_intent.succeeded', 1, '{}', $2, 'done', 1, $2, $2 \
         FROM generate_series(1, 3000) AS g",
    )
    .bind(&namespace)
    .bind(old)
    .execute(&raw)
    .await
    .unwrap();
    let left = || async {
        sqlx::query("SELECT COUNT(*) FROM payhook_inbox WHERE namespace = $1")
            .bind(&namespace)
            .fetch_one(&raw)
            .await
            .unwrap()
            .get::<i64, _>(0)
    };
    let workers = inbox.start(|_job: Job| async { Ok(()) });
    let deadline = Instant::now() + Duration::from_secs(10);
    while left().await == 3000 {
        assert!(Instant::now() < deadline, "the retention purge never ran");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let first_batch = Instant::now();
    assert_eq!(left().await, 2000, "more than one batch went at once");
    while first_batch.elapsed() < Duration::from_millis(300) {
        assert_eq!(
            left().await,
            2000,
            "the next batch came {:?} after the first: the purge did not rest",
            first_batch.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // It goes on after its rest (2 s at the most).
    let deadline = Instant::now() + Duration::from_secs(10);
    while left().await > 0 {
        assert!(
            Instant::now() < deadline,
            "the purge stopped after its first batch"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    workers.shutdown().await;
}
