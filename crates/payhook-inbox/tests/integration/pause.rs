//! Pausing an event type, on SQLite (a file in a fresh temp dir) and on
//! PostgreSQL (`PAYHOOK_TEST_DATABASE_URL`, started by `.ci/start-postgres`;
//! the PostgreSQL tests fail when it is unset or unreachable).
//!
//! | test | what it holds the inbox to |
//! |---|---|
//! | [`paused_type_waits_on_every_replica_and_resumes_in_order`] | a paused type's deliveries are acknowledged and stored but claimed by no replica (also one started after the pause), a paused event holds back the later events of its payment intent, other types run; once resumed, its events run in arrival order, each once |
//! | [`a_paused_types_events_are_out_of_the_claims_range`] | a paused type's waiting events (stored before the pause or after) are parked out of the claims' index range (`due_at <= now`) yet stay `pending` and show their own due time; resumed, they are back with the due times they had and run in arrival order |
//! | [`an_event_type_is_checked_before_it_is_paused`] | an empty or too long type is refused, nothing is written |
//! | [`a_paused_types_event_waiting_by_another_route_is_not_claimed`] | a paused type's events made waiting by a route that does not park them — a failed attempt's retry, a dead event retried by id or in bulk — are due and in the claims' range, yet no claim takes them (the claim's own check of the paused types); resumed, each runs once more |

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use payhook_core::sender::SignedDelivery;
use payhook_core::Receiver;
use payhook_inbox::admin::{Admin, BulkAction, PausedType, Selection, State};
use payhook_inbox::{HandlerError, Inbox, InboxError, Job};
use payhook_test_support::{on_every_backend, unique};

const SECRET: &str = "whsec_pause";
const PAUSED: &str = "payment_intent.payment_failed";
const RUNNING: &str = "payment_intent.succeeded";

#[derive(Debug, Clone, Copy)]
enum Backend {
    Sqlite,
    Postgres,
}

fn url_of(backend: Backend) -> String {
    match backend {
        Backend::Sqlite => {
            let dir = std::env::temp_dir().join(unique("payhook-inbox-pause"));
            std::fs::create_dir_all(&dir).unwrap();
            format!("sqlite://{}", dir.join("inbox.db").display())
        }
        Backend::Postgres => payhook_test_support::postgres_url(),
    }
}

/// One replica: an inbox with one handler, so its claims run one event at a
/// time in claim order.
async fn replica(url: &str, namespace: &str) -> Inbox {
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    Inbox::builder(receiver)
        .namespace(namespace)
        .concurrency(1)
        .poll_interval(Duration::from_millis(20))
        .connect(url)
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"))
}

fn event(id: &str, event_type: &str, intent: &str, created: i64) -> Bytes {
    Bytes::from(format!(
        r#"{{"id":"{id}","type":"{event_type}","created":{created},"data":{{"object":{{"id":"{intent}","object":"payment_intent","amount":100,"currency":"btc","status":"succeeded","created":1}}}}}}"#
    ))
}

async fn ingest_ok(inbox: &Inbox, body: Bytes) {
    let delivery = SignedDelivery::now(body, SECRET).unwrap();
    let reply = inbox.ingest(&delivery.headers(), delivery.body).await;
    assert_eq!(reply.status().as_u16(), 200, "{}", reply.body());
}

/// The ids handled, in the order their handlers started.
type Handled = Arc<Mutex<Vec<String>>>;

fn start(inbox: &Inbox, handled: &Handled) -> payhook_inbox::Workers {
    let handled = Arc::clone(handled);
    inbox.start(move |job: Job| {
        let handled = Arc::clone(&handled);
        async move {
            handled.lock().unwrap().push(job.event().id().to_owned());
            Ok(())
        }
    })
}

/// Waits until `check` holds, for 20 s at the most.
async fn eventually(what: &str, check: impl FnMut() -> bool) {
    payhook_test_support::eventually(Duration::from_secs(20), what, check).await;
}

fn handled_of(handled: &Handled, prefix: &str) -> Vec<String> {
    let handled = handled.lock().unwrap();
    handled
        .iter()
        .filter(|id| id.starts_with(prefix))
        .cloned()
        .collect()
}

async fn state_of(admin: &Admin, event_id: &str) -> String {
    admin.show(event_id).await.unwrap().state.to_string()
}

