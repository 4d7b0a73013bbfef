//! The numbered migrations upgrade an inbox made before they existed, in
//! place, losing nothing: a table with rows in every state, created with the
//! schema as first released (the fixture below, copied from that release), is
//! taken over by `Inbox::connect`, and its events keep flowing; with
//! history in it, an old replica keeps storing deliveries while it upgrades.
//!
//! PostgreSQL comes from `PAYHOOK_TEST_DATABASE_URL` (`.ci/start-postgres`);
//! the test makes a database of its own there, and fails when it is
//! unreachable.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use payhook_core::Receiver;
use payhook_inbox::admin::{Admin, Filter, State};
use payhook_inbox::sqlx::{self, AnyPool, Row};
use payhook_inbox::{Inbox, Job};
use payhook_test_support::{any_pool, fresh_postgres_database, on_every_backend, sqlite_url};

/// The inbox's schema before migrations were numbered (the key's type is
/// filled in for each database).
const FIRST_SCHEMA: [&str; 3] = [
    "CREATE TABLE IF NOT EXISTS payhook_inbox (
        arrival {arrival},
        namespace TEXT NOT NULL,
        event_id TEXT NOT NULL,
        event_type TEXT NOT NULL,
        intent_id TEXT,
        created BIGINT NOT NULL,
        body TEXT NOT NULL,
        received_at BIGINT NOT NULL,
        state TEXT NOT NULL,
        attempts BIGINT NOT NULL DEFAULT 0,
        due_at BIGINT NOT NULL,
        lease_token BIGINT,
        lease_until BIGINT,
        last_error TEXT,
        last_attempt_at BIGINT,
        done_at BIGINT,
        UNIQUE (namespace, event_id)
    )",
    "CREATE INDEX IF NOT EXISTS payhook_inbox_claim ON payhook_inbox (namespace, state, due_at, arrival)",
    "CREATE INDEX IF NOT EXISTS payhook_inbox_intent ON payhook_inbox (namespace, intent_id, created, arrival)",
];

fn now_ms() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

fn body(id: &str) -> String {
    format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","created":1,"data":{{"object":{{"id":"pi_{id}","object":"payment_intent","amount":1,"currency":"eth","status":"succeeded","created":1}}}}}}"#
    )
}

/// (event id, state, attempts, last error) of every row.
async fn rows(pool: &AnyPool) -> Vec<(String, String, i64, Option<String>)> {
    sqlx::query("SELECT event_id, state, attempts, last_error FROM payhook_inbox ORDER BY event_id")
        .fetch_all(pool)
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
        .collect()
}

