//! Bulk actions with a count first, on SQLite (a file in a fresh temp dir)
//! and on PostgreSQL (`PAYHOOK_TEST_DATABASE_URL`, started by
//! `.ci/start-postgres`; the PostgreSQL tests fail when it is unset).
//!
//! | test | what it holds the inbox to |
//! |---|---|
//! | [`retry_counts_first_then_runs_in_batches_and_reruns_touch_the_rest`] | the count names what the run changes (by type, prefix, id list); the run goes in batches of at most `BULK_BATCH`, resting between them; run again with the count's time it changes only what the first run left (an interruption), never an event that died again since |
//! | [`replay_and_purge_act_on_their_states_only_once`] | replay takes done events done before the count, once (a replayed event done again is not replayed again); purge deletes done and dead events only, never waiting ones; a state an action does not change is refused |
//! | [`a_count_stops_at_its_limit_and_the_run_acts_on_all_selected`] | a count reads at most `BULK_COUNT_LIMIT` events, so its cost does not grow with history: exact at the limit, `more` past it, and a run given a `more` count acts on every event selected at its time |
//! | [`bulk_pause_pauses_the_selected_types`] | a bulk pause pauses each type among the selected events and changes no event |
//! | [`bulk_runs_act_on_what_was_counted`] | with workers failing and finishing events between the count and the run: a confirmed retry retries exactly the events dead at the count, never one that died after it (the issue's "counted 2, retried 7"); a confirmed purge deletes only events done or dead at the count, never one running then (dead or done since) nor one retried since; each report says selected, acted on and no longer qualified; a run given a smaller count acts on that many and no more |
//! | [`bulk_pause_leaves_what_arrived_after_the_count_alone`] | a bulk pause confirmed after the counted event was handled and a new event of its type (and one of a new type) arrived pauses nothing: the new events were not there at the count, and the counted one no longer qualifies |

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use payhook_core::sender::SignedDelivery;
use payhook_core::Receiver;
use payhook_inbox::admin::{Admin, BulkAction, BulkCount, Selection, State, BULK_BATCH, BULK_COUNT_LIMIT};
use payhook_inbox::sqlx::{self, Row};
use payhook_inbox::{HandlerError, Inbox, InboxError, Job};
use payhook_test_support::{on_every_backend, unique};

use crate::eventually as until;

const SECRET: &str = "whsec_bulk";
const TYPE_A: &str = "payment_intent.succeeded";
const TYPE_B: &str = "payment_intent.payment_failed";

#[derive(Debug, Clone, Copy)]
enum Backend {
    Sqlite,
    Postgres,
}

fn url_of(backend: Backend) -> String {
    match backend {
        Backend::Sqlite => {
            let dir = std::env::temp_dir().join(unique("payhook-inbox-bulk"));
            std::fs::create_dir_all(&dir).unwrap();
            format!("sqlite://{}", dir.join("inbox.db").display())
        }
        Backend::Postgres => payhook_test_support::postgres_url(),
    }
}

fn now_ms() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// An inbox without workers: events stay as the test sets them.
async fn inbox(backend: Backend) -> Inbox {
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    Inbox::builder(receiver)
        .namespace(unique("bulk"))
        .connect(&url_of(backend))
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"))
}

/// Stores `count` events of `event_type` with ids `{prefix}{n:04}`.
async fn store(inbox: &Inbox, prefix: &str, event_type: &str, count: usize) {
    for n in 0..count {
        let body = Bytes::from(format!(
            r#"{{"id":"{prefix}{n:04}","type":"{event_type}","created":{n},"data":{{"object":{{"id":"pi_{prefix}{n}","object":"payment_intent","amount":1,"currency":"eth","status":"succeeded","created":1}}}}}}"#
        ));
        let delivery = SignedDelivery::now(body, SECRET).unwrap();
        let reply = inbox.ingest(&delivery.headers(), delivery.body).await;
        assert_eq!(reply.status().as_u16(), 200, "{}", reply.body());
    }
}

