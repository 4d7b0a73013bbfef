//! Section 16 of the inbox bench: what the inbox costs as its history grows.
//!
//! One namespace is filled, by SQL, with the history a month of traffic
//! leaves: done events (one in 33 dead, with its error) of about 1.5 KB,
//! three per payment intent, received over the last 30 days, each with one
//! attempt record. At each level of `PAYHOOK_BENCH_HISTORY` (stored events,
//! default `0,1000000`; the fill adds to the one before, then the
//! statistics are taken as autovacuum would) the same inbox is measured:
//!
//! - the no-op drain of `PAYHOOK_BENCH_HISTORY_EVENTS` (default 10 000) new
//!   events, 16 handlers, `PAYHOOK_BENCH_ROUNDS` rounds (median);
//! - each read of the dashboard and the CLI, the median of 5 calls: the
//!   overview's counts and its activity chart (the last hour, as the
//!   dashboard draws it), the first events page with
//!   and without a state filter, `payhook inbox list` and `show`, the
//!   bulk counts (retry dead, purge older than 7 days, replay older than
//!   1 day), the paused types;
//! - the ack p99 of a paced load (`PAYHOOK_BENCH_BULK_RATE`, default 300/s)
//!   with no-op workers running, idle, while the oldest day of history is
//!   purged at the retention purge's pace, and while the next day is purged
//!   at the operator's: rows, batches, seconds in the purge's statements
//!   (per 100 000 rows) and over all, its rests included;
//! - on PostgreSQL, the bytes on disk per stored event (table, indexes,
//!   TOAST, bodies and attempts) and the largest index;
//! - a reconcile pass that finds nothing missed (section 15's, by an inbox
//!   of its own namespace beside the history).
//!
//! Each figure is printed beside the empty table's of the same run.

use std::time::{Duration, Instant};

use payhook::inbox::admin::{Admin, BulkAction, Filter, Pace, PageQuery, Selection};
use payhook::inbox::{sqlx, Inbox, State};
use payhook_test_support::unique;

use super::pause_bulk::{ms, p99_while};
use super::{body, env_number, now, quick, serve, SECRET};

/// The history fill on PostgreSQL: `$1` namespace, `$2` the month's start
/// (Unix ms), `$3` ms between two events, rows `$4 + 1` to `$5` of a level
/// whose first row is `$6 + 1`, received at the month's start (each
/// level's fill spreads over the whole month). Stored as the intake stores
/// them: the row with an empty body, the body in `payhook_inbox_bodies`
/// under the row's `arrival`.
const FILL_POSTGRES: &str = "WITH stored AS (INSERT INTO payhook_inbox \
    (namespace, event_id, event_type, intent_id, created, body, received_at, state, attempts, due_at, \
     last_error, last_attempt_at, done_at) \
    SELECT $1, 'evt_history_' || g, 'payment_intent.succeeded', 'pi_history_' || (g / 3), 1700000000 + g / 5, '', \
      $2 + (g - $6) * $3, CASE WHEN g % 33 = 0 THEN 'dead' ELSE 'done' END, 1, $2 + (g - $6) * $3, \
      CASE WHEN g % 33 = 0 THEN 'the handler failed' END, $2 + (g - $6) * $3 + 5, \
      CASE WHEN g % 33 = 0 THEN NULL ELSE $2 + (g - $6) * $3 + 10 END \
    FROM generate_series($4 + 1, $5) AS g RETURNING arrival, event_id) \
    INSERT INTO payhook_inbox_bodies (arrival, body) \
    SELECT arrival, '{\"id\":\"evt_history_' || g || '\",\"type\":\"payment_intent.succeeded\",\"data\":{\"object\":{\"id\":\"pi_history_' \
        || (g / 3) || '\",\"amount\":2500,\"currency\":\"btc\",\"metadata\":{\"note\":\"' || md5(g::text) || repeat('x', 1300) || '\"}}}}' \
    FROM stored, LATERAL (SELECT CAST(substring(event_id FROM 13) AS BIGINT) AS g) AS n";

