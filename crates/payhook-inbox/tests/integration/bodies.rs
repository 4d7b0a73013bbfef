//! Where PostgreSQL keeps an event's body (migration 20): in
//! `payhook_inbox_bodies`, written with the event and deleted with it (by
//! one range of keys when the deleted events lie close together, migration
//! 21, as their attempts are), the
//! events table's row left with an empty `body`; an event stored before
//! version 20 keeps its body in its row and is read from there. SQLite keeps
//! every body in its row (its tests throughout read bodies back), so these
//! tests are PostgreSQL's.
//!
//! | test | guarantee | fails when |
//! |---|---|---|
//! | [`postgres_a_body_is_stored_apart_and_read_back_exactly`] | a delivered event's body is in the bodies table, its row's `body` empty; the handler, `show` and a differing copy's check read it byte for byte | the intake writing the body into the row; a reader reading the row's column only |
//! | [`postgres_a_body_goes_with_its_event`] | the retention purge and a bulk purge delete the purged events' bodies, and only theirs | the trigger left out, or deleting other events' bodies |
//! | [`postgres_a_delete_takes_exactly_its_events_attempts_and_bodies`] | the attempts and bodies of the events a statement deletes go with them and no others, whether their arrivals lie close together (read as one range of each key: one index scan) or far apart (version 21) | the range's join dropped (neighbours deleted); the range never taken (one lookup per event); a far-apart delete reading the keys between (at this size the planner looks the three up even inside a range, so the four-keys-per-event bound is not what holds it here) |
//! | [`postgres_an_event_stored_before_version_20_is_read_from_its_row`] | an event whose body is in its row (stored by an older version) is handled with that body and shown with it; `show` works on a database not yet upgraded | the fallback to the row's column dropped; `show` failing on the missing table |

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use payhook_core::sender::SignedDelivery;
use payhook_core::Receiver;
use payhook_inbox::admin::{Admin, BulkAction, Selection, State};
use payhook_inbox::sqlx::{self, PgPool, Row};
use payhook_inbox::{Inbox, InboxBuilder, Job};
use payhook_test_support::{drop_postgres_database, fresh_postgres_database, unique};

use super::{eventually, now_ms};

const SECRET: &str = "whsec_bodies";

/// A body with spacing, key order and escapes a re-serialisation would
/// change, of a type outside the catalogue, so that its handler sees `data`
/// exactly as stored.
fn body(id: &str) -> String {
    format!(
        "{{\"type\":\"custom.bodies_test\",  \"id\":\"{id}\",\"created\":1,\
         \"data\":{{\"object\":{{\"id\":\"pi_{id}\",\"object\":\"payment_intent\",\"amount\":7,\
         \"currency\":\"btc\",\"status\":\"succeeded\",\"created\":1,\
         \"description\":\"caf\\u00e9 \\\"quoted\\\"\"}}}}}}"
    )
}

async fn deliver(inbox: &Inbox, body: &str) -> u16 {
    let delivery = SignedDelivery::now(Bytes::from(body.to_owned()), SECRET).unwrap();
    inbox
        .ingest(&delivery.headers(), delivery.body)
        .await
        .status()
        .as_u16()
}

async fn inbox(url: &str, namespace: &str, configure: impl FnOnce(InboxBuilder) -> InboxBuilder) -> Inbox {
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    configure(
        Inbox::builder(receiver)
            .namespace(namespace)
            .poll_interval(Duration::from_millis(20)),
    )
    .connect(url)
    .await
    .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"))
}

/// The events a handler was given: id, and `data` as its JSON text.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// `data`'s JSON text in `body` (its last member).
fn data_of(body: &str) -> String {
    let start = body.find("\"data\":").unwrap() + "\"data\":".len();
    body[start..body.len() - 1].to_owned()
}

fn recording(seen: &Seen) -> impl Fn(Job) -> std::future::Ready<Result<(), payhook_inbox::HandlerError>> {
    let seen = Arc::clone(seen);
    move |job: Job| {
        let event = job.event();
        let data = event.data().map(|data| data.get().to_owned()).unwrap_or_default();
        seen.lock().unwrap().push((event.id().to_owned(), data));
        std::future::ready(Ok(()))
    }
}