/// (id, state, attempts, last error, done_at) of a row of the old inbox.
type FixtureRow = (&'static str, &'static str, i64, Option<&'static str>, Option<i64>);

async fn inbox_of_the_first_schema_upgrades_in_place(url: String) {
    // The first schema's key, as each database spelled it.
    let arrival = if url.starts_with("postgres") {
        "BIGSERIAL PRIMARY KEY"
    } else {
        "INTEGER PRIMARY KEY AUTOINCREMENT"
    };
    // On SQLite the old inbox made the file; the fixture's pool does too.
    let old = any_pool(&url).await;
    for statement in FIRST_SCHEMA {
        sqlx::query(&statement.replace("{arrival}", arrival))
            .execute(&old)
            .await
            .unwrap();
    }
    let now = now_ms();
    let fixture: [FixtureRow; 5] = [
        ("evt_pending", "pending", 0, None, None),
        ("evt_retrying", "pending", 1, Some("first attempt failed"), None),
        ("evt_running", "running", 1, None, None),
        ("evt_done", "done", 2, Some("an old failure"), Some(now)),
        ("evt_dead", "dead", 3, Some("gave up"), None),
    ];
    for (id, state, attempts, last_error, done_at) in fixture {
        sqlx::query(
            "INSERT INTO payhook_inbox (namespace, event_id, event_type, intent_id, created, body, received_at, \
             state, attempts, due_at, lease_token, lease_until, last_error, done_at) \
             VALUES ('payhook', $1, 'payment_intent.succeeded', $2, 1, $3, $4, $5, $6, $4, $7, $8, $9, $10)",
        )
        .bind(id)
        .bind(format!("pi_{id}"))
        .bind(body(id))
        .bind(now)
        .bind(state)
        .bind(attempts)
        .bind((state == "running").then_some(42_i64))
        // The running event's worker died: its lease has run out.
        .bind((state == "running").then_some(now - 1))
        .bind(last_error)
        .bind(done_at)
        .execute(&old)
        .await
        .unwrap();
    }
    let before = rows(&old).await;
    let counts = [
        (State::Pending, 2),
        (State::Running, 1),
        (State::Dead, 1),
        (State::Done, 1),
    ];

    let receiver = Receiver::builder().secret("whsec_upgrade").build().unwrap();
    let inbox = Inbox::builder(receiver.clone())
        .lease(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(20))
        .connect(&url)
        .await
        .unwrap();
    // Every row is still there as it was, but for the done event's stale
    // error (done events keep none since migration 2).
    let after = rows(&old).await;
    let expected: Vec<_> = before
        .into_iter()
        .map(|(id, state, attempts, error)| {
            let error = if state == "done" { None } else { error };
            (id, state, attempts, error)
        })
        .collect();
    assert_eq!(after, expected);
    let versions: Vec<i64> = sqlx::query("SELECT version FROM payhook_inbox_schema ORDER BY version")
        .fetch_all(&old)
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    // Every numbered migration the crate ships, each once.
    let shipped = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite"))
        .unwrap()
        .count();
    assert_eq!(versions, (1..=shipped as i64).collect::<Vec<_>>());
    assert!(shipped >= 9, "{shipped} migrations");
    if url.starts_with("postgres") {
        // Migrations 8 and 13: room on each page for every row's next
        // version (HOT claims).
        let options: String = sqlx::query(
            "SELECT array_to_string(reloptions, ',') FROM pg_class WHERE relname = 'payhook_inbox'",
        )
        .fetch_one(&old)
        .await
        .unwrap()
        .get(0);
        assert_eq!(options, "fillfactor=50");
        // Migration 13: the attempts record keeps no foreign key (a trigger
        // deletes an event's attempts with it).
        let keys: i64 = sqlx::query(
            "SELECT COUNT(*) FROM pg_constraint WHERE conrelid = 'payhook_inbox_attempts'::regclass AND contype = 'f'",
        )
        .fetch_one(&old)
        .await
        .unwrap()
        .get(0);
        assert_eq!(keys, 0);
        // Migration 14: the claims' index of each intent's waiting and
        // running events, built over the events already there.
        let index: String =
            sqlx::query("SELECT indexdef FROM pg_indexes WHERE indexname = 'payhook_inbox_intent_waiting'")
                .fetch_one(&old)
                .await
                .unwrap()
                .get(0);
        let index = index.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            index.contains(
                "WHERE ( CASE WHEN (phase = 'pending'::text) THEN intent_id ELSE NULL::text END IS NOT NULL)"
            ),
            "{index}"
        );
    }
    // Migrations 15 and 16: the tally counted the events already stored.
    let upgraded = Admin::connect(&url, "payhook").await.unwrap();
    let stats: Vec<(State, i64)> = upgraded.stats().await.unwrap().counts().collect();
    assert_eq!(stats, counts, "the overview's counts after the upgrade");
    let tallied: i64 = sqlx::query("SELECT CAST(SUM(n) AS BIGINT) FROM payhook_inbox_tally")
        .fetch_one(&old)
        .await
        .unwrap()
        .get(0);
    assert_eq!(tallied, 5, "the tally holds every stored event once");
    // Migrating again (another replica starting) changes nothing.
    let again = Inbox::connect(receiver, &url).await.unwrap();
    again.migrate().await.unwrap();
    assert_eq!(rows(&old).await, after);

    // The upgraded inbox works: the waiting events (the running one's lease
    // has run out) are handled; done and dead stay as they were.
    let workers = inbox.start(|_job: Job| async { Ok(()) });
    inbox.wait_idle(Duration::from_secs(20)).await.unwrap();
    workers.shutdown().await;
    let admin = Admin::connect(&url, "payhook").await.unwrap();
    let mut states: Vec<(String, String)> = admin
        .list(&Filter::default())
        .await
        .unwrap()
        .into_iter()
        .map(|event| (event.event_id, event.state.to_string()))
        .collect();
    states.sort();
    assert_eq!(
        states,
        [
            ("evt_dead", "dead"),
            ("evt_done", "done"),
            ("evt_pending", "done"),
            ("evt_retrying", "done"),
            ("evt_running", "done"),
        ]
        .map(|(id, state)| (id.to_owned(), state.to_owned()))
    );
    // The attempts record of migration 3 is written: the pending event's
    // attempt is there; the done event from before it has none.
    let attempts = admin.attempts("evt_pending").await.unwrap();
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0].outcome, "done");
    assert!(admin.attempts("evt_done").await.unwrap().is_empty());
    // The event held when the inbox was upgraded had its attempt counted by
    // the release before (at its start): migration 11 takes it as a started
    // suspect, so that attempt is recorded as interrupted and the next is 2.
    let held: Vec<(i64, String)> = admin
        .attempts("evt_running")
        .await
        .unwrap()
        .iter()
        .map(|attempt| (attempt.attempt, attempt.outcome.clone()))
        .collect();
    assert_eq!(held, [(2, "done".to_owned()), (1, "interrupted".to_owned())]);
    // Purged events take their attempts with them on the upgraded inbox
    // (PostgreSQL: migration 13's trigger, in place of the foreign key).
    assert_eq!(admin.purge_done_before(i64::MAX).await.unwrap().events, 4);
    let orphans: i64 = sqlx::query(
        "SELECT COUNT(*) FROM payhook_inbox_attempts a \
         WHERE NOT EXISTS (SELECT 1 FROM payhook_inbox e WHERE e.arrival = a.arrival)",
    )
    .fetch_one(&old)
    .await
    .unwrap()
    .get(0);
    assert_eq!(orphans, 0);
    assert!(admin.attempts("evt_running").await.unwrap().is_empty());
    let stats: Vec<(State, i64)> = admin.stats().await.unwrap().counts().collect();
    assert_eq!(
        stats,
        [
            (State::Pending, 0),
            (State::Running, 0),
            (State::Dead, 1),
            (State::Done, 0)
        ],
        "the overview's counts after the upgraded inbox handled and purged"
    );
}

