//! The durable inbox over loopback HTTP and in process, each figure beside its
//! reference from the same run (see BENCHMARKS.md, "Durable inbox"):
//!
//! 1. ack p99 with 2-second handlers ÷ ack p99 with no-op handlers;
//! 2. ingest over HTTP ÷ the same database's single-row inserts from the same
//!    number of concurrent clients without HTTP;
//! 3. no-op workers, events/s;
//! 4. resident memory while 100 000 events pass through;
//! 5. no-op workers on the app's own typed pool ÷ the same on a URL-built
//!    (`Any`) inbox, both backends;
//! 6. PostgreSQL replicas: ingest on replica A → handler start on replica B
//!    with a 5 s poll interval (woken by `NOTIFY`), p50/p99;
//! 7. PostgreSQL no-op workers ÷ a minimal hand-written `FOR UPDATE SKIP
//!    LOCKED` claim-and-mark loop on the same database, same pool size;
//! 8. soak (only when listed in `PAYHOOK_BENCH_SECTIONS`): events ingested at
//!    a steady rate (`PAYHOOK_BENCH_SOAK_RATE`, default 1 000/s) for
//!    `PAYHOOK_BENCH_SOAK_MINUTES` (default 10) with no-op workers and a
//!    1-minute retention: the table's waiting and done rows and the RSS once
//!    a minute;
//! 9. the dashboard over 100 000 stored events: each page's queries and
//!    rendering (p50, p99), each asked after the dashboard's rest from the
//!    page before, and the query plans of the overview and events page;
//! 10. PostgreSQL replicas: 1, 2 and 4 inboxes in one namespace on one
//!     database, each with its own pool and HTTP endpoint, as child processes
//!     of the bench (or, with `PAYHOOK_BENCH_REPLICAS_AS=pools`, as pools in
//!     this process), the load spread over their endpoints: with no-op
//!     handlers the same total workers split over them (1 × 32, 2 × 16,
//!     4 × 8), with 50 ms handlers 8 workers each (1 × 8, 2 × 8, 4 × 8;
//!     left out with `PAYHOOK_BENCH_REPLICAS_SLOW=off`).
//!     Per run: end-to-end events/s, ack p99, the claims and events per claim
//!     (the inbox's claim counters), the lock wait sampled from
//!     `pg_stat_activity` (in the claim's statements per claim, in the others
//!     per event), and with `pg_stat_statements` loaded the statements run
//!     most often, their calls and the server's time in them per event.
//!     `PAYHOOK_BENCH_ROUNDS` alternating rounds (default 3), then the
//!     medians' ratios.
//! 11. pausing an event type and bulk actions (`inbox/pause_bulk.rs`): the
//!     longest batch of a bulk retry and purge over 100 000 events and the ack
//!     p99 of deliveries meanwhile ÷ idle; a paused type's ack p99 ÷ handled,
//!     and its events drained after `resume` ÷ the no-op workers' rate.
//! 12. the dashboard under load (`inbox/dashboard_load.rs`): deliveries' ack
//!     p99 while 60 clients load filtered events pages over 100 000 stored
//!     events ÷ idle, every delivery `200`, the pages' own `200`/`503` counted.
//! 13. feature `otel` (`inbox/otel.rs`): ingest over HTTP and no-op workers
//!     with the spans exported ÷ with them off, and with them on but no
//!     OpenTelemetry layer ÷ off, alternating rounds.
//! 14. the no-op drain (`inbox/drain.rs`) (16 handlers; `PAYHOOK_BENCH_DRAIN_EVENTS`, default
//!     10 000 and 50 000; `PAYHOOK_BENCH_DRAIN_INTENTS` payment intents, default
//!     one per event) beside a batched hand-written loop (claim 500 and mark
//!     500 per transaction) on the same database, and on PostgreSQL section
//!     7's one-row loop, in `PAYHOOK_BENCH_ROUNDS` alternating rounds: events/s,
//!     CPU-s per 1 000 events of the process and of the PostgreSQL server
//!     (`PAYHOOK_TEST_PG_DIR`), statements per event (sqlx's own count, and
//!     `pg_stat_statements` when loaded). `PAYHOOK_BENCH_DRAIN_FLOORS=off`
//!     runs the inbox's drain only (as
//!     `benches/peers/graphile/run.sh` does).
//! 15. reconciling (`inbox/reconcile.rs`, feature `reconcile`), against the
//!     emulator in this process: 10 000 events it created and never
//!     delivered (`PAYHOOK_BENCH_RECONCILE_EVENTS`), taken by a fresh inbox
//!     with 16 no-op workers from its reconciler ÷ as signed deliveries over
//!     loopback HTTP from 16 clients, in `PAYHOOK_BENCH_ROUNDS` alternating
//!     rounds: until all stored and until all handled; then a pass when every
//!     event was delivered: wall time, requests, events stored, CPU and rows
//!     written per pass.
//! 16. a month of history (`inbox/history.rs`): one namespace filled by
//!     SQL with done events of ~1.5 KB received over 30 days
//!     (`PAYHOOK_BENCH_HISTORY` stored events, default `0,1000000`), and at
//!     each level the no-op drain, each dashboard and CLI read, the purge
//!     of the oldest day and (PostgreSQL) the bytes on disk per stored
//!     event, beside the empty table's.
//!
//! ```text
//! cargo bench --bench inbox                        # SQLite in a temp dir
//! PAYHOOK_TEST_DATABASE_URL=postgres://… cargo bench --bench inbox   # PostgreSQL too
//! PAYHOOK_BENCH_QUICK=1 cargo bench --bench inbox  # fewer requests (a smoke run)
//! PAYHOOK_BENCH_SECTIONS=3,4 cargo bench --bench inbox  # only these sections
//! PAYHOOK_BENCH_BACKENDS=postgres cargo bench --bench inbox  # sqlite, postgres or both
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Response};
use axum::routing::post;
use axum::Router;
use payhook::inbox::sqlx;
use payhook::inbox::{Backend, Inbox, Job};
use payhook::{sign, Receiver, Secret};
use payhook_test_support::unique;

#[path = "inbox/drain.rs"]
mod drain;
#[path = "inbox/pause_bulk.rs"]
mod pause_bulk;

