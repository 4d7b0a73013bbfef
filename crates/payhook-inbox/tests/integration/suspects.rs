//! The suspect rule, on SQLite and PostgreSQL (`PAYHOOK_TEST_DATABASE_URL`;
//! fails when it is unset): an attempt is counted with its end, so a process
//! that dies charges nothing to the events it held; those come back as
//! suspects, whose attempts are counted before their handlers run, and a
//! suspect cut short again (a repeat suspect) runs alone.
//!
//! Each "process" here is an inbox on a Tokio runtime of its own, on a
//! thread of its own; its crash is the runtime shut down at once: its tasks
//! and connections are dropped mid-handler, nothing is handed back, marked
//! or rolled forward — the database sees what a `kill -9` leaves (open
//! transactions rolled back, claimed rows `running` until their lease runs
//! out). The examples' tests crash real processes the same way with a
//! signal.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use payhook_core::sender::SignedDelivery;
use payhook_core::Receiver;
use payhook_inbox::admin::Admin;
use payhook_inbox::sqlx::{self, Row};
use payhook_inbox::{HandlerError, Inbox, Job};
use payhook_test_support::{on_every_backend, postgres_url, sqlite_url, unique};

use crate::attempt_record;

const SECRET: &str = "whsec_suspects";
const MAX_ATTEMPTS: u32 = 2;
/// The events handled before the crashing one, so that the first process
/// has a pace and claims ahead of its handlers.
const QUICK: usize = 400;
/// The events after the crashing one.
const WAITING: usize = 200;
const CRASHING: &str = "evt_crashing";
/// Handlers per process: enough that the first one's pace makes it claim
/// well over 40 events ahead even on a loaded machine.
const HANDLERS: usize = 8;

fn body(id: &str, intent: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","created":1,"data":{{"object":{{"id":"{intent}","amount":5,"currency":"btc","status":"succeeded"}}}}}}"#
    ))
}

async fn connect(url: &str, namespace: &str) -> Inbox {
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    Inbox::builder(receiver)
        .namespace(namespace)
        .max_attempts(MAX_ATTEMPTS)
        .concurrency(HANDLERS)
        .lease(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(10))
        .connect(url)
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"))
}

/// What one process's handlers do with the events after the quick ones.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Then {
    /// The crashing event and every later one hang (the first process: the
    /// others wait in its local queue meanwhile).
    HangAll,
    /// The crashing event hangs, every other one is handled.
    HangCrashing,
}

/// A process running an inbox until [`Process::crash`] or [`Process::stop`].
struct Process {
    /// Says "crash now" (`true`) or "stop gracefully" (`false`).
    order: tokio::sync::oneshot::Sender<bool>,
    thread: std::thread::JoinHandle<()>,
    /// Receives a message each time the crashing event's handler starts.
    crashing_started: mpsc::Receiver<()>,
}

impl Process {
    fn start(url: &str, namespace: &str, then: Then) -> Self {
        let (order, ordered) = tokio::sync::oneshot::channel::<bool>();
        let (started, crashing_started) = mpsc::channel();
        let (url, namespace) = (url.to_owned(), namespace.to_owned());
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let crash = runtime.block_on(async move {
                let inbox = connect(&url, &namespace).await;
                let workers = inbox.start(move |job: Job| {
                    let started = started.clone();
                    async move {
                        let id = job.event().id().to_owned();
                        let quick = id.starts_with("evt_quick_");
                        if id == CRASHING {
                            let _ = started.send(());
                            std::future::pending::<()>().await;
                        }
                        if !quick && then == Then::HangAll {
                            std::future::pending::<()>().await;
                        }
                        // Long enough that a suspect started beside the
                        // crashing one would still run when it crashes.
                        let pause = if quick { 1 } else { 20 };
                        tokio::time::sleep(Duration::from_millis(pause)).await;
                        Ok::<(), HandlerError>(())
                    }
                });
                let crash = ordered.await.unwrap_or(true);
                if !crash {
                    workers.shutdown().await;
                }
                crash
            });
            if crash {
                // Tasks and connections dropped where they are.
                runtime.shutdown_background();
            }
        });
        Self {
            order,
            thread,
            crashing_started,
        }
    }

    fn crash(self) {
        let _ = self.order.send(true);
        self.thread.join().unwrap();
    }

    fn stop(self) {
        let _ = self.order.send(false);
        self.thread.join().unwrap();
    }
}

