//! The inbox's guarantees, one test each, on SQLite (a file in a fresh temp
//! dir) and on PostgreSQL (`PAYHOOK_TEST_DATABASE_URL`, started by
//! `.ci/start-postgres`; the PostgreSQL tests fail when it is unset or
//! unreachable, they never skip).
//!
//! Each test below fails when the guarantee it names is broken by a one-line
//! change to the queue, and each was seen failing on that change. A change to
//! the queue keeps this list whole: a guarantee that moves or changes keeps a
//! test here that fails without it.
//!
//! | test | guarantee | the change it catches |
//! |---|---|---|
//! | [`taken_over_worker_cannot_commit`] | a worker whose lease was taken over cannot open its transaction or commit while the event runs under the new worker: nothing it writes is visible, the new worker's commit stands, the effect exists once | the done mark without its lease-token condition |
//! | [`repeated_delivery_is_counted_as_a_duplicate`] | a repeated delivery (sequential, concurrent, or after the event is done) is acknowledged as already stored: the duplicate counter and log line, not the ingest counter; one row; the handler runs once | every stored delivery counted as new |
//! | [`handler_longer_than_its_lease_is_never_taken_over`] | the lease is renewed while the handler runs: a handler 3× longer than the shortest lease finishes as attempt 1, never run twice | lease renewal switched off |
//! | [`failed_attempt_waits_its_backoff`] | after a failure the event is due no sooner than the documented minimum backoff (half the nominal delay, which doubles per failure), and the next attempt does not start before it | no backoff; no doubling |
//! | [`one_intent_never_runs_twice_at_once_across_replicas`] | two events of one payment intent never run at once, also when an earlier event of the intent arrives while another replica's claim is under way (on PostgreSQL: the per-intent guard taken by the claim) | the PostgreSQL claim ignoring whether it got the intent's guard |
//! | [`retention_purges_only_old_done_rows`] | done rows older than the retention are purged, and so are the activity chart's buckets; younger done rows and buckets, rows in any other state and other namespaces' rows and buckets are kept; a redelivery of a purged event is stored and handled again | the purge ignoring `done_at`, the state or the namespace; the buckets not forgotten, or forgotten in every namespace |
//! | [`purge_round_continues_while_old_rows_remain`] | the workers' purge keeps deleting batch after batch in one round while old done rows remain, so a backlog of several batches is gone at once, not one batch per round | the workers' purge returning after its first batch |
//! | [`a_purge_backlog_does_not_hold_claims_back`] | the retention purge runs beside the claims: a new event is handled while a backlog of old rows is still being purged | the purge run inside the claim loop until it catches up |
//! | [`admin_purge_continues_while_old_rows_remain`] | `Admin::purge_done_before` (`payhook inbox purge`) deletes every old done row, batch after batch, counts them all and their batches, and rests at least 2 ms after each full batch | the admin purge returning after its first batch; no rest between batches |
//! | [`batched_done_mark_clears_the_last_error`] | an event that failed once and then succeeded without opening its transaction (its done mark written in a batch) is done with no `last_error`; its attempts record keeps the failure | the batched done mark without `last_error = NULL` |
//! | [`claimed_ahead_events_are_handed_back_uncounted`] | the workers claim ahead of their handlers without counting an attempt (it counts when the event starts), and when they stop they hand what they claimed but never started back to the queue at once, before their running handlers finish, still uncounted | the claim counting the attempt; no hand-back on shutdown |
//! | [`handled_event_is_logged_at_info`] | each handled event is logged at `INFO` with its id, type, attempt and time, whether its done mark was batched or in the handler's transaction | the line at `DEBUG` or missing for one path |
//! | [`failed_write_answers_503_and_stores_nothing`] | a delivery whose database write fails is answered `503` and nothing is stored or counted; once the database writes again the redelivery is stored and handled once | `200` after a failed write |
//! | [`postgres_intake_writer_gives_up_at_its_deadline`] (PostgreSQL) | the intake writer gives a batch up at its deliveries' deadline: a connection that never answers costs the delivery waiting on it a `503` within the deadline, and the next delivery is stored at once on another connection, not held behind it | the writer's deadline an hour later |
//!
//! Why the PostgreSQL claim guards each intent (what the test shows): claims
//! read pending rows under a statement snapshot, and `FOR UPDATE SKIP LOCKED`
//! only keeps two claims off the *same* row. When an earlier event of an intent
//! becomes pending (a late arrival, a replay, a retry of a dead event) between
//! the snapshots of two concurrent claims, the first claim took the later
//! event (the earlier one was not in its snapshot) and the second takes the
//! earlier one (the first claim's `running` mark is not committed yet): both
//! run at once. The claim holds a transaction-scoped guard on each intent it
//! claims (the queue module's docs argue the design): the second claim finds
//! the intent guarded and skips its event. The test holds the first claim
//! inside its transaction with a trigger that waits on a lock the test holds.
//!
//! Type names of the API under test are in one place ([`TestInbox`],
//! [`TestJob`]); raw SQL goes through the test's own pool.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use payhook_core::sender::SignedDelivery;
use payhook_core::{Receiver, Reply};
use payhook_inbox::admin::{Admin, State, StoredEvent};
use payhook_inbox::metrics::{DIFFERING_DUPLICATES, DUPLICATES, INGESTED};
use payhook_inbox::sqlx::{self, AnyPool, Row};
use payhook_inbox::{HandlerError, Inbox, InboxBuilder, InboxError, Job};
use payhook_test_support::{on_every_backend, unique};
use tokio::sync::watch;

use crate::telemetry::{namespace_sample, telemetry};
use crate::{eventually, now_ms};

/// The inbox type under test.
type TestInbox = Inbox;
/// The job type its handlers get.
type TestJob = Job;

const SECRET: &str = "whsec_guarantees";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

fn url_of(backend: Backend) -> String {
    match backend {
        Backend::Sqlite => {
            let dir = std::env::temp_dir().join(unique("payhook-inbox-guarantees"));
            std::fs::create_dir_all(&dir).unwrap();
            format!("sqlite://{}", dir.join("inbox.db").display())
        }
        Backend::Postgres => payhook_test_support::postgres_url(),
    }
}

/// A counter's value for one namespace, as a scraper reads it.
fn counter(name: &str, namespace: &str) -> f64 {
    namespace_sample(&telemetry().prometheus.render(), name, namespace).unwrap_or(0.0)
}

/// How many captured log lines say `message` about `event_id`.
fn log_lines(message: &str, event_id: &str) -> usize {
    let field = format!("event_id={event_id}");
    telemetry()
        .log
        .lines(|line| line.contains(message) && line.split(' ').any(|word| word == field))
        .len()
}

/// One test's inbox on one database: its namespace, its ledger table (the
/// handlers' effects), its `Admin` and a pool of its own for what the API
/// does not expose.
struct Setup {
    backend: Backend,
    url: String,
    namespace: String,
    ledger: String,
    admin: Admin,
    raw: AnyPool,
}

impl Setup {
    async fn new(backend: Backend) -> Self {
        Self::on(backend, url_of(backend)).await
    }

    /// On PostgreSQL, in a database of its own (made here, dropped by
    /// [`Setup::finish`]): for a test that holds a transaction open on the
    /// inbox table while it goes on. In the shared database another test's
    /// migrations (`CREATE INDEX IF NOT EXISTS` locks the table) would queue
    /// behind that transaction, and every write to the table behind them.
    /// Needs the `CREATEDB` privilege (the throwaway cluster's user has it).
    async fn isolated(backend: Backend) -> Self {
        match backend {
            Backend::Sqlite => Self::new(backend).await,
            Backend::Postgres => {
                let url = payhook_test_support::fresh_postgres_database("payhook_guarantees").await;
                Self::on(backend, url).await
            }
        }
    }