#[path = "inbox/dashboard_load.rs"]
mod dashboard_load;

#[path = "inbox/otel.rs"]
mod otel;

#[path = "inbox/reconcile.rs"]
mod reconcile;

#[path = "inbox/history.rs"]
mod history;

const SECRET: &str = "whsec_bench_inbox";
const CLIENTS: usize = 16;

fn quick() -> bool {
    std::env::var_os("PAYHOOK_BENCH_QUICK").is_some()
}

/// Whether section `n` runs: all unless `PAYHOOK_BENCH_SECTIONS` lists some.
fn section(n: u32) -> bool {
    std::env::var("PAYHOOK_BENCH_SECTIONS").map_or(true, |list| {
        list.split(',').any(|item| item.trim().parse() == Ok(n))
    })
}

/// Whether `backend` runs: both unless `PAYHOOK_BENCH_BACKENDS` lists one.
fn backend(name: &str) -> bool {
    std::env::var("PAYHOOK_BENCH_BACKENDS")
        .map_or(true, |list| list.split(',').any(|item| item.trim() == name))
}

fn sqlite_url() -> String {
    payhook_test_support::sqlite_url("payhook-inbox-bench")
}

/// A fresh database on the PostgreSQL server, when one is configured.
async fn postgres_url() -> Option<String> {
    let base = std::env::var("PAYHOOK_TEST_DATABASE_URL").ok()?;
    sqlx::any::install_default_drivers();
    let admin = sqlx::AnyPool::connect(&base).await.expect("PostgreSQL reachable");
    let name = unique("payhook_bench");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .expect("create database");
    admin.close().await;
    let (server, _) = base.rsplit_once('/').expect("URL with a database");
    Some(format!("{server}/{name}"))
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

fn body(id: &str) -> String {
    format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","created":1732264800,"data":{{"object":{{"id":"pi_{id}","object":"payment_intent","amount":2500,"currency":"btc","status":"succeeded","created":1732264800,"metadata":{{"order":"42"}}}}}}}}"#
    )
}

async fn connect(url: &str, concurrency: usize) -> Inbox {
    let receiver = Receiver::builder().secret(SECRET).build().expect("receiver");
    Inbox::builder(receiver)
        .namespace(unique("bench"))
        .concurrency(concurrency)
        .poll_interval(Duration::from_millis(20))
        .connect(url)
        .await
        .expect("inbox")
}

async fn webhook(State(inbox): State<Inbox>, headers: HeaderMap, body: Bytes) -> Response<Body> {
    inbox.ingest(&headers, body).await.into_response()
}

async fn serve(inbox: Inbox) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = Router::new().route("/webhooks", post(webhook)).with_state(inbox);
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/webhooks")
}

/// `total` signed POSTs from `CLIENTS` concurrent clients; each latency.
async fn load(url: &str, total: usize) -> (Duration, Vec<Duration>) {
    load_over(&[url.to_owned()], CLIENTS, total).await
}

/// `total` signed POSTs of new events from `clients` concurrent keep-alive
/// clients, spread over `endpoints` (client `n` posts to endpoint
/// `n % endpoints.len()`); the time they took and each latency.
async fn load_over(endpoints: &[String], clients: usize, total: usize) -> (Duration, Vec<Duration>) {
    let client = reqwest::Client::new();
    let next = Arc::new(AtomicUsize::new(0));
    let prefix = unique("evt");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..clients {
        let (client, next, prefix) = (client.clone(), Arc::clone(&next), prefix.clone());
        let url = endpoints[task % endpoints.len()].clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return latencies;
                }
                let body = body(&format!("{prefix}_{i}"));
                let signature = sign(body.as_bytes(), &Secret::new(SECRET).expect("secret"), now());
                let sent = Instant::now();
                let response = client
                    .post(&url)
                    .header("x-service-signature", signature)
                    .body(body)
                    .send()
                    .await
                    .expect("reply");
                assert_eq!(response.status().as_u16(), 200);
                let _ = response.bytes().await;
                latencies.push(sent.elapsed());
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("client"));
    }
    (started.elapsed(), all)
}

fn percentile(latencies: &mut [Duration], p: f64) -> Duration {
    latencies.sort();
    let index = ((latencies.len() as f64 - 1.0) * p).round() as usize;
    latencies[index]
}

async fn ack_p99(url: &str, requests: usize, handler_delay: Duration) -> Duration {
    let inbox = connect(url, 32).await;
    let workers = inbox.start(move |_job: Job| async move {
        tokio::time::sleep(handler_delay).await;
        Ok(())
    });
    let endpoint = serve(inbox).await;
    let _ = load(&endpoint, 200).await; // warm-up
    let (_, mut latencies) = load(&endpoint, requests).await;
    // Stop them (running handlers finish) so that they do not load the
    // database and the CPU during the later sections.
    workers.shutdown().await;
    percentile(&mut latencies, 0.99)
}

async fn raw_inserts_per_second(url: &str, total: usize) -> f64 {
    let inbox = connect(url, 1).await; // creates the table
    let pool = inbox.pool().clone();
    let namespace = unique("raw");
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (pool, next, namespace) = (pool.clone(), Arc::clone(&next), namespace.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return;
                }
                let id = format!("evt_raw_{i}");
                sqlx::query(
                    "INSERT INTO payhook_inbox (namespace, event_id, event_type, intent_id, created, body, received_at, state, attempts, due_at) \
                     VALUES ($1, $2, 'payment_intent.succeeded', $3, 1732264800, $4, 0, 'pending', 0, 0) \
                     ON CONFLICT (namespace, event_id) DO NOTHING",
                )
                .bind(&namespace)
                .bind(&id)
                .bind(format!("pi_{id}"))
                .bind(body(&id))
                .execute(&pool)
                .await
                .expect("insert");
            }
        }));
    }
    for task in tasks {
        task.await.expect("client");
    }
    total as f64 / started.elapsed().as_secs_f64()
}

async fn http_ingest_per_second(url: &str, total: usize) -> f64 {
    let inbox = connect(url, 1).await; // no workers: ingest alone
    let endpoint = serve(inbox).await;
    let _ = load(&endpoint, 200).await;
    let (elapsed, _) = load(&endpoint, total).await;
    total as f64 / elapsed.as_secs_f64()
}

