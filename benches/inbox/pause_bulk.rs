//! Section 11 of the inbox bench: pausing an event type and bulk actions.
//!
//! * Bulk: 100 000 dead events in one namespace (100 000 in quick runs: the
//!   target is about that size), retried, then purged, by `Admin::bulk_run`
//!   while deliveries arrive at a steady rate (`PAYHOOK_BENCH_BULK_RATE`,
//!   default 300/s) on the same database: the longest batch (one statement,
//!   its own transaction) and the deliveries' ack p99 during the action ÷
//!   the ack p99 of the same paced load with no action, alternating rounds
//!   (`PAYHOOK_BENCH_ROUNDS`, default 2).
//! * Pause: ack p99 of the same paced load while its type is paused ÷
//!   while it is handled; 10 000 events of a paused type drained after
//!   `resume` ÷ 10 000 stored events drained by freshly started workers
//!   (16 no-op handlers each), alternating rounds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use payhook::inbox::admin::{Admin, BulkAction, Selection};
use payhook::inbox::{sqlx, Inbox, Job};
use payhook::{sign, Secret};
use payhook_test_support::unique;
use tokio::sync::watch;

use super::{body, connect, fill, noop_rate, now, percentile, quick, serve, store, SECRET};

/// The event type of the bench's deliveries.
const TYPE: &str = "payment_intent.succeeded";

pub(crate) fn rounds() -> usize {
    std::env::var("PAYHOOK_BENCH_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2)
}

pub(crate) fn rate() -> u64 {
    std::env::var("PAYHOOK_BENCH_BULK_RATE")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300)
}

/// Signed POSTs of new events to `endpoint` at `rate` a second (each in its
/// own task, so a slow reply does not delay the next arrival) until `stop`
/// turns true; each latency.
async fn paced_load(endpoint: String, rate: u64, mut stop: watch::Receiver<bool>) -> Vec<Duration> {
    let client = reqwest::Client::new();
    let prefix = unique("evt_paced");
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    let mut n = 0u64;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|stop| *stop) => break,
        }
        n += 1;
        let (client, endpoint) = (client.clone(), endpoint.clone());
        let body = body(&format!("{prefix}_{n}"));
        tasks.spawn(async move {
            let signature = sign(body.as_bytes(), &Secret::new(SECRET).expect("secret"), now());
            let sent = Instant::now();
            let response = client
                .post(&endpoint)
                .header("x-service-signature", signature)
                .body(body)
                .send()
                .await
                .expect("reply");
            assert_eq!(response.status().as_u16(), 200);
            let _ = response.bytes().await;
            sent.elapsed()
        });
    }
    let mut latencies = Vec::new();
    while let Some(latency) = tasks.join_next().await {
        latencies.push(latency.expect("client"));
    }
    latencies
}

/// The ack p99 of a paced load to `endpoint` while `during` runs (or for
/// `idle` when `during` is `None`), and what `during` returned.
pub(crate) async fn p99_while<T>(
    endpoint: &str,
    during: Option<std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + '_>>>,
    idle: Duration,
) -> (Duration, Option<T>) {
    let (stop, stopped) = watch::channel(false);
    let load = tokio::spawn(paced_load(endpoint.to_owned(), rate(), stopped));
    let result = match during {
        Some(work) => Some(work.await),
        None => {
            tokio::time::sleep(idle).await;
            None
        }
    };
    stop.send_replace(true);
    let mut latencies = load.await.expect("load");
    (percentile(&mut latencies, 0.99), result)
}

