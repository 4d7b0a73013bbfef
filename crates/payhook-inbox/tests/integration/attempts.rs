//! The attempts record (migration 3) and the dashboard's reads, on SQLite and
//! PostgreSQL (`PAYHOOK_TEST_DATABASE_URL`; fails when it is unset): every
//! ended attempt is recorded with its outcome and error, at most
//! `MAX_ATTEMPT_RECORDS` per event, deleted with its event; stats, activity,
//! keyset pages and the events of an intent read what the workers wrote.

use std::time::{Duration, Instant};

use bytes::Bytes;
use payhook_core::sender::SignedDelivery;
use payhook_core::Receiver;
use payhook_inbox::admin::{Admin, Filter, PageQuery, State, MAX_ATTEMPT_RECORDS};
use payhook_inbox::sqlx::{self, Row};
use payhook_inbox::{HandlerError, Inbox, Job};
use payhook_test_support::{on_every_backend, postgres_url, sqlite_url, unique};

use crate::now_ms;

const SECRET: &str = "whsec_attempts";
/// How long the handler of a successful event sleeps.
const FINE_HANDLER: Duration = Duration::from_millis(150);

async fn ingest(inbox: &Inbox, id: &str, intent: &str) {
    let body = Bytes::from(format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","created":1,"data":{{"object":{{"id":"{intent}","amount":5,"currency":"btc","status":"succeeded"}}}}}}"#
    ));
    let delivery = SignedDelivery::now(body, SECRET).unwrap();
    let reply = inbox.ingest(&delivery.headers(), delivery.body).await;
    assert_eq!(reply.status().as_u16(), 200, "{}", reply.body());
}