async fn store<DB: Backend>(inbox: &Inbox<DB>, count: usize, prefix: &str) {
    let secret = Secret::new(SECRET).expect("secret");
    let mut pending = Vec::new();
    for i in 0..count {
        let body = Bytes::from(body(&format!("{prefix}_{i}")));
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "x-service-signature",
            sign(&body, &secret, now()).parse().expect("header"),
        );
        pending.push(inbox.ingest(&headers, body));
        if pending.len() == 512 {
            for reply in futures_util::future::join_all(pending.drain(..)).await {
                assert_eq!(reply.status().as_u16(), 200);
            }
        }
    }
    for reply in futures_util::future::join_all(pending).await {
        assert_eq!(reply.status().as_u16(), 200);
    }
}

async fn workers_per_second(url: &str, total: usize) -> f64 {
    let inbox = connect(url, 16).await;
    let prefix = unique("evt_w");
    store(&inbox, total, &prefix).await;
    let done = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&done);
    let started = Instant::now();
    let workers = inbox.start(move |_job: Job| {
        let counter = Arc::clone(&counter);
        async move {
            counter.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    });
    // Handler calls are counted before their mark commits: wait for the marks.
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM payhook_inbox WHERE state <> 'done' AND event_id LIKE $1",
        )
        .bind(format!("{prefix}%"))
        .fetch_one(inbox.pool())
        .await
        .expect("count");
        if waiting == 0 && done.load(Ordering::Relaxed) >= total {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    workers.shutdown().await;
    rate
}