async fn paused_type_waits_on_every_replica_and_resumes_in_order(backend: Backend) {
    let url = url_of(backend);
    let namespace = unique("pause");
    let first = replica(&url, &namespace).await;
    let second = replica(&url, &namespace).await;
    let admin = Admin::of_inbox(&first);

    assert!(admin.pause(PAUSED).await.unwrap());
    assert!(
        !admin.pause(PAUSED).await.unwrap(),
        "a second pause is reported as such"
    );

    // Deliveries of the paused type through both replicas are acknowledged.
    let paused_ids: Vec<String> = (0..6).map(|i| format!("evt_paused{i}")).collect();
    for (index, id) in paused_ids.iter().enumerate() {
        let inbox = if index % 2 == 0 { &first } else { &second };
        let created = i64::try_from(index).unwrap() + 10;
        // The first three share one payment intent; the others have their own.
        let intent = if index < 3 {
            "pi_shared".to_owned()
        } else {
            format!("pi_own{index}")
        };
        ingest_ok(inbox, event(id, PAUSED, &intent, created)).await;
    }
    // Another type runs; one of its events comes after paused events of its
    // intent and must wait for them.
    for i in 0..3 {
        ingest_ok(
            &second,
            event(&format!("evt_other{i}"), RUNNING, &format!("pi_other{i}"), 1),
        )
        .await;
    }
    ingest_ok(&first, event("evt_held", RUNNING, "pi_shared", 100)).await;

    let handled = Handled::default();
    let workers_first = start(&first, &handled);
    let workers_second = start(&second, &handled);
    eventually("the other type's events", || {
        handled_of(&handled, "evt_other").len() == 3
    })
    .await;
    // Both replicas claim many times meanwhile (polling every 20 ms).
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(handled_of(&handled, "evt_paused"), Vec::<String>::new());
    assert_eq!(
        handled_of(&handled, "evt_held"),
        Vec::<String>::new(),
        "per-intent order kept"
    );
    assert_eq!(state_of(&admin, "evt_paused0").await, "pending");
    assert_eq!(state_of(&admin, "evt_held").await, "pending");
    let listed = admin.paused().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let PausedType {
        event_type, waiting, ..
    } = &listed[0];
    assert_eq!((event_type.as_str(), *waiting), (PAUSED, 6));

    // A replica started after the pause (a restart) sees it too.
    workers_first.shutdown().await;
    drop(first);
    let restarted = replica(&url, &namespace).await;
    let workers_restarted = start(&restarted, &handled);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(handled_of(&handled, "evt_paused"), Vec::<String>::new());
    assert_eq!(Admin::of_inbox(&restarted).paused().await.unwrap().len(), 1);

    // Resumed through the other replica, with one handler left running so
    // that the start order is the claim order.
    workers_second.shutdown().await;
    let other_admin = Admin::of_inbox(&second);
    assert!(other_admin.resume(PAUSED).await.unwrap());
    assert!(
        !other_admin.resume(PAUSED).await.unwrap(),
        "a second resume is reported as such"
    );
    restarted.wait_idle(Duration::from_secs(20)).await.unwrap();
    // Oldest first, each once, the shared intent's events in their order.
    // (Events of other intents may run between them: while one event's
    // done mark is on its way, its intent is held, and a claim ahead takes
    // the next claimable events, the other intents'.)
    let resumed = handled_of(&handled, "evt_paused");
    let mut each_once = resumed.clone();
    each_once.sort();
    assert_eq!(each_once, paused_ids, "each once: {resumed:?}");
    assert_eq!(resumed[0], paused_ids[0], "oldest first: {resumed:?}");
    let of = |ids: &[usize]| -> Vec<String> {
        let wanted: Vec<&String> = ids.iter().map(|&i| &paused_ids[i]).collect();
        resumed.iter().filter(|id| wanted.contains(id)).cloned().collect()
    };
    assert_eq!(
        of(&[0, 1, 2]),
        paused_ids[..3],
        "the shared intent's order: {resumed:?}"
    );
    assert_eq!(
        of(&[0, 3, 4, 5]),
        [0, 3, 4, 5].map(|i| paused_ids[i].clone()),
        "claims oldest first: {resumed:?}"
    );
    let order = handled.lock().unwrap().clone();
    let position = |id: &str| order.iter().position(|handled| handled == id).unwrap();
    assert!(position("evt_held") > position("evt_paused2"), "{order:?}");
    assert_eq!(order.len(), 6 + 3 + 1, "{order:?}");
    assert!(other_admin.paused().await.unwrap().is_empty());
    workers_restarted.shutdown().await;
}