/// Sets the state (and the attempt, done and death times) of the events
/// whose id starts with `prefix`, as workers would have left them.
async fn set_state(inbox: &Inbox, prefix: &str, state: &str, at: i64) {
    sqlx::query(
        "UPDATE payhook_inbox SET state = $1, last_attempt_at = $2, attempts = 1, \
         done_at = CASE WHEN $1 = 'done' THEN $2 ELSE NULL END, \
         due_at = CASE WHEN $1 = 'dead' THEN $2 ELSE due_at END \
         WHERE namespace = $3 AND substr(event_id, 1, CAST($4 AS INTEGER)) = $5",
    )
    .bind(state)
    .bind(at)
    .bind(inbox.namespace())
    .bind(i64::try_from(prefix.len()).unwrap())
    .bind(prefix)
    .execute(inbox.pool())
    .await
    .unwrap();
}

async fn count_in(inbox: &Inbox, prefix: &str, state: &str) -> i64 {
    sqlx::query(
        "SELECT COUNT(*) AS n FROM payhook_inbox WHERE namespace = $1 AND state = $2 AND substr(event_id, 1, CAST($3 AS INTEGER)) = $4",
    )
    .bind(inbox.namespace())
    .bind(state)
    .bind(i64::try_from(prefix.len()).unwrap())
    .bind(prefix)
    .fetch_one(inbox.pool())
    .await
    .unwrap()
    .get::<i64, _>("n")
}

async fn retry_counts_first_then_runs_in_batches_and_reruns_touch_the_rest(backend: Backend) {
    let inbox = inbox(backend).await;
    let admin = Admin::of_inbox(&inbox);
    store(&inbox, "evt_a", TYPE_A, 1100).await;
    store(&inbox, "evt_b", TYPE_B, 20).await;
    let before = now_ms() - 1000;
    set_state(&inbox, "evt_", "dead", before).await;

    let selection = Selection {
        event_type: Some(TYPE_A.to_owned()),
        ..Selection::default()
    };
    let count = admin
        .bulk_count(BulkAction::Retry, &selection, None)
        .await
        .unwrap();
    assert_eq!(count.events, 1100);
    assert_eq!(count.types, vec![(TYPE_A.to_owned(), 1100)]);
    assert_eq!(
        count_in(&inbox, "evt_a", "dead").await,
        1100,
        "counting changes nothing"
    );

    // An earlier run that stopped part way: the first 300 by id list.
    let first_part = Selection {
        ids: (0..300).map(|n| format!("evt_a{n:04}")).collect(),
        ..selection.clone()
    };
    let partial = admin
        .bulk_run(BulkAction::Retry, &first_part, &count)
        .await
        .unwrap();
    assert_eq!(partial.events, 300);
    // One of those died again after the count: the re-run leaves it dead.
    sqlx::query("UPDATE payhook_inbox SET state = 'dead', last_attempt_at = $1, due_at = $1 WHERE namespace = $2 AND event_id = 'evt_a0000'")
        .bind(now_ms() + 1)
        .bind(inbox.namespace())
        .execute(inbox.pool())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;

    let started = Instant::now();
    let report = admin
        .bulk_run(BulkAction::Retry, &selection, &count)
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(report.events, 800, "only what the first run left");
    assert_eq!(
        (report.selected, report.no_longer_qualified),
        (1100, 300),
        "the first run's 300 changed since the count"
    );
    let full_batches = 800u64.div_ceil(u64::try_from(BULK_BATCH).unwrap());
    assert!(report.batches >= full_batches, "{report:?}");
    // It rests (2 ms at least) between batches, leaving the database to
    // deliveries and workers.
    let rests = u32::try_from(report.batches - 1).unwrap();
    assert!(
        took >= Duration::from_millis(2) * rests,
        "{took:?} for {report:?}"
    );
    assert!(report.longest_batch > Duration::ZERO);
    assert_eq!(count_in(&inbox, "evt_a", "pending").await, 1099);
    assert_eq!(
        count_in(&inbox, "evt_a", "dead").await,
        1,
        "died again after the count"
    );
    assert_eq!(
        count_in(&inbox, "evt_b", "dead").await,
        20,
        "another type untouched"
    );

    let again = admin
        .bulk_run(BulkAction::Retry, &selection, &count)
        .await
        .unwrap();
    assert_eq!(again.events, 0);

    // A prefix narrows: evt_b000x are ten of the twenty.
    let prefixed = Selection {
        id_prefix: Some("evt_b000".to_owned()),
        ..Selection::default()
    };
    assert_eq!(
        admin
            .bulk_count(BulkAction::Retry, &prefixed, None)
            .await
            .unwrap()
            .events,
        10
    );
    // A wildcard in a prefix is a character, not a pattern.
    let wildcard = Selection {
        id_prefix: Some("evt_%".to_owned()),
        ..Selection::default()
    };
    assert_eq!(
        admin
            .bulk_count(BulkAction::Retry, &wildcard, None)
            .await
            .unwrap()
            .events,
        0
    );
}