    /// Drops the database [`Setup::isolated`] made (nothing on SQLite, whose
    /// file is the test's own anyway).
    async fn finish(self) {
        if self.backend == Backend::Postgres && self.url != url_of(Backend::Postgres) {
            self.raw.close().await;
            payhook_test_support::drop_postgres_database(&self.url).await;
        }
    }

    /// Another namespace on the same database.
    async fn sibling(&self) -> Self {
        Self::on(self.backend, self.url.clone()).await
    }

    async fn on(backend: Backend, url: String) -> Self {
        telemetry();
        let namespace = unique("ns");
        let ledger = format!("ledger_{namespace}");
        // The inbox's own connect creates the file and the table; the raw pool
        // connects only when first used, after that.
        let inbox = connect(&url, &namespace, |b| b).await;
        drop(inbox);
        sqlx::any::install_default_drivers();
        let raw = sqlx::any::AnyPoolOptions::new()
            .max_connections(4)
            .connect(&url)
            .await
            .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"));
        sqlx::query(&format!(
            "CREATE TABLE IF NOT EXISTS {ledger} (event_id TEXT NOT NULL, note TEXT NOT NULL)"
        ))
        .execute(&raw)
        .await
        .unwrap();
        // One `Admin` per test: connecting runs the migrations, too slow to
        // repeat at every poll.
        let admin = Admin::connect(&url, &namespace).await.unwrap();
        Self {
            backend,
            url,
            namespace,
            ledger,
            admin,
            raw,
        }
    }

    /// An inbox (a replica) on this namespace: short backoff and poll
    /// interval, then `configure`.
    async fn inbox(&self, configure: impl FnOnce(InboxBuilder) -> InboxBuilder) -> TestInbox {
        connect(&self.url, &self.namespace, configure).await
    }

    async fn show(&self, event_id: &str) -> StoredEvent {
        self.admin.show(event_id).await.unwrap()
    }

    async fn state(&self, event_id: &str) -> (String, i64) {
        let shown = self.show(event_id).await;
        (shown.state.to_string(), shown.attempts)
    }

    /// The rows of this namespace, by event id and state.
    async fn rows(&self) -> Vec<(String, String)> {
        let mut rows: Vec<(String, String)> =
            sqlx::query("SELECT event_id, state FROM payhook_inbox WHERE namespace = $1")
                .bind(&self.namespace)
                .fetch_all(&self.raw)
                .await
                .unwrap()
                .iter()
                .map(|row| (row.get(0), row.get(1)))
                .collect();
        rows.sort();
        rows
    }

    /// The handlers' effects, sorted.
    async fn ledger(&self) -> Vec<(String, String)> {
        let mut rows: Vec<(String, String)> =
            sqlx::query(&format!("SELECT event_id, note FROM {}", self.ledger))
                .fetch_all(&self.raw)
                .await
                .unwrap()
                .iter()
                .map(|row| (row.get(0), row.get(1)))
                .collect();
        rows.sort();
        rows
    }

    /// Runs `sql` with the namespace as `$1` and `event_id` as `$2`.
    async fn update(&self, sql: &str, event_id: &str) {
        let done = sqlx::query(sql)
            .bind(&self.namespace)
            .bind(event_id)
            .execute(&self.raw)
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 1, "{sql} {event_id}");
    }
}

async fn connect(
    url: &str,
    namespace: &str,
    configure: impl FnOnce(InboxBuilder) -> InboxBuilder,
) -> TestInbox {
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let builder = Inbox::builder(receiver)
        .namespace(namespace)
        .backoff(Duration::from_millis(50), Duration::from_millis(200))
        .poll_interval(Duration::from_millis(20));
    configure(builder)
        .connect(url)
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"))
}

fn event(id: &str, intent: &str, created: i64) -> Bytes {
    Bytes::from(format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","created":{created},"data":{{"object":{{"id":"{intent}","object":"payment_intent","amount":100,"currency":"btc","status":"succeeded","created":1}}}}}}"#
    ))
}

async fn ingest(inbox: &TestInbox, body: &Bytes) -> Reply {
    let delivery = SignedDelivery::now(body.clone(), SECRET).unwrap();
    inbox.ingest(&delivery.headers(), delivery.body).await
}