/// (the row's own `body`, the bodies table's) for an event.
async fn where_kept(raw: &PgPool, namespace: &str, id: &str) -> (String, Option<String>) {
    let row = sqlx::query(
        "SELECT e.body, b.body AS apart FROM payhook_inbox e \
         LEFT JOIN payhook_inbox_bodies b ON b.arrival = e.arrival \
         WHERE e.namespace = $1 AND e.event_id = $2",
    )
    .bind(namespace)
    .bind(id)
    .fetch_one(raw)
    .await
    .unwrap();
    (row.get("body"), row.get("apart"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_body_is_stored_apart_and_read_back_exactly() {
    let url = payhook_test_support::postgres_url();
    let namespace = unique("bodies_apart");
    let inbox = inbox(&url, &namespace, |b| b).await;
    let raw = PgPool::connect(&url).await.unwrap();
    let first = body("evt_apart_1");
    assert_eq!(deliver(&inbox, &first).await, 200);
    assert_eq!(
        where_kept(&raw, &namespace, "evt_apart_1").await,
        (String::new(), Some(first.clone())),
        "the body is not in the bodies table alone"
    );
    // A copy that differs only in spacing is the same content; one with
    // another amount differs: the check read the stored body.
    assert_eq!(deliver(&inbox, &first.replace(",  ", ",")).await, 200);
    assert_eq!(
        deliver(&inbox, &first.replace("\"amount\":7", "\"amount\":8")).await,
        200
    );
    let admin = Admin::of_inbox(&inbox);
    eventually("the differing copy recorded", || async {
        admin.differing_copies("evt_apart_1").await.unwrap().is_some()
    })
    .await;
    let differing = admin.differing_copies("evt_apart_1").await.unwrap();
    assert_eq!(
        differing.map(|copies| copies.copies),
        Some(1),
        "the copy with the same content was counted"
    );

    let seen = Seen::default();
    let workers = inbox.start(recording(&seen));
    eventually("the event handled", || async { !seen.lock().unwrap().is_empty() }).await;
    workers.shutdown().await;
    assert_eq!(
        *seen.lock().unwrap(),
        [("evt_apart_1".to_owned(), data_of(&first))]
    );
    let shown = admin.show("evt_apart_1").await.unwrap();
    assert_eq!(shown.body.as_deref(), Some(first.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_body_goes_with_its_event() {
    let url = payhook_test_support::postgres_url();
    let namespace = unique("bodies_purged");
    let inbox = inbox(&url, &namespace, |b| b).await;
    let raw = PgPool::connect(&url).await.unwrap();
    for id in ["evt_purged_old", "evt_purged_bulk", "evt_purged_kept"] {
        assert_eq!(deliver(&inbox, &body(id)).await, 200);
    }
    let seen = Seen::default();
    let workers = inbox.start(recording(&seen));
    eventually("the events handled", || async { seen.lock().unwrap().len() == 3 }).await;
    workers.shutdown().await;
    let bodies = |id: &'static str| {
        let raw = raw.clone();
        let namespace = namespace.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM payhook_inbox_bodies b WHERE b.body = $1 \
                 OR b.arrival IN (SELECT arrival FROM payhook_inbox WHERE namespace = $2 AND event_id = $3)",
            )
            .bind(body(id))
            .bind(&namespace)
            .bind(id)
            .fetch_one(&raw)
            .await
            .unwrap()
        }
    };
    // One event done long ago, for the purge by age.
    sqlx::query("UPDATE payhook_inbox SET done_at = 1 WHERE namespace = $1 AND event_id = 'evt_purged_old'")
        .bind(&namespace)
        .execute(&raw)
        .await
        .unwrap();
    let admin = Admin::of_inbox(&inbox);
    assert_eq!(
        admin
            .purge_done_before(now_ms() - 3_600_000)
            .await
            .unwrap()
            .events,
        1
    );
    assert_eq!(
        bodies("evt_purged_old").await,
        0,
        "the purged event's body was kept"
    );
    let selection = Selection {
        ids: vec!["evt_purged_bulk".to_owned()],
        state: Some(State::Done),
        ..Selection::default()
    };
    let count = admin
        .bulk_count(BulkAction::Purge, &selection, None)
        .await
        .unwrap();
    let report = admin
        .bulk_run(BulkAction::Purge, &selection, &count)
        .await
        .unwrap();
    assert_eq!(report.events, 1, "{report:?}");
    assert_eq!(
        bodies("evt_purged_bulk").await,
        0,
        "the bulk-purged event's body was kept"
    );
    assert_eq!(
        where_kept(&raw, &namespace, "evt_purged_kept").await,
        (String::new(), Some(body("evt_purged_kept"))),
        "another event's body went with the purged ones"
    );
}

/// 20 000 done events stored by SQL, each with its body apart and one
/// attempt; then two deletes by plain SQL, as any statement deleting events
/// (a purge batch, a bulk purge, an operator's own) fires the triggers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_delete_takes_exactly_its_events_attempts_and_bodies() {
    const STORED: i64 = 20_000;
    let url = fresh_postgres_database("bodies_range").await;
    let namespace = unique("bodies_range");
    drop(inbox(&url, &namespace, |b| b).await);
    let raw = PgPool::connect(&url).await.unwrap();
    let now = now_ms();
    sqlx::query(
        "WITH stored AS (INSERT INTO payhook_inbox (namespace, event_id, event_type, intent_id, created, body, \
           received_at, state, attempts, due_at, last_attempt_at, done_at) \
           SELECT $1, 'evt_many_' || g, 'payment_intent.succeeded', 'pi_many_' || g, 1, '', $2, $3, 1, $2, $2, $2 \
           FROM generate_series(1, $4) AS g RETURNING arrival, namespace), \
         bodies AS (INSERT INTO payhook_inbox_bodies (arrival, body) SELECT arrival, repeat('x', 1500) FROM stored) \
         INSERT INTO payhook_inbox_attempts (arrival, namespace, attempt, started_at, finished_at, duration_ms, outcome) \
         SELECT arrival, namespace, 1, $2, $2, 0, $3 FROM stored",
    )
    .bind(&namespace)
    .bind(now)
    .bind(State::Done.as_str())
    .bind(STORED)
    .execute(&raw)
    .await
    .unwrap();
    for table in ["payhook_inbox", "payhook_inbox_bodies", "payhook_inbox_attempts"] {
        sqlx::query(&format!("ANALYZE {table}"))
            .execute(&raw)
            .await
            .unwrap();
    }
    let first: i64 = sqlx::query_scalar("SELECT MIN(arrival) FROM payhook_inbox WHERE namespace = $1")
        .bind(&namespace)
        .fetch_one(&raw)
        .await
        .unwrap();
    // The arrivals in [from, to] that still have a body apart, an attempt.
    let left = |from: i64, to: i64| {
        let raw = raw.clone();
        async move {
            let mut left = Vec::new();
            for table in ["payhook_inbox_bodies", "payhook_inbox_attempts"] {
                let arrivals: Vec<i64> = sqlx::query_scalar(&format!(
                    "SELECT arrival FROM {table} WHERE arrival BETWEEN $1 AND $2 ORDER BY arrival"
                ))
                .bind(from)
                .bind(to)
                .fetch_all(&raw)
                .await
                .unwrap();
                left.push(arrivals);
            }
            left
        }
    };
    // How each table's key has been read so far, as the server counts it
    // (a backend reports its counts when it ends at the latest): bodies
    // deleted (which tells the counts have arrived), then the scans of the
    // bodies' and the attempts' keys, then the entries each returned.
    let key_reads = || {
        let raw = raw.clone();
        async move {
            sqlx::query_as::<_, (i64, i64, i64, i64, i64)>(
                "SELECT (SELECT n_tup_del FROM pg_stat_user_tables WHERE relname = 'payhook_inbox_bodies'), \
                        b.idx_scan, a.idx_scan, b.idx_tup_read, a.idx_tup_read \
                 FROM pg_stat_user_indexes b, pg_stat_user_indexes a \
                 WHERE b.indexrelname = 'payhook_inbox_bodies_pkey' AND a.indexrelname = 'payhook_inbox_attempts_pkey'",
            )
            .fetch_one(&raw)
            .await
            .unwrap()
        }
    };
    let counted_after = |before: (i64, i64, i64, i64, i64)| {
        let key_reads = &key_reads;
        async move {
            eventually("the delete's reads counted", || async {
                key_reads().await.0 != before.0
            })
            .await;
            let after = key_reads().await;
            (
                after.1 - before.1,
                after.2 - before.2,
                after.3 - before.3,
                after.4 - before.4,
            )
        }
    };
    let delete_alone = |sql: String| {
        let url = url.clone();
        let namespace = namespace.clone();
        async move {
            use sqlx::Connection as _;
            let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
            let deleted = sqlx::query(&sql)
                .bind(&namespace)
                .execute(&mut conn)
                .await
                .unwrap()
                .rows_affected();
            conn.close().await.unwrap();
            deleted
        }
    };

    // Close together: every other event of 200 consecutive arrivals. Their
    // attempts and bodies go, their neighbours' stay, and each table's key
    // is read once, as one range, not once per event.
    let (from, to) = (first + 1000, first + 1199);
    let before = key_reads().await;
    let deleted = delete_alone(format!(
        "DELETE FROM payhook_inbox WHERE namespace = $1 AND arrival BETWEEN {from} AND {to} AND arrival % 2 = 0"
    ))
    .await;
    assert_eq!(deleted, 100);
    let odd: Vec<i64> = (from..=to).filter(|arrival| arrival % 2 != 0).collect();
    assert_eq!(left(from, to).await, [odd.clone(), odd]);
    let (bodies_scans, attempts_scans, bodies_read, attempts_read) = counted_after(before).await;
    assert_eq!(
        (bodies_scans, attempts_scans),
        (1, 1),
        "the deleted events' bodies and attempts not read as one range of each key"
    );
    assert!(
        bodies_read <= 200 && attempts_read <= 200,
        "the range read {bodies_read} and {attempts_read} entries for 200 arrivals"
    );

    // Far apart: three events 5 000 arrivals from each other, each looked
    // up by its key, never the 10 000 keys between them, whose events keep
    // theirs.
    let spread = [first + 3000, first + 8000, first + 13_000];
    let before = key_reads().await;
    let deleted = delete_alone(format!(
        "DELETE FROM payhook_inbox WHERE namespace = $1 AND arrival IN ({}, {}, {})",
        spread[0], spread[1], spread[2]
    ))
    .await;
    assert_eq!(deleted, 3);
    let kept: Vec<i64> = (spread[0] - 1..=spread[2] + 1)
        .filter(|arrival| !spread.contains(arrival))
        .collect();
    assert_eq!(left(spread[0] - 1, spread[2] + 1).await, [kept.clone(), kept]);
    let (_, _, bodies_read, attempts_read) = counted_after(before).await;
    assert!(
        bodies_read < 100 && attempts_read < 100,
        "three far-apart events read {bodies_read} and {attempts_read} key entries: the range between them"
    );
    let remaining: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM payhook_inbox_bodies), (SELECT COUNT(*) FROM payhook_inbox_attempts)",
    )
    .fetch_one(&raw)
    .await
    .unwrap();
    assert_eq!(remaining, (STORED - 103, STORED - 103));
    raw.close().await;
    drop_postgres_database(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_event_stored_before_version_20_is_read_from_its_row() {
    let url = fresh_postgres_database("bodies_upgrade").await;
    let namespace = unique("bodies_old");
    // A database at version 19: the inbox made, then versions 20 and 21
    // (which only changes version 20's trigger function) undone.
    drop(inbox(&url, &namespace, |b| b).await);
    let raw = PgPool::connect(&url).await.unwrap();
    for statement in [
        "DROP TRIGGER payhook_inbox_forget_bodies ON payhook_inbox",
        "DROP FUNCTION payhook_inbox_forget_bodies()",
        "DROP TABLE payhook_inbox_bodies",
        "DELETE FROM payhook_inbox_schema WHERE version >= 20",
    ] {
        sqlx::query(statement).execute(&raw).await.unwrap();
    }
    // Stored as version 19 stores it: the body in the row.
    let old = body("evt_old_layout");
    let now = now_ms();
    sqlx::query(
        "INSERT INTO payhook_inbox (namespace, event_id, event_type, intent_id, created, body, received_at, \
         state, attempts, due_at) VALUES ($1, 'evt_old_layout', 'payment_intent.succeeded', 'pi_evt_old_layout', \
         1, $2, $3, 'pending', 0, $3)",
    )
    .bind(&namespace)
    .bind(&old)
    .bind(now)
    .execute(&raw)
    .await
    .unwrap();
    // The operator's tools never migrate: `show` reads the row.
    let admin = Admin::connect(&url, &namespace).await.unwrap();
    let shown = admin.show("evt_old_layout").await.unwrap();
    assert_eq!(shown.body.as_deref(), Some(old.as_str()));

    // Upgraded: the old event is still read from its row, a new one apart.
    let inbox = inbox(&url, &namespace, |b| b).await;
    let new = body("evt_new_layout");
    assert_eq!(deliver(&inbox, &new).await, 200);
    assert_eq!(
        where_kept(&raw, &namespace, "evt_old_layout").await,
        (old.clone(), None),
        "the upgrade moved a stored body"
    );
    let seen = Seen::default();
    let workers = inbox.start(recording(&seen));
    eventually("both events handled", || async {
        seen.lock().unwrap().len() == 2
    })
    .await;
    workers.shutdown().await;
    let mut handled = seen.lock().unwrap().clone();
    handled.sort();
    assert_eq!(
        handled,
        [
            ("evt_new_layout".to_owned(), data_of(&new)),
            ("evt_old_layout".to_owned(), data_of(&old))
        ]
    );
    let shown = admin.show("evt_old_layout").await.unwrap();
    assert_eq!(shown.body.as_deref(), Some(old.as_str()));
    raw.close().await;
    drop(inbox);
    drop(admin);
    drop_postgres_database(&url).await;
}