async fn replay_and_purge_act_on_their_states_only_once(backend: Backend) {
    let inbox = inbox(backend).await;
    let admin = Admin::of_inbox(&inbox);
    store(&inbox, "evt_done", TYPE_A, 600).await;
    store(&inbox, "evt_dead", TYPE_A, 30).await;
    store(&inbox, "evt_wait", TYPE_A, 30).await;
    let before = now_ms() - 1000;
    set_state(&inbox, "evt_done", "done", before).await;
    set_state(&inbox, "evt_dead", "dead", before).await;

    let everything = Selection::default();
    let replay = admin
        .bulk_count(BulkAction::Replay, &everything, None)
        .await
        .unwrap();
    assert_eq!(replay.events, 600);
    // Interrupted after the first batch, then handled again meanwhile.
    let older_half = Selection {
        id_prefix: Some("evt_done00".to_owned()),
        ..Selection::default()
    };
    let first = admin
        .bulk_run(BulkAction::Replay, &older_half, &replay)
        .await
        .unwrap();
    assert_eq!(first.events, 100);
    tokio::time::sleep(Duration::from_millis(5)).await;
    set_state(&inbox, "evt_done00", "done", now_ms()).await;
    let rest = admin
        .bulk_run(BulkAction::Replay, &everything, &replay)
        .await
        .unwrap();
    assert_eq!(
        rest.events, 500,
        "the replayed and handled again are not replayed twice"
    );
    assert_eq!(count_in(&inbox, "evt_done", "pending").await, 500);

    // Purge: done and dead only; the waiting events stay.
    set_state(&inbox, "evt_done", "done", now_ms() - 10).await;
    let purge = admin
        .bulk_count(BulkAction::Purge, &everything, None)
        .await
        .unwrap();
    assert_eq!(purge.events, 630);
    let purged = admin
        .bulk_run(BulkAction::Purge, &everything, &purge)
        .await
        .unwrap();
    assert_eq!(purged.events, 630);
    assert_eq!(
        count_in(&inbox, "evt_", "done").await + count_in(&inbox, "evt_", "dead").await,
        0
    );
    assert_eq!(count_in(&inbox, "evt_wait", "pending").await, 30);
    assert_eq!(
        admin
            .bulk_run(BulkAction::Purge, &everything, &purge)
            .await
            .unwrap()
            .events,
        0
    );

    for (action, state) in [
        (BulkAction::Purge, State::Pending),
        (BulkAction::Retry, State::Done),
        (BulkAction::Replay, State::Dead),
    ] {
        let selection = Selection {
            state: Some(state),
            ..Selection::default()
        };
        let err = admin.bulk_count(action, &selection, None).await.unwrap_err();
        assert!(
            matches!(err, InboxError::InvalidSetting(_)),
            "{action} {state}: {err}"
        );
    }
    let future = BulkCount {
        as_of: now_ms() + 60_000,
        ..purge.clone()
    };
    let future = admin.bulk_run(BulkAction::Purge, &everything, &future).await;
    assert!(matches!(future, Err(InboxError::InvalidSetting(_))), "{future:?}");
}