/// The same on SQLite (no `generate_series` nor `md5`).
const FILL_SQLITE: &str = "WITH RECURSIVE g(n) AS (SELECT $4 + 1 UNION ALL SELECT n + 1 FROM g WHERE n < $5) \
    INSERT INTO payhook_inbox \
    (namespace, event_id, event_type, intent_id, created, body, received_at, state, attempts, due_at, \
     last_error, last_attempt_at, done_at) \
    SELECT $1, 'evt_history_' || n, 'payment_intent.succeeded', 'pi_history_' || (n / 3), 1700000000 + n / 5, \
      '{\"id\":\"evt_history_' || n || '\",\"type\":\"payment_intent.succeeded\",\"data\":{\"object\":{\"id\":\"pi_history_' \
        || (n / 3) || '\",\"amount\":2500,\"currency\":\"btc\",\"metadata\":{\"note\":\"' || hex(zeroblob(666)) || '\"}}}}', \
      $2 + (n - $6) * $3, CASE WHEN n % 33 = 0 THEN 'dead' ELSE 'done' END, 1, $2 + (n - $6) * $3, \
      CASE WHEN n % 33 = 0 THEN 'the handler failed' END, $2 + (n - $6) * $3 + 5, \
      CASE WHEN n % 33 = 0 THEN NULL ELSE $2 + (n - $6) * $3 + 10 END \
    FROM g";

/// One attempt record for each event the fill stored (`$2`: arrivals above).
const FILL_ATTEMPTS: &str = "INSERT INTO payhook_inbox_attempts \
    (arrival, namespace, attempt, started_at, finished_at, duration_ms, outcome, error) \
    SELECT arrival, namespace, 1, last_attempt_at, last_attempt_at + 5, 5, state, last_error \
    FROM payhook_inbox WHERE namespace = $1 AND arrival > $2";

const MONTH_MS: i64 = 30 * 86_400_000;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The median of 5 calls of `read`, in milliseconds.
async fn timed<F, Fut, T, E>(mut read: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
    E: std::fmt::Debug,
{
    let mut times = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        read().await.expect("read");
        times.push(started.elapsed().as_secs_f64() * 1e3);
    }
    median(times)
}

/// The reads measured at each level, by name, in milliseconds.
async fn reads(admin: &Admin, any_id: &str) -> Vec<(&'static str, f64)> {
    let now = i64::try_from(now()).expect("clock") * 1000;
    let dead = Selection {
        state: Some(State::Dead),
        ..Selection::default()
    };
    let week_old = Selection {
        received_before: Some(now - 7 * 86_400_000),
        ..Selection::default()
    };
    let day_old = Selection {
        received_before: Some(now - 86_400_000),
        ..Selection::default()
    };
    let dead_page = PageQuery {
        filter: Filter {
            state: Some(State::Dead),
            ..Filter::default()
        },
        ..PageQuery::default()
    };
    let first_page = PageQuery::default();
    let fifty = Filter {
        limit: Some(50),
        ..Filter::default()
    };
    vec![
        ("overview counts (inbox stats)", timed(|| admin.stats()).await),
        (
            "overview activity chart (the last hour)",
            timed(|| admin.activity(Duration::from_secs(300), 12)).await,
        ),
        ("events page", timed(|| admin.page(&first_page)).await),
        ("dead letters page", timed(|| admin.page(&dead_page)).await),
        ("inbox list --limit 50", timed(|| admin.list(&fifty)).await),
        ("inbox show", timed(|| admin.show(any_id)).await),
        (
            "bulk count: retry dead",
            timed(|| admin.bulk_count(BulkAction::Retry, &dead, None)).await,
        ),
        (
            "bulk count: purge older than 7 d",
            timed(|| admin.bulk_count(BulkAction::Purge, &week_old, None)).await,
        ),
        (
            "bulk count: replay older than 1 d",
            timed(|| admin.bulk_count(BulkAction::Replay, &day_old, None)).await,
        ),
        ("paused types", timed(|| admin.paused()).await),
    ]
}

/// `events` new events stored in `inbox`'s namespace, then drained by 16
/// no-op handlers: events/s from the workers' start to the last done mark.
async fn drain(inbox: &Inbox, events: usize) -> f64 {
    let prefix = unique("evt_new");
    super::drain::ingest_signed(inbox, events, |i| body(&format!("{prefix}_{i}"))).await;
    // As section 14 times its drain: the table is asked only once every
    // handler has run (a count of the waiting events every few ms would
    // itself load the database), then until the last done mark is written.
    let handled = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&handled);
    let started = Instant::now();
    let workers = inbox.start(move |_job: payhook::inbox::Job| {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        async { Ok(()) }
    });
    while handled.load(std::sync::atomic::Ordering::Relaxed) < events {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    inbox.wait_idle(Duration::from_secs(600)).await.expect("drained");
    let rate = events as f64 / started.elapsed().as_secs_f64();
    workers.shutdown().await;
    rate
}

/// Empties `pg_stat_statements`; whether it is there to read.
async fn statements_reset(pool: &sqlx::AnyPool) -> bool {
    let _ = sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(pool)
        .await;
    sqlx::query("SELECT pg_stat_statements_reset()")
        .execute(pool)
        .await
        .is_ok()
}

