//! actix-web and PostgreSQL, with the inbox on the app's own pool
//! (`Inbox::from_pool`): the guide's test (`docs/guide/testing.md`, "Testing
//! inbox mode") run for real, with `wait_idle` waiting for its own namespace
//! only, and
//! `examples/actix_inbox_postgres.rs` as a process, each payment recorded once
//! however often it is delivered.
//!
//! PostgreSQL comes from `PAYHOOK_TEST_DATABASE_URL` (`.ci/start-postgres`);
//! the tests fail, never skip, when it is unset or unreachable.

use crate::example_process;

use std::time::Duration;

use actix_web::{test as actix_test, App};
use example_process::Example;
use payhook::actix::testing::SignedDeliveryExt;
use payhook::inbox::{HandlerError, Inbox, InboxError, Job};
use payhook::sender::{EventBuilder, SignedDelivery};
use payhook::Receiver;
use payhook_test_support::{fresh_postgres_database, postgres_url, unique};

const SECRET: &str = "whsec_actix_inbox_postgres";

/// The example's table, created the way it creates it.
const PAYMENTS_TABLE: &str = "CREATE TABLE IF NOT EXISTS payments_received \
     (event_id TEXT, payment_intent TEXT, status TEXT, amount NUMERIC(40, 0), currency TEXT)";

async fn pool(url: &str) -> sqlx::PgPool {
    sqlx::PgPool::connect(url)
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test PostgreSQL: {err}"))
}

/// The guide's handler.
async fn record(job: Job<sqlx::Postgres>) -> Result<(), HandlerError> {
    if let Some(intent) = job.event().payment_intent() {
        let mut tx = job.transaction().await?;
        sqlx::query("INSERT INTO payments_received (event_id, amount) VALUES ($1, $2::NUMERIC)")
            .bind(job.event().id())
            .bind(intent.amount.to_string())
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

async fn rows_of(pool: &sqlx::PgPool, event_id: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM payments_received WHERE event_id = $1")
        .bind(event_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[actix_web::test]
async fn the_readme_test_records_a_payment_once_and_waits_for_its_own_namespace_only() {
    let pool = pool(&postgres_url()).await;
    sqlx::query(PAYMENTS_TABLE).execute(&pool).await.unwrap();
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(unique("test_recorded_once"))
        .from_pool(pool.clone())
        .await
        .unwrap();
    let workers = inbox.start(record);
    let app =
        actix_test::init_service(App::new().route("/webhooks", payhook::actix::inbox_route(inbox.clone())))
            .await;

    // Another app on the same database, in its own namespace, whose event
    // waits: it has no workers.
    let other = Inbox::builder(Receiver::builder().secret(SECRET).build().unwrap())
        .namespace(unique("other_app"))
        .from_pool(pool.clone())
        .await
        .unwrap();
    let waiting = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), SECRET).unwrap();
    let other_app =
        actix_test::init_service(App::new().route("/webhooks", payhook::actix::inbox_route(other.clone())))
            .await;
    let request = waiting.to_test_request("/webhooks").to_request();
    assert_eq!(actix_test::call_service(&other_app, request).await.status(), 200);

    let id = unique("evt_recorded_once");
    let event = EventBuilder::payment_intent_succeeded().id(&id).amount(42_000);
    let delivery = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    for _ in 0..2 {
        let request = delivery.to_test_request("/webhooks").to_request();
        assert_eq!(actix_test::call_service(&app, request).await.status(), 200);
    }
    // The other namespace's waiting event does not hold this one up.
    inbox.wait_idle(Duration::from_secs(10)).await.unwrap();
    assert_eq!(rows_of(&pool, &id).await, 1);
    let amount: String = sqlx::query_scalar("SELECT amount::TEXT FROM payments_received WHERE event_id = $1")
        .bind(&id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(amount, "42000");
    // And it is waited for by its own inbox, which has no workers.
    match other.wait_idle(Duration::from_millis(300)).await {
        Err(InboxError::NotIdle(waiting)) => assert_eq!(waiting, 1),
        result => panic!("the other namespace has one waiting event: {result:?}"),
    }
    workers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_records_each_payment_once_on_the_apps_pool() {
    let url = fresh_postgres_database("payhook_actix_pg").await;
    let mut example = Example::start(
        "actix_inbox_postgres",
        &[("PAYHOOK_SECRET", SECRET), ("PAYHOOK_DATABASE_URL", &url)],
    );

    // 20 ETH in wei, above 2^64: kept exact in the app's NUMERIC column.
    let paid = EventBuilder::payment_intent_succeeded()
        .id(unique("evt_paid"))
        .amount(20_000_000_000_000_000_000)
        .currency("eth");
    let failed = EventBuilder::payment_intent_failed().id(unique("evt_failed"));
    let other = EventBuilder::other("customer.created").id(unique("evt_other"));
    let mut ids = Vec::new();
    for event in [&paid, &failed, &other] {
        let json = event.to_json();
        let id = serde_json::from_str::<serde_json::Value>(&json).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        // Each delivered twice, as a sender's retry would.
        for _ in 0..2 {
            let signed = SignedDelivery::now(json.clone(), SECRET).unwrap();
            assert_eq!(
                example.post(signed.body, &signed.signature).await,
                (200, r#"{"received":true}"#.to_owned())
            );
        }
        ids.push(id);
    }
    let handled = example.wait_for_lines(Duration::from_secs(20), 3, |line| line.starts_with("handled "));
    for id in &ids {
        assert_eq!(
            handled
                .iter()
                .filter(|line| line.split(' ').nth(1) == Some(id))
                .count(),
            1,
            "{handled:?}"
        );
    }

    let app = pool(&url).await;
    assert_eq!(rows_of(&app, &ids[0]).await, 1);
    assert_eq!(rows_of(&app, &ids[1]).await, 1);
    assert_eq!(rows_of(&app, &ids[2]).await, 0, "not a payment: no row");
    let (status, amount, currency): (String, String, String) =
        sqlx::query_as("SELECT status, amount::TEXT, currency FROM payments_received WHERE event_id = $1")
            .bind(&ids[0])
            .fetch_one(&app)
            .await
            .unwrap();
    assert_eq!(
        (status.as_str(), amount.as_str(), currency.as_str()),
        ("succeeded", "20000000000000000000", "eth")
    );
    app.close().await;
}

#[test]
fn the_example_refuses_to_start_without_a_database() {
    let output = example_process::command("actix_inbox_postgres", &[("PAYHOOK_SECRET", SECRET)])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("PAYHOOK_DATABASE_URL is required"), "{stderr}");
}