async fn bulk_pause_pauses_the_selected_types(backend: Backend) {
    let inbox = inbox(backend).await;
    let admin = Admin::of_inbox(&inbox);
    store(&inbox, "evt_a", TYPE_A, 3).await;
    store(&inbox, "evt_b", TYPE_B, 2).await;
    set_state(&inbox, "evt_b", "dead", now_ms() - 1000).await;
    let dead = Selection {
        state: Some(State::Dead),
        ..Selection::default()
    };
    let count = admin.bulk_count(BulkAction::Pause, &dead, None).await.unwrap();
    assert_eq!(
        (count.events, count.types.clone()),
        (2, vec![(TYPE_B.to_owned(), 2)])
    );
    let report = admin.bulk_run(BulkAction::Pause, &dead, &count).await.unwrap();
    assert_eq!(report.paused_types, vec![TYPE_B.to_owned()]);
    assert_eq!(
        (report.selected, report.events, report.no_longer_qualified),
        (2, 2, 0)
    );
    let paused: Vec<String> = admin
        .paused()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.event_type)
        .collect();
    assert_eq!(paused, vec![TYPE_B.to_owned()]);
    assert_eq!(count_in(&inbox, "evt_b", "dead").await, 2, "no event changed");
}

/// Events die and finish between the count and the run, by the workers'
/// own paths: the run acts on what the count saw, never more.
async fn bulk_runs_act_on_what_was_counted(backend: Backend) {
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(unique("bulk-race"))
        .concurrency(16)
        .max_attempts(1)
        .poll_interval(Duration::from_millis(20))
        .connect(&url_of(backend))
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"));
    let admin = Admin::of_inbox(&inbox);
    // `evt_1…` handlers wait until the gate opens; `…dies…` and `…dead…`
    // fail their one attempt (dead), the others succeed (done).
    let gate = Arc::new(AtomicBool::new(false));
    let open = Arc::clone(&gate);
    let workers = inbox.start(move |job: Job| {
        let open = Arc::clone(&open);
        async move {
            let id = job.event().id().to_owned();
            while id.starts_with("evt_1") && !open.load(Ordering::Acquire) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if id.contains("dies") || id.contains("dead") {
                return Err(HandlerError::from("the downstream is down"));
            }
            Ok(())
        }
    });
    // Received first, so that a run reaching past its count would meet
    // them first.
    store(&inbox, "evt_1dies", TYPE_A, 5).await;
    store(&inbox, "evt_1ends", TYPE_A, 3).await;
    store(&inbox, "evt_2dead", TYPE_A, 2).await;
    store(&inbox, "evt_2done", TYPE_A, 2).await;
    until("5 + 3 running, 2 dead, 2 done", || async {
        count_in(&inbox, "evt_1", "running").await == 8
            && count_in(&inbox, "evt_2dead", "dead").await == 2
            && count_in(&inbox, "evt_2done", "done").await == 2
    })
    .await;

    let everything = Selection::default();
    let retry = admin
        .bulk_count(BulkAction::Retry, &everything, None)
        .await
        .unwrap();
    assert_eq!(retry.events, 2, "the dead ones");
    let purge = admin
        .bulk_count(BulkAction::Purge, &everything, None)
        .await
        .unwrap();
    assert_eq!(purge.events, 4, "the dead and done ones, not the running");

    // Between the count and the run: five die, three finish.
    tokio::time::sleep(Duration::from_millis(5)).await;
    gate.store(true, Ordering::Release);
    until("the held events dead or done", || async {
        count_in(&inbox, "evt_1dies", "dead").await == 5 && count_in(&inbox, "evt_1ends", "done").await == 3
    })
    .await;
    workers.shutdown().await;

    // A run given a smaller count acts on that many, no more.
    let smaller = BulkCount {
        events: 1,
        ..retry.clone()
    };
    let one = admin
        .bulk_run(BulkAction::Retry, &everything, &smaller)
        .await
        .unwrap();
    assert_eq!((one.selected, one.events, one.no_longer_qualified), (1, 1, 0));
    let report = admin
        .bulk_run(BulkAction::Retry, &everything, &retry)
        .await
        .unwrap();
    assert_eq!(
        (report.selected, report.events, report.no_longer_qualified),
        (2, 1, 1),
        "one left by the smaller run; the other retried by it since"
    );
    assert_eq!(count_in(&inbox, "evt_2dead", "pending").await, 2);
    assert_eq!(
        count_in(&inbox, "evt_1dies", "dead").await,
        5,
        "died after the count: not retried"
    );

    let purged = admin
        .bulk_run(BulkAction::Purge, &everything, &purge)
        .await
        .unwrap();
    assert_eq!(
        (purged.selected, purged.events, purged.no_longer_qualified),
        (4, 2, 2),
        "the two done ones; the two dead ones were retried since"
    );
    assert_eq!(count_in(&inbox, "evt_2done", "done").await, 0);
    assert_eq!(count_in(&inbox, "evt_2dead", "pending").await, 2);
    assert_eq!(
        count_in(&inbox, "evt_1dies", "dead").await,
        5,
        "running at the count, dead since: not purged"
    );
    assert_eq!(
        count_in(&inbox, "evt_1ends", "done").await,
        3,
        "running at the count, done since: not purged"
    );
}

