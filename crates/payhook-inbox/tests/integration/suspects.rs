//! The suspect rule, on SQLite and PostgreSQL (`PAYHOOK_TEST_DATABASE_URL`;
//! fails when it is unset): an attempt is counted with its end, so a process
//! that dies charges nothing to the events it held; those come back as
//! suspects, whose attempts are counted before their handlers run, and a
//! suspect cut short again (a repeat suspect) runs alone: it waits for the
//! suspects running beside it to end, so a crash while it runs charges it
//! alone.
//!
//! Each "process" here is an inbox on a Tokio runtime of its own, on a
//! thread of its own; its crash is the runtime shut down at once: its tasks
//! and connections are dropped mid-handler, nothing is handed back, marked
//! or rolled forward — the database sees what a `kill -9` leaves (open
//! transactions rolled back, claimed rows `running` until their lease runs
//! out). The examples' tests crash real processes the same way with a
//! signal.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use payhook_core::sender::SignedDelivery;
use payhook_core::Receiver;
use payhook_inbox::admin::Admin;
use payhook_inbox::sqlx::{self, Row};
use payhook_inbox::{HandlerError, Inbox, Job};
use payhook_test_support::{on_every_backend, postgres_url, sqlite_url, unique};

use crate::{attempt_record, eventually};

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
/// The fewest events after the crashing one the first process must hold
/// when it crashes: 7 running beside the crashing one and 9 in its local
/// queue.
const MIN_HELD: usize = 16;

fn body(id: &str, intent: &str) -> Bytes {
    typed_body(id, "payment_intent.succeeded", intent)
}

fn typed_body(id: &str, event_type: &str, intent: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"id":"{id}","type":"{event_type}","created":1,"data":{{"object":{{"id":"{intent}","amount":5,"currency":"btc","status":"succeeded"}}}}}}"#
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

/// The events after the crashing one that the namespace's processes hold
/// (`running`): a quick event claimed ahead may still be among the running
/// rows, so it is not counted.
async fn held_waiting(pool: &sqlx::AnyPool, namespace: &str) -> Vec<String> {
    sqlx::query(
        "SELECT event_id FROM payhook_inbox WHERE namespace = $1 AND state = 'running' AND event_id LIKE 'evt_waiting_%'",
    )
    .bind(namespace)
    .fetch_all(pool)
    .await
    .unwrap()
    .iter()
    .map(|row| row.get(0))
    .collect()
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
    // 7 handlers beside the crashing one and, on an idle machine, 40 or more
    // in the local queue; the quick events claimed ahead of them may still be
    // finishing. How far a process claims ahead follows its handlers' pace,
    // which a loaded machine slows: after 10 s, MIN_HELD (a local queue of
    // 9 beside the 7 running) is enough to show the rule.
    let deadline = Instant::now() + Duration::from_secs(10);
    let held_at_crash = loop {
        let held = held_waiting(&pool, &namespace).await;
        if held.len() >= 47 || (Instant::now() >= deadline && held.len() >= MIN_HELD) {
            break held;
        }
        assert!(
            Instant::now() < deadline,
            "the first process holds {} of the events after the crashing one, not {MIN_HELD} or more (7 handlers and a local queue): {held:?}",
            held.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
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
    // The events held at the first crash, but those that ran beside the
    // crashing one at a counted crash (fewer than HANDLERS), went uncharged:
    // at least the local queue's.
    let uncharged = held_at_crash.iter().filter(|id| !charged.contains(id)).count();
    assert!(
        uncharged >= MIN_HELD - (HANDLERS - 1),
        "{uncharged} of the {} events held at the first crash were not charged",
        held_at_crash.len()
    );
}

/// The repeat suspect of [`a_repeat_suspect_waits_for_the_suspects_running_beside_it`].
const REPEAT: &str = "evt_repeat";
const REPEAT_TYPE: &str = "payment_intent.succeeded";
/// The suspects running when the repeat suspect is claimed: a type of their
/// own, so that each can be held back by a pause while the other runs.
const NEIGHBOUR_TYPE: &str = "payment_intent.failed";
const NEIGHBOURS: usize = 5;

/// What the handlers of one process of
/// [`a_repeat_suspect_waits_for_the_suspects_running_beside_it`] do and see.
#[derive(Default)]
struct Watch {
    /// The events whose handlers run in this process now.
    running: Mutex<BTreeSet<String>>,
    /// At each start of [`REPEAT`]'s handler: the other handlers running.
    repeat_started: Mutex<Vec<Vec<String>>>,
    /// The neighbours' handlers return once this is set, and wait until then.
    release: AtomicBool,
    /// [`REPEAT`]'s handler returns at once when set, and hangs (until the
    /// process crashes) otherwise.
    repeat_returns: bool,
}

impl Watch {
    fn running(&self) -> BTreeSet<String> {
        self.running.lock().unwrap().clone()
    }

    fn repeat_started(&self) -> Vec<Vec<String>> {
        self.repeat_started.lock().unwrap().clone()
    }
}

/// A handler's place in [`Watch::running`], left when the handler ends
/// however it ends (its process crashing included).
struct Running(Arc<Watch>, String);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.lock().unwrap().remove(&self.1);
    }
}

