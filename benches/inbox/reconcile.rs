//! Section 15 of the inbox bench: reconciling, against the emulator run in
//! this process (`payhook::emulator`, its real `GET /v1/events` on loopback).
//!
//! - **A backlog**: the emulator creates `PAYHOOK_BENCH_RECONCILE_EVENTS`
//!   events (default 10 000, the most it keeps; 2 000 quick) with no
//!   endpoint, so none is delivered. In alternating rounds
//!   (`PAYHOOK_BENCH_ROUNDS`, default 3), a fresh inbox with 16 no-op
//!   workers takes them in two ways: as signed deliveries of the same
//!   bodies, POSTed over loopback HTTP to an axum receiver by 16 concurrent
//!   keep-alive clients (section 2's load), and from its reconciler, whose
//!   first pass pages through the whole list. Timed from the first POST, or
//!   from `start` (the reconciler's start), until every event is stored (the
//!   last `200`; the last `payhook_inbox_reconciled_total` increment) and
//!   until every one is handled and marked done.
//! - **A pass when nothing was missed**: a second emulator creates 50
//!   events, each delivered to the inbox before its reconciler starts; then
//!   passes every 100 ms. Per pass: wall time (from the reconciler's row:
//!   its turn taken to its mark recorded), requests to the events list
//!   (`payhook_inbox_reconcile_requests_total`), events stored and handlers
//!   run (the reconciled rows counted in the table), this process's CPU
//!   (the emulator's reply included), and on PostgreSQL the reconciler's
//!   row updates (`pg_stat_user_tables`).
//! - **An endless list**: the API client (`payhook::api::Client`, what the
//!   reconciler and `payhook reconcile` page with) walks a list on loopback
//!   that never ends — every page 100 new events, each a second older than
//!   the last, `has_more` always — for `PAYHOOK_BENCH_ENDLESS_PAGES` pages
//!   (default 3 000, 300 000 events); this process's resident memory
//!   (`VmRSS`) after 10 pages and at each tenfold, so memory that grew with
//!   the events read would show.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use payhook::emulator::Emulator;
use payhook::inbox::{sqlx, Inbox, Job, Reconcile, Workers};
use payhook::{sign, Secret};

use super::{builder, counter, env_number, now, percentile, prometheus, quick, serve, CLIENTS, SECRET};

/// The reconciler's interval while a pass is measured.
const QUIET_INTERVAL: Duration = Duration::from_millis(100);
/// The events delivered before the quiet passes: fewer than a page.
const QUIET_EVENTS: usize = 50;

/// One way of taking the backlog: until all stored, until all handled.
#[derive(Clone, Copy)]
struct Taken {
    stored: Duration,
    handled: Duration,
}

/// Section 15.
pub(super) async fn reconciling(url: &str, postgres: bool) {
    let q = quick();
    let events = env_number("PAYHOOK_BENCH_RECONCILE_EVENTS", if q { 2000 } else { 10_000 }) as usize;
    let rounds = env_number("PAYHOOK_BENCH_ROUNDS", if q { 1 } else { 3 }) as usize;
    let (emulator, bodies) = backlog(events).await;
    // Old enough that the reconciler's window (up to one interval ago) takes all.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let bodies = Arc::new(bodies);
    let mut delivered = Vec::new();
    let mut reconciled = Vec::new();
    let mut requests = 0.0;
    for round in 1..=rounds {
        // Alternate which goes first, so a drift in the machine's load
        // weighs on both.
        if round % 2 == 1 {
            delivered.push(deliveries(url, &bodies).await);
            let (taken, made) = reconcile_backlog(url, &emulator, events).await;
            reconciled.push(taken);
            requests = made;
        } else {
            let (taken, made) = reconcile_backlog(url, &emulator, events).await;
            reconciled.push(taken);
            requests = made;
            delivered.push(deliveries(url, &bodies).await);
        }
        let last = |runs: &[Taken]| runs.last().copied().map_or((0.0, 0.0), seconds);
        let (ds, dh) = last(&delivered);
        let (rs, rh) = last(&reconciled);
        println!(
            "15. round {round} of {rounds}: {events} events stored / handled: deliveries {ds:.2} / {dh:.2} s, reconciled {rs:.2} / {rh:.2} s"
        );
    }
    emulator.shutdown().await;
    let median = |runs: &[Taken], pick: fn(&Taken) -> Duration| {
        let mut values: Vec<Duration> = runs.iter().map(pick).collect();
        percentile(&mut values, 0.5).as_secs_f64()
    };
    let (d_stored, d_handled) = (
        median(&delivered, |t| t.stored),
        median(&delivered, |t| t.handled),
    );
    let (r_stored, r_handled) = (
        median(&reconciled, |t| t.stored),
        median(&reconciled, |t| t.handled),
    );
    println!(
        "15. backlog of {events} undelivered events, medians of {rounds} rounds: stored: deliveries ({CLIENTS} clients) {d_stored:.2} s \
         ({:.0}/s), reconciled {r_stored:.2} s ({:.0}/s, {requests:.0} requests): reconcile / deliveries = {:.2}; \
         handled: deliveries {d_handled:.2} s, reconciled {r_handled:.2} s: ratio {:.2}",
        events as f64 / d_stored,
        events as f64 / r_stored,
        r_stored / d_stored,
        r_handled / d_handled,
    );
    quiet_passes(url, postgres, "15.").await;
    endless_list().await;
}