/// Pending events of the namespace a claim's index range reaches now (due
/// by now), by id.
async fn due_now(inbox: &Inbox) -> Vec<String> {
    let now = i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap();
    let rows = payhook_inbox::sqlx::query(
        "SELECT event_id FROM payhook_inbox WHERE namespace = $1 AND state = 'pending' AND due_at <= $2 ORDER BY arrival",
    )
    .bind(inbox.namespace())
    .bind(now)
    .fetch_all(inbox.pool())
    .await
    .unwrap();
    rows.iter()
        .map(|row| payhook_inbox::sqlx::Row::get::<String, _>(row, "event_id"))
        .collect()
}

async fn a_paused_types_events_are_out_of_the_claims_range(backend: Backend) {
    let url = url_of(backend);
    let inbox = replica(&url, &unique("pause-parked")).await;
    let admin = Admin::of_inbox(&inbox);
    // Stored before the pause, and (after it) through intake.
    ingest_ok(&inbox, event("evt_parked0", PAUSED, "pi_parked0", 1)).await;
    ingest_ok(&inbox, event("evt_parked1", PAUSED, "pi_parked1", 2)).await;
    ingest_ok(&inbox, event("evt_running", RUNNING, "pi_running", 3)).await;
    assert_eq!(due_now(&inbox).await.len(), 3);
    assert!(admin.pause(PAUSED).await.unwrap());
    ingest_ok(&inbox, event("evt_parked2", PAUSED, "pi_parked2", 4)).await;
    // Every pending event of the paused type is parked past the claims'
    // range (`due_at <= now`), so no claim steps over it; it stays pending,
    // and is shown with its own due time.
    assert_eq!(due_now(&inbox).await, vec!["evt_running".to_owned()]);
    let shown = admin.show("evt_parked2").await.unwrap();
    assert_eq!(shown.state, State::Pending);
    assert!(shown.due_at <= shown.received_at + 1000, "{shown:?}");
    assert_eq!(admin.paused().await.unwrap()[0].waiting, 3);
    // A second pause parks nothing twice.
    assert!(!admin.pause(PAUSED).await.unwrap());
    assert_eq!(due_now(&inbox).await, vec!["evt_running".to_owned()]);

    // Resumed: back in the range with the due times they had, and handled
    // in arrival order.
    assert!(admin.resume(PAUSED).await.unwrap());
    assert_eq!(
        due_now(&inbox).await,
        ["evt_parked0", "evt_parked1", "evt_running", "evt_parked2"]
    );
    let handled = Handled::default();
    let workers = start(&inbox, &handled);
    inbox.wait_idle(Duration::from_secs(20)).await.unwrap();
    assert_eq!(
        handled_of(&handled, "evt_parked"),
        ["evt_parked0", "evt_parked1", "evt_parked2"]
    );
    workers.shutdown().await;
}

async fn an_event_type_is_checked_before_it_is_paused(backend: Backend) {
    let url = url_of(backend);
    let inbox = replica(&url, &unique("pause-check")).await;
    let admin = Admin::of_inbox(&inbox);
    for bad in [String::new(), "t".repeat(256)] {
        let err = admin.pause(&bad).await.unwrap_err();
        assert!(matches!(err, InboxError::InvalidSetting(_)), "{err}");
        let err = admin.resume(&bad).await.unwrap_err();
        assert!(matches!(err, InboxError::InvalidSetting(_)), "{err}");
    }
    assert!(admin.pause(&"t".repeat(255)).await.unwrap());
    assert!(admin.paused().await.unwrap().len() == 1);
}

