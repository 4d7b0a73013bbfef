//! Section 12 of the inbox bench: the dashboard under load beside
//! deliveries. 100 000 events stored in the namespace deliveries arrive in;
//! a paced load of deliveries (`PAYHOOK_BENCH_BULK_RATE`, default 300/s) to
//! no-op workers, its ack p99 while 60 clients load the events page filtered
//! by type (and by type and state) as fast as they are answered ÷ the same
//! load with the dashboard idle, alternating rounds
//! (`PAYHOOK_BENCH_ROUNDS`, default 2). Every delivery must get `200`; the
//! dashboard's own answers are counted (`200`, or `503` when a page is given
//! up at its deadline), with how long a page took to answer (its wait in
//! line included), p50 and p99.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use payhook::dashboard::{Dashboard, DashboardRequest};
use payhook::inbox::{sqlx, Job};

use super::pause_bulk::{ms, p99_while, rate, rounds};
use super::{connect, fill, percentile, quick, serve};

/// How many clients load pages at once.
const PAGE_CLIENTS: usize = 60;

/// The filtered pages the clients load, in turn.
const QUERIES: [&str; 3] = [
    "type=charge.succeeded",
    "type=payment_intent.payment_failed&state=dead",
    "type=charge.succeeded&limit=200",
];

/// Section 12 on one database.
pub(crate) async fn dashboard_under_load(url: &str) {
    let postgres = url.starts_with("postgres");
    let name = if postgres { "PostgreSQL" } else { "SQLite" };
    let total = if quick() { 20_000 } else { 100_000 };
    let live = connect(url, 16).await;
    fill(&live, total).await;
    if postgres {
        sqlx::query("ANALYZE payhook_inbox")
            .execute(live.pool())
            .await
            .expect("analyze");
    }
    let workers = live.start(|_job: Job| async { Ok(()) });
    let endpoint = serve(live.clone()).await;
    let token = "bench-dashboard-token-0123456789";
    let dashboard = Dashboard::for_inbox(&live, token).expect("dashboard");
    let mut headers = http::HeaderMap::new();
    let credentials = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(format!("bench:{token}"))
    };
    headers.insert(
        "authorization",
        format!("Basic {credentials}").parse().expect("header"),
    );
    let _ = p99_while::<()>(&endpoint, None, Duration::from_secs(1)).await; // warm-up
    println!(
        "12. dashboard under load, {name}, {total} stored events: {PAGE_CLIENTS} clients loading filtered events pages, deliveries at {}/s meanwhile (2 cores shared)",
        rate()
    );
    let time = Duration::from_secs(if quick() { 2 } else { 5 });
    let mut ratios = Vec::new();
    for round in 1..=rounds() {
        let (idle, _) = p99_while::<()>(&endpoint, None, time).await;
        let stop = Arc::new(AtomicBool::new(false));
        let (pages, unavailable) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let mut clients = tokio::task::JoinSet::new();
        for client in 0..PAGE_CLIENTS {
            let (dashboard, headers, stop) = (dashboard.clone(), headers.clone(), Arc::clone(&stop));
            let (pages, unavailable) = (Arc::clone(&pages), Arc::clone(&unavailable));
            clients.spawn(async move {
                let method = http::Method::GET;
                let mut n = client;
                let mut waits = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    let response = dashboard
                        .handle(DashboardRequest {
                            method: &method,
                            base: "/payhook",
                            path: "/events",
                            query: Some(QUERIES[n % QUERIES.len()]),
                            headers: &headers,
                            body: &[],
                        })
                        .await;
                    match response.status().as_u16() {
                        200 => pages.fetch_add(1, Ordering::Relaxed),
                        503 => unavailable.fetch_add(1, Ordering::Relaxed),
                        other => panic!("page answered {other}"),
                    };
                    waits.push(asked.elapsed());
                    n += 1;
                }
                waits
            });
        }
        let started = Instant::now();
        let (busy, _) = p99_while::<()>(&endpoint, None, time).await;
        let elapsed = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        let mut waits = Vec::new();
        while let Some(client) = clients.join_next().await {
            waits.extend(client.expect("page client"));
        }
        let ratio = busy.as_secs_f64() / idle.as_secs_f64();
        ratios.push(ratio);
        println!(
            "    round {round}: ack p99 idle {:.2} ms, with {PAGE_CLIENTS} page clients {:.2} ms: ratio {ratio:.2}; every delivery 200; pages {:.0}/s answered 200, {} answered 503, a page answered in {:.1} ms (p50) / {:.1} ms (p99) with {PAGE_CLIENTS} asking",
            ms(idle),
            ms(busy),
            pages.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64(),
            unavailable.load(Ordering::Relaxed),
            ms(percentile(&mut waits, 0.5)),
            ms(percentile(&mut waits, 0.99)),
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!("    median ack p99 ratio {:.2}", ratios[ratios.len() / 2]);
    workers.shutdown().await;
}