async fn ingest_ok(inbox: &TestInbox, body: &Bytes) {
    let reply = ingest(inbox, body).await;
    assert_eq!(reply.status().as_u16(), 200, "{}", reply.body());
    assert_eq!(reply.body(), r#"{"received":true}"#);
}

/// The handler's effect: one ledger row, written in the job's transaction.
async fn write_effect(job: &TestJob, table: &str, note: &str) -> Result<(), HandlerError> {
    let mut tx = job.transaction().await?;
    sqlx::query(&format!("INSERT INTO {table} (event_id, note) VALUES ($1, $2)"))
        .bind(job.event().id())
        .bind(note)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Holds handlers until the test opens it, and counts those that reached it.
#[derive(Clone)]
struct Gate {
    entered: Arc<watch::Sender<usize>>,
    open: Arc<watch::Sender<bool>>,
}

impl Gate {
    fn new() -> Self {
        Self {
            entered: Arc::new(watch::channel(0).0),
            open: Arc::new(watch::channel(false).0),
        }
    }

    async fn pass(&self) {
        self.entered.send_modify(|entered| *entered += 1);
        let mut open = self.open.subscribe();
        let _ = open.wait_for(|open| *open).await;
    }

    async fn entered(&self, count: usize) {
        let mut entered = self.entered.subscribe();
        tokio::time::timeout(Duration::from_secs(20), entered.wait_for(|n| *n >= count))
            .await
            .expect("timed out waiting for a handler to start")
            .unwrap();
    }

    fn open(&self) {
        self.open.send_replace(true);
    }
}

// ---------------------------------------------------------------------------

/// A worker stalls past its lease (as a paused process would); another one
/// takes the event over and is still running it when the stalled one wakes
/// up and asks for its transaction, then tries to commit.
async fn taken_over_worker_cannot_commit(backend: Backend) {
    let setup = Setup::new(backend).await;
    // Long leases: nothing renews or expires them during the test but the
    // take-over below. One handler at a time: the stalled worker does not
    // claim the event again itself.
    let stalled = setup
        .inbox(|b| b.lease(Duration::from_secs(60)).concurrency(1))
        .await;
    ingest_ok(&stalled, &event("evt_takeover", "pi_t", 1)).await;

    let (stalled_gate, new_gate) = (Gate::new(), Gate::new());
    let outcome: Arc<Mutex<Vec<String>>> = Arc::default();
    let (gate, out, table) = (stalled_gate.clone(), Arc::clone(&outcome), setup.ledger.clone());
    let stalled_workers = stalled.start(move |job: TestJob| {
        let (gate, out, table) = (gate.clone(), Arc::clone(&out), table.clone());
        async move {
            gate.pass().await;
            let opened = match job.transaction().await {
                Ok(mut tx) => sqlx::query(&format!(
                    "INSERT INTO {table} (event_id, note) VALUES ($1, 'stalled')"
                ))
                .bind(job.event().id())
                .execute(&mut *tx)
                .await
                .map(drop)
                .map_err(InboxError::from),
                Err(err) => Err(err),
            };
            let committed = job.commit().await;
            let mut out = out.lock().unwrap();
            for (step, result) in [("transaction", opened), ("commit", committed)] {
                out.push(match result {
                    Ok(()) => format!("{step}: ok"),
                    Err(InboxError::LeaseLost(_)) => format!("{step}: lease lost"),
                    Err(err) => format!("{step}: {err}"),
                });
            }
            Err::<(), HandlerError>("the stalled attempt ends".into())
        }
    });
    stalled_gate.entered(1).await;
    setup
        .update(
            "UPDATE payhook_inbox SET lease_until = 0 WHERE namespace = $1 AND event_id = $2",
            "evt_takeover",
        )
        .await;
    let replica = setup.inbox(|b| b.lease(Duration::from_secs(60))).await;
    let (gate, table) = (new_gate.clone(), setup.ledger.clone());
    let new_workers = replica.start(move |job: TestJob| {
        let (gate, table) = (gate.clone(), table.clone());
        async move {
            gate.pass().await;
            write_effect(&job, &table, "new").await
        }
    });
    new_gate.entered(1).await;
    // The stalled attempt was never counted: the new worker's is the first
    // (a suspect's, counted before its handler ran).
    assert_eq!(setup.state("evt_takeover").await, ("running".to_owned(), 1));

    // The stalled worker wakes up while the event runs under the new one.
    stalled_gate.open();
    eventually("the stalled attempt ended", || async {
        outcome.lock().unwrap().len() == 2
    })
    .await;
    assert_eq!(
        *outcome.lock().unwrap(),
        ["transaction: lease lost", "commit: lease lost"]
    );
    stalled_workers.shutdown().await;
    assert!(
        setup.ledger().await.is_empty(),
        "the stalled worker's write is visible"
    );
    assert_eq!(
        setup.state("evt_takeover").await,
        ("running".to_owned(), 1),
        "the stalled worker changed the new worker's event"
    );

    new_gate.open();
    eventually("done by the new worker", || async {
        setup.state("evt_takeover").await.0 == "done"
    })
    .await;
    new_workers.shutdown().await;
    assert_eq!(
        setup.ledger().await,
        [("evt_takeover".to_owned(), "new".to_owned())]
    );
    let shown = setup.show("evt_takeover").await;
    assert_eq!((shown.state.as_str(), shown.attempts), ("done", 1));
}

/// Repeats of a stored event — one after the other, many at once, and after
/// it is done — are acknowledged as already stored, never as new.
async fn repeated_delivery_is_counted_as_a_duplicate(backend: Backend) {
    let setup = Setup::new(backend).await;
    let inbox = setup.inbox(|b| b).await;
    let ns = setup.namespace.as_str();
    // Ids unique to the test: the log lines are read by event id.
    let (one, burst) = (format!("evt_{ns}_one"), format!("evt_{ns}_burst"));
    let (one_body, burst_body) = (event(&one, "pi_one", 1), event(&burst, "pi_burst", 1));

    ingest_ok(&inbox, &one_body).await;
    ingest_ok(&inbox, &one_body).await;
    assert_eq!(counter(INGESTED, ns), 1.0);
    assert_eq!(counter(DUPLICATES, ns), 1.0);
    assert_eq!(log_lines("event stored in the inbox", &one), 1);
    assert_eq!(log_lines("duplicate delivery acknowledged", &one), 1);

    // Eight at once: written together, one of them new.
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (inbox, body) = (inbox.clone(), burst_body.clone());
            tokio::spawn(async move { ingest_ok(&inbox, &body).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(counter(INGESTED, ns), 2.0);
    assert_eq!(counter(DUPLICATES, ns), 8.0);
    assert_eq!(log_lines("event stored in the inbox", &burst), 1);
    assert_eq!(log_lines("duplicate delivery acknowledged", &burst), 7);
    assert_eq!(
        setup.rows().await,
        [
            (burst.clone(), "pending".to_owned()),
            (one.clone(), "pending".to_owned())
        ]
    );

    let table = setup.ledger.clone();
    let workers = inbox.start(move |job: TestJob| {
        let table = table.clone();
        async move { write_effect(&job, &table, "handled").await }
    });
    eventually("both done", || async {
        setup.rows().await.iter().all(|(_, state)| state == "done")
    })
    .await;
    // A repeat of a done event, with the workers running: a duplicate, not run.
    ingest_ok(&inbox, &one_body).await;
    assert_eq!(counter(INGESTED, ns), 2.0);
    assert_eq!(counter(DUPLICATES, ns), 9.0);
    assert_eq!(log_lines("duplicate delivery acknowledged", &one), 2);
    workers.shutdown().await;
    assert_eq!(
        setup.ledger().await,
        [
            (burst.clone(), "handled".to_owned()),
            (one.clone(), "handled".to_owned())
        ]
    );
    assert_eq!(setup.rows().await.len(), 2);
    assert_eq!(setup.show(&one).await.attempts, 1);
}

/// A duplicate whose type or data differs from the stored event is still
/// acknowledged and the first body kept (the handler gets it), but it is
/// logged at WARN, counted apart and recorded for the event's page; the same
/// event serialised otherwise (members reordered, spaced, the envelope's own
/// fields changed) is an ordinary duplicate. The record goes with its event.
async fn a_duplicate_that_differs_is_flagged(backend: Backend) {
    let setup = Setup::new(backend).await;
    let inbox = setup.inbox(|b| b).await;
    let ns = setup.namespace.as_str();
    let id = format!("evt_{ns}_differs");
    let first = event(&id, "pi_first", 1);
    ingest_ok(&inbox, &first).await;
    // The same event as another source serialises it: not a differing copy.
    let reserialised = Bytes::from(format!(
        r#"{{ "data" : {{ "object" : {{ "status":"succeeded","currency":"btc","amount":100,"object":"payment_intent","id":"pi_first","created":1 }} }},
            "object":"event", "livemode":false, "created":2, "type":"payment_intent.succeeded", "id":"{id}" }}"#
    ));
    ingest_ok(&inbox, &reserialised).await;
    // Another amount under the same id, signed: acknowledged, and flagged.
    let altered = Bytes::from(
        String::from_utf8(first.to_vec())
            .unwrap()
            .replace(r#""amount":100"#, r#""amount":900"#),
    );
    ingest_ok(&inbox, &altered).await;
    ingest_ok(&inbox, &altered).await;
    eventually("both differing copies recorded", || async {
        setup
            .admin
            .differing_copies(&id)
            .await
            .unwrap()
            .is_some_and(|copies| copies.copies == 2)
    })
    .await;
    assert_eq!(counter(DUPLICATES, ns), 3.0);
    assert_eq!(counter(DIFFERING_DUPLICATES, ns), 2.0);
    assert_eq!(log_lines("duplicate delivery with a different body", &id), 2);
    let copies = setup.admin.differing_copies(&id).await.unwrap().unwrap();
    assert_eq!(copies.last_body.as_bytes(), &altered[..]);
    assert!(copies.first_at <= copies.last_at);
    // The first body is the event's, and is what the handler gets.
    assert_eq!(
        setup.show(&id).await.body.as_deref().map(str::as_bytes),
        Some(&first[..])
    );
    let table = setup.ledger.clone();
    let workers = inbox.start(move |job: TestJob| {
        let table = table.clone();
        async move {
            let amount = job.event().payment_intent().unwrap().amount;
            write_effect(&job, &table, &amount.to_string()).await
        }
    });
    eventually("handled", || async { !setup.ledger().await.is_empty() }).await;
    assert_eq!(setup.ledger().await, [(id.clone(), "100".to_owned())]);
    // An event that never had a differing copy has no record.
    let other = format!("evt_{ns}_same");
    ingest_ok(&inbox, &event(&other, "pi_same", 1)).await;
    ingest_ok(&inbox, &event(&other, "pi_same", 1)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(setup.admin.differing_copies(&other).await.unwrap(), None);
    assert_eq!(counter(DIFFERING_DUPLICATES, ns), 2.0);
    // Purged with its event: the workers' upkeep forgets the record.
    eventually("both done", || async {
        setup.rows().await.iter().all(|(_, state)| state == "done")
    })
    .await;
    setup.admin.purge_done_before(now_ms() + 1).await.unwrap();
    workers.shutdown().await;
    let workers = inbox.start(|_job: TestJob| async { Ok(()) });
    eventually("the record of a purged event forgotten", || async {
        setup.admin.differing_copies(&id).await.unwrap().is_none()
    })
    .await;
    workers.shutdown().await;
    setup.finish().await;
}

/// A handler three times longer than the shortest lease, with two replicas
/// ready to take over an expired lease: the lease is renewed while it runs.
async fn handler_longer_than_its_lease_is_never_taken_over(backend: Backend) {
    let lease = Duration::from_secs(1); // the builder's minimum (the receiver's `MIN_LEASE`)
    let setup = Setup::new(backend).await;
    let replicas = [
        setup.inbox(|b| b.lease(lease).concurrency(2)).await,
        setup.inbox(|b| b.lease(lease).concurrency(2)).await,
    ];
    ingest_ok(&replicas[0], &event("evt_long", "pi_long", 1)).await;
    let attempts: Arc<Mutex<Vec<u32>>> = Arc::default();
    let workers: Vec<_> = replicas
        .iter()
        .map(|inbox| {
            let (attempts, table) = (Arc::clone(&attempts), setup.ledger.clone());
            inbox.start(move |job: TestJob| {
                let (attempts, table) = (Arc::clone(&attempts), table.clone());
                async move {
                    attempts.lock().unwrap().push(job.attempt());
                    tokio::time::sleep(3 * lease + Duration::from_millis(100)).await;
                    write_effect(&job, &table, &format!("attempt {}", job.attempt())).await
                }
            })
        })
        .collect();
    // Done, or (a lease lost) started again: the assertions below tell which.
    eventually("done or started again", || async {
        attempts.lock().unwrap().len() > 1 || setup.state("evt_long").await.0 == "done"
    })
    .await;
    for workers in workers {
        workers.shutdown().await;
    }
    assert_eq!(*attempts.lock().unwrap(), [1], "the handler was started again");
    let shown = setup.show("evt_long").await;
    assert_eq!((shown.state.as_str(), shown.attempts), ("done", 1));
    assert_eq!(shown.last_error, None);
    assert_eq!(
        setup.ledger().await,
        [("evt_long".to_owned(), "attempt 1".to_owned())]
    );
}

/// Two failures, then success: after each failure the event is due no
/// sooner than the documented minimum (`InboxBuilder::backoff`: the delay is
/// `base · 2^(failures-1)`, jittered between half and all of it), and the
/// next attempt starts no sooner than that.
async fn failed_attempt_waits_its_backoff(backend: Backend) {
    // Long enough that the test sees each scheduled retry (at least 300 ms,
    // then 600 ms) before it starts, even on a loaded machine.
    let base = Duration::from_millis(600);
    let setup = Setup::new(backend).await;
    let inbox = setup
        .inbox(|b| b.backoff(base, Duration::from_secs(10)).max_attempts(5))
        .await;
    ingest_ok(&inbox, &event("evt_retry", "pi_r", 1)).await;
    // (attempt, started, ended) in Unix milliseconds.
    let attempts: Arc<Mutex<Vec<(u32, i64, i64)>>> = Arc::default();
    let (seen, table) = (Arc::clone(&attempts), setup.ledger.clone());
    let workers = inbox.start(move |job: TestJob| {
        let (seen, table) = (Arc::clone(&seen), table.clone());
        async move {
            let started = now_ms();
            let result = if job.attempt() <= 2 {
                Err(format!("failing attempt {}", job.attempt()).into())
            } else {
                write_effect(&job, &table, "ok").await
            };
            seen.lock().unwrap().push((job.attempt(), started, now_ms()));
            result
        }
    });
    // The retry as scheduled, read while the event waits for it.
    let mut due = Vec::new();
    for failed in 1..=2 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let shown = setup.show("evt_retry").await;
            if shown.state == State::Pending && shown.attempts == failed && shown.last_error.is_some() {
                due.push(shown.due_at);
                break;
            }
            assert!(
                shown.attempts <= failed,
                "attempt {} started before the retry after attempt {failed} was seen scheduled: {shown:?}",
                shown.attempts
            );
            assert!(
                Instant::now() < deadline,
                "timed out waiting for attempt {failed} to fail"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    eventually("done", || async { setup.state("evt_retry").await.0 == "done" }).await;
    workers.shutdown().await;
    let attempts = attempts.lock().unwrap().clone();
    assert_eq!(attempts.iter().map(|a| a.0).collect::<Vec<_>>(), [1, 2, 3]);
    for (failed, due_at) in (1..=2).zip(&due) {
        let (_, _, ended) = attempts[failed - 1];
        let (_, next_started, _) = attempts[failed];
        // The least delay after failure n: half of base · 2^(n-1).
        let least = i64::try_from((base * (1 << (failed - 1)) / 2).as_millis()).unwrap();
        assert!(
            *due_at >= ended + least,
            "after failure {failed}: due {} ms after the attempt ended, at least {least} ms expected",
            due_at - ended
        );
        assert!(
            next_started >= *due_at,
            "attempt {} started {} ms before it was due",
            failed + 1,
            due_at - next_started
        );
    }
    assert_eq!(setup.ledger().await, [("evt_retry".to_owned(), "ok".to_owned())]);
}

/// Two replicas; a later event of an intent is being claimed by one when an
/// earlier event of the same intent arrives and the other replica claims.
async fn one_intent_never_runs_twice_at_once_across_replicas(backend: Backend) {
    let setup = Setup::isolated(backend).await;
    let running = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let order: Arc<Mutex<Vec<i64>>> = Arc::default();
    let hold = Gate::new();
    let handler = || {
        let (running, overlaps, order, hold, table) = (
            Arc::clone(&running),
            Arc::clone(&overlaps),
            Arc::clone(&order),
            hold.clone(),
            setup.ledger.clone(),
        );
        move |job: TestJob| {
            let (running, overlaps, order, hold, table) = (
                Arc::clone(&running),
                Arc::clone(&overlaps),
                Arc::clone(&order),
                hold.clone(),
                table.clone(),
            );
            async move {
                if running.fetch_add(1, Ordering::SeqCst) > 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                order.lock().unwrap().push(job.event().created().unwrap());
                hold.pass().await;
                // Long enough for a wrongly claimed second event to start.
                tokio::time::sleep(Duration::from_millis(300)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                write_effect(&job, &table, "ok").await
            }
        }
    };
    let first = setup.inbox(|b| b.concurrency(4)).await;
    let second = setup.inbox(|b| b.concurrency(4)).await;
    ingest_ok(&first, &event("evt_later", "pi_x", 200)).await;

    let (first_workers, mut gate) = match backend {
        Backend::Postgres => {
            // Hold the first replica's claim inside its transaction, after its
            // statement snapshot was taken: a trigger on the claim's update
            // waits for a lock the test holds.
            let gate = PgGate::install(&setup).await;
            let workers = first.start(handler());
            assert!(
                gate.wait_for_waiters(1, Duration::from_secs(20)).await,
                "the first replica's claim never reached the gate"
            );
            (workers, Some(gate))
        }
        Backend::Sqlite => {
            // SQLite claims hold the database's one write lock: the nearest
            // case is the earlier event arriving while the later one runs.
            let workers = first.start(handler());
            hold.entered(1).await;
            (workers, None)
        }
    };
    // The earlier event arrives; the other replica claims.
    ingest_ok(&second, &event("evt_earlier", "pi_x", 100)).await;
    let second_workers = second.start(handler());
    if let Some(gate) = &mut gate {
        // Without the intent's guard, the second claim takes the earlier
        // event and reaches the gate too; with it, it skips the event.
        let _ = gate.wait_for_waiters(2, Duration::from_millis(500)).await;
        gate.release().await;
        hold.entered(1).await;
    }
    // Give a wrong second claim time to start its handler.
    tokio::time::sleep(Duration::from_millis(200)).await;
    hold.open();
    eventually("both done", || async {
        setup
            .rows()
            .await
            .iter()
            .filter(|(_, state)| state == "done")
            .count()
            == 2
    })
    .await;
    first_workers.shutdown().await;
    second_workers.shutdown().await;
    if let Some(gate) = gate {
        gate.remove().await;
    }
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two events of one intent ran at once"
    );
    // The later event was claimed before the earlier one existed; the
    // earlier one waited until it had finished.
    assert_eq!(*order.lock().unwrap(), [200, 100]);
    assert_eq!(
        setup.ledger().await,
        [
            ("evt_earlier".to_owned(), "ok".to_owned()),
            ("evt_later".to_owned(), "ok".to_owned())
        ]
    );
    drop((first, second));
    setup.finish().await;
}

/// A PostgreSQL trigger that holds every claim of one namespace (its
/// `pending` → `running` update) until the test releases a lock it holds on
/// a connection of its own.
struct PgGate {
    raw: AnyPool,
    name: String,
    key: i32,
    holder: sqlx::pool::PoolConnection<sqlx::Any>,
}

impl PgGate {
    const CLASS: i32 = 0x6761_7465; // "gate"

    async fn install(setup: &Setup) -> Self {
        let key = i32::try_from(COUNTER.fetch_add(1, Ordering::Relaxed)).unwrap();
        let name = format!("gate_{}", setup.namespace);
        let mut holder = setup.raw.acquire().await.unwrap();
        sqlx::query("SELECT 1 FROM pg_advisory_lock($1, $2)")
            .bind(Self::CLASS)
            .bind(key)
            .execute(&mut *holder)
            .await
            .unwrap();
        sqlx::query(&format!(
            "CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               IF NEW.namespace = '{ns}' AND OLD.state = 'pending' AND NEW.state = 'running' THEN \
                 PERFORM pg_advisory_xact_lock_shared({class}, {key}); \
               END IF; \
               RETURN NEW; \
             END $$",
            ns = setup.namespace,
            class = Self::CLASS,
        ))
        .execute(&setup.raw)
        .await
        .unwrap();
        sqlx::query(&format!(
            "CREATE TRIGGER {name} BEFORE UPDATE ON payhook_inbox FOR EACH ROW EXECUTE FUNCTION {name}()"
        ))
        .execute(&setup.raw)
        .await
        .unwrap();
        Self {
            raw: setup.raw.clone(),
            name,
            key,
            holder,
        }
    }

    /// Waits until `count` claims wait at the gate (true), or `limit` passes.
    async fn wait_for_waiters(&self, count: i64, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                 AND classid::text::bigint = $1 AND objid::text::bigint = $2 AND objsubid = 2",
            )
            .bind(i64::from(Self::CLASS))
            .bind(i64::from(self.key))
            .fetch_one(&self.raw)
            .await
            .unwrap();
            if waiting >= count {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    }

    /// Lets the held claims (and every later one) through.
    async fn release(&mut self) {
        sqlx::query("SELECT 1 FROM pg_advisory_unlock($1, $2)")
            .bind(Self::CLASS)
            .bind(self.key)
            .execute(&mut *self.holder)
            .await
            .unwrap();
    }

    async fn remove(self) {
        drop(self.holder);
        sqlx::query(&format!("DROP TRIGGER {0} ON payhook_inbox", self.name))
            .execute(&self.raw)
            .await
            .unwrap();
        sqlx::query(&format!("DROP FUNCTION {0}()", self.name))
            .execute(&self.raw)
            .await
            .unwrap();
    }
}

/// Done rows older than the retention go; everything else stays; a
/// redelivery of a purged event is a new event.
async fn retention_purges_only_old_done_rows(backend: Backend) {
    let setup = Setup::new(backend).await;
    let other = setup.sibling().await;
    let retention = Duration::from_secs(3600);
    let inbox = setup.inbox(|b| b.retention(retention)).await;
    let ids = [
        "evt_old_done",
        "evt_young_done",
        "evt_replayed",
        "evt_dead",
        "evt_running",
    ];
    for id in ids {
        ingest_ok(&inbox, &event(id, &format!("pi_{id}"), 1)).await;
    }
    let other_inbox = other.inbox(|b| b).await;
    ingest_ok(&other_inbox, &event("evt_other_ns", "pi_o", 1)).await;
    let start = |inbox: &TestInbox, table: String| {
        inbox.start(move |job: TestJob| {
            let table = table.clone();
            async move { write_effect(&job, &table, "handled").await }
        })
    };
    let workers = start(&inbox, setup.ledger.clone());
    eventually("all done", || async {
        setup.rows().await.iter().all(|(_, state)| state == "done")
    })
    .await;
    workers.shutdown().await;

    // Ages set by hand: two hours is past the retention, half an hour is not.
    // Rows in other states keep an old `done_at` from an earlier life (they
    // were replayed or retried), which must not make them purgeable.
    let old = now_ms() - 2 * 3600 * 1000;
    let young = now_ms() - 1800 * 1000;
    let future = now_ms() + 3600 * 1000;
    let set = |sql: String, id: &'static str| {
        let setup = &setup;
        async move { setup.update(&sql, id).await }
    };
    let aged = "WHERE namespace = $1 AND event_id = $2";
    set(
        format!("UPDATE payhook_inbox SET done_at = {old}, received_at = {old} {aged}"),
        "evt_old_done",
    )
    .await;
    set(
        format!("UPDATE payhook_inbox SET done_at = {young} {aged}"),
        "evt_young_done",
    )
    .await;
    set(
        format!("UPDATE payhook_inbox SET state = 'pending', due_at = {future}, done_at = {old} {aged}"),
        "evt_replayed",
    )
    .await;
    set(
        format!("UPDATE payhook_inbox SET state = 'dead', done_at = {old} {aged}"),
        "evt_dead",
    )
    .await;
    set(
        format!(
            "UPDATE payhook_inbox SET state = 'running', lease_token = 7, lease_until = {future}, \
             done_at = {old} {aged}"
        ),
        "evt_running",
    )
    .await;
    other
        .update(
            &format!("UPDATE payhook_inbox SET state = 'done', done_at = {old} {aged}"),
            "evt_other_ns",
        )
        .await;

    // The activity chart's buckets: one past the retention, one within it,
    // and another namespace's old one.
    let bucket = |namespace: &str, at: i64| {
        format!(
            "INSERT INTO payhook_inbox_activity (namespace, bucket, shard, received) VALUES ('{namespace}', {}, 99, 1)",
            at / 10_000
        )
    };
    for sql in [
        bucket(&setup.namespace, old),
        bucket(&setup.namespace, young),
        bucket(&other.namespace, old),
    ] {
        sqlx::query(&sql).execute(&setup.raw).await.unwrap();
    }
    let buckets = |namespace: String| {
        let raw = setup.raw.clone();
        async move {
            let rows = sqlx::query(
                "SELECT bucket FROM payhook_inbox_activity WHERE namespace = $1 AND shard = 99 ORDER BY bucket",
            )
            .bind(namespace)
            .fetch_all(&raw)
            .await
            .unwrap();
            rows.iter().map(|row| row.get::<i64, _>(0)).collect::<Vec<i64>>()
        }
    };

    // Workers purge when they start (then every minute).
    let workers = start(&inbox, setup.ledger.clone());
    eventually("the old done row purged", || async {
        setup.rows().await.len() < ids.len()
    })
    .await;
    eventually("the old activity bucket forgotten", || async {
        buckets(setup.namespace.clone()).await == [young / 10_000]
    })
    .await;
    assert_eq!(buckets(other.namespace.clone()).await, [old / 10_000]);
    assert_eq!(
        setup.rows().await,
        [
            ("evt_dead".to_owned(), "dead".to_owned()),
            ("evt_replayed".to_owned(), "pending".to_owned()),
            ("evt_running".to_owned(), "running".to_owned()),
            ("evt_young_done".to_owned(), "done".to_owned()),
        ]
    );
    assert_eq!(
        other.rows().await,
        [("evt_other_ns".to_owned(), "done".to_owned())]
    );

    // Its redelivery is not recognised any more: stored and handled again.
    let ingested = counter(INGESTED, &setup.namespace);
    ingest_ok(&inbox, &event("evt_old_done", "pi_evt_old_done", 1)).await;
    assert_eq!(counter(INGESTED, &setup.namespace), ingested + 1.0);
    eventually("handled again", || async {
        setup.state("evt_old_done").await == ("done".to_owned(), 1)
    })
    .await;
    workers.shutdown().await;
    let handled: Vec<_> = setup
        .ledger()
        .await
        .into_iter()
        .filter(|(id, _)| id == "evt_old_done")
        .collect();
    assert_eq!(handled.len(), 2);
}

/// More old done rows than one purge batch holds (the batch is 1 000 rows):
/// `count` of them in this namespace, done two hours ago (past a one-hour
/// retention), written in one statement.
async fn insert_old_done_rows(setup: &Setup, count: usize) {
    let old = now_ms() - 2 * 3600 * 1000;
    sqlx::query(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count}) \
         INSERT INTO payhook_inbox (namespace, event_id, event_type, created, body, received_at, \
         state, attempts, due_at, done_at) \
         SELECT $1, 'evt_old' || CAST(i AS TEXT), 'payment_intent.succeeded', 1, '{{}}', {old}, \
         'done', 1, {old}, {old} FROM n"
    ))
    .bind(&setup.namespace)
    .execute(&setup.raw)
    .await
    .unwrap();
}

/// Done rows of this namespace done more than an hour ago.
async fn old_done_rows(setup: &Setup) -> i64 {
    sqlx::query("SELECT COUNT(*) FROM payhook_inbox WHERE namespace = $1 AND state = 'done' AND done_at < $2")
        .bind(&setup.namespace)
        .bind(now_ms() - 3600 * 1000)
        .fetch_one(&setup.raw)
        .await
        .unwrap()
        .get(0)
}

/// The retention purge runs beside the claims: while it catches up on a
/// backlog (seconds of paced batches), a new event is claimed and handled
/// at once, not after the backlog is gone.
async fn a_purge_backlog_does_not_hold_claims_back(backend: Backend) {
    let setup = Setup::new(backend).await;
    let inbox = setup.inbox(|b| b.retention(Duration::from_secs(3600))).await;
    // About 2.5 s of purging on PostgreSQL (1 000 rows a batch), tens of
    // seconds on SQLite (25 a batch), each batch followed by its rest.
    let backlog: i64 = match backend {
        Backend::Sqlite => 10_000,
        Backend::Postgres => 100_000,
    };
    insert_old_done_rows(&setup, usize::try_from(backlog).unwrap()).await;
    let workers = inbox.start(|_job: TestJob| async { Ok(()) });
    eventually("the first purge batch", || async {
        old_done_rows(&setup).await < backlog
    })
    .await;
    ingest_ok(&inbox, &event("evt_new", "pi_new", 1)).await;
    eventually("the new event done", || async {
        setup.state("evt_new").await.0 == "done"
    })
    .await;
    let left = old_done_rows(&setup).await;
    workers.shutdown().await;
    assert!(
        left > 0,
        "the backlog was gone before the new event was handled: the claims waited for the purge"
    );
}

/// Three purge batches of old done rows (1 000 a batch on PostgreSQL, 25
/// on SQLite, the last one half full): once the workers' purge has deleted
/// the first batch, the rest goes in the same round, each batch after its
/// rest (99 times its own time, 2 s at the most). A purge that stopped after
/// one batch per round would leave rows for the purge period (10 s) per
/// remaining batch.
async fn purge_round_continues_while_old_rows_remain(backend: Backend) {
    let setup = Setup::new(backend).await;
    let inbox = setup.inbox(|b| b.retention(Duration::from_secs(3600))).await;
    let backlog: i64 = match backend {
        Backend::Sqlite => 62,
        Backend::Postgres => 2500,
    };
    insert_old_done_rows(&setup, usize::try_from(backlog).unwrap()).await;
    ingest_ok(&inbox, &event("evt_young", "pi_young", 1)).await;
    let workers = inbox.start(|_job: TestJob| async { Ok(()) });
    eventually("the young event done", || async {
        setup.state("evt_young").await.0 == "done"
    })
    .await;
    // The purge runs when the workers start: wait for its first batch.
    eventually("the first purge batch", || async {
        old_done_rows(&setup).await < backlog
    })
    .await;
    let first_batch = Instant::now();
    loop {
        let left = old_done_rows(&setup).await;
        if left == 0 {
            break;
        }
        assert!(
            first_batch.elapsed() < Duration::from_secs(8),
            "{left} old done rows still there 8 s after the first purge batch: the round stopped while old rows remained"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    workers.shutdown().await;
    assert_eq!(setup.rows().await, [("evt_young".to_owned(), "done".to_owned())]);
}

/// `payhook inbox purge` deletes every old done row, however many batches
/// that takes, reports them all, and rests between its batches.
async fn admin_purge_continues_while_old_rows_remain(backend: Backend) {
    let setup = Setup::new(backend).await;
    let inbox = setup.inbox(|b| b).await;
    insert_old_done_rows(&setup, 2500).await;
    ingest_ok(&inbox, &event("evt_pending", "pi_pending", 1)).await;
    let started = Instant::now();
    let purged = setup
        .admin
        .purge_done_before(now_ms() - 3600 * 1000)
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(purged.events, 2500);
    // 1 000 rows a batch on PostgreSQL (the third finds 500), 25 on SQLite
    // (the 101st finds none).
    let batches: u32 = match backend {
        Backend::Sqlite => 101,
        Backend::Postgres => 3,
    };
    assert_eq!(purged.batches, u64::from(batches));
    // A rest of 2 ms at least after each batch that found a full one.
    let rests = Duration::from_millis(2) * (batches - 1);
    assert!(
        took >= purged.busy + rests,
        "took {took:?} with {:?} in statements: no rest between the batches",
        purged.busy
    );
    assert_eq!(old_done_rows(&setup).await, 0);
    assert_eq!(
        setup.rows().await,
        [("evt_pending".to_owned(), "pending".to_owned())]
    );
}

/// A first attempt fails; the second succeeds without opening its
/// transaction, so its done mark is written in a batch: the event is done
/// and its `last_error` is gone (the attempts record keeps the failure).
async fn batched_done_mark_clears_the_last_error(backend: Backend) {
    let setup = Setup::new(backend).await;
    let inbox = setup.inbox(|b| b.max_attempts(3)).await;
    ingest_ok(&inbox, &event("evt_fail_then_ok", "pi_f", 1)).await;
    let workers = inbox.start(|job: TestJob| async move {
        if job.attempt() == 1 {
            Err("the first attempt fails".into())
        } else {
            Ok(())
        }
    });
    eventually("done", || async {
        setup.state("evt_fail_then_ok").await.0 == "done"
    })
    .await;
    workers.shutdown().await;
    let shown = setup.show("evt_fail_then_ok").await;
    assert_eq!((shown.state.as_str(), shown.attempts), ("done", 2));
    assert_eq!(shown.last_error, None, "a done event kept its last error");
    let attempts = setup.admin.attempts("evt_fail_then_ok").await.unwrap();
    let ended: Vec<(i64, &str, Option<&str>)> = attempts
        .iter()
        .map(|a| (a.attempt, a.outcome.as_str(), a.error.as_deref()))
        .collect();
    assert_eq!(
        ended,
        [(2, "done", None), (1, "failed", Some("the first attempt fails"))]
    );
}

/// The database refuses the write (a trigger that fails every insert of the
/// test's namespace): every delivery is answered `503` and nothing is stored;
/// once the trigger is gone the redeliveries are stored and handled once.
async fn failed_write_answers_503_and_stores_nothing(backend: Backend) {
    let setup = Setup::new(backend).await;
    let inbox = setup.inbox(|b| b).await;
    let ns = setup.namespace.clone();
    let name = format!("refuse_{ns}");
    let install: Vec<String> = match backend {
        Backend::Sqlite => vec![format!(
            "CREATE TRIGGER {name} BEFORE INSERT ON payhook_inbox WHEN NEW.namespace = '{ns}' \
             BEGIN SELECT RAISE(ABORT, 'disk I/O refused by the test'); END"
        )],
        Backend::Postgres => vec![
            format!(
                "CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                   IF NEW.namespace = '{ns}' THEN RAISE EXCEPTION 'disk I/O refused by the test'; END IF; \
                   RETURN NEW; END $$"
            ),
            format!(
                "CREATE TRIGGER {name} BEFORE INSERT ON payhook_inbox FOR EACH ROW EXECUTE FUNCTION {name}()"
            ),
        ],
    };
    for statement in &install {
        sqlx::query(statement).execute(&setup.raw).await.unwrap();
    }
    let bodies: Vec<Bytes> = (0..5)
        .map(|i| event(&format!("evt_refused{i}"), &format!("pi_{i}"), 1))
        .collect();
    // One alone, then several at once (written in one statement).
    let reply = ingest(&inbox, &bodies[0]).await;
    assert_eq!(reply.status().as_u16(), 503, "{}", reply.body());
    assert!(reply.body().starts_with("Webhook Error: "), "{}", reply.body());
    let tasks: Vec<_> = bodies
        .iter()
        .map(|body| {
            let (inbox, body) = (inbox.clone(), body.clone());
            tokio::spawn(async move { ingest(&inbox, &body).await.status().as_u16() })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), 503);
    }
    assert!(setup.rows().await.is_empty(), "a refused delivery was stored");
    assert_eq!(counter(INGESTED, &ns), 0.0);
    assert_eq!(counter(DUPLICATES, &ns), 0.0);

    let remove: Vec<String> = match backend {
        Backend::Sqlite => vec![format!("DROP TRIGGER {name}")],
        Backend::Postgres => vec![
            format!("DROP TRIGGER {name} ON payhook_inbox"),
            format!("DROP FUNCTION {name}()"),
        ],
    };
    for statement in &remove {
        sqlx::query(statement).execute(&setup.raw).await.unwrap();
    }
    // The sender delivers again: stored, then handled once each.
    for body in &bodies {
        ingest_ok(&inbox, body).await;
    }
    assert_eq!(counter(INGESTED, &ns), 5.0);
    let table = setup.ledger.clone();
    let workers = inbox.start(move |job: TestJob| {
        let table = table.clone();
        async move { write_effect(&job, &table, "handled").await }
    });
    eventually("all handled", || async {
        let rows = setup.rows().await;
        rows.len() == 5 && rows.iter().all(|(_, state)| state == "done")
    })
    .await;
    workers.shutdown().await;
    let ledger: Vec<String> = setup.ledger().await.into_iter().map(|(id, _)| id).collect();
    assert_eq!(
        ledger,
        (0..5).map(|i| format!("evt_refused{i}")).collect::<Vec<_>>()
    );
}

/// The workers claim ahead of their handlers into a local queue (a claim
/// counts no attempt, and neither does starting one: an attempt counts with
/// its end), and when they stop they hand the events they claimed but never
/// started back to the queue at once, before the running handlers finish:
/// nothing waits for a lease, nothing is counted an attempt it never had.
async fn claimed_ahead_events_are_handed_back_uncounted(backend: Backend) {
    let setup = Setup::new(backend).await;
    let inbox = setup.inbox(|b| b.concurrency(2)).await;
    for i in 0..400 {
        ingest_ok(
            &inbox,
            &event(&format!("evt_ahead_{i:03}"), &format!("pi_ahead_{i}"), 1),
        )
        .await;
    }
    let gate = Gate::new();
    let handled = Arc::new(AtomicUsize::new(0));
    let workers = {
        let (gate, handled) = (gate.clone(), Arc::clone(&handled));
        inbox.start(move |_job: TestJob| {
            let (gate, handled) = (gate.clone(), Arc::clone(&handled));
            async move {
                if handled.fetch_add(1, Ordering::SeqCst) >= 150 {
                    gate.pass().await;
                } else {
                    // Slow enough that the workers measure a pace (over a
                    // quarter second) before the gate, and claim ahead.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Ok::<(), HandlerError>(())
            }
        })
    };
    gate.entered(2).await;
    let running = |attempts: i64| {
        let setup = &setup;
        async move {
            sqlx::query(
                "SELECT COUNT(*) FROM payhook_inbox WHERE namespace = $1 AND state = 'running' AND attempts = $2",
            )
            .bind(&setup.namespace)
            .bind(attempts)
            .fetch_one(&setup.raw)
            .await
            .unwrap()
            .get::<i64, _>(0)
        }
    };
    // Nothing held is counted yet: not the two held handlers' attempts
    // (counted when they end), not the events claimed ahead of them.
    assert_eq!(running(1).await, 0);
    let waiting = running(0).await - 2;
    assert!(waiting > 0, "nothing was claimed ahead of the handlers");
    let per_claim = counter(payhook_inbox::metrics::CLAIMED, &setup.namespace)
        / counter(payhook_inbox::metrics::CLAIMS, &setup.namespace);
    assert!(per_claim > 2.0, "{per_claim} events per claim with 2 handlers");
    let stopping = tokio::spawn(workers.shutdown());
    eventually("the events claimed ahead handed back", || async {
        running(0).await == 2
    })
    .await;
    assert_eq!(running(1).await, 0, "the held handlers still run, uncounted");
    let uncounted: i64 = sqlx::query(
        "SELECT COUNT(*) FROM payhook_inbox WHERE namespace = $1 AND state = 'pending' AND attempts = 0 \
         AND lease_token IS NULL",
    )
    .bind(&setup.namespace)
    .fetch_one(&setup.raw)
    .await
    .unwrap()
    .get(0);
    assert!(
        uncounted >= waiting,
        "{uncounted} pending < {waiting} handed back"
    );
    gate.open();
    stopping.await.unwrap();
    let counts: Vec<(String, i64, i64)> = sqlx::query(
        "SELECT state, attempts, COUNT(*) FROM payhook_inbox WHERE namespace = $1 GROUP BY state, attempts ORDER BY state",
    )
    .bind(&setup.namespace)
    .fetch_all(&setup.raw)
    .await
    .unwrap()
    .iter()
    .map(|row| (row.get(0), row.get(1), row.get(2)))
    .collect();
    let handled = i64::try_from(handled.load(Ordering::SeqCst)).unwrap();
    assert_eq!(
        counts,
        [
            ("done".to_owned(), 1, handled),
            ("pending".to_owned(), 0, 400 - handled)
        ]
    );
}

/// Each handled event is logged at `INFO` as an inline delivery is, with its
/// id, type, attempt and time, whether its done mark was batched or written
/// in the handler's transaction.
async fn handled_event_is_logged_at_info(backend: Backend) {
    let setup = Setup::new(backend).await;
    let inbox = setup.inbox(|b| b).await;
    let batched = unique("evt_logged_batched");
    let in_transaction = unique("evt_logged_tx");
    ingest_ok(&inbox, &event(&batched, "pi_logged_b", 1)).await;
    ingest_ok(&inbox, &event(&in_transaction, "pi_logged_t", 1)).await;
    let workers = {
        let (ledger, in_transaction) = (setup.ledger.clone(), in_transaction.clone());
        inbox.start(move |job: TestJob| {
            let (ledger, in_transaction) = (ledger.clone(), in_transaction.clone());
            async move {
                if job.event().id() == in_transaction {
                    write_effect(&job, &ledger, "tx").await?;
                }
                Ok(())
            }
        })
    };
    for id in [&batched, &in_transaction] {
        eventually("done", || async { setup.state(id).await.0 == "done" }).await;
    }
    workers.shutdown().await;
    for id in [&batched, &in_transaction] {
        assert_eq!(log_lines("inbox event handled", id), 1, "{id}");
        let line = telemetry()
            .log
            .lines(|line| line.contains("inbox event handled") && line.contains(&format!("event_id={id} ")))
            .into_iter()
            .next()
            .unwrap();
        assert!(line.contains(" INFO "), "{line}");
        assert!(line.contains("event_type=payment_intent.succeeded"), "{line}");
        assert!(line.contains("attempt=1"), "{line}");
        assert!(line.contains("elapsed_ms="), "{line}");
        // Delivered, not reconciled: the line says where the event came from.
        assert!(line.contains("source=\"delivered\""), "{line}");
    }
}

on_every_backend!(
    sqlite: Backend::Sqlite, postgres: Backend::Postgres, worker_threads: 4;
    taken_over_worker_cannot_commit,
    repeated_delivery_is_counted_as_a_duplicate,
    handler_longer_than_its_lease_is_never_taken_over,
    failed_attempt_waits_its_backoff,
    one_intent_never_runs_twice_at_once_across_replicas,
    retention_purges_only_old_done_rows,
    failed_write_answers_503_and_stores_nothing,
    purge_round_continues_while_old_rows_remain,
    a_purge_backlog_does_not_hold_claims_back,
    admin_purge_continues_while_old_rows_remain,
    batched_done_mark_clears_the_last_error,
    claimed_ahead_events_are_handed_back_uncounted,
    handled_event_is_logged_at_info,
    a_duplicate_that_differs_is_flagged,
);

/// A TCP proxy on loopback in front of the test's PostgreSQL which, once
/// armed, makes the next connection that sends anything one that never
/// answers: it takes the bytes and passes nothing on, either way, until the
/// client closes it (a server or a network that stopped answering on it).
struct Stall {
    addr: SocketAddr,
    armed: Arc<AtomicBool>,
}

impl Stall {
    fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let armed = Arc::new(AtomicBool::new(false));
        let shared = Arc::clone(&armed);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let (Ok(client), Ok(server)) = (client, TcpStream::connect(&upstream)) else {
                    return;
                };
                let stalled = Arc::new(AtomicBool::new(false));
                let ways = [
                    (client.try_clone().unwrap(), server.try_clone().unwrap(), true),
                    (server, client, false),
                ];
                for (from, to, from_client) in ways {
                    let (armed, stalled) = (Arc::clone(&shared), Arc::clone(&stalled));
                    std::thread::spawn(move || pump(from, to, from_client.then_some(&*armed), &stalled));
                }
            }
        });
        Self { addr, armed }
    }
}