/// A bulk pause confirmed after the counted event was handled, and after
/// new events arrived: nothing that was not there at the count is acted on.
async fn bulk_pause_leaves_what_arrived_after_the_count_alone(backend: Backend) {
    let inbox = inbox(backend).await;
    let admin = Admin::of_inbox(&inbox);
    store(&inbox, "evt_a", TYPE_A, 1).await;
    // A count selects what changed strictly before its time: not within the
    // millisecond the event was stored in.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let everything = Selection::default();
    let count = admin
        .bulk_count(BulkAction::Pause, &everything, None)
        .await
        .unwrap();
    assert_eq!(
        (count.events, count.types.clone()),
        (1, vec![(TYPE_A.to_owned(), 1)])
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    // Meanwhile the counted event is handled, and two arrive: one of its
    // type, one of another.
    set_state(&inbox, "evt_a", "done", now_ms()).await;
    store(&inbox, "evt_later_a", TYPE_A, 1).await;
    store(&inbox, "evt_later_b", TYPE_B, 1).await;
    let report = admin
        .bulk_run(BulkAction::Pause, &everything, &count)
        .await
        .unwrap();
    assert_eq!(report.paused_types, Vec::<String>::new(), "{report:?}");
    assert_eq!(
        (report.selected, report.events, report.no_longer_qualified),
        (1, 0, 1)
    );
    assert!(admin.paused().await.unwrap().is_empty());
    assert_eq!(count_in(&inbox, "evt_later_", "pending").await, 2);
}

/// Dead events written by SQL, `count` of them with ids
/// `{prefix}{n}`, died an hour ago (as a history fill would leave them).
async fn fill_dead(inbox: &Inbox, prefix: &str, count: i64) {
    let died = now_ms() - 3_600_000;
    sqlx::query(
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < $3) \
         INSERT INTO payhook_inbox (namespace, event_id, event_type, intent_id, created, body, received_at, \
           state, attempts, due_at, last_error, last_attempt_at) \
         SELECT $1, $2 || CAST(n AS TEXT), 'payment_intent.succeeded', NULL, 1, '{}', $4, 'dead', 1, $4, 'failed', $4 \
         FROM g",
    )
    .bind(inbox.namespace())
    .bind(prefix)
    .bind(count)
    .bind(died)
    .execute(inbox.pool())
    .await
    .unwrap();
}