/// An admin never migrates: on a database whose schema predates the tally
/// (migration 15) or the activity chart's buckets (migration 18; here
/// dropped after the fact) the overview counts the events themselves, and
/// says the same.
async fn an_admin_counts_the_events_where_there_is_no_tally(url: String) {
    let receiver = Receiver::builder().secret("whsec_upgrade").build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace("untallied")
        .connect(&url)
        .await
        .unwrap();
    for id in ["evt_a", "evt_b", "evt_c"] {
        let delivery = payhook_core::sender::SignedDelivery::now(body(id), "whsec_upgrade").unwrap();
        let reply = inbox.ingest(&delivery.headers(), delivery.body).await;
        assert_eq!(reply.status().as_u16(), 200);
    }
    let admin = Admin::connect(&url, "untallied").await.unwrap();
    let tallied: Vec<(State, i64)> = admin.stats().await.unwrap().counts().collect();
    sqlx::query("DROP TABLE payhook_inbox_tally")
        .execute(inbox.pool())
        .await
        .unwrap();
    let counted: Vec<(State, i64)> = admin.stats().await.unwrap().counts().collect();
    assert_eq!(tallied, counted);
    // The activity chart too (migration 18): from the events themselves
    // where its buckets are not there.
    let received =
        |slots: Vec<payhook_inbox::admin::ActivitySlot>| slots.iter().map(|slot| slot.received).sum::<i64>();
    let bucketed = received(admin.activity(Duration::from_secs(300), 12).await.unwrap());
    sqlx::query("DROP TABLE payhook_inbox_activity")
        .execute(inbox.pool())
        .await
        .unwrap();
    let counted_activity = received(admin.activity(Duration::from_secs(300), 12).await.unwrap());
    assert_eq!((bucketed, counted_activity), (3, 3));
    assert_eq!(
        counted,
        [
            (State::Pending, 3),
            (State::Running, 0),
            (State::Dead, 0),
            (State::Done, 0)
        ]
    );
}