/// The inbox statements that took most of the database's time since the
/// reset, per drained event: calls, time, buffers read from outside
/// PostgreSQL's cache and found in it.
async fn print_statements(pool: &sqlx::AnyPool, level: i64, drained: usize) {
    let rows: Vec<(i64, f64, i64, i64, String)> = sqlx::query_as(
        "SELECT calls, total_exec_time, shared_blks_read, shared_blks_hit, \
           regexp_replace(left(query, 70), '\\s+', ' ', 'g') \
         FROM pg_stat_statements WHERE query LIKE '%payhook_inbox%' \
         ORDER BY total_exec_time DESC LIMIT 6",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    let per = drained.max(1) as f64;
    for (calls, total_ms, read, hit, query) in rows {
        println!(
            "16. {level} stored: drain's statement {:.3} calls, {:.3} ms, {:.2} blocks read, {:.1} hit per event: {query}",
            calls as f64 / per,
            total_ms / per,
            read as f64 / per,
            hit as f64 / per
        );
    }
}

/// Section 16 on one database.
pub(crate) async fn with_history(url: &str, postgres: bool) {
    let q = quick();
    let levels: Vec<i64> = std::env::var("PAYHOOK_BENCH_HISTORY")
        .unwrap_or_else(|_| if q { "0,100000".into() } else { "0,1000000".into() })
        .split(',')
        .map(|n| n.trim().parse().expect("PAYHOOK_BENCH_HISTORY: numbers"))
        .collect();
    let events = env_number("PAYHOOK_BENCH_HISTORY_EVENTS", if q { 2000 } else { 10_000 }) as usize;
    let rounds = env_number("PAYHOOK_BENCH_ROUNDS", if q { 1 } else { 3 }) as usize;
    let namespace = unique("history");
    // Kept for the whole month, as a month of history is: the inbox's own
    // retention purge would otherwise delete what the fill stored while
    // the drain runs. The purge of one day is measured on its own below.
    let receiver = payhook::Receiver::builder()
        .secret(SECRET)
        .build()
        .expect("receiver");
    let inbox = Inbox::builder(receiver)
        .namespace(&namespace)
        .concurrency(16)
        .poll_interval(Duration::from_millis(20))
        .retention(Duration::from_secs(31 * 86_400))
        .connect(url)
        .await
        .expect("inbox");
    let admin = Admin::of_inbox(&inbox);
    let pool = inbox.pool().clone();
    let endpoint = serve(inbox.clone()).await;
    let month_start = i64::try_from(now()).expect("clock") * 1000 - MONTH_MS;
    let mut stored = 0_i64;
    let mut empty: Option<(f64, Vec<(&'static str, f64)>)> = None;
    let mut empty_quiet: Option<f64> = None;
    for level in levels {
        if level > stored {
            let started = Instant::now();
            let last: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(arrival), 0) FROM payhook_inbox")
                .fetch_one(&pool)
                .await
                .expect("arrival");
            // Filled in slices of 100 000, so no statement holds the
            // whole fill in memory (SQLite's recursive rows).
            let mut from = stored;
            while from < level {
                let to = (from + 100_000).min(level);
                sqlx::query(if postgres { FILL_POSTGRES } else { FILL_SQLITE })
                    .bind(&namespace)
                    .bind(month_start)
                    .bind(MONTH_MS / (level - stored).max(1))
                    .bind(from)
                    .bind(to)
                    .bind(stored)
                    .execute(&pool)
                    .await
                    .expect("fill");
                from = to;
            }
            sqlx::query(FILL_ATTEMPTS)
                .bind(&namespace)
                .bind(last)
                .execute(&pool)
                .await
                .expect("attempts");
            if postgres {
                sqlx::query("VACUUM ANALYZE payhook_inbox")
                    .execute(&pool)
                    .await
                    .expect("vacuum");
                sqlx::query("VACUUM ANALYZE payhook_inbox_attempts")
                    .execute(&pool)
                    .await
                    .expect("vacuum");
                sqlx::query("VACUUM ANALYZE payhook_inbox_bodies")
                    .execute(&pool)
                    .await
                    .expect("vacuum");
                // The fill wrote a month of the activity chart's buckets at
                // once; autovacuum would analyze them as it does the events.
                sqlx::query("VACUUM ANALYZE payhook_inbox_activity")
                    .execute(&pool)
                    .await
                    .expect("vacuum");
            }
            stored = level;
            println!(
                "16. history: {level} stored events (filled in {:.0} s)",
                started.elapsed().as_secs_f64()
            );
        }
        // Where the drain's database time goes (PostgreSQL with
        // pg_stat_statements loaded, as `.ci/start-postgres` starts it).
        let statements = postgres && statements_reset(&pool).await;
        let mut rates = Vec::new();
        for _ in 0..rounds {
            rates.push(drain(&inbox, events).await);
        }
        let rate = median(rates);
        if statements {
            print_statements(&pool, level, rounds * events).await;
        }
        // One stored event: of the history when there is one.
        let any_id = if stored > 0 {
            format!("evt_history_{}", stored / 2)
        } else {
            let one = Filter {
                limit: Some(1),
                ..Filter::default()
            };
            admin.list(&one).await.expect("list")[0].event_id.clone()
        };
        let read = reads(&admin, &any_id).await;
        match &empty {
            None => println!("16. {level} stored: drain {events} events {rate:.0}/s"),
            Some((empty_rate, _)) => println!(
                "16. {level} stored: drain {events} events {rate:.0}/s ({:.2} of empty)",
                rate / empty_rate
            ),
        }
        for (index, (name, ms)) in read.iter().enumerate() {
            match &empty {
                Some((_, before)) => println!(
                    "16. {level} stored: {name}: {ms:.1} ms ({:.1}x empty)",
                    ms / before[index].1.max(0.001)
                ),
                None => println!("16. {level} stored: {name}: {ms:.1} ms"),
            }
        }
        if postgres && stored > 0 {
            let row: (i64, i64, String) = sqlx::query_as(
                "SELECT pg_total_relation_size('payhook_inbox') + pg_total_relation_size('payhook_inbox_attempts') \
                   + pg_total_relation_size('payhook_inbox_bodies'), \
                   (SELECT COUNT(*) FROM payhook_inbox), \
                   (SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = 'payhook_inbox'::regclass \
                    ORDER BY pg_relation_size(indexrelid) DESC LIMIT 1)",
            )
            .fetch_one(&pool)
            .await
            .expect("sizes");
            println!(
                "16. {level} stored: {:.0} bytes on disk per stored event (largest index {})",
                row.0 as f64 / row.1.max(1) as f64,
                row.2
            );
        }
        // Acknowledgements of a paced load (`PAYHOOK_BENCH_BULK_RATE`, 300/s
        // by default) with no-op workers running: idle, then while the
        // oldest day of history is purged at the retention purge's pace,
        // then the next day at the operator's (`payhook inbox purge`). The
        // idle window is 15 s (4 500 acknowledgements): in 5 s the p99, the
        // 15th slowest, moved by half a millisecond between runs.
        let workers = inbox.start(|_job: payhook::inbox::Job| async { Ok(()) });
        let (idle, _) = p99_while::<()>(&endpoint, None, Duration::from_secs(15)).await;
        println!("16. {level} stored: ack p99 {:.1} ms", ms(idle));
        if stored > 0 {
            for (day, pace, name) in [
                (1, Pace::Background, "retention"),
                (2, Pace::Operator, "operator"),
            ] {
                let purge = async {
                    let started = Instant::now();
                    let purged = admin
                        .purge_done_before_paced(month_start + day * MONTH_MS / 30, pace)
                        .await
                        .expect("purge");
                    (purged, started.elapsed().as_secs_f64())
                };
                let (during, purged) = p99_while(&endpoint, Some(Box::pin(purge)), Duration::ZERO).await;
                let (purged, seconds) = purged.expect("purged");
                let busy = purged.busy.as_secs_f64();
                println!(
                    "16. {level} stored: purge of a day at the {name} pace: {} events in {} batches, {busy:.2} s in \
                     statements ({:.2} s per 100 000) over {seconds:.2} s, ack p99 meanwhile {:.1} ms ({:.2}x idle)",
                    purged.events,
                    purged.batches,
                    busy * 100_000.0 / purged.events.max(1) as f64,
                    ms(during),
                    during.as_secs_f64() / idle.as_secs_f64()
                );
            }
        }
        workers.shutdown().await;
        // A reconcile pass that finds nothing missed, by an inbox of its own
        // namespace beside this history (the indexes it reads are shared).
        let quiet = super::reconcile::quiet_passes(url, postgres, &format!("16. {level} stored:")).await;
        match empty_quiet {
            Some(before) => println!(
                "16. {level} stored: quiet reconcile pass {quiet:.1} ms ({:.2}x empty)",
                quiet / before
            ),
            None => empty_quiet = Some(quiet),
        }
        if empty.is_none() {
            empty = Some((rate, read));
        }
    }
    inbox.pool().close().await;
    // The SQLite file of a month of history takes gigabytes: its directory
    // (made for this section alone) goes with it.
    if let Some(file) = url.strip_prefix("sqlite://") {
        if let Some(dir) = std::path::Path::new(file).parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