/// A process of [`a_repeat_suspect_waits_for_the_suspects_running_beside_it`],
/// running an inbox until [`Replica::crash`] or [`Replica::stop`], its
/// handlers as [`Watch`] says.
struct Replica {
    order: tokio::sync::oneshot::Sender<bool>,
    thread: std::thread::JoinHandle<()>,
    watch: Arc<Watch>,
}

impl Replica {
    fn start(url: &str, namespace: &str, watch: Watch) -> Self {
        let watch = Arc::new(watch);
        let (order, ordered) = tokio::sync::oneshot::channel::<bool>();
        let (url, namespace, seen) = (url.to_owned(), namespace.to_owned(), Arc::clone(&watch));
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let crash = runtime.block_on(async move {
                let inbox = connect(&url, &namespace).await;
                let workers = inbox.start(move |job: Job| {
                    let watch = Arc::clone(&seen);
                    async move {
                        let id = job.event().id().to_owned();
                        let others: Vec<String> = {
                            let mut running = watch.running.lock().unwrap();
                            let others = running.iter().cloned().collect();
                            running.insert(id.clone());
                            others
                        };
                        let _running = Running(Arc::clone(&watch), id.clone());
                        if id == REPEAT {
                            watch.repeat_started.lock().unwrap().push(others);
                            if !watch.repeat_returns {
                                std::future::pending::<()>().await;
                            }
                        } else {
                            while !watch.release.load(Ordering::Acquire) {
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                        }
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
                runtime.shutdown_background();
            }
        });
        Self { order, thread, watch }
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

async fn state_and_attempts(admin: &Admin, id: &str) -> (String, i64) {
    let event = admin.show(id).await.unwrap();
    (event.state.to_string(), event.attempts)
}

/// A repeat suspect claimed while other suspects run in its process waits
/// until they have ended, so the crash it causes charges it alone.
///
/// The events are set up by crashes, with pauses keeping each type out of
/// the claims in turn: a first process runs the repeat event and crashes
/// (a suspect, uncounted); a second runs it again, counted, beside the
/// neighbours (not suspects: uncounted), and crashes, so the repeat event
/// comes back a repeat suspect and the neighbours suspects. The third
/// process, with the repeat event's type paused, starts the neighbours as
/// suspects and they keep running; then the type is resumed and the repeat
/// suspect is claimed beside them. It must not start until they end; it
/// crashes the process when it does, and ends dead after its counted
/// attempts, while each neighbour is charged its one finished attempt.
async fn a_repeat_suspect_waits_for_the_suspects_running_beside_it(url: String) {
    let namespace = unique("repeat-suspect");
    let inbox = connect(&url, &namespace).await;
    let admin = Admin::of_inbox(&inbox);
    let neighbours: Vec<String> = (0..NEIGHBOURS).map(|i| format!("evt_neighbour_{i}")).collect();
    admin.pause(NEIGHBOUR_TYPE).await.unwrap();
    let mut bodies: Vec<Bytes> = neighbours
        .iter()
        .map(|id| typed_body(id, NEIGHBOUR_TYPE, &format!("pi_{id}")))
        .collect();
    bodies.push(typed_body(REPEAT, REPEAT_TYPE, "pi_repeat"));
    for body in bodies {
        let delivery = SignedDelivery::now(body, SECRET).unwrap();
        let reply = inbox.ingest(&delivery.headers(), delivery.body).await;
        assert_eq!(reply.status().as_u16(), 200, "{}", reply.body());
    }

    // First: the repeat event alone runs, and its process crashes.
    let first = Replica::start(&url, &namespace, Watch::default());
    eventually("the repeat event started in the first process", || async {
        !first.watch.repeat_started().is_empty()
    })
    .await;
    first.crash();

    // Second: the neighbours run (not suspects) beside the repeat event, a
    // suspect now, whose attempt is counted; the process crashes.
    admin.resume(NEIGHBOUR_TYPE).await.unwrap();
    let second = Replica::start(&url, &namespace, Watch::default());
    eventually(
        "the repeat event and every neighbour running in the second process",
        || async {
            !second.watch.repeat_started().is_empty() && second.watch.running().len() == NEIGHBOURS + 1
        },
    )
    .await;
    second.crash();
    assert_eq!(
        state_and_attempts(&admin, REPEAT).await,
        ("running".to_owned(), 1)
    );
    for id in &neighbours {
        assert_eq!(
            state_and_attempts(&admin, id).await,
            ("running".to_owned(), 0),
            "{id}"
        );
    }

    // Third: the neighbours come back suspects and start, counted; they keep
    // running while the repeat suspect, held back by its paused type, waits.
    admin.pause(REPEAT_TYPE).await.unwrap();
    let third = Replica::start(&url, &namespace, Watch::default());
    eventually("every neighbour running in the third process", || async {
        third.watch.running().len() == NEIGHBOURS
    })
    .await;
    for id in &neighbours {
        assert_eq!(
            state_and_attempts(&admin, id).await,
            ("running".to_owned(), 1),
            "{id}"
        );
    }
    eventually("the repeat event taken back, not claimed", || async {
        state_and_attempts(&admin, REPEAT).await.0 == "pending"
    })
    .await;
    // Resumed: the third process claims the repeat suspect while every
    // neighbour still runs there. Time for it to start if it may.
    admin.resume(REPEAT_TYPE).await.unwrap();
    eventually("the repeat suspect claimed by the third process", || async {
        state_and_attempts(&admin, REPEAT).await.0 == "running"
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(2);
    while third.watch.repeat_started().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let running = third.watch.running();
    assert!(
        neighbours.iter().all(|id| running.contains(id)),
        "the neighbours still run: {running:?}"
    );
    third.watch.release.store(true, Ordering::Release);
    eventually("the repeat suspect started in the third process", || async {
        !third.watch.repeat_started().is_empty()
    })
    .await;
    let started_beside = third.watch.repeat_started();
    third.crash();
    assert_eq!(
        started_beside,
        [Vec::<String>::new()],
        "the repeat suspect started beside other handlers"
    );

    // Fourth: the repeat event is dead after its counted attempts; nothing
    // else is left to run.
    let fourth = Replica::start(
        &url,
        &namespace,
        Watch {
            repeat_returns: true,
            release: AtomicBool::new(true),
            ..Watch::default()
        },
    );
    eventually("the repeat event dead", || async {
        state_and_attempts(&admin, REPEAT).await.0 == "dead"
    })
    .await;
    let ran_again = fourth.watch.repeat_started();
    fourth.stop();
    assert!(
        ran_again.is_empty(),
        "the repeat event ran after its last attempt"
    );
    assert_eq!(
        state_and_attempts(&admin, REPEAT).await,
        ("dead".to_owned(), i64::from(MAX_ATTEMPTS))
    );
    assert_eq!(
        attempt_record(&admin, REPEAT).await,
        [(2, "interrupted".to_owned()), (1, "interrupted".to_owned())]
    );
    // Not charged for the crash: each neighbour had ended before it.
    for id in &neighbours {
        assert_eq!(
            state_and_attempts(&admin, id).await,
            ("done".to_owned(), 1),
            "{id}"
        );
        assert_eq!(attempt_record(&admin, id).await, [(1, "done".to_owned())], "{id}");
    }
}

on_every_backend! {
    sqlite: sqlite_url("payhook-suspects"), postgres: postgres_url(), worker_threads: 2;
    a_crashing_event_ends_dead_and_its_neighbours_are_never_charged,
    a_repeat_suspect_waits_for_the_suspects_running_beside_it,
}