/// A `/proc/self/status` field in KiB (`VmRSS`: all resident memory;
/// `RssAnon`: the heap and stacks, without mapped files such as SQLite's
/// shared-memory WAL index).
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with(field))
                .and_then(|line| line.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

async fn memory_while_passing(url: &str, total: usize) {
    let inbox = connect(url, 16).await;
    let done = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&done);
    let workers = inbox.start(move |_job: Job| {
        let counter = Arc::clone(&counter);
        async move {
            counter.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    });
    let step = total / 10;
    let prefix = unique("evt_m");
    let mut samples = Vec::new();
    let mut anon = Vec::new();
    let mut connections = Vec::new();
    for chunk in 0..10 {
        store(&inbox, step, &format!("{prefix}_{chunk}")).await;
        while done.load(Ordering::Relaxed) < step * (chunk + 1) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        samples.push(status_kib("VmRSS:"));
        anon.push(status_kib("RssAnon:"));
        connections.push(inbox.pool().size().to_string());
    }
    workers.shutdown().await;
    let mib = |samples: &[u64]| {
        samples
            .iter()
            .map(|kib| format!("{:.1}", *kib as f64 / 1024.0))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("  RSS (MiB) after each {step} events: {}", mib(&samples));
    println!("  of which anonymous (heap, stacks):    {}", mib(&anon));
    println!(
        "  database connections open:            {}",
        connections.join(", ")
    );
    let first = samples[1] as f64; // after warm-up (pools, caches)
    let last = samples[9] as f64;
    println!(
        "  growth from 20% to 100% of the events: {:+.1} % ({:+.1} MiB)",
        (last / first - 1.0) * 100.0,
        (last - first) / 1024.0
    );
}

/// No-op workers (16) on `inbox`: events/s from start to the last mark.
async fn noop_rate<DB: Backend>(inbox: Inbox<DB>, total: usize) -> f64 {
    let prefix = unique("evt_t");
    store(&inbox, total, &prefix).await;
    let done = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&done);
    let started = Instant::now();
    let workers = inbox.start(move |_job: Job<DB>| {
        counter.fetch_add(1, Ordering::Relaxed);
        async { Ok(()) }
    });
    inbox.wait_idle(Duration::from_secs(600)).await.expect("idle");
    let rate = total as f64 / started.elapsed().as_secs_f64();
    assert!(done.load(Ordering::Relaxed) >= total);
    workers.shutdown().await;
    rate
}

fn builder(concurrency: usize) -> payhook::inbox::InboxBuilder {
    let receiver = Receiver::builder().secret(SECRET).build().expect("receiver");
    Inbox::builder(receiver)
        .namespace(unique("bench"))
        .concurrency(concurrency)
        .poll_interval(Duration::from_millis(20))
}

/// Section 5: typed pool ÷ `Any`, same settings and pool size (16 + 6).
async fn typed_against_any(url: &str, postgres: bool, total: usize) {
    let any = noop_rate(connect(url, 16).await, total).await;
    let typed = if postgres {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(22)
            .connect(url)
            .await
            .expect("pool");
        noop_rate(builder(16).from_pool(pool).await.expect("inbox"), total).await
    } else {
        let options: sqlx::sqlite::SqliteConnectOptions = url.parse().expect("sqlite URL");
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(22)
            .connect_with(
                options
                    .create_if_missing(true)
                    .busy_timeout(Duration::from_secs(10))
                    .synchronous(sqlx::sqlite::SqliteSynchronous::Normal),
            )
            .await
            .expect("pool");
        noop_rate(builder(16).from_pool(pool).await.expect("inbox"), total).await
    };
    println!(
        "5. no-op workers (16), {total} events: typed pool {typed:.0}/s, Any {any:.0}/s: ratio {:.2}",
        typed / any
    );
}

/// Section 6: replica A ingests, replica B (polling every 5 s) handles.
async fn replica_wake(url: &str, events: usize) {
    let namespace = unique("wake");
    let receiver = || Receiver::builder().secret(SECRET).build().expect("receiver");
    let a = Inbox::builder(receiver())
        .namespace(&namespace)
        .poll_interval(Duration::from_secs(5))
        .connect(url)
        .await
        .expect("replica A");
    let pool = sqlx::PgPool::connect(url).await.expect("pool");
    let b = Inbox::builder(receiver())
        .namespace(&namespace)
        .poll_interval(Duration::from_secs(5))
        .from_pool(pool)
        .await
        .expect("replica B");
    let started: Arc<std::sync::Mutex<std::collections::HashMap<String, Instant>>> = Arc::default();
    let seen = Arc::clone(&started);
    let workers = b.start(move |job: Job<sqlx::Postgres>| {
        seen.lock()
            .expect("lock")
            .insert(job.event().id().to_owned(), Instant::now());
        async { Ok(()) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let secret = Secret::new(SECRET).expect("secret");
    let mut latencies = Vec::new();
    for i in 0..events {
        let id = format!("evt_wake_{i}");
        let body = Bytes::from(body(&id));
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "x-service-signature",
            sign(&body, &secret, now()).parse().expect("header"),
        );
        let sent = Instant::now();
        assert_eq!(a.ingest(&headers, body).await.status().as_u16(), 200);
        let at = loop {
            if let Some(at) = started.lock().expect("lock").get(&id).copied() {
                break at;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        latencies.push(at.saturating_duration_since(sent));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    workers.shutdown().await;
    let p50 = percentile(&mut latencies, 0.50);
    let p99 = percentile(&mut latencies, 0.99);
    println!(
        "6. replicas, poll 5 s: ingest on A -> handler start on B, {events} events: p50 {:.2} ms, p99 {:.2} ms",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
}

/// Section 7: the physical reference, a minimal queue on the same database:
/// 16 tasks each claim one row with `FOR UPDATE SKIP LOCKED` and mark it done
/// in the same transaction, on a pool of the inbox's size (22).
async fn skip_locked_reference(url: &str, total: usize) -> f64 {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(22)
        .connect(url)
        .await
        .expect("pool");
    let table = unique("reference_queue");
    sqlx::query(&format!(
        "CREATE TABLE {table} (id BIGSERIAL PRIMARY KEY, state TEXT NOT NULL, body TEXT NOT NULL)"
    ))
    .execute(&pool)
    .await
    .expect("create");
    sqlx::query(&format!(
        "INSERT INTO {table} (state, body) SELECT 'pending', $1 FROM generate_series(1, $2)"
    ))
    .bind(body("evt_reference"))
    .bind(i64::try_from(total).expect("count"))
    .execute(&pool)
    .await
    .expect("fill");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (pool, table) = (pool.clone(), table.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let mut tx = pool.begin().await.expect("begin");
                let id: Option<i64> = sqlx::query_scalar(&format!(
                    "SELECT id FROM {table} WHERE state = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
                ))
                .fetch_optional(&mut *tx)
                .await
                .expect("claim");
                let Some(id) = id else { return };
                sqlx::query(&format!("UPDATE {table} SET state = 'done' WHERE id = $1"))
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .expect("mark");
                tx.commit().await.expect("commit");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    total as f64 / started.elapsed().as_secs_f64()
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// Section 8: a steady load with a 1-minute retention, one line a minute.
async fn soak(url: &str) {
    let rate = env_number("PAYHOOK_BENCH_SOAK_RATE", 1000);
    let minutes = env_number("PAYHOOK_BENCH_SOAK_MINUTES", 10);
    let inbox = builder(16)
        .retention(Duration::from_secs(60))
        .connect(url)
        .await
        .expect("inbox");
    let workers = inbox.start(|_job: Job| async { Ok(()) });
    let secret = Secret::new(SECRET).expect("secret");
    let started = Instant::now();
    let mut sent: u64 = 0;
    let mut next_report = started + Duration::from_secs(60);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let per_tick = (rate / 100).max(1);
    let mut pending = Vec::new();
    println!("8. soak: {rate} events/s for {minutes} min, retention 60 s, no-op workers (16)");
    while started.elapsed() < Duration::from_secs(minutes * 60) {
        tick.tick().await;
        for _ in 0..per_tick {
            let body = Bytes::from(body(&format!("evt_soak_{sent}")));
            let mut headers = http::HeaderMap::new();
            headers.insert(
                "x-service-signature",
                sign(&body, &secret, now()).parse().expect("header"),
            );
            pending.push(tokio::spawn(inbox.ingest(&headers, body)));
            sent += 1;
        }
        if pending.len() >= 2048 {
            for reply in pending.drain(..) {
                assert_eq!(reply.await.expect("ingest").status().as_u16(), 200);
            }
        }
        if Instant::now() >= next_report {
            next_report += Duration::from_secs(60);
            // Waiting rows (the workers' backlog) apart from done rows (the
            // purge's): a growing table says which of the two fell behind.
            let (waiting, done): (i64, i64) = sqlx::query_as(
                "SELECT COUNT(*) FILTER (WHERE state <> 'done'), COUNT(*) FILTER (WHERE state = 'done') \
                 FROM payhook_inbox WHERE namespace = $1",
            )
            .bind(inbox.namespace())
            .fetch_one(inbox.pool())
            .await
            .expect("count");
            println!(
                "  minute {:>2}: {sent} sent, {waiting} waiting and {done} done rows in the table, RSS {:.1} MiB",
                started.elapsed().as_secs() / 60,
                status_kib("VmRSS:") as f64 / 1024.0
            );
        }
    }
    for reply in pending {
        assert_eq!(reply.await.expect("ingest").status().as_u16(), 200);
    }
    workers.shutdown().await;
}

/// Lock waits seen by [`sample_lock_waits`], per lock type (`advisory`,
/// `transactionid`, `tuple`, …): the sum over the samples of the connections
/// waiting for such a lock, apart for the claim's statements (the only ones
/// with `SKIP LOCKED`) and for every other statement (ingest, done marks).
#[derive(Default)]
struct LockWaits {
    samples: u64,
    claim: std::collections::BTreeMap<String, i64>,
    other: std::collections::BTreeMap<String, i64>,
}

/// Samples `pg_stat_activity` every 5 ms until stopped. Each waiting
/// connection in a sample stands for one sample period of lock wait (the
/// samples are few enough not to load the server).
async fn sample_lock_waits(pool: sqlx::PgPool, mut stop: tokio::sync::watch::Receiver<bool>) -> LockWaits {
    let mut waits = LockWaits::default();
    loop {
        let rows: Vec<(bool, String, i64)> = sqlx::query_as(
            "SELECT query LIKE '%SKIP LOCKED%', wait_event, COUNT(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock' GROUP BY 1, 2",
        )
        .fetch_all(&pool)
        .await
        .expect("pg_stat_activity");
        waits.samples += 1;
        for (in_claim, event, count) in rows {
            let into = if in_claim {
                &mut waits.claim
            } else {
                &mut waits.other
            };
            *into.entry(event).or_insert(0) += count;
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
            _ = stop.changed() => return waits,
        }
    }
}

/// Starts counting statements with `pg_stat_statements` when the server has
/// it loaded (`shared_preload_libraries`); whether it does.
async fn statements_reset(pool: &sqlx::PgPool) -> bool {
    if sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(pool)
        .await
        .is_err()
    {
        return false;
    }
    sqlx::query("SELECT pg_stat_statements_reset()")
        .execute(pool)
        .await
        .is_ok()
}

/// The statements run most often in this database since
/// [`statements_reset`], as calls per event and the statement's start.
async fn statements_per_event(pool: &sqlx::PgPool, events: usize) -> String {
    let rows: Vec<(i64, f64, String)> = sqlx::query_as(
        "SELECT calls, total_exec_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 40) FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
           AND query NOT LIKE '%pg_stat_%' \
         ORDER BY calls DESC LIMIT 10",
    )
    .fetch_all(pool)
    .await
    .expect("pg_stat_statements");
    // Calls per event, and the server's time in them per event (µs).
    let listed: Vec<String> = rows
        .iter()
        .map(|(calls, ms, query)| {
            format!(
                "{:.2} ({:.0} µs) {query}",
                *calls as f64 / events as f64,
                ms * 1000.0 / events as f64
            )
        })
        .collect();
    listed.join(" | ")
}

/// The recorder of the inbox's metrics in this process, installed on first
/// use: section 10 reads its claim counters by namespace.
fn prometheus() -> &'static metrics_exporter_prometheus::PrometheusHandle {
    static HANDLE: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
        std::sync::OnceLock::new();
    HANDLE.get_or_init(|| {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .expect("the bench's only recorder")
    })
}

/// A counter's value for one namespace, from a Prometheus text rendering.
fn counter(text: &str, name: &str, namespace: &str) -> f64 {
    let series = format!("{name}{{namespace=\"{namespace}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0.0, |value| value.trim().parse().expect("counter value"))
}

/// How section 10 runs its replicas: as child processes of this bench (the
/// default, as an app's replicas run) or as worker pools with their own
/// connections in this process (`PAYHOOK_BENCH_REPLICAS_AS=pools`).
fn replicas_as_processes() -> bool {
    std::env::var("PAYHOOK_BENCH_REPLICAS_AS").map_or(true, |mode| mode != "pools")
}

/// One replica of section 10: an inbox with its workers and HTTP endpoint.
enum Replica {
    /// In this process; its counters are in this process's recorder.
    Pool(Inbox, payhook::inbox::Workers),
    /// A child process running [`replica_child`], driven over its stdin and
    /// stdout one line at a time.
    Process {
        child: std::process::Child,
        commands: std::process::ChildStdin,
        answers: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    },
}

/// The settings of a replica: PostgreSQL URL, namespace, workers, handler
/// delay in ms, passed to a child in `PAYHOOK_BENCH_REPLICA`.
struct ReplicaSettings<'a> {
    url: &'a str,
    namespace: &'a str,
    workers: usize,
    delay: Duration,
}

impl ReplicaSettings<'_> {
    async fn inbox(&self) -> Inbox {
        let receiver = Receiver::builder().secret(SECRET).build().expect("receiver");
        Inbox::builder(receiver)
            .namespace(self.namespace)
            .concurrency(self.workers.max(1))
            .poll_interval(Duration::from_millis(20))
            .connect(self.url)
            .await
            .expect("replica")
    }

    fn start_workers(&self, inbox: &Inbox) -> payhook::inbox::Workers {
        let delay = self.delay;
        inbox.start(move |_job: Job| async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Ok(())
        })
    }
}

impl Replica {
    /// Starts a replica; its endpoint.
    async fn start(settings: &ReplicaSettings<'_>, process: bool) -> (Self, String) {
        if !process {
            let inbox = settings.inbox().await;
            let workers = settings.start_workers(&inbox);
            let endpoint = serve(inbox.clone()).await;
            return (Replica::Pool(inbox, workers), endpoint);
        }
        use std::io::BufRead as _;
        let mut child = std::process::Command::new(std::env::current_exe().expect("bench binary"))
            .arg("--bench")
            .env(
                "PAYHOOK_BENCH_REPLICA",
                format!(
                    "{} {} {} {}",
                    settings.url,
                    settings.namespace,
                    settings.workers,
                    settings.delay.as_millis()
                ),
            )
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("replica process");
        let commands = child.stdin.take().expect("stdin");
        let mut answers = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let endpoint = tokio::task::block_in_place(|| answers.next())
            .expect("the replica's endpoint")
            .expect("replica output");
        (
            Replica::Process {
                child,
                commands,
                answers,
            },
            endpoint,
        )
    }

    /// This replica's claims and events claimed so far in `namespace`.
    fn claims(&mut self, namespace: &str) -> (f64, f64) {
        match self {
            Replica::Pool(..) => {
                let text = prometheus().render();
                (
                    counter(&text, "payhook_inbox_claims_total", namespace),
                    counter(&text, "payhook_inbox_claimed_total", namespace),
                )
            }
            Replica::Process {
                commands, answers, ..
            } => {
                use std::io::Write as _;
                writeln!(commands, "claims").expect("replica stdin");
                let line = tokio::task::block_in_place(|| answers.next())
                    .expect("the replica's counters")
                    .expect("replica output");
                let (claims, claimed) = line.split_once(' ').expect("two counters");
                (claims.parse().expect("claims"), claimed.parse().expect("claimed"))
            }
        }
    }

    async fn stop(self) {
        match self {
            Replica::Pool(inbox, workers) => {
                workers.shutdown().await;
                // Its endpoint's server holds a clone until the process
                // ends: closing the pool gives its connections back now.
                inbox.pool().close().await;
            }
            Replica::Process {
                mut child, commands, ..
            } => {
                // End of input: the child shuts its workers down and exits.
                drop(commands);
                let status = tokio::task::block_in_place(|| child.wait()).expect("replica exit");
                assert!(status.success(), "replica process failed: {status}");
            }
        }
    }
}

/// A replica process of section 10 (`PAYHOOK_BENCH_REPLICA` set): prints its
/// endpoint, answers each `claims` line on stdin with its two claim counters,
/// and shuts its workers down at the end of its input.
async fn replica_child(settings: &str) {
    let mut fields = settings.split(' ');
    let mut next = || {
        fields
            .next()
            .expect("PAYHOOK_BENCH_REPLICA: url namespace workers delay_ms")
    };
    let (url, namespace) = (next(), next());
    let settings = ReplicaSettings {
        url,
        namespace,
        workers: next().parse().expect("workers"),
        delay: Duration::from_millis(next().parse().expect("delay")),
    };
    let metrics = prometheus();
    let inbox = settings.inbox().await;
    let workers = settings.start_workers(&inbox);
    println!("{}", serve(inbox).await);
    let mut lines = std::io::stdin().lines();
    while let Some(line) = tokio::task::block_in_place(|| lines.next()) {
        let line = line.expect("stdin");
        if line == "claims" {
            let text = metrics.render();
            println!(
                "{} {}",
                counter(&text, "payhook_inbox_claims_total", namespace),
                counter(&text, "payhook_inbox_claimed_total", namespace)
            );
        }
    }
    workers.shutdown().await;
}

/// The sum of the replicas' claim counters. Pools share this process's
/// recorder, which already sums them: it is read once.
fn claims_of(replicas: &mut [Replica], namespace: &str) -> (f64, f64) {
    let mut pools_read = false;
    let (mut claims, mut claimed) = (0.0, 0.0);
    for replica in replicas {
        if matches!(replica, Replica::Pool(..)) {
            if pools_read {
                continue;
            }
            pools_read = true;
        }
        let (more_claims, more_claimed) = replica.claims(namespace);
        claims += more_claims;
        claimed += more_claimed;
    }
    (claims, claimed)
}

/// One run of section 10: `replicas` inboxes of `workers` each in one
/// namespace, `events` deliveries from 32 clients spread over their
/// endpoints; events/s from the first delivery to the last event done (also
/// returned). Claims are counted from the first delivery on.
async fn replica_run(url: &str, replicas: usize, workers: usize, events: usize, delay: Duration) -> f64 {
    let process = replicas_as_processes();
    let namespace = unique("replicas");
    let settings = ReplicaSettings {
        url,
        namespace: &namespace,
        workers,
        delay,
    };
    let mut running = Vec::new();
    let mut endpoints = Vec::new();
    for _ in 0..replicas {
        let (replica, endpoint) = Replica::start(&settings, process).await;
        running.push(replica);
        endpoints.push(endpoint);
    }
    // For waiting until idle: an inbox of the namespace without workers.
    let observer = ReplicaSettings {
        workers: 1,
        ..settings
    }
    .inbox()
    .await;
    let sampler_pool = sqlx::PgPool::connect(url).await.expect("pool");
    let commits = || async {
        // Backends report their counts when idle, at most once a second.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        sqlx::query_scalar::<_, i64>(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()",
        )
        .fetch_one(&sampler_pool)
        .await
        .expect("pg_stat_database")
    };
    let commits_before = commits().await;
    let counting_statements = statements_reset(&sampler_pool).await;
    let (claims_before, claimed_before) = claims_of(&mut running, &namespace);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let sampler = tokio::spawn(sample_lock_waits(sampler_pool.clone(), stopped));
    let started = Instant::now();
    let (_, mut latencies) = load_over(&endpoints, 32, events).await;
    observer.wait_idle(Duration::from_secs(600)).await.expect("idle");
    let elapsed = started.elapsed();
    let _ = stop.send(true);
    let waits = sampler.await.expect("sampler");
    let (claims_after, claimed_after) = claims_of(&mut running, &namespace);
    let (claims, claimed) = (claims_after - claims_before, claimed_after - claimed_before);
    let transactions = commits().await - commits_before;
    for replica in running {
        replica.stop().await;
    }
    let statements = if counting_statements {
        statements_per_event(&sampler_pool, events).await
    } else {
        "not counted (pg_stat_statements is not loaded)".to_owned()
    };
    observer.pool().close().await;
    sampler_pool.close().await;
    let rate = events as f64 / elapsed.as_secs_f64();
    let p99 = percentile(&mut latencies, 0.99);
    // Each waiting connection seen in a sample ≈ one sample period of wait.
    let period = elapsed.as_secs_f64() / waits.samples.max(1) as f64;
    let seconds =
        |by_type: &std::collections::BTreeMap<String, i64>| by_type.values().sum::<i64>() as f64 * period;
    let listed = |by_type: &std::collections::BTreeMap<String, i64>| {
        if by_type.is_empty() {
            "none seen".to_owned()
        } else {
            let types: Vec<String> = by_type
                .iter()
                .map(|(event, count)| format!("{event} {:.3} s", *count as f64 * period))
                .collect();
            types.join(", ")
        }
    };
    let (claim_wait, other_wait) = (seconds(&waits.claim), seconds(&waits.other));
    println!(
        "10. {replicas} x {workers} ({} ms handlers, {}), {events} events: {rate:.0} events/s, ack p99 {:.1} ms; \
         {claims:.0} claims ({:.1} events per claim); lock wait in claims {claim_wait:.3} s = {:.4} ms per claim ({}), \
         elsewhere {other_wait:.3} s = {:.4} ms per event ({}); {} samples; {:.1} transactions per event",
        delay.as_millis(),
        if process { "processes" } else { "pools" },
        p99.as_secs_f64() * 1e3,
        claimed / claims.max(1.0),
        claim_wait * 1e3 / claims.max(1.0),
        listed(&waits.claim),
        other_wait * 1e3 / events as f64,
        listed(&waits.other),
        waits.samples,
        transactions as f64 / events as f64,
    );
    println!("    statements per event: {statements}");
    rate
}

/// Section 10: replicas on one PostgreSQL.
async fn replicas(url: &str) {
    let q = quick();
    let (noop_events, slow_events) = if q { (2000, 1000) } else { (5000, 3000) };
    // Rounds alternate the configurations so that a slower stretch of a
    // shared machine falls on all of them; the summary takes medians.
    let rounds = env_number("PAYHOOK_BENCH_ROUNDS", if q { 1 } else { 3 }) as usize;
    let noop_shapes = [(1, 32), (2, 16), (4, 8)];
    let mut noop = vec![Vec::new(); noop_shapes.len()];
    let mut slow = vec![Vec::new(); 3];
    // `PAYHOOK_BENCH_REPLICAS_SLOW=off`: the no-op runs only.
    let with_slow = std::env::var("PAYHOOK_BENCH_REPLICAS_SLOW").map_or(true, |v| v != "off");
    let median = |rates: &mut Vec<f64>| {
        rates.sort_by(f64::total_cmp);
        rates[rates.len() / 2]
    };
    for round in 1..=rounds {
        println!("10. round {round} of {rounds}");
        for (index, &(replicas, workers)) in noop_shapes.iter().enumerate() {
            noop[index].push(replica_run(url, replicas, workers, noop_events, Duration::ZERO).await);
        }
        if with_slow {
            for (index, replicas) in [1, 2, 4].into_iter().enumerate() {
                slow[index].push(replica_run(url, replicas, 8, slow_events, Duration::from_millis(50)).await);
            }
        }
    }
    let noop: Vec<f64> = noop.iter_mut().map(median).collect();
    let slow = if with_slow {
        let slow: Vec<f64> = slow.iter_mut().map(median).collect();
        format!(
            "; 50 ms handlers, 8 workers each: 2 x 8 / (2 * 1 x 8) = {:.2}, 4 x 8 / (4 * 1 x 8) = {:.2} of linear",
            slow[1] / (2.0 * slow[0]),
            slow[2] / (4.0 * slow[0]),
        )
    } else {
        String::new()
    };
    println!(
        "10. medians of {rounds} rounds: no-op, same 32 workers: 2 x 16 / 1 x 32 = {:.2}, 4 x 8 / 1 x 32 = {:.2}{slow}",
        noop[1] / noop[0],
        noop[2] / noop[0],
    );
}

async fn run(name: &str, url: impl Fn() -> String) {
    let q = quick();
    let requests = if q { 1000 } else { 4000 };
    println!("== {name}");
    if section(1) {
        let noop = ack_p99(&url(), requests, Duration::ZERO).await;
        let slow = ack_p99(&url(), requests, Duration::from_secs(2)).await;
        println!(
            "1. ack p99, {CLIENTS} clients: no-op handlers {:.2} ms, 2 s handlers {:.2} ms: ratio {:.2}",
            noop.as_secs_f64() * 1e3,
            slow.as_secs_f64() * 1e3,
            slow.as_secs_f64() / noop.as_secs_f64()
        );
    }
    if section(2) {
        let raw = raw_inserts_per_second(&url(), requests).await;
        let http = http_ingest_per_second(&url(), requests).await;
        println!(
            "2. ingest, {CLIENTS} clients: HTTP {http:.0}/s, raw single-row inserts {raw:.0}/s: ratio {:.2}",
            http / raw
        );
    }
    if section(3) {
        let events = if q { 2000 } else { 10_000 };
        let rate = workers_per_second(&url(), events).await;
        println!("3. no-op workers (16), {events} events: {rate:.0} events/s");
    }
    if section(5) {
        let events = if q { 2000 } else { 10_000 };
        typed_against_any(&url(), name.starts_with("PostgreSQL"), events).await;
    }
    // The soak runs only when asked for by number: it takes minutes.
    let soak_listed = std::env::var("PAYHOOK_BENCH_SECTIONS")
        .is_ok_and(|list| list.split(',').any(|item| item.trim() == "8"));
    if soak_listed {
        soak(&url()).await;
    }
    if name.starts_with("PostgreSQL") {
        if section(10) {
            replicas(&url()).await;
        }
        if section(6) {
            replica_wake(&url(), if q { 100 } else { 500 }).await;
        }
        if section(7) {
            let events = if q { 2000 } else { 10_000 };
            let reference = skip_locked_reference(&url(), events).await;
            let inbox = noop_rate(connect(&url(), 16).await, events).await;
            println!(
                "7. no-op workers (16), {events} events: inbox {inbox:.0}/s, FOR UPDATE SKIP LOCKED loop {reference:.0}/s: ratio {:.2}",
                inbox / reference
            );
        }
    }
    if section(9) {
        dashboard_pages(&url()).await;
    }
    if section(11) {
        pause_bulk::pause_and_bulk(&url()).await;
    }
    if section(12) {
        dashboard_load::dashboard_under_load(&url()).await;
    }
    // Last: it installs the process's global subscriber.
    if section(13) {
        otel::overhead(&url).await;
    }
    // After section 13: its statement counter is the global subscriber
    // when no other section installed one.
    if section(14) {
        drain::drain_floors(&url(), name.starts_with("PostgreSQL")).await;
    }
    if section(15) {
        reconcile::reconciling(&url(), name.starts_with("PostgreSQL")).await;
    }
    if section(16) {
        history::with_history(&url(), name.starts_with("PostgreSQL")).await;
    }
}

/// Stores `total` events straight into the table (100 rows a statement):
/// 5 % dead, 2 % pending, the rest done, four types, three events per
/// payment intent, received over the last week two by two in the same
/// millisecond, each with one recorded attempt.
async fn fill(inbox: &Inbox, total: usize) {
    let now_ms = i64::try_from(now()).expect("time") * 1000;
    let namespace = inbox.namespace().to_owned();
    let types = [
        "payment_intent.succeeded",
        "payment_intent.created",
        "payment_intent.payment_failed",
        "charge.succeeded",
    ];
    let mut i = 0;
    while i < total {
        let rows = 100.min(total - i);
        let mut sql = String::from(
            "INSERT INTO payhook_inbox (namespace, event_id, event_type, intent_id, created, body, received_at, \
             state, attempts, due_at, last_error, done_at) VALUES ",
        );
        for row in 0..rows {
            let p = row * 12;
            if row > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!(
                "(${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, ${})",
                p + 1,
                p + 2,
                p + 3,
                p + 4,
                p + 5,
                p + 6,
                p + 7,
                p + 8,
                p + 9,
                p + 10,
                p + 11,
                p + 12
            ));
        }
        let mut query = sqlx::query(&sql);
        for n in i..i + rows {
            let id = format!("evt_{n:06}");
            let received = now_ms - i64::try_from((total - n) / 2).expect("count") * 12_000;
            let (state, error, done) = match n % 50 {
                0 | 10 | 20 => ("dead", Some("the ledger refused it (attempt 8 of 8)"), None),
                1 => ("pending", None, None),
                _ => ("done", None, Some(received + 40)),
            };
            query = query
                .bind(namespace.clone())
                .bind(id.clone())
                .bind(types[n % 4])
                .bind(format!("pi_{:06}", n / 3))
                .bind(received / 1000)
                .bind(body(&id))
                .bind(received)
                .bind(state)
                .bind(if state == "dead" { 8i64 } else { 1 })
                .bind(received)
                .bind(error)
                .bind(done);
        }
        query.execute(inbox.pool()).await.expect("fill");
        i += rows;
    }
    // One recorded attempt per event, ended 40 ms after it arrived.
    sqlx::query(
        "INSERT INTO payhook_inbox_attempts (arrival, namespace, attempt, started_at, finished_at, duration_ms, outcome, error) \
         SELECT arrival, namespace, attempts, received_at, received_at + 40, 40, \
           CASE state WHEN 'dead' THEN 'dead' WHEN 'done' THEN 'done' ELSE 'failed' END, last_error \
         FROM payhook_inbox WHERE namespace = $1",
    )
    .bind(namespace)
    .execute(inbox.pool())
    .await
    .expect("fill attempts");
}

/// Section 9: the dashboard over 100 000 stored events.
async fn dashboard_pages(url: &str) {
    use payhook::dashboard::{Dashboard, DashboardRequest};
    let total = if quick() { 20_000 } else { 100_000 };
    let inbox = connect(url, 1).await;
    let started = Instant::now();
    fill(&inbox, total).await;
    let filled = started.elapsed();
    let postgres = url.starts_with("postgres");
    if postgres {
        // What autovacuum does after this many inserts.
        sqlx::query("ANALYZE payhook_inbox")
            .execute(inbox.pool())
            .await
            .expect("analyze");
        sqlx::query("ANALYZE payhook_inbox_attempts")
            .execute(inbox.pool())
            .await
            .expect("analyze");
    }
    let token = "bench-dashboard-token-0123456789";
    let dashboard = Dashboard::for_inbox(&inbox, token).expect("dashboard");
    let admin = payhook::inbox::admin::Admin::of_inbox(&inbox);
    let middle = admin
        .page(&payhook::inbox::admin::PageQuery {
            limit: 500,
            ..Default::default()
        })
        .await
        .expect("page")
        .next
        .expect("more pages");
    let mut headers = HeaderMap::new();
    let credentials = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(format!("bench:{token}"))
    };
    headers.insert(
        "authorization",
        format!("Basic {credentials}").parse().expect("header"),
    );
    println!(
        "9. dashboard over {total} stored events ({} filled in {:.1} s): server-side time per page, queries + rendering, each page after the rest that follows the one before",
        if postgres { "PostgreSQL" } else { "SQLite" },
        filled.as_secs_f64()
    );
    let after = format!("after={middle}");
    let pages: [(&str, &str, Option<&str>); 7] = [
        ("events, newest 50", "/events", None),
        ("events, dead", "/events", Some("state=dead")),
        ("events, by type", "/events", Some("type=charge.succeeded")),
        ("events, page 11 (keyset)", "/events", Some(&after)),
        ("events, 500 a page", "/events", Some("limit=500")),
        ("one event", "/event", Some("id=evt_050000")),
        ("overview", "/", None),
    ];
    let runs = if quick() { 50 } else { 300 };
    for (what, path, query) in pages {
        let method = http::Method::GET;
        let mut times = Vec::with_capacity(runs);
        let mut size = 0;
        for _ in 0..runs {
            let started = Instant::now();
            let response = dashboard
                .handle(DashboardRequest {
                    method: &method,
                    base: "/payhook",
                    path,
                    query,
                    headers: &headers,
                    body: &[],
                })
                .await;
            let took = started.elapsed();
            times.push(took);
            assert_eq!(response.status().as_u16(), 200, "{what}: {}", response.body());
            size = response.body().len();
            // The dashboard rests three times a page's time (at most 200 ms)
            // before the next page's turn; asked back to back, each page
            // would wait out the one before and measure four pages' time.
            // One person reading pages asks more slowly than that.
            tokio::time::sleep((took * 4).min(Duration::from_millis(250))).await;
        }
        let p50 = percentile(&mut times, 0.50);
        let p99 = percentile(&mut times, 0.99);
        println!(
            "   {what:<26} p50 {:>6.2} ms  p99 {:>6.2} ms  ({} KiB of HTML)",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            size / 1024
        );
    }
    println!("   query plans:");
    for (what, lines) in admin.query_plans().await.expect("plans") {
        println!("   - {what}:");
        for line in lines {
            println!("       {line}");
        }
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if let Ok(settings) = std::env::var("PAYHOOK_BENCH_REPLICA") {
        replica_child(&settings).await;
        return;
    }
    // `cargo bench` passes `--bench`; nothing else is accepted.
    if backend("sqlite") {
        run("SQLite (file in WAL mode)", sqlite_url).await;
        if section(4) {
            let events = if quick() { 20_000 } else { 100_000 };
            println!("4. memory, SQLite, {events} events through ingest and no-op workers");
            memory_while_passing(&sqlite_url(), events).await;
        }
    }
    if !backend("postgres") {
        return;
    }
    if let Some(url) = postgres_url().await {
        // One fresh database serves every PostgreSQL figure; namespaces keep runs apart.
        run("PostgreSQL", || url.clone()).await;
        // Dropped after the run: section 16 alone leaves gigabytes in it.
        let base = std::env::var("PAYHOOK_TEST_DATABASE_URL").expect("set");
        let admin = sqlx::AnyPool::connect(&base).await.expect("PostgreSQL reachable");
        let (_, name) = url.rsplit_once('/').expect("URL with a database");
        sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
            .execute(&admin)
            .await
            .expect("drop database");
        admin.close().await;
    } else {
        println!("(PostgreSQL skipped: PAYHOOK_TEST_DATABASE_URL is not set)");
    }
}
