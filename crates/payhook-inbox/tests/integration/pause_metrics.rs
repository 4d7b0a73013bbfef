//! The paused types' gauges, read back as a scraper reads them: the workers
//! report how many types are paused and how many of their events wait.
//!
//! Read from the process-wide recorder ([`crate::telemetry`]), by the test's
//! own namespace.

use std::time::{Duration, Instant};

use bytes::Bytes;
use payhook_core::sender::SignedDelivery;
use payhook_core::Receiver;
use payhook_inbox::admin::Admin;
use payhook_inbox::metrics::{PAUSED_PENDING, PAUSED_TYPES};
use payhook_inbox::{Inbox, Job};
use payhook_test_support::unique;

use crate::telemetry::{namespace_sample as sample, telemetry};

const SECRET: &str = "whsec_pause_metrics";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_types_and_their_waiting_events_are_gauges() {
    let prometheus = &telemetry().prometheus;

    let dir = std::env::temp_dir().join(unique("payhook-pause-metrics"));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("inbox.db").display());
    let namespace = unique("paused-gauges");
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(namespace.clone())
        .poll_interval(Duration::from_millis(20))
        .connect(&url)
        .await
        .unwrap();
    Admin::of_inbox(&inbox)
        .pause("payment_intent.succeeded")
        .await
        .unwrap();
    for n in 0..3 {
        let body = Bytes::from(format!(
            r#"{{"id":"evt_gauge{n}","type":"payment_intent.succeeded","created":1,"data":{{"object":{{"id":"pi_{n}","object":"payment_intent","amount":1,"currency":"eth","status":"succeeded","created":1}}}}}}"#
        ));
        let delivery = SignedDelivery::now(body, SECRET).unwrap();
        let reply = inbox.ingest(&delivery.headers(), delivery.body).await;
        assert_eq!(reply.status().as_u16(), 200, "{}", reply.body());
    }
    // The workers report the depth (and the paused gauges) when they start.
    let workers = inbox.start(|_job: Job| async { Ok(()) });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = prometheus.render();
        let types = sample(&text, PAUSED_TYPES, &namespace);
        let pending = sample(&text, PAUSED_PENDING, &namespace);
        if (types, pending) == (Some(1.0), Some(3.0)) {
            break;
        }
        assert!(Instant::now() < deadline, "gauges {types:?} {pending:?}:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    workers.shutdown().await;
}