/// This process's resident memory, in KiB (`VmRSS` of `/proc/self/status`).
fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The API client walking an endless list of distinct pages: resident
/// memory after 10 pages and at each tenfold.
async fn endless_list() {
    use payhook::api::{ApiKey, Client, EventsQuery};
    let pages = env_number("PAYHOOK_BENCH_ENDLESS_PAGES", if quick() { 300 } else { 3000 });
    let served = Arc::new(AtomicUsize::new(0));
    let start = i64::try_from(now()).expect("a time");
    let app = axum::Router::new().route(
        "/v1/events",
        axum::routing::get({
            let served = Arc::clone(&served);
            move || {
                let page = served.fetch_add(1, Ordering::SeqCst) as i64;
                async move {
                    let mut data = Vec::with_capacity(100);
                    for n in 0..100i64 {
                        let id = page * 100 + n;
                        data.push(format!(
                            r#"{{"id":"evt_endless_{id}","object":"event","type":"payment_intent.succeeded","created":{},"data":{{"object":{{"id":"pi_{id}","object":"payment_intent","amount":1500,"currency":"btc","status":"succeeded"}}}}}}"#,
                            start - id
                        ));
                    }
                    (
                        [("content-type", "application/json")],
                        format!(r#"{{"object":"list","has_more":true,"data":[{}]}}"#, data.join(",")),
                    )
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = Client::new(&base, ApiKey::new("sk_test_bench").expect("key")).expect("client");
    let mut walk = client.events(EventsQuery::default());
    let mut events = 0usize;
    let mut read = 0u64;
    let mut samples = Vec::new();
    let mut next_sample = 10u64;
    let started = Instant::now();
    while read < pages {
        let Some(page) = walk.next().await else { break };
        events += page.expect("a page").events.len();
        read += 1;
        if read == next_sample || read == pages {
            samples.push(format!(
                "{read} pages ({events} events) {:.1} MB",
                resident_kib() as f64 / 1024.0
            ));
            next_sample *= 10;
        }
    }
    println!(
        "15. an endless list walked by the API client, {read} pages in {:.1} s: resident memory after {}",
        started.elapsed().as_secs_f64(),
        samples.join(", ")
    );
}

fn seconds(taken: Taken) -> (f64, f64) {
    (taken.stored.as_secs_f64(), taken.handled.as_secs_f64())
}

/// An emulator holding `events` events no endpoint was sent (two in three
/// intents succeed, the others fail); their bodies, oldest first.
async fn backlog(events: usize) -> (Emulator, Vec<Bytes>) {
    let emulator = Emulator::builder().start().await.expect("emulator");
    for i in 0..events {
        let intent = emulator.create_payment_intent(1500, "btc").expect("intent");
        if i % 3 == 0 {
            emulator.fail_payment_intent(&intent.id).expect("fail");
        } else {
            emulator.succeed_payment_intent(&intent.id).expect("succeed");
        }
    }
    let bodies: Vec<Bytes> = emulator.events().into_iter().map(|event| event.body).collect();
    assert_eq!(bodies.len(), events, "the emulator keeps every event");
    (emulator, bodies)
}

/// 16 no-op workers counting their calls.
fn counting(inbox: &Inbox) -> (Arc<AtomicUsize>, Workers) {
    let handled = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&handled);
    let workers = inbox.start(move |_job: Job| {
        counter.fetch_add(1, Ordering::Relaxed);
        async { Ok(()) }
    });
    (handled, workers)
}

/// Until `total` handler calls, then until their marks are written.
async fn until_handled(inbox: &Inbox, handled: &AtomicUsize, total: usize) {
    while handled.load(Ordering::Relaxed) < total {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    inbox.wait_idle(Duration::from_secs(600)).await.expect("idle");
}

/// The backlog as signed deliveries over loopback HTTP.
async fn deliveries(url: &str, bodies: &Arc<Vec<Bytes>>) -> Taken {
    let inbox = builder(16).connect(url).await.expect("inbox");
    let (handled, workers) = counting(&inbox);
    let endpoint = serve(inbox.clone()).await;
    let started = Instant::now();
    post_all(&endpoint, bodies).await;
    let stored = started.elapsed();
    until_handled(&inbox, &handled, bodies.len()).await;
    let taken = Taken {
        stored,
        handled: started.elapsed(),
    };
    workers.shutdown().await;
    inbox.pool().close().await;
    taken
}

/// Every body, signed now, POSTed by [`CLIENTS`] keep-alive clients; each
/// must be acknowledged.
async fn post_all(endpoint: &str, bodies: &Arc<Vec<Bytes>>) {
    let client = reqwest::Client::new();
    let next = Arc::new(AtomicUsize::new(0));
    let secret = Secret::new(SECRET).expect("secret");
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (client, next, bodies) = (client.clone(), Arc::clone(&next), Arc::clone(bodies));
        let (endpoint, secret) = (endpoint.to_owned(), secret.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(body) = bodies.get(i) else { return };
                let response = client
                    .post(&endpoint)
                    .header("x-service-signature", sign(body, &secret, now()))
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await
                    .expect("reply");
                assert_eq!(response.status().as_u16(), 200);
                let _ = response.bytes().await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("client");
    }
}

/// The sum of a counter's series of one namespace, whatever its other labels.
fn counter_sum(text: &str, name: &str, namespace: &str) -> f64 {
    let label = format!("namespace=\"{namespace}\"");
    text.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")) && line.contains(&label))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// The backlog from the reconciler's first pass; and the requests it made.
async fn reconcile_backlog(url: &str, emulator: &Emulator, total: usize) -> (Taken, f64) {
    let settings = Reconcile::new(&emulator.base_url(), emulator.api_key())
        .expect("reconcile settings")
        .interval(Duration::from_secs(1));
    let inbox = builder(16).reconcile(settings).connect(url).await.expect("inbox");
    let namespace = inbox.namespace().to_owned();
    let metrics = prometheus();
    let started = Instant::now();
    let (handled, workers) = counting(&inbox);
    // The reconciled counter is incremented once each row is committed.
    while (counter_sum(&metrics.render(), "payhook_inbox_reconciled_total", &namespace) as usize) < total {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stored = started.elapsed();
    until_handled(&inbox, &handled, total).await;
    let taken = Taken {
        stored,
        handled: started.elapsed(),
    };
    workers.shutdown().await;
    let requests = counter(
        &metrics.render(),
        "payhook_inbox_reconcile_requests_total",
        &namespace,
    );
    assert_eq!(handled.load(Ordering::Relaxed), total, "each event handled once");
    inbox.pool().close().await;
    (taken, requests)
}

/// CPU seconds (user + system) of this process.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map_or(Vec::new(), |(_, rest)| rest.split(' ').collect());
    // utime and stime, fields 14 and 15, in USER_HZ (100 on Linux).
    let field = |n: usize| {
        fields
            .get(n - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field(14) + field(15)) / 100.0
}

/// Rows updated in the reconciler's table so far, on PostgreSQL: what
/// the backends that exited have reported (a backend flushes its statistics
/// when it exits), read over a connection of its own.
async fn reconciler_updates(url: &str) -> i64 {
    let pool = sqlx::AnyPool::connect(url).await.expect("pool");
    let updated: i64 = sqlx::query_scalar(
        "SELECT COALESCE(SUM(n_tup_upd), 0)::BIGINT FROM pg_stat_user_tables WHERE relname = 'payhook_inbox_reconciler'",
    )
    .fetch_one(&pool)
    .await
    .expect("pg_stat_user_tables");
    pool.close().await;
    updated
}

/// Passes when every event was delivered, printed after `label` (`15.`,
/// or section 16's level); returns their mean wall time in milliseconds.
pub(super) async fn quiet_passes(url: &str, postgres: bool, label: &str) -> f64 {
    let passes = if quick() { 20 } else { 50 };
    let (emulator, bodies) = backlog(QUIET_EVENTS).await;
    let settings = Reconcile::new(&emulator.base_url(), emulator.api_key())
        .expect("reconcile settings")
        .interval(QUIET_INTERVAL);
    // Workers that only wake for what is stored: the database sees the
    // reconciler and nothing else.
    let inbox = builder(4)
        .poll_interval(Duration::from_secs(3600))
        .reconcile(settings)
        .connect(url)
        .await
        .expect("inbox");
    let namespace = inbox.namespace().to_owned();
    let secret = Secret::new(SECRET).expect("secret");
    for body in &bodies {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "x-service-signature",
            sign(body, &secret, now()).parse().expect("header"),
        );
        assert_eq!(inbox.ingest(&headers, body.clone()).await.status().as_u16(), 200);
    }
    // Listed from the next second on: the window ends before this one.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let updates_before = if postgres {
        Some(reconciler_updates(url).await)
    } else {
        None
    };
    let (handled, workers) = counting(&inbox);
    until_handled(&inbox, &handled, QUIET_EVENTS).await;
    let metrics = prometheus();
    let requests_of = || {
        counter(
            &metrics.render(),
            "payhook_inbox_reconcile_requests_total",
            &namespace,
        )
    };
    // Each pass ends by writing `last_success_at`; it took its turn (a lease
    // of 10 s at this interval: three intervals, at least 10 s) just before
    // reading its mark and listing.
    let row = || async {
        sqlx::query_as::<_, (Option<i64>, Option<i64>)>(
            "SELECT lease_until, last_success_at FROM payhook_inbox_reconciler WHERE namespace = $1",
        )
        .bind(&namespace)
        .fetch_one(inbox.pool())
        .await
        .expect("reconciler row")
    };
    let mut last = row().await.1;
    let requests_before = requests_of();
    let mut walls = Vec::new();
    while walls.len() < passes {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (lease, success) = row().await;
        if success != last {
            if let (Some(lease), Some(success)) = (lease, success) {
                let wall = success - (lease - 10_000);
                assert!((0..10_000).contains(&wall), "a pass took {wall} ms");
                walls.push(Duration::from_millis(wall.unsigned_abs()));
            }
            last = success;
        }
    }
    let per_pass = (requests_of() - requests_before) / walls.len() as f64;
    // About as many passes again, unwatched: this process's CPU per pass.
    let mean = walls.iter().sum::<Duration>() / walls.len() as u32;
    let cpu_before = cpu_seconds();
    let requests_before = requests_of();
    tokio::time::sleep((QUIET_INTERVAL + mean) * passes as u32).await;
    let cpu = cpu_seconds() - cpu_before;
    let unwatched = (requests_of() - requests_before) / per_pass;
    workers.shutdown().await;
    let stored: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM payhook_inbox WHERE namespace = $1 AND source IS NOT NULL")
            .bind(&namespace)
            .fetch_one(inbox.pool())
            .await
            .expect("count");
    let all_passes = requests_of() / per_pass;
    inbox.pool().close().await;
    let rows = match updates_before {
        Some(before) => {
            tokio::time::sleep(Duration::from_millis(300)).await;
            // Less the one that gave the turn up at shutdown.
            let updated = reconciler_updates(url).await - before - 1;
            format!(
                "; {:.2} rows updated per pass (the reconciler's row), none inserted",
                updated as f64 / all_passes
            )
        }
        None => String::new(),
    };
    let calls = handled.load(Ordering::Relaxed);
    let p50 = percentile(&mut walls, 0.5);
    let p99 = percentile(&mut walls, 0.99);
    println!(
        "{label} a pass when nothing was missed ({QUIET_EVENTS} events delivered, every {} ms), {passes} passes: wall {:.1} ms mean \
         (p50 {} ms, p99 {} ms), {per_pass:.2} requests per pass, {stored} events stored, {} handler runs beyond the deliveries, \
         {:.2} ms CPU per pass (this process, the emulator's reply included){rows}",
        QUIET_INTERVAL.as_millis(),
        mean.as_secs_f64() * 1e3,
        p50.as_millis(),
        p99.as_millis(),
        calls - QUIET_EVENTS,
        cpu * 1e3 / unwatched,
    );
    emulator.shutdown().await;
    mean.as_secs_f64() * 1e3
}
