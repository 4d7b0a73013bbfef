//! Deliveries to the inbox are counted by the receiver's one intake, like
//! inline deliveries: `payhook_deliveries_total` counts the rejected ones by
//! reason (the inbox's own refusals included) and the verified ones, and the
//! inbox counts what it stored, its claims and the events they took, and the
//! deliveries it could not store. Read back as a scraper reads them.
//!
//! One test in this binary (the others are in `tests/integration/`), so the
//! process-wide recorder sees only its deliveries.

use bytes::Bytes;
use metrics_exporter_prometheus::PrometheusBuilder;
use payhook_core::sender::SignedDelivery;
use payhook_core::Receiver;
use payhook_inbox::Inbox;
use payhook_test_support::prometheus_samples as samples;

const SECRET: &str = "whsec_inbox_metrics";

/// An inbox metric of the default namespace, 0 when absent.
fn inbox_count(text: &str, name: &str) -> f64 {
    samples(text, name)
        .get(r#"namespace="payhook""#)
        .copied()
        .unwrap_or(0.0)
}

fn signed(body: &Bytes) -> http::HeaderMap {
    SignedDelivery::now(body.clone(), SECRET).unwrap().headers()
}

fn event(id: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","created":1,"data":{{"object":{{"id":"pi_1","object":"payment_intent","amount":1,"currency":"eth","status":"succeeded","created":1}}}}}}"#
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_deliveries_are_counted_by_the_one_intake() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let prometheus = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");

    let dir = std::env::temp_dir().join(format!("payhook-inbox-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::connect(receiver, &format!("sqlite://{}", dir.join("inbox.db").display()))
        .await
        .unwrap();

    // Every counter of the namespace is exported at 0 from the start, so
    // rate and increase rules see its first increment.
    let text = prometheus.render();
    for name in [
        "payhook_inbox_ingested_total",
        "payhook_inbox_processed_total",
        "payhook_inbox_failed_total",
        "payhook_inbox_dead_total",
    ] {
        assert_eq!(
            samples(&text, name).get(r#"namespace="payhook""#),
            Some(&0.0),
            "{name}: {text}"
        );
    }
    let errors = samples(&text, "payhook_inbox_database_errors_total");
    assert_eq!(
        errors.get(r#"namespace="payhook",operation="ingest""#),
        Some(&0.0),
        "{text}"
    );
    assert_eq!(
        errors.get(r#"namespace="payhook",operation="claim""#),
        Some(&0.0),
        "{text}"
    );

    // Unsigned, wrongly signed: rejected before anything is stored.
    let good = event("evt_counted");
    assert_eq!(
        inbox
            .ingest(&http::HeaderMap::new(), good.clone())
            .await
            .status()
            .as_u16(),
        400
    );
    assert_eq!(
        inbox
            .ingest(&signed(&event("evt_other")), good.clone())
            .await
            .status()
            .as_u16(),
        400
    );
    // Signed, but what the inbox cannot store: verified, then rejected.
    let poison = event("evt_nul\\u0000");
    assert_eq!(
        inbox.ingest(&signed(&poison), poison).await.status().as_u16(),
        400
    );
    // Stored, then a repeat.
    assert_eq!(
        inbox.ingest(&signed(&good), good.clone()).await.status().as_u16(),
        200
    );
    assert_eq!(inbox.ingest(&signed(&good), good).await.status().as_u16(), 200);

    let text = prometheus.render();
    let deliveries = samples(&text, "payhook_deliveries_total");
    let count = |labels: &str| deliveries.get(labels).copied().unwrap_or(0.0);
    assert_eq!(
        count(r#"outcome="rejected",reason="missing_header""#),
        1.0,
        "{text}"
    );
    assert_eq!(
        count(r#"outcome="rejected",reason="signature_mismatch""#),
        1.0,
        "{text}"
    );
    assert_eq!(
        count(r#"outcome="rejected",reason="invalid_payload""#),
        1.0,
        "{text}"
    );
    assert_eq!(count(r#"outcome="verified""#), 3.0, "{text}");
    assert_eq!(inbox_count(&text, "payhook_inbox_ingested_total"), 1.0, "{text}");
    assert_eq!(
        inbox_count(&text, "payhook_inbox_duplicates_total"),
        1.0,
        "{text}"
    );
    assert_eq!(
        inbox_count(&text, "payhook_inbox_claims_total"),
        0.0,
        "no worker ran yet: {text}"
    );

    // Four more stored before the workers start: their first claim takes all
    // five at once, and each claimed event is counted once.
    for id in ["evt_batch_1", "evt_batch_2", "evt_batch_3", "evt_batch_4"] {
        let body = event(id);
        assert_eq!(inbox.ingest(&signed(&body), body).await.status().as_u16(), 200);
    }
    let workers = inbox.start(|_job: payhook_inbox::Job| async { Ok(()) });
    inbox.wait_idle(std::time::Duration::from_secs(30)).await.unwrap();
    workers.shutdown().await;
    let text = prometheus.render();
    assert_eq!(inbox_count(&text, "payhook_inbox_processed_total"), 5.0, "{text}");
    assert_eq!(inbox_count(&text, "payhook_inbox_claimed_total"), 5.0, "{text}");
    let claims = inbox_count(&text, "payhook_inbox_claims_total");
    assert!(claims >= 1.0, "{text}");

    // The database file is gone: a delivery is answered 503 and counted as a
    // database error of ingest.
    std::fs::remove_dir_all(&dir).unwrap();
    let late = event("evt_late");
    assert_eq!(inbox.ingest(&signed(&late), late).await.status().as_u16(), 503);
    let text = prometheus.render();
    let errors = samples(&text, "payhook_inbox_database_errors_total");
    assert_eq!(
        errors.get(r#"namespace="payhook",operation="ingest""#),
        Some(&1.0),
        "{text}"
    );
}