pub(crate) fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// Section 11 on one database.
pub(crate) async fn pause_and_bulk(url: &str) {
    let postgres = url.starts_with("postgres");
    let name = if postgres { "PostgreSQL" } else { "SQLite" };
    let total = 100_000;
    // Deliveries arrive at an endpoint whose no-op workers handle them.
    let live = connect(url, 16).await;
    let live_workers = live.start(|_job: Job| async { Ok(()) });
    let endpoint = serve(live.clone()).await;
    // The events the bulk actions select, in a namespace of their own.
    let target = connect(url, 1).await;
    fill(&target, total).await;
    let admin = Admin::of_inbox(&target);
    let make_dead = || async {
        sqlx::query("UPDATE payhook_inbox SET state = 'dead', done_at = NULL WHERE namespace = $1")
            .bind(target.namespace())
            .execute(target.pool())
            .await
            .expect("dead");
        // Settle what that one large statement left behind before the idle
        // load is measured: SQLite's WAL holds every row it changed (the
        // idle deliveries' commits would otherwise copy it back), and
        // PostgreSQL's autovacuum would otherwise clean up after it during
        // whichever measurement comes next.
        let settle = if postgres {
            "VACUUM ANALYZE payhook_inbox"
        } else {
            "PRAGMA wal_checkpoint(TRUNCATE)"
        };
        sqlx::query(settle).execute(target.pool()).await.expect("settle");
    };
    let _ = p99_while::<()>(&endpoint, None, Duration::from_secs(1)).await; // warm-up
    println!(
        "11. bulk actions over {total} dead events, {name}, deliveries at {}/s meanwhile (2 cores shared)",
        rate()
    );
    // The idle p99 is compared with one taken over a whole action (20-75 s
    // at 300 deliveries a second): measured over 20 s, it rests on some 60
    // of 6 000 latencies, not 12 of 1 200, so one stray slow commit in a
    // short window no longer decides the ratio.
    let idle_time = Duration::from_secs(if quick() { 2 } else { 20 });
    let mut ratios = Vec::new();
    for round in 1..=rounds() {
        make_dead().await;
        let (idle, _) = p99_while::<()>(&endpoint, None, idle_time).await;
        let selection = Selection::default();
        let count = admin
            .bulk_count(BulkAction::Retry, &selection, None)
            .await
            .expect("count");
        assert_eq!(count.events, total as u64);
        let started = Instant::now();
        let (busy, report) = p99_while(
            &endpoint,
            Some(Box::pin(admin.bulk_run(BulkAction::Retry, &selection, &count))),
            idle_time,
        )
        .await;
        let report = report.expect("ran").expect("bulk retry");
        assert_eq!(report.events, total as u64);
        let ratio = busy.as_secs_f64() / idle.as_secs_f64();
        ratios.push(ratio);
        println!(
            "    round {round}: retry {} events in {:.1} s, {} batches, longest {:.1} ms; ack p99 idle {:.2} ms, during {:.2} ms: ratio {ratio:.2}",
            report.events,
            started.elapsed().as_secs_f64(),
            report.batches,
            ms(report.longest_batch),
            ms(idle),
            ms(busy)
        );
    }
    // Purge them all (done and dead), once.
    make_dead().await;
    let (idle, _) = p99_while::<()>(&endpoint, None, idle_time).await;
    let count = admin
        .bulk_count(BulkAction::Purge, &Selection::default(), None)
        .await
        .expect("count");
    let started = Instant::now();
    let (busy, report) = p99_while(
        &endpoint,
        Some(Box::pin(admin.bulk_run(
            BulkAction::Purge,
            &Selection::default(),
            &count,
        ))),
        idle_time,
    )
    .await;
    let report = report.expect("ran").expect("bulk purge");
    println!(
        "    purge {} events in {:.1} s, {} batches, longest {:.1} ms; ack p99 idle {:.2} ms, during {:.2} ms: ratio {:.2}",
        report.events,
        started.elapsed().as_secs_f64(),
        report.batches,
        ms(report.longest_batch),
        ms(idle),
        ms(busy),
        busy.as_secs_f64() / idle.as_secs_f64()
    );
    ratios.sort_by(f64::total_cmp);
    println!("    retry: median ack p99 ratio {:.2}", ratios[ratios.len() / 2]);

    // Pause: the paced load's type paused ÷ handled.
    let live_admin = Admin::of_inbox(&live);
    let mut ack_ratios = Vec::new();
    let mut drain_ratios = Vec::new();
    let events = if quick() { 2000 } else { 10_000 };
    println!("11. pause, {name}: ack p99 with the deliveries' type paused ÷ handled; {events} paused events drained after resume ÷ the no-op workers' rate");
    for round in 1..=rounds() {
        let (handled, _) = p99_while::<()>(&endpoint, None, idle_time).await;
        live_admin.pause(TYPE).await.expect("pause");
        let (paused, _) = p99_while::<()>(&endpoint, None, idle_time).await;
        live_admin.resume(TYPE).await.expect("resume");
        live.wait_idle(Duration::from_secs(600)).await.expect("idle");
        let ack_ratio = paused.as_secs_f64() / handled.as_secs_f64();
        ack_ratios.push(ack_ratio);

        let usual = noop_rate(connect(url, 16).await, events).await;
        let resumed = resumed_rate(connect(url, 16).await, events).await;
        let drain_ratio = resumed / usual;
        drain_ratios.push(drain_ratio);
        println!(
            "    round {round}: ack p99 handled {:.2} ms, paused {:.2} ms: ratio {ack_ratio:.2}; drain after resume {resumed:.0}/s, usual {usual:.0}/s: ratio {drain_ratio:.2}",
            ms(handled),
            ms(paused)
        );
    }
    ack_ratios.sort_by(f64::total_cmp);
    drain_ratios.sort_by(f64::total_cmp);
    println!(
        "    medians: ack p99 paused ÷ handled {:.2}; drain after resume ÷ usual {:.2}",
        ack_ratios[ack_ratios.len() / 2],
        drain_ratios[drain_ratios.len() / 2]
    );
    live_workers.shutdown().await;
}

/// No-op workers (16) running while `total` events of a paused type are
/// stored, then the type resumed: events/s from the resume to the last mark.
async fn resumed_rate(inbox: Inbox, total: usize) -> f64 {
    let admin = Admin::of_inbox(&inbox);
    admin.pause(TYPE).await.expect("pause");
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&done);
    let workers = inbox.start(move |_job: Job| {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        async { Ok(()) }
    });
    store(&inbox, total, &unique("evt_p")).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        done.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "a paused type was handled"
    );
    let started = Instant::now();
    admin.resume(TYPE).await.expect("resume");
    inbox.wait_idle(Duration::from_secs(600)).await.expect("idle");
    let rate = total as f64 / started.elapsed().as_secs_f64();
    workers.shutdown().await;
    rate
}
