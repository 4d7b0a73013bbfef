//! Section 14 of the inbox bench: the no-op drain beside hand-written
//! floors on the same database, with what each costs: events/s, CPU seconds
//! per 1 000 events of this process and of the test PostgreSQL server, and
//! statements per event (sqlx's own count, `pg_stat_statements` when the
//! server loads it). `benches/peers/graphile/run.sh` runs its drain alone
//! (`PAYHOOK_BENCH_DRAIN_FLOORS=off`) in rounds beside graphile-worker.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use payhook::inbox::{sqlx, Job};
use payhook::{sign, Secret};
use payhook_test_support::unique;

use super::{
    body, connect, env_number, now, quick, skip_locked_reference, statements_per_event, statements_reset,
    SECRET,
};

/// Whether the statement counter below counts now.
static COUNTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Whether [`StatementCounter`] is the global subscriber.
static COUNTER_INSTALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Statements sqlx ran while [`COUNTING`] was on (its `sqlx::query` events).
static STATEMENTS: AtomicUsize = AtomicUsize::new(0);

/// Counts sqlx's statement events while [`COUNTING`] is on; sees nothing
/// else, so it costs nothing when off.
struct StatementCounter;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for StatementCounter {
    fn register_callsite(&self, meta: &'static tracing::Metadata<'static>) -> tracing::subscriber::Interest {
        if meta.target() == "sqlx::query" {
            tracing::subscriber::Interest::sometimes()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    fn enabled(&self, meta: &tracing::Metadata<'_>, _: tracing_subscriber::layer::Context<'_, S>) -> bool {
        meta.target() == "sqlx::query" && COUNTING.load(Ordering::Relaxed)
    }

    fn on_event(&self, _: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        STATEMENTS.fetch_add(1, Ordering::Relaxed);
    }
}

/// CPU seconds (user + system) in `/proc/PID/stat`, with the reaped
/// children's when `children`.
fn cpu_seconds(pid: &str, children: bool) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses.
    let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split(' ').collect();
    let field = |n: usize| fields.get(n - 3).and_then(|value| value.parse::<f64>().ok());
    let mut ticks = field(14)? + field(15)?;
    if children {
        ticks += field(16)? + field(17)?;
    }
    // USER_HZ is 100 on Linux.
    Some(ticks / 100.0)
}

/// CPU seconds of the test PostgreSQL server (`PAYHOOK_TEST_PG_DIR`): its
/// postmaster with its reaped children, and its live children.
fn postgres_cpu() -> Option<f64> {
    let dir = std::env::var("PAYHOOK_TEST_PG_DIR").ok()?;
    let pid = std::fs::read_to_string(format!("{dir}/data/postmaster.pid")).ok()?;
    let postmaster = pid.lines().next()?.trim().to_owned();
    let mut total = cpu_seconds(&postmaster, true)?;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{name}/stat")) else {
            continue;
        };
        let parent = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split(' ').nth(1));
        if parent == Some(postmaster.as_str()) {
            total += cpu_seconds(&name, false).unwrap_or(0.0);
        }
    }
    Some(total)
}

/// One drain's figures: events/s, CPU seconds per 1 000 events of this
/// process and of the PostgreSQL server (when known), statements per event
/// (when counted).
#[derive(Clone, Copy, Default)]
struct Drain {
    rate: f64,
    process_cpu: f64,
    database_cpu: Option<f64>,
    statements: Option<f64>,
}

/// Measures `run` (which drains `events` events): its rate and CPU, and with
/// `count` the statements sqlx ran.
async fn measured<F: std::future::Future<Output = ()>>(events: usize, count: bool, run: F) -> Drain {
    let process_before = cpu_seconds("self", false).unwrap_or(0.0);
    let database_before = postgres_cpu();
    STATEMENTS.store(0, Ordering::Relaxed);
    COUNTING.store(count, Ordering::Relaxed);
    let started = Instant::now();
    run.await;
    let elapsed = started.elapsed();
    COUNTING.store(false, Ordering::Relaxed);
    let per_1000 = 1000.0 / events as f64;
    Drain {
        rate: events as f64 / elapsed.as_secs_f64(),
        process_cpu: (cpu_seconds("self", false).unwrap_or(0.0) - process_before) * per_1000,
        database_cpu: database_before
            .zip(postgres_cpu())
            .map(|(before, after)| (after - before) * per_1000),
        statements: count.then(|| STATEMENTS.load(Ordering::Relaxed) as f64 / events as f64),
    }
}

fn body_of_intent(id: &str, intent: &str) -> String {
    body(id).replace(&format!("\"pi_{id}\""), &format!("\"{intent}\""))
}