async fn held(pool: &sqlx::AnyPool, namespace: &str) -> i64 {
    sqlx::query("SELECT COUNT(*) FROM payhook_inbox WHERE namespace = $1 AND state = 'running'")
        .bind(namespace)
        .fetch_one(pool)
        .await
        .unwrap()
        .get(0)
}

/// An event whose handler crashes its process every time is counted from
/// its second crash on and ends dead after max-attempts + 1 crashes; the
/// 40 and more events held by the first crashed process (running beside it
/// or waiting in its local queue), and every other event, are handled once
/// and charged exactly that one attempt, except one that ran beside the
/// crashing event at a counted crash (both suspects then, at most
/// concurrency - 1 of them), charged for that crash alone.
async fn a_crashing_event_ends_dead_and_its_neighbours_are_never_charged(url: String) {
    let namespace = unique("suspects");
    let inbox = connect(&url, &namespace).await;
    let admin = Admin::of_inbox(&inbox);
    let pool = inbox.pool().clone();
    let mut ids = Vec::new();
    for i in 0..QUICK {
        ids.push(format!("evt_quick_{i:03}"));
    }
    ids.push(CRASHING.to_owned());
    for i in 0..WAITING {
        ids.push(format!("evt_waiting_{i:03}"));
    }
    for (i, id) in ids.iter().enumerate() {
        let delivery = SignedDelivery::now(body(id, &format!("pi_{i}")), SECRET).unwrap();
        let reply = inbox.ingest(&delivery.headers(), delivery.body).await;
        assert_eq!(reply.status().as_u16(), 200, "{}", reply.body());
    }

    // The first process: the quick events give it a pace, so it claims
    // ahead; it crashes while the crashing event runs and the rest wait.
    let first = Process::start(&url, &namespace, Then::HangAll);
    first
        .crashing_started
        .recv_timeout(Duration::from_secs(30))
        .expect("the crashing event never started");
    let deadline = Instant::now() + Duration::from_secs(10);
    while held(&pool, &namespace).await < 48 {
        assert!(
            Instant::now() < deadline,
            "the first process holds {} events, not 48 or more (8 handlers and 40 waiting)",
            held(&pool, &namespace).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let held_at_crash: Vec<String> = sqlx::query(
        "SELECT event_id FROM payhook_inbox WHERE namespace = $1 AND state = 'running' AND event_id <> $2",
    )
    .bind(&namespace)
    .bind(CRASHING)
    .fetch_all(&pool)
    .await
    .unwrap()
    .iter()
    .map(|row| row.get(0))
    .collect();
    assert!(held_at_crash.len() >= 47, "{held_at_crash:?}");
    first.crash();
    let mut crashes = 1;

    // Each next process takes the held events back as suspects; the crashing
    // one runs alone among them and crashes it again, until it is dead.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        assert!(Instant::now() < deadline, "not dead after {crashes} crashes");
        let process = Process::start(&url, &namespace, Then::HangCrashing);
        let mut crashed = false;
        while Instant::now() < deadline {
            if process
                .crashing_started
                .recv_timeout(Duration::from_millis(50))
                .is_ok()
            {
                crashed = true;
                break;
            }
            if admin.show(CRASHING).await.unwrap().state.to_string() == "dead" {
                break;
            }
        }
        if !crashed {
            // Dead: this process handles all the others.
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let done: i64 =
                    sqlx::query("SELECT COUNT(*) FROM payhook_inbox WHERE namespace = $1 AND state = 'done'")
                        .bind(&namespace)
                        .fetch_one(&pool)
                        .await
                        .unwrap()
                        .get(0);
                if done == i64::try_from(QUICK + WAITING).unwrap() {
                    break;
                }
                assert!(Instant::now() < deadline, "{done} events done");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            process.stop();
            break;
        }
        // Time for the other handler to start whatever it may beside the
        // crashing event, before the crash.
        std::thread::sleep(Duration::from_millis(100));
        process.crash();
        crashes += 1;
        assert!(
            crashes <= MAX_ATTEMPTS + 1,
            "the crashing event ran after {crashes} crashes"
        );
    }
    assert_eq!(
        crashes,
        MAX_ATTEMPTS + 1,
        "the first crash is not counted, each later one is"
    );

    let crashing = admin.show(CRASHING).await.unwrap();
    assert_eq!(
        (crashing.state.to_string().as_str(), crashing.attempts),
        ("dead", i64::from(MAX_ATTEMPTS))
    );
    assert_eq!(
        attempt_record(&admin, CRASHING).await,
        [(2, "interrupted".to_owned()), (1, "interrupted".to_owned())],
        "each counted crash is in the record"
    );

    // Every other event is done. None was charged for waiting in a queue or
    // for running beside the crash that was not counted; one that ran beside
    // the crashing event as a suspect (at most concurrency - 1 of them) was
    // charged for that crash only: as a repeat suspect it then ran alone.
    let rows: BTreeMap<String, (String, i64)> = sqlx::query(
        "SELECT event_id, state, attempts FROM payhook_inbox WHERE namespace = $1 AND event_id <> $2",
    )
    .bind(&namespace)
    .bind(CRASHING)
    .fetch_all(&pool)
    .await
    .unwrap()
    .iter()
    .map(|row| (row.get(0), (row.get(1), row.get(2))))
    .collect();
    assert_eq!(rows.len(), QUICK + WAITING);
    let not_done: Vec<_> = rows.iter().filter(|(_, (state, _))| state != "done").collect();
    assert!(not_done.is_empty(), "{not_done:?}");
    let charged: Vec<&String> = rows
        .iter()
        .filter(|(_, (_, attempts))| *attempts != 1)
        .map(|(id, _)| id)
        .collect();
    assert!(charged.len() < HANDLERS, "charged: {charged:?}");
    for id in &charged {
        assert_eq!(
            attempt_record(&admin, id).await,
            [(2, "done".to_owned()), (1, "interrupted".to_owned())],
            "{id} was charged more than the one crash it ran beside"
        );
    }
    let outcomes: Vec<(String, i64, String)> = sqlx::query(
        "SELECT e.event_id, a.attempt, a.outcome FROM payhook_inbox_attempts a JOIN payhook_inbox e ON e.arrival = a.arrival \
         WHERE e.namespace = $1 AND e.event_id <> $2 AND (a.attempt <> 1 OR a.outcome <> 'done')",
    )
    .bind(&namespace)
    .bind(CRASHING)
    .fetch_all(&pool)
    .await
    .unwrap()
    .iter()
    .map(|row| (row.get(0), row.get(1), row.get(2)))
    .filter(|(id, _, _): &(String, i64, String)| !charged.contains(&id))
    .collect();
    assert!(outcomes.is_empty(), "{outcomes:?}");
    let uncharged = held_at_crash.iter().filter(|id| !charged.contains(id)).count();
    assert!(
        uncharged >= 40,
        "{uncharged} of the events held at the first crash were not charged"
    );
}

on_every_backend! {
    sqlite: sqlite_url("payhook-suspects"), postgres: postgres_url(), worker_threads: 2;
    a_crashing_event_ends_dead_and_its_neighbours_are_never_charged,
}
