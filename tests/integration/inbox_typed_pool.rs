//! The inbox on the app's own sqlx pool, typed by its database: the handler's
//! transaction goes wherever the app's code takes `&mut PgConnection` or
//! `&mut SqliteConnection`, compile-checked `sqlx::query!` included (checked
//! against the committed offline data in `.sqlx/`), and the inbox route mounts
//! an `Inbox<sqlx::Postgres>` / `Inbox<sqlx::Sqlite>` like any other.
//!
//! The programs in `probe_pg` and `probe_sqlite` are written as an app writes
//! them, with `sqlx = "0.8"` as its own dependency, and each event is credited
//! exactly once however often it is delivered.
//!
//! PostgreSQL comes from `PAYHOOK_TEST_DATABASE_URL` (`.ci/start-postgres`); the
//! test fails when it is unset or unreachable.

use std::error::Error;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use payhook::{sign, Receiver, Secret};
use payhook_test_support::unique;

const SECRET: &str = "whsec_typed_pool";

/// The app's own function over its own connection type, with a
/// compile-checked query.
async fn credit_pg(conn: &mut sqlx::PgConnection, id: &str) -> Result<(), sqlx::Error> {
    sqlx::query!("INSERT INTO typed_pool_credits (event_id) VALUES ($1)", id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

async fn credit_sqlite(conn: &mut sqlx::SqliteConnection, id: &str) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO typed_pool_credits (event_id) VALUES ($1)")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The issue's probe, on PostgreSQL, unchanged but for serving the app.
async fn probe_pg(url: String, receiver: Receiver) -> Result<axum::Router, Box<dyn Error>> {
    let pool = sqlx::PgPool::connect(&url).await?; // the app's own pool
    let inbox = payhook::inbox::Inbox::from_pool(receiver, pool.clone()).await?;
    let _workers = inbox.start(|job: payhook::inbox::Job<sqlx::Postgres>| async move {
        let mut tx = job.transaction().await?;
        credit_pg(&mut tx, job.event().id()).await?; // async fn credit_pg(conn: &mut sqlx::PgConnection, id: &str) -> Result<(), sqlx::Error>
        Ok(())
    });
    let app = axum::Router::new().route("/webhooks", payhook::tower::axum::inbox_route(inbox));
    Ok(app)
}

/// The same on SQLite.
async fn probe_sqlite(url: String, receiver: Receiver) -> Result<axum::Router, Box<dyn Error>> {
    let pool = sqlx::SqlitePool::connect(&url).await?; // the app's own pool
    let inbox = payhook::inbox::Inbox::from_pool(receiver, pool.clone()).await?;
    let _workers = inbox.start(|job: payhook::inbox::Job<sqlx::Sqlite>| async move {
        let mut tx = job.transaction().await?;
        credit_sqlite(&mut tx, job.event().id()).await?;
        Ok(())
    });
    let app = axum::Router::new().route("/webhooks", payhook::tower::axum::inbox_route(inbox));
    Ok(app)
}

fn event(id: &str) -> String {
    format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","created":1,"data":{{"object":{{"id":"pi_{id}","object":"payment_intent","amount":100,"currency":"eth","status":"succeeded","created":1}}}}}}"#
    )
}

/// Serves `app` on loopback, delivers three events (each twice), and returns
/// once every reply was `200`.
async fn deliver(app: axum::Router, ids: &[String]) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();
    for round in 0..2 {
        for id in ids {
            let body = event(id);
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
            let response = client
                .post(format!("http://{addr}/webhooks"))
                .header(
                    "x-service-signature",
                    sign(body.as_bytes(), &Secret::new(SECRET).unwrap(), now),
                )
                .body(body)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            assert_eq!(
                (status, response.text().await.unwrap().as_str()),
                (200, r#"{"received":true}"#),
                "delivery {round} of {id}"
            );
        }
    }
    server.abort();
}

fn receiver() -> Receiver {
    Receiver::builder()
        .secret(SECRET)
        .namespace(unique("typed"))
        .build()
        .unwrap()
}

/// Waits until `count` reports `expected`, then a little more for strays.
async fn credited<F, Fut>(expected: i64, mut count: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = i64>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    while count().await < expected {
        assert!(Instant::now() < deadline, "the events were not credited in time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(count().await, expected, "an event was credited more than once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_runs_on_the_apps_own_pg_pool() {
    // A database of its own: the probe's table is the app's.
    let url = payhook_test_support::fresh_postgres_database("payhook_typed").await;
    let app_pool = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::query("CREATE TABLE typed_pool_credits (event_id TEXT NOT NULL)")
        .execute(&app_pool)
        .await
        .unwrap();

    let app = probe_pg(url, receiver()).await.expect("the probe builds");
    let ids: Vec<String> = (0..3).map(|n| unique(&format!("evt_pg{n}"))).collect();
    deliver(app, &ids).await;
    credited(3, || async {
        sqlx::query_scalar!("SELECT COUNT(*) FROM typed_pool_credits")
            .fetch_one(&app_pool)
            .await
            .unwrap()
            .unwrap_or(0)
    })
    .await;
    let credited: Vec<String> =
        sqlx::query_scalar!("SELECT event_id FROM typed_pool_credits ORDER BY event_id")
            .fetch_all(&app_pool)
            .await
            .unwrap();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(credited, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_runs_on_the_apps_own_sqlite_pool() {
    let dir = std::env::temp_dir().join(unique("payhook-typed-pool"));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.join("app.db").display());
    let app_pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("CREATE TABLE typed_pool_credits (event_id TEXT NOT NULL)")
        .execute(&app_pool)
        .await
        .unwrap();

    let app = probe_sqlite(url, receiver()).await.expect("the probe builds");
    let ids: Vec<String> = (0..3).map(|n| unique(&format!("evt_sq{n}"))).collect();
    deliver(app, &ids).await;
    credited(3, || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM typed_pool_credits")
            .fetch_one(&app_pool)
            .await
            .unwrap()
    })
    .await;
    let mut credited: Vec<String> = sqlx::query_scalar("SELECT event_id FROM typed_pool_credits")
        .fetch_all(&app_pool)
        .await
        .unwrap();
    credited.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(credited, expected);
    std::fs::remove_dir_all(&dir).unwrap();
}