/// A count reads at most `BULK_COUNT_LIMIT` events (one more says "more"),
/// so its cost does not grow with history: at the limit it is exact, past it
/// it says `more`, and a run given that count acts on every event selected
/// at its time, not only the limit's number.
async fn a_count_stops_at_its_limit_and_the_run_acts_on_all_selected(backend: Backend) {
    let inbox = inbox(backend).await;
    let admin = Admin::of_inbox(&inbox);
    let limit = i64::try_from(BULK_COUNT_LIMIT).unwrap();
    fill_dead(&inbox, "evt_many_", limit).await;
    let dead = Selection {
        state: Some(State::Dead),
        ..Selection::default()
    };
    let exact = admin.bulk_count(BulkAction::Purge, &dead, None).await.unwrap();
    assert_eq!((exact.events, exact.more), (BULK_COUNT_LIMIT, false));
    assert_eq!(
        exact.types,
        [("payment_intent.succeeded".to_owned(), BULK_COUNT_LIMIT)]
    );
    fill_dead(&inbox, "evt_more_", 2).await;
    let count = admin.bulk_count(BulkAction::Purge, &dead, None).await.unwrap();
    assert_eq!((count.events, count.more), (BULK_COUNT_LIMIT, true));
    assert_eq!(count.types[0].1, BULK_COUNT_LIMIT);
    let report = admin.bulk_run(BulkAction::Purge, &dead, &count).await.unwrap();
    assert_eq!(report.events, BULK_COUNT_LIMIT + 2, "{report:?}");
    assert_eq!(count_in(&inbox, "evt_", "dead").await, 0);
}

/// A count lists its 20 most common types (most events first, then by
/// name) and counts every selected event, of the types it lists and of
/// those it does not.
async fn a_count_lists_its_most_common_types_and_counts_all(backend: Backend) {
    let inbox = inbox(backend).await;
    let admin = Admin::of_inbox(&inbox);
    let died = now_ms() - 3_600_000;
    // 25 types: `type_NN` has 1 to 3 dead events (NN % 3 + 1).
    let mut expected: Vec<(String, u64)> = Vec::new();
    for n in 0..25_u64 {
        let event_type = format!("type_{n:02}");
        let events = n % 3 + 1;
        for e in 0..events {
            sqlx::query(
                "INSERT INTO payhook_inbox (namespace, event_id, event_type, intent_id, created, body, \
                 received_at, state, attempts, due_at, last_error, last_attempt_at) \
                 VALUES ($1, $2, $3, NULL, 1, '{}', $4, 'dead', 1, $4, 'failed', $4)",
            )
            .bind(inbox.namespace())
            .bind(format!("evt_{event_type}_{e}"))
            .bind(&event_type)
            .bind(died)
            .execute(inbox.pool())
            .await
            .unwrap();
        }
        expected.push((event_type, events));
    }
    let total: u64 = expected.iter().map(|(_, events)| events).sum();
    expected.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    expected.truncate(20);
    let dead = Selection {
        state: Some(State::Dead),
        ..Selection::default()
    };
    let count = admin.bulk_count(BulkAction::Retry, &dead, None).await.unwrap();
    assert_eq!((count.events, count.more), (total, false));
    assert_eq!(count.types, expected);
}

on_every_backend!(
    sqlite: Backend::Sqlite, postgres: Backend::Postgres, worker_threads: 2;
    a_count_stops_at_its_limit_and_the_run_acts_on_all_selected,
    a_count_lists_its_most_common_types_and_counts_all,
    retry_counts_first_then_runs_in_batches_and_reruns_touch_the_rest,
    replay_and_purge_act_on_their_states_only_once,
    bulk_pause_pauses_the_selected_types,
    bulk_runs_act_on_what_was_counted,
    bulk_pause_leaves_what_arrived_after_the_count_alone,
);