/// Stores `events` signed deliveries in `inbox` (the `i`th body from
/// `body_of`), 512 at once, each answered `200`.
pub(crate) async fn ingest_signed(
    inbox: &payhook::inbox::Inbox,
    events: usize,
    body_of: impl Fn(usize) -> String,
) {
    let secret = Secret::new(SECRET).expect("secret");
    let mut pending = Vec::new();
    for i in 0..events {
        let body = Bytes::from(body_of(i));
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

/// Section 3's drain: `events` stored (over `intents` payment intents, or
/// one each when 0), then 16 no-op workers until every event is done.
async fn inbox_drain(url: &str, events: usize, intents: usize, count: bool) -> Drain {
    let inbox = connect(url, 16).await;
    let prefix = unique("evt_d");
    ingest_signed(&inbox, events, |i| {
        let id = format!("{prefix}_{i}");
        if intents == 0 {
            body(&id)
        } else {
            body_of_intent(&id, &format!("pi_{prefix}_{}", i % intents))
        }
    })
    .await;
    let done = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&done);
    let pool = inbox.pool().clone();
    let figures = measured(events, count, async {
        let workers = inbox.start(move |_job: Job| {
            counter.fetch_add(1, Ordering::Relaxed);
            async { Ok(()) }
        });
        // As graphile-worker's drain is timed (benches/peers/graphile): the
        // table is counted only once every handler has run, then until the
        // last done mark is written.
        loop {
            if done.load(Ordering::Relaxed) >= events {
                let waiting: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM payhook_inbox WHERE state <> 'done' AND event_id LIKE $1",
                )
                .bind(format!("{prefix}%"))
                .fetch_one(&pool)
                .await
                .expect("count");
                if waiting == 0 {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        workers.shutdown().await;
    })
    .await;
    inbox.pool().close().await;
    figures
}

/// The batched hand-written floor: `events` rows, then `tasks` loops each
/// claiming up to `batch` pending rows (bodies read) and marking them done,
/// one transaction per batch; on PostgreSQL `FOR UPDATE SKIP LOCKED`, an
/// index on `(state, id)`.
async fn batched_floor(
    url: &str,
    postgres: bool,
    events: usize,
    batch: usize,
    tasks: usize,
    count: bool,
) -> Drain {
    sqlx::any::install_default_drivers();
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(u32::try_from(tasks).expect("tasks") + 1)
        .connect(url)
        .await
        .expect("pool");
    let table = unique("floor_queue");
    let id = if postgres {
        "BIGSERIAL PRIMARY KEY"
    } else {
        "INTEGER PRIMARY KEY AUTOINCREMENT"
    };
    sqlx::query(&format!(
        "CREATE TABLE {table} (id {id}, state TEXT NOT NULL, body TEXT NOT NULL)"
    ))
    .execute(&pool)
    .await
    .expect("create");
    sqlx::query(&format!("CREATE INDEX {table}_state ON {table} (state, id)"))
        .execute(&pool)
        .await
        .expect("index");
    for chunk in (0..events).collect::<Vec<_>>().chunks(500) {
        let values = vec!["('pending', $1)"; chunk.len()].join(", ");
        sqlx::query(&format!("INSERT INTO {table} (state, body) VALUES {values}"))
            .bind(body("evt_floor"))
            .execute(&pool)
            .await
            .expect("fill");
    }
    let lock = if postgres { " FOR UPDATE SKIP LOCKED" } else { "" };
    let figures = measured(events, count, async {
        let mut running = Vec::new();
        for _ in 0..tasks {
            let (pool, table) = (pool.clone(), table.clone());
            running.push(tokio::spawn(async move {
                loop {
                    let mut tx = pool.begin().await.expect("begin");
                    let rows: Vec<(i64, String)> = sqlx::query_as(&format!(
                        "SELECT id, body FROM {table} WHERE state = 'pending' ORDER BY id LIMIT {batch}{lock}"
                    ))
                    .fetch_all(&mut *tx)
                    .await
                    .expect("claim");
                    if rows.is_empty() {
                        return;
                    }
                    let ids: Vec<String> = rows.iter().map(|(id, _)| id.to_string()).collect();
                    sqlx::query(&format!(
                        "UPDATE {table} SET state = 'done' WHERE id IN ({})",
                        ids.join(", ")
                    ))
                    .execute(&mut *tx)
                    .await
                    .expect("mark");
                    tx.commit().await.expect("commit");
                }
            }));
        }
        for task in running {
            task.await.expect("task");
        }
    })
    .await;
    pool.close().await;
    figures
}

fn median_of(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn describe_drain(figures: &[Drain]) -> String {
    let mut rates: Vec<f64> = figures.iter().map(|f| f.rate).collect();
    let mut process: Vec<f64> = figures.iter().map(|f| f.process_cpu).collect();
    let mut database: Vec<f64> = figures.iter().filter_map(|f| f.database_cpu).collect();
    let database = if database.is_empty() {
        String::new()
    } else {
        format!(" + database {:.3}", median_of(&mut database))
    };
    format!(
        "{:.0} events/s (min {:.0}, max {:.0}), CPU-s per 1 000: process {:.3}{database}",
        median_of(&mut rates),
        rates.first().copied().unwrap_or(0.0),
        rates.last().copied().unwrap_or(0.0),
        median_of(&mut process),
    )
}

/// Section 14: the inbox's no-op drain (16 handlers) beside the batched
/// hand-written floor (and, on PostgreSQL at up to 10 000 events, section
/// 7's one-row loop) on the same database, alternating rounds; then one
/// counted run of each for statements per event.
pub(crate) async fn drain_floors(url: &str, postgres: bool) {
    // Statements are counted by a global subscriber of this section's own;
    // when another section installed one first, they are not counted.
    let counting = {
        use tracing_subscriber::layer::SubscriberExt as _;
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(StatementCounter)).is_ok()
            || COUNTER_INSTALLED.load(Ordering::Relaxed)
    };
    COUNTER_INSTALLED.store(counting, Ordering::Relaxed);
    let q = quick();
    let sizes: Vec<usize> = std::env::var("PAYHOOK_BENCH_DRAIN_EVENTS")
        .unwrap_or_else(|_| if q { "2000".into() } else { "10000,50000".into() })
        .split(',')
        .map(|n| n.trim().parse().expect("PAYHOOK_BENCH_DRAIN_EVENTS: numbers"))
        .collect();
    let intents = env_number("PAYHOOK_BENCH_DRAIN_INTENTS", 0) as usize;
    let floors = std::env::var("PAYHOOK_BENCH_DRAIN_FLOORS").map_or(true, |v| v != "off");
    let rounds = env_number("PAYHOOK_BENCH_ROUNDS", if q { 1 } else { 3 }) as usize;
    let spread = if intents == 0 {
        "one payment intent each".to_owned()
    } else {
        format!("{intents} payment intents")
    };
    for events in sizes {
        let (mut inbox, mut floor, mut one_row) = (Vec::new(), Vec::new(), Vec::new());
        for round in 1..=rounds {
            let drained = inbox_drain(url, events, intents, false).await;
            println!(
                "14. payhook drain {events} events ({spread}), round {round}: {:.0} events/s",
                drained.rate
            );
            inbox.push(drained);
            if floors {
                floor.push(
                    batched_floor(url, postgres, events, 500, if postgres { 16 } else { 1 }, false).await,
                );
                if postgres && events <= 10_000 {
                    let rate = skip_locked_reference(url, events).await;
                    one_row.push(rate);
                }
            }
        }
        println!("14. {events} events ({spread}), medians of {rounds} rounds:");
        println!("    payhook inbox, 16 no-op handlers: {}", describe_drain(&inbox));
        if floors {
            println!(
                "    batched hand loop (claim 500 + mark 500 per transaction, {} task(s)): {}",
                if postgres { 16 } else { 1 },
                describe_drain(&floor)
            );
            let mut inbox_rates: Vec<f64> = inbox.iter().map(|f| f.rate).collect();
            let mut floor_rates: Vec<f64> = floor.iter().map(|f| f.rate).collect();
            println!(
                "    payhook / batched hand loop = {:.2}",
                median_of(&mut inbox_rates) / median_of(&mut floor_rates)
            );
            if !one_row.is_empty() {
                let one = median_of(&mut one_row);
                println!(
                    "    one-row SKIP LOCKED loop (section 7): {one:.0} events/s; payhook / it = {:.2}",
                    median_of(&mut inbox_rates) / one
                );
            }
            // Counted once each, apart from the timed rounds.
            let counted = inbox_drain(url, events, intents, true).await;
            let floor_counted =
                batched_floor(url, postgres, events, 500, if postgres { 16 } else { 1 }, true).await;
            if counting {
                println!(
                    "    statements per event (sqlx's own count): payhook {:.3}, batched hand loop {:.3}",
                    counted.statements.unwrap_or(0.0),
                    floor_counted.statements.unwrap_or(0.0)
                );
            } else {
                println!("    statements per event: not counted (another section installed the subscriber)");
            }
        }
        if postgres && floors {
            let pool = sqlx::PgPool::connect(url).await.expect("pool");
            if statements_reset(&pool).await {
                inbox_drain(url, events, intents, false).await;
                let total: i64 = sqlx::query_scalar(
                    "SELECT COALESCE(SUM(calls), 0)::BIGINT FROM pg_stat_statements \
                     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                       AND query NOT LIKE '%pg_stat_%'",
                )
                .fetch_one(&pool)
                .await
                .expect("pg_stat_statements");
                println!(
                    "    pg_stat_statements, one payhook drain incl. its fill: {:.3} statements per event; most run: {}",
                    total as f64 / events as f64,
                    statements_per_event(&pool, events).await
                );
            }
            pool.close().await;
        }
    }
}