/// Done events of history the upgrade test fills.
const HISTORY: i64 = 300_000;

/// The last migration of the schema the previous release made (round 5's:
/// the per-intent probes' index); the upgrade test starts from it.
const PREVIOUS_RELEASE: i64 = 14;

/// An inbox of the previous release's schema holding history (`HISTORY`
/// done events, ~500-byte bodies) is upgraded by `Inbox::connect` while an
/// old replica goes on storing deliveries with that release's statement,
/// one every few milliseconds: no such insert waits as long as the intake's
/// deadline (`DEFAULT_DATABASE_TIMEOUT`) — on PostgreSQL none waits for most
/// of the upgrade —, none is lost, and the history is counted exactly by
/// the new schema's tally.
async fn an_inbox_with_history_upgrades_while_an_old_replica_stores_deliveries(url: String) {
    // The previous release's schema: the runner skips every version already
    // recorded, so the later ones are recorded first, then forgotten.
    let old = any_pool(&url).await;
    sqlx::query("CREATE TABLE IF NOT EXISTS payhook_inbox_schema (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)")
        .execute(&old)
        .await
        .unwrap();
    for version in PREVIOUS_RELEASE + 1..=PREVIOUS_RELEASE + 100 {
        sqlx::query("INSERT INTO payhook_inbox_schema (version, applied_at) VALUES ($1, 0)")
            .bind(version)
            .execute(&old)
            .await
            .unwrap();
    }
    let receiver = Receiver::builder().secret("whsec_upgrade").build().unwrap();
    drop(Inbox::connect(receiver.clone(), &url).await.unwrap());
    let tally_made: bool =
        sqlx::query("SELECT COUNT(*) AS n FROM payhook_inbox_schema WHERE version > $1 AND applied_at > 0")
            .bind(PREVIOUS_RELEASE)
            .fetch_one(&old)
            .await
            .unwrap()
            .get::<i64, _>("n")
            > 0;
    assert!(!tally_made, "a migration past the previous release ran early");
    sqlx::query("DELETE FROM payhook_inbox_schema WHERE version > $1")
        .bind(PREVIOUS_RELEASE)
        .execute(&old)
        .await
        .unwrap();
    let now = now_ms();
    let padding = "x".repeat(400);
    sqlx::query(
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < $1) \
         INSERT INTO payhook_inbox (namespace, event_id, event_type, intent_id, created, body, received_at, \
           state, attempts, due_at, last_attempt_at, done_at) \
         SELECT 'payhook', 'evt_history_' || CAST(n AS TEXT), 'payment_intent.succeeded', \
           'pi_history_' || CAST(n AS TEXT), 1, '{\"padding\":\"' || $2 || '\"}', $3 - n, 'done', 1, $3 - n, \
           $3 - n, $3 - n \
         FROM g",
    )
    .bind(HISTORY)
    .bind(&padding)
    .bind(now)
    .execute(&old)
    .await
    .unwrap();

    // The old replica: the previous release's insert, one delivery at a time.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (old, stop) = (old.clone(), std::sync::Arc::clone(&stop));
        tokio::spawn(async move {
            let mut slowest = Duration::ZERO;
            let mut stored = 0_i64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let id = format!("evt_during_{stored}");
                let started = std::time::Instant::now();
                sqlx::query(
                    "INSERT INTO payhook_inbox (namespace, event_id, event_type, intent_id, created, body, \
                     received_at, state, attempts, due_at) \
                     VALUES ('payhook', $1, 'payment_intent.succeeded', $2, 1, $3, $4, 'pending', 0, $4) \
                     ON CONFLICT (namespace, event_id) DO NOTHING",
                )
                .bind(&id)
                .bind(format!("pi_{id}"))
                .bind(body(&id))
                .bind(now_ms())
                .execute(&old)
                .await
                .unwrap_or_else(|err| panic!("the old replica's insert failed during the upgrade: {err}"));
                slowest = slowest.max(started.elapsed());
                stored += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (stored, slowest)
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    let inbox = Inbox::connect(receiver, &url).await.unwrap();
    let upgraded_in = started.elapsed();
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (stored, slowest) = writer.await.unwrap();
    eprintln!(
        "{}: upgrade from migration {PREVIOUS_RELEASE} over {HISTORY} stored events: {upgraded_in:?}; \
         the old replica stored {stored} meanwhile, its slowest insert {slowest:?}",
        url.split(':').next().unwrap_or_default()
    );
    assert!(
        slowest < payhook_inbox::DEFAULT_DATABASE_TIMEOUT,
        "an old replica's insert waited {slowest:?} while the upgrade ran ({upgraded_in:?})"
    );
    // PostgreSQL: no migration holds the table for its duration (migration
    // 16 counts in its own snapshot, reading only). SQLite has one writer:
    // the tally's base is counted in the migration's write turn, which the
    // guide states.
    if url.starts_with("postgres") {
        assert!(
            slowest < upgraded_in / 2 + Duration::from_millis(50),
            "an old replica's insert waited {slowest:?}, most of the upgrade's {upgraded_in:?}"
        );
    }
    assert!(stored > 0);
    // The tally itself, not the admin's fallback count of a schema without it.
    let tallied: i64 = sqlx::query(
        "SELECT CAST(SUM(n) AS BIGINT) AS n FROM payhook_inbox_tally WHERE namespace = 'payhook'",
    )
    .fetch_one(&old)
    .await
    .unwrap()
    .get("n");
    assert_eq!(tallied, HISTORY + stored);
    let counts: Vec<(State, i64)> = Admin::of_inbox(&inbox).stats().await.unwrap().counts().collect();
    assert!(
        counts.contains(&(State::Done, HISTORY)) && counts.contains(&(State::Pending, stored)),
        "{counts:?}, {stored} stored during the upgrade ({upgraded_in:?}, slowest insert {slowest:?})"
    );
    // The activity chart's last hour (the history was received in it too):
    // what was stored before migration 18 counted by its base (19 on
    // PostgreSQL), what came after by its triggers, none twice.
    let last_hour: i64 = Admin::of_inbox(&inbox)
        .activity(Duration::from_secs(300), 12)
        .await
        .unwrap()
        .iter()
        .map(|slot| slot.received)
        .sum();
    let stored_in_the_last_hour: i64 = sqlx::query(
        "SELECT COUNT(*) AS n FROM payhook_inbox WHERE namespace = 'payhook' AND received_at > $1",
    )
    .bind(now_ms() - 3_600_000)
    .fetch_one(&old)
    .await
    .unwrap()
    .get("n");
    assert_eq!(
        (last_hour, stored_in_the_last_hour),
        (HISTORY + stored, HISTORY + stored)
    );
}

on_every_backend! {
    sqlite: sqlite_url("payhook-upgrade"),
    postgres: fresh_postgres_database("payhook_upgrade").await,
    worker_threads: 2;
    inbox_of_the_first_schema_upgrades_in_place,
    an_admin_counts_the_events_where_there_is_no_tally,
    an_inbox_with_history_upgrades_while_an_old_replica_stores_deliveries,
}