async fn wait_for(admin: &Admin, id: &str, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !admin
        .show(id)
        .await
        .is_ok_and(|event| event.state.as_str() == state)
    {
        assert!(Instant::now() < deadline, "{id} never became {state}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn attempts_are_recorded_bounded_and_deleted_with_their_event(url: String) {
    let attempts = u32::try_from(MAX_ATTEMPT_RECORDS).unwrap() + 5;
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(unique("attempts"))
        .max_attempts(attempts)
        .backoff(Duration::from_millis(1), Duration::from_millis(2))
        .poll_interval(Duration::from_millis(5))
        .connect(&url)
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"));
    let admin = Admin::of_inbox(&inbox);
    let workers = inbox.start(|job: Job| async move {
        if job.event().id() == "evt_always_fails" {
            return Err::<(), HandlerError>(format!("refused on attempt {}", job.attempt()).into());
        }
        tokio::time::sleep(FINE_HANDLER).await;
        Ok(())
    });
    let before = now_ms();
    ingest(&inbox, "evt_always_fails", "pi_a").await;
    ingest(&inbox, "evt_fine", "pi_a").await;
    wait_for(&admin, "evt_always_fails", "dead").await;
    wait_for(&admin, "evt_fine", "done").await;
    let after = now_ms();
    workers.shutdown().await; // every record written

    // Bounded: the latest MAX_ATTEMPT_RECORDS, latest first, each with its
    // outcome and error.
    let record = admin.attempts("evt_always_fails").await.unwrap();
    assert_eq!(record.len(), usize::try_from(MAX_ATTEMPT_RECORDS).unwrap());
    assert_eq!(record[0].attempt, i64::from(attempts));
    assert_eq!(record[0].outcome, "dead");
    assert_eq!(
        record[0].error.as_deref(),
        Some(format!("refused on attempt {attempts}").as_str())
    );
    assert_eq!(
        record.last().unwrap().attempt,
        i64::from(attempts) - MAX_ATTEMPT_RECORDS + 1
    );
    assert!(record[1..].iter().all(|attempt| attempt.outcome == "failed"));
    let fine = admin.attempts("evt_fine").await.unwrap();
    assert_eq!(fine.len(), 1);
    assert_eq!(
        (
            fine[0].attempt,
            fine[0].outcome.as_str(),
            fine[0].error.as_deref()
        ),
        (1, "done", None)
    );
    // The attempt started after the delivery and lasted at least its
    // handler's sleep, ending before the event was seen done.
    let sleep_ms = i64::try_from(FINE_HANDLER.as_millis()).unwrap();
    assert!(
        fine[0].started_at >= before
            && fine[0].duration_ms >= sleep_ms
            && fine[0].started_at + fine[0].duration_ms <= after,
        "started at {} for {} ms, between {before} and {after}",
        fine[0].started_at,
        fine[0].duration_ms
    );
    assert!(admin.attempts("evt_unknown").await.unwrap().is_empty());

    // What the overview reads.
    let stats = admin.stats().await.unwrap();
    assert_eq!(
        (
            stats.count(State::Pending),
            stats.count(State::Running),
            stats.count(State::Done),
            stats.count(State::Dead)
        ),
        (0, 0, 1, 1)
    );
    // Every state, in the order the tools show them.
    assert_eq!(
        stats.counts().collect::<Vec<_>>(),
        [
            (State::Pending, 0),
            (State::Running, 0),
            (State::Dead, 1),
            (State::Done, 1)
        ]
    );
    assert_eq!(stats.oldest_pending_at, None);
    let activity = admin.activity(Duration::from_secs(300), 12).await.unwrap();
    assert_eq!(activity.len(), 12);
    let total = activity.iter().fold((0, 0, 0), |(r, h, f), slot| {
        (r + slot.received, h + slot.handled, f + slot.failed)
    });
    // The chart counts every attempt that ended (its buckets are kept as the
    // attempts happen), though the record keeps the latest
    // MAX_ATTEMPT_RECORDS of each event.
    assert_eq!(total, (2, 1, i64::from(attempts)));
    assert!(activity
        .windows(2)
        .all(|pair| pair[1].start - pair[0].start == 300_000));
    // Any interval and number of slots is taken: the slots are capped at
    // 1 000, and a span past the start of time counts everything since it.
    let widest = admin.activity(Duration::MAX, usize::MAX).await.unwrap();
    assert_eq!(widest.len(), 1000);
    assert_eq!(widest.iter().map(|slot| slot.received).sum::<i64>(), 2);
    // On PostgreSQL no bucket row is written by two kinds of statement (a
    // delivery's insert and a done mark would otherwise take its row and the
    // tally's in opposite orders, and could deadlock).
    if url.starts_with("postgres") {
        let shared: i64 = sqlx::query(
            "SELECT COUNT(*) AS n FROM payhook_inbox_activity WHERE namespace = $1 AND shard >= 0 AND \
             (CASE WHEN received > 0 THEN 1 ELSE 0 END) + (CASE WHEN duplicates > 0 THEN 1 ELSE 0 END) \
             + (CASE WHEN handled + failed > 0 THEN 1 ELSE 0 END) > 1",
        )
        .bind(admin.namespace())
        .fetch_one(inbox.pool())
        .await
        .unwrap()
        .get("n");
        assert_eq!(shared, 0, "a bucket row written by two kinds of statement");
    }
    let intent = admin.intent_events("pi_a", 10).await.unwrap();
    assert_eq!(
        intent
            .iter()
            .map(|event| event.event_id.as_str())
            .collect::<Vec<_>>(),
        ["evt_always_fails", "evt_fine"]
    );
    let page = admin
        .page(&PageQuery {
            limit: 1,
            ..PageQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(page.events[0].event_id, "evt_fine");
    let rest = admin
        .page(&PageQuery {
            limit: 1,
            after: page.next,
            ..PageQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(rest.events[0].event_id, "evt_always_fails");
    assert_eq!(rest.next, None);

    // Deleted with their event: the done one purged, its attempts go too.
    let purged = admin.purge_done_before(i64::MAX).await.unwrap();
    assert_eq!(purged.events, 1);
    let orphans: i64 = sqlx::query(
        "SELECT COUNT(*) AS n FROM payhook_inbox_attempts a WHERE a.namespace = $1 \
         AND NOT EXISTS (SELECT 1 FROM payhook_inbox e WHERE e.arrival = a.arrival)",
    )
    .bind(inbox.namespace())
    .fetch_one(inbox.pool())
    .await
    .unwrap()
    .get("n");
    assert_eq!(orphans, 0);
    assert!(admin.attempts("evt_fine").await.unwrap().is_empty());
    assert_eq!(admin.attempts("evt_always_fails").await.unwrap().len(), 50);
}

/// A suspect's attempt cut short (its process killed mid-handler: here its
/// row is left `running` under a lease that ran out, its attempt counted by
/// its start mark, as a crash leaves it) is recorded as `interrupted` by the
/// claim that takes the event back, and counted among the failed attempts;
/// the attempt after it is recorded as usual. One whose lease ran out on its
/// last attempt is recorded too, and the event is dead. An event held
/// without a start mark (not a suspect: it ran or only waited, nothing
/// says) is taken back uncounted, even at its last attempt, and becomes a
/// suspect.
async fn cut_short_attempts_are_recorded_as_interrupted(url: String) {
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(unique("interrupted"))
        .max_attempts(2)
        .poll_interval(Duration::from_millis(5))
        .connect(&url)
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"));
    let admin = Admin::of_inbox(&inbox);
    ingest(&inbox, "evt_cut", "pi_cut").await;
    ingest(&inbox, "evt_cut_last", "pi_cut_last").await;
    ingest(&inbox, "evt_never_started", "pi_never_started").await;
    ingest(&inbox, "evt_uncounted", "pi_uncounted").await;
    let now = now_ms();
    // What a process killed in its handler leaves: running, a suspect's
    // attempt counted by its start mark (`suspect` 2), the lease run out.
    // (A claim lost before its handler started has no attempt to record.)
    for (id, attempts, suspect) in [
        ("evt_cut", 1, 2),
        ("evt_cut_last", 2, 2),
        ("evt_never_started", 0, 1),
        ("evt_uncounted", 2, 0),
    ] {
        sqlx::query(
            "UPDATE payhook_inbox SET state = 'running', lease_token = 7, lease_until = $1, \
             attempts = $2, last_attempt_at = $3, suspect = $6 WHERE namespace = $4 AND event_id = $5",
        )
        .bind(now - 1_000)
        .bind(attempts)
        .bind(now - 5_000)
        .bind(inbox.namespace())
        .bind(id)
        .bind(suspect)
        .execute(inbox.pool())
        .await
        .unwrap();
    }
    let workers = inbox.start(|_job: Job| async move { Ok::<(), HandlerError>(()) });
    wait_for(&admin, "evt_cut", "done").await;
    wait_for(&admin, "evt_cut_last", "dead").await;
    wait_for(&admin, "evt_never_started", "done").await;
    wait_for(&admin, "evt_uncounted", "done").await;
    workers.shutdown().await;

    let cut = admin.attempts("evt_cut").await.unwrap();
    let summary = |attempts: &[payhook_inbox::admin::Attempt]| {
        attempts
            .iter()
            .map(|attempt| (attempt.attempt, attempt.outcome.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        summary(&cut),
        [(2, "done".to_owned()), (1, "interrupted".to_owned())]
    );
    assert_eq!(cut[1].started_at, now - 5_000);
    assert!(cut[1].duration_ms >= 5_000, "{:?}", cut[1]);
    // The reason alone: the outcome beside it already says "interrupted", so
    // `payhook inbox show` and the dashboard print it once.
    assert_eq!(
        cut[1].error.as_deref(),
        Some("the process handling it stopped or lost the lease before the attempt ended"),
        "{:?}",
        cut[1]
    );
    let last = admin.attempts("evt_cut_last").await.unwrap();
    assert_eq!(summary(&last), [(2, "interrupted".to_owned())]);
    let never = admin.attempts("evt_never_started").await.unwrap();
    assert_eq!(summary(&never), [(1, "done".to_owned())]);
    // Its two failed attempts are in the record of a real run; its
    // uncounted one is not: the third attempt is the one that ran to the end.
    let uncounted = admin.attempts("evt_uncounted").await.unwrap();
    assert_eq!(summary(&uncounted), [(3, "done".to_owned())]);
    assert_eq!(admin.show("evt_uncounted").await.unwrap().attempts, 3);
    // The overview counts them with the failed attempts.
    let activity = admin.activity(Duration::from_secs(300), 12).await.unwrap();
    let total = activity
        .iter()
        .fold((0, 0), |(h, f), slot| (h + slot.handled, f + slot.failed));
    assert_eq!(total, (3, 2));
}

/// Pending and running events share one phase (migration 12): the counts,
/// the oldest pending event and the state filters still tell them apart.
async fn waiting_events_are_told_pending_or_running(url: String) {
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(unique("waiting"))
        .connect(&url)
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"));
    let admin = Admin::of_inbox(&inbox);
    for (index, id) in ["evt_first", "evt_held", "evt_later", "evt_gone"]
        .into_iter()
        .enumerate()
    {
        ingest(&inbox, id, &format!("pi_{index}")).await;
        // Each received in a millisecond of its own.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let set = |id: &'static str, state: State| {
        let inbox = &inbox;
        async move {
            sqlx::query(
                "UPDATE payhook_inbox SET state = $1, lease_token = 7, lease_until = $2 \
                 WHERE namespace = $3 AND event_id = $4",
            )
            .bind(state.as_str())
            .bind(i64::MAX / 2)
            .bind(inbox.namespace())
            .bind(id)
            .execute(inbox.pool())
            .await
            .unwrap();
        }
    };
    set("evt_held", State::Running).await;
    set("evt_gone", State::Dead).await;
    let counts = |stats: &payhook_inbox::admin::Stats| {
        State::ALL
            .iter()
            .map(|&state| stats.count(state))
            .collect::<Vec<_>>()
    };
    let stats = admin.stats().await.unwrap();
    // Pending, running, dead, done.
    assert_eq!(counts(&stats), [2, 1, 1, 0]);
    let first = admin.show("evt_first").await.unwrap().received_at;
    assert_eq!(stats.oldest_pending_at, Some(first));
    let of_state = |state: State| {
        let admin = &admin;
        async move {
            let filter = Filter {
                state: Some(state),
                ..Filter::default()
            };
            let listed: Vec<String> = admin
                .list(&filter)
                .await
                .unwrap()
                .into_iter()
                .map(|e| e.event_id)
                .collect();
            let paged: Vec<String> = admin
                .page(&PageQuery {
                    filter,
                    ..PageQuery::default()
                })
                .await
                .unwrap()
                .events
                .into_iter()
                .map(|e| e.event_id)
                .collect();
            assert_eq!(listed, paged, "{state}");
            listed
        }
    };
    assert_eq!(of_state(State::Pending).await, ["evt_later", "evt_first"]);
    assert_eq!(of_state(State::Running).await, ["evt_held"]);
    assert_eq!(of_state(State::Dead).await, ["evt_gone"]);

    // The oldest waiting event running, the oldest pending one is the next.
    set("evt_first", State::Running).await;
    let stats = admin.stats().await.unwrap();
    assert_eq!(counts(&stats), [1, 2, 1, 0]);
    let later = admin.show("evt_later").await.unwrap().received_at;
    assert_eq!(stats.oldest_pending_at, Some(later));
    assert_eq!(of_state(State::Running).await, ["evt_held", "evt_first"]);
}

/// What makes a claim a heap-only update on PostgreSQL (migration 12): no
/// index of the events table holds a column a claim, a renewal or a requeue
/// changes, in its key, its included columns or its predicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_no_index_holds_what_a_claim_changes() {
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .connect(&payhook_test_support::postgres_url())
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"));
    let definitions: Vec<String> = sqlx::query(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'payhook_inbox'",
    )
    .fetch_all(inbox.pool())
    .await
    .unwrap()
    .iter()
    .map(|row| row.get::<String, _>("indexdef"))
    .collect();
    assert!(
        definitions
            .iter()
            .any(|index| index.contains("WHERE (phase = 'pending'")),
        "the waiting events' index: {definitions:#?}"
    );
    for index in &definitions {
        let words: Vec<&str> = index
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .collect();
        for column in [
            "state",
            "lease_token",
            "lease_until",
            "suspect",
            "attempts",
            "last_attempt_at",
        ] {
            assert!(!words.contains(&column), "{column} in {index}");
        }
    }
}

/// The events page filtered by type reads the type's index range (migration
/// 4), newest first, instead of every event of the namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_the_type_filter_reads_its_index() {
    let dir = std::env::temp_dir().join(unique("payhook-type-index"));
    std::fs::create_dir_all(&dir).unwrap();
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .connect(&format!("sqlite://{}", dir.join("inbox.db").display()))
        .await
        .unwrap();
    let plans = Admin::of_inbox(&inbox).query_plans().await.unwrap();
    let (_, by_type) = plans
        .iter()
        .find(|(what, _)| *what == "events page, by type")
        .expect("the type filter's plan is listed");
    let plan = by_type.join("\n");
    assert!(plan.contains("USING INDEX payhook_inbox_type_received"), "{plan}");
    assert!(!plan.contains("TEMP B-TREE"), "sorted by the index: {plan}");
}

/// Three deliveries of one event, two of them duplicates: the activity
/// counts one first delivery and two duplicates, not "1 acknowledged".
async fn duplicates_are_counted_apart_from_first_deliveries(url: String) {
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(unique("duplicates"))
        .connect(&url)
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"));
    let admin = Admin::of_inbox(&inbox);
    for _ in 0..3 {
        ingest(&inbox, "evt_thrice", "pi_thrice").await;
    }
    ingest(&inbox, "evt_once", "pi_once").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let activity = admin.activity(Duration::from_secs(300), 12).await.unwrap();
        let total = activity
            .iter()
            .fold((0, 0), |(r, d), slot| (r + slot.received, d + slot.duplicates));
        if total == (2, 2) {
            break;
        }
        assert!(total.1 < 2, "{total:?}");
        assert!(
            Instant::now() < deadline,
            "the duplicates were never counted: {total:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

on_every_backend! {
    sqlite: sqlite_url("payhook-attempts"), postgres: postgres_url(), worker_threads: 2;
    attempts_are_recorded_bounded_and_deleted_with_their_event,
    cut_short_attempts_are_recorded_as_interrupted,
    waiting_events_are_told_pending_or_running,
    duplicates_are_counted_apart_from_first_deliveries,
}