/// Passes bytes from `from` to `to` until either closes; `armed` (the
/// client's side) makes the connection `stalled` at its next bytes.
fn pump(mut from: TcpStream, mut to: TcpStream, armed: Option<&AtomicBool>, stalled: &AtomicBool) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if armed.is_some_and(|armed| armed.swap(false, Ordering::AcqRel)) {
            stalled.store(true, Ordering::Release);
        }
        if stalled.load(Ordering::Acquire) {
            continue;
        }
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// The intake writer's own deadline: without it, a connection that never
/// answers would hold the one writer, and every later delivery would wait
/// behind it and be refused, though the database answers on every other
/// connection. (The pool's checkout is given an hour, so that only the
/// writer's deadline can free it; SQLite's writer is bounded by its busy
/// timeout as well, so this is PostgreSQL's test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_intake_writer_gives_up_at_its_deadline() {
    let url = payhook_test_support::postgres_url();
    let (scheme, rest) = url.split_once("://").unwrap();
    let (user, rest) = rest
        .split_once('@')
        .map_or((String::new(), rest), |(user, rest)| (format!("{user}@"), rest));
    let (server, database) = rest.split_once('/').unwrap();
    let stall = Stall::start(server.to_owned());
    let proxied = format!("{scheme}://{user}{}/{database}", stall.addr);
    let deadline = Duration::from_secs(1);
    let inbox = connect(&proxied, &unique("stall"), |b| {
        b.database_timeout(deadline)
            .acquire_timeout(Duration::from_secs(3600))
    })
    .await;
    ingest_ok(&inbox, &event("evt_before", "pi_before", 1)).await;
    // The writer's NOTIFY after that batch (bounded on its own) is sent
    // before the proxy is armed: the next bytes are the next delivery's.
    tokio::time::sleep(Duration::from_millis(300)).await;

    stall.armed.store(true, Ordering::Release);
    let started = Instant::now();
    let reply = ingest(&inbox, &event("evt_stalled", "pi_stalled", 2)).await;
    let took = started.elapsed();
    assert_eq!(reply.status().as_u16(), 503, "{}", reply.body());
    assert!(took < deadline + Duration::from_millis(500), "{took:?}");
    assert!(
        !stall.armed.load(Ordering::Acquire),
        "the delivery's write never reached the stalled connection"
    );

    // The writer gave that batch up at its deadline: the next delivery is
    // written at once, on another connection.
    let started = Instant::now();
    let reply = ingest(&inbox, &event("evt_after", "pi_after", 3)).await;
    let took = started.elapsed();
    assert_eq!(
        reply.status().as_u16(),
        200,
        "the writer is still held by the stalled batch: {}",
        reply.body()
    );
    assert!(took < deadline, "{took:?}");
}