/// Events of a paused type made waiting by routes that do not park them
/// (the pause parks only what waits when it is made, and what intake stores
/// after): only the claim's check of the paused types keeps them.
async fn a_paused_types_event_waiting_by_another_route_is_not_claimed(backend: Backend) {
    let url = url_of(backend);
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(unique("pause-routes"))
        .concurrency(4)
        .max_attempts(2)
        .backoff(Duration::from_millis(20), Duration::from_millis(40))
        .poll_interval(Duration::from_millis(20))
        .connect(&url)
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"));
    let admin = Admin::of_inbox(&inbox);
    // Every attempt's id, in the order they started. While `failing`, every
    // attempt fails; `evt_flaky`'s waits for the gate first.
    let attempts = Handled::default();
    let failing = Arc::new(AtomicBool::new(true));
    let gate = Arc::new(AtomicBool::new(false));
    let workers = {
        let (attempts, failing, gate) = (Arc::clone(&attempts), Arc::clone(&failing), Arc::clone(&gate));
        inbox.start(move |job: Job| {
            let (attempts, failing, gate) = (Arc::clone(&attempts), Arc::clone(&failing), Arc::clone(&gate));
            async move {
                let id = job.event().id().to_owned();
                attempts.lock().unwrap().push(id.clone());
                while id == "evt_flaky" && !gate.load(Ordering::Acquire) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                if failing.load(Ordering::Acquire) {
                    return Err(HandlerError::from("the downstream is down"));
                }
                Ok(())
            }
        })
    };
    let count = |id: &str| attempts.lock().unwrap().iter().filter(|seen| *seen == id).count();
    // Two events dead after their two attempts, one running.
    ingest_ok(&inbox, event("evt_doomed0", PAUSED, "pi_doomed0", 1)).await;
    ingest_ok(&inbox, event("evt_doomed1", PAUSED, "pi_doomed1", 2)).await;
    eventually("two dead events", || {
        count("evt_doomed0") == 2 && count("evt_doomed1") == 2
    })
    .await;
    for id in ["evt_doomed0", "evt_doomed1"] {
        let deadline = Instant::now() + Duration::from_secs(20);
        while state_of(&admin, id).await != "dead" {
            assert!(Instant::now() < deadline, "{id} never dead");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    ingest_ok(&inbox, event("evt_flaky", PAUSED, "pi_flaky", 3)).await;
    eventually("evt_flaky running", || count("evt_flaky") == 1).await;

    assert!(admin.pause(PAUSED).await.unwrap());
    // Its attempt fails after the pause: waiting again, due after its backoff.
    gate.store(true, Ordering::Release);
    // A dead event retried by id, and one in bulk: waiting, due now.
    admin.retry("evt_doomed0").await.unwrap();
    let one = Selection {
        ids: vec!["evt_doomed1".to_owned()],
        ..Selection::default()
    };
    let counted = admin.bulk_count(BulkAction::Retry, &one, None).await.unwrap();
    let report = admin.bulk_run(BulkAction::Retry, &one, &counted).await.unwrap();
    assert_eq!(report.events, 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while state_of(&admin, "evt_flaky").await == "running" {
        assert!(Instant::now() < deadline, "evt_flaky's attempt never ended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The claims (every 20 ms) see all three due, and take none.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        (count("evt_doomed0"), count("evt_doomed1"), count("evt_flaky")),
        (2, 2, 1),
        "a paused type's event was claimed: {:?}",
        attempts.lock().unwrap()
    );
    let due = due_now(&inbox).await;
    for id in ["evt_doomed0", "evt_doomed1", "evt_flaky"] {
        assert!(due.iter().any(|due| due == id), "{id} is not due: {due:?}");
        assert_eq!(state_of(&admin, id).await, "pending", "{id}");
    }

    // Resumed: each runs once more, and is done.
    failing.store(false, Ordering::Release);
    assert!(admin.resume(PAUSED).await.unwrap());
    inbox.wait_idle(Duration::from_secs(20)).await.unwrap();
    assert_eq!(
        (count("evt_doomed0"), count("evt_doomed1"), count("evt_flaky")),
        (3, 3, 2)
    );
    for id in ["evt_doomed0", "evt_doomed1", "evt_flaky"] {
        assert_eq!(state_of(&admin, id).await, "done", "{id}");
    }
    workers.shutdown().await;
}

on_every_backend!(
    sqlite: Backend::Sqlite, postgres: Backend::Postgres, worker_threads: 4;
    paused_type_waits_on_every_replica_and_resumes_in_order,
    a_paused_types_events_are_out_of_the_claims_range,
    an_event_type_is_checked_before_it_is_paused,
    a_paused_types_event_waiting_by_another_route_is_not_claimed,
);
