//! A month of history must not change how the inbox's hot path runs.
//!
//! PostgreSQL compiles a statement with JIT when its *estimated* cost passes
//! `jit_above_cost` (100 000 on a stock server), and the estimates of the
//! claim's per-intent probes grow with the rows the table keeps: on a table
//! holding a million done events a claim that reads a few index entries was
//! estimated past that line, and each one compiled for tens to hundreds of
//! milliseconds. This test fills such a history by SQL, lets the statistics
//! see it, drains new events of several payment intents through the inbox
//! (intake, claims, done marks, a failure), and asks `pg_stat_statements`
//! whether the server compiled any statement on the inbox's tables.
//!
//! It needs `pg_stat_statements` loaded by the server
//! (`shared_preload_libraries`, as `.ci/start-postgres` starts it) and fails,
//! saying so, when it is not.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use payhook_core::sender::SignedDelivery;
use payhook_core::Receiver;
use payhook_inbox::sqlx::{self, Row};
use payhook_inbox::{HandlerError, Inbox, Job};
use payhook_test_support::{any_pool, drop_postgres_database, fresh_postgres_database, unique};

const SECRET: &str = "whsec_history";

/// Stored events of history: well past the point (about 300 000) where the
/// claim's estimate crossed the stock `jit_above_cost`.
const HISTORY: i64 = 1_000_000;

/// New events drained over the history, over [`INTENTS`] payment intents.
const EVENTS: usize = 240;
const INTENTS: usize = 40;

/// The history, as the inbox would have stored it: done events (one in 33
/// dead, with its error) received over 30 days, three per payment intent.
/// Bodies are short: their size changes no estimate that matters here, and
/// the fill stays quick.
const FILL: &str = "INSERT INTO payhook_inbox \
    (namespace, event_id, event_type, intent_id, created, body, received_at, state, attempts, due_at, \
     last_error, last_attempt_at, done_at) \
    SELECT $1, 'evt_history_' || g, 'payment_intent.succeeded', 'pi_history_' || (g / 3), 1700000000 + g / 5, \
      '{}', $2 + g * $3, CASE WHEN g % 33 = 0 THEN 'dead' ELSE 'done' END, 1, $2 + g * $3, \
      CASE WHEN g % 33 = 0 THEN 'failed' END, $2 + g * $3 + 5, \
      CASE WHEN g % 33 = 0 THEN NULL ELSE $2 + g * $3 + 10 END \
    FROM generate_series(1, $4) AS g";

fn body(id: &str, intent: &str) -> String {
    format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","created":1700000000,"data":{{"object":{{"id":"{intent}","object":"payment_intent","amount":1,"currency":"eth","status":"succeeded","created":1}}}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_no_statement_of_the_inbox_is_compiled_over_a_million_stored_events() {
    let url = fresh_postgres_database("payhook_history").await;
    let pool = any_pool(&url).await;
    if let Err(err) = sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(&pool)
        .await
    {
        panic!("cannot create pg_stat_statements ({err}): start the server as .ci/start-postgres does");
    }
    let loaded: String = sqlx::query_scalar("SELECT current_setting('shared_preload_libraries')")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(
        loaded.contains("pg_stat_statements"),
        "this test reads pg_stat_statements: start PostgreSQL with shared_preload_libraries=pg_stat_statements \
         (.ci/start-postgres does); the server loads {loaded:?}"
    );
    // The server's defaults: JIT on, compiled past a cost of 100 000.
    let (jit, above): (String, String) =
        sqlx::query_as("SELECT current_setting('jit'), current_setting('jit_above_cost')")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        (jit.as_str(), above.as_str()),
        ("on", "100000"),
        "a stock JIT configuration"
    );

    let namespace = unique("history");
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox: Inbox = Inbox::builder(receiver)
        .namespace(&namespace)
        .concurrency(8)
        .poll_interval(Duration::from_millis(20))
        .backoff(Duration::from_millis(10), Duration::from_millis(10))
        .connect(&url)
        .await
        .unwrap();

    let now = i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap();
    let month_ago = now - 30 * 86_400_000;
    let step = 30 * 86_400_000 / HISTORY;
    sqlx::query(FILL)
        .bind(&namespace)
        .bind(month_ago)
        .bind(step)
        .bind(HISTORY)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("ANALYZE payhook_inbox").execute(&pool).await.unwrap();
    sqlx::query("SELECT pg_stat_statements_reset()")
        .execute(&pool)
        .await
        .unwrap();

    for i in 0..EVENTS {
        let id = format!("evt_new_{i:04}");
        let delivery = SignedDelivery::now(body(&id, &format!("pi_new_{}", i % INTENTS)), SECRET).unwrap();
        let reply = inbox.ingest(&delivery.headers(), delivery.body).await;
        assert_eq!(reply.status().as_u16(), 200, "{}", reply.body());
    }
    // One event fails once, so a failure and its retry are among the
    // statements too.
    let failed_once = Arc::new(AtomicUsize::new(0));
    let handled = Arc::new(AtomicUsize::new(0));
    let workers = inbox.start({
        let (failed_once, handled) = (Arc::clone(&failed_once), Arc::clone(&handled));
        move |job: Job| {
            let first_failure =
                job.event().id() == "evt_new_0007" && failed_once.fetch_add(1, Ordering::SeqCst) == 0;
            let handled = Arc::clone(&handled);
            async move {
                if first_failure {
                    return Err(HandlerError::from("fails once"));
                }
                handled.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        }
    });
    inbox.wait_idle(Duration::from_secs(60)).await.unwrap();
    workers.shutdown().await;
    assert_eq!(handled.load(Ordering::SeqCst), EVENTS);
    assert!(failed_once.load(Ordering::SeqCst) >= 1, "the failure path ran");

    // The claims ran: their statements are in the view (a test that saw none
    // would prove nothing).
    let rows = sqlx::query(
        "SELECT query, calls, jit_functions FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
           AND query LIKE '%payhook_inbox%' AND query NOT LIKE '%pg_stat_statements%'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let claims = rows
        .iter()
        .filter(|row| {
            row.get::<String, _>("query")
                .contains("pg_try_advisory_xact_lock")
        })
        .count();
    assert!(
        claims > 0,
        "no claim statement was recorded: {} statements seen",
        rows.len()
    );
    let compiled: Vec<String> = rows
        .iter()
        .filter(|row| row.get::<i64, _>("jit_functions") > 0)
        .map(|row| {
            let query: String = row.get("query");
            format!(
                "{} calls, {} functions: {}",
                row.get::<i64, _>("calls"),
                row.get::<i64, _>("jit_functions"),
                query
            )
        })
        .collect();
    assert!(
        compiled.is_empty(),
        "statements of the inbox compiled with JIT over {HISTORY} stored events:\n{}",
        compiled.join("\n")
    );

    inbox.pool().close().await;
    pool.close().await;
    drop_postgres_database(&url).await;
}
