//! What the receiver records through the `metrics` facade, read back the way a
//! scraper reads it: from a Prometheus recorder's text rendering.
//!
//! One test in this binary (the others are in `tests/integration/`), so the
//! process-wide recorder sees only its deliveries.
#![cfg(feature = "testing")]

use std::time::Duration;

use http::HeaderMap;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use payhook_core::adapter::{HandlerOutcome, ReceiveOutcome};
use payhook_core::sender::{unix_now, EventBuilder, SignedDelivery};
use payhook_core::store::{Claim, ClaimToken, Completion, Store};
use payhook_core::testing::FailingStore;
use payhook_core::{MemoryStore, Receiver, Reply, StoreError};
use payhook_test_support::prometheus_samples as samples;

const SECRET: &str = "whsec_metrics";

fn headers(signature: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("x-service-signature", signature.parse().unwrap());
    headers
}

fn count(text: &str, name: &str, labels: &str) -> f64 {
    samples(text, name).get(labels).copied().unwrap_or(0.0)
}

/// A memory store whose later steps can be made to fail, like a Redis that
/// goes away between the claim and the settle.
struct SwitchableStore {
    inner: MemoryStore,
    settle_fails: bool,
    renew_fails: bool,
}

impl Store for SwitchableStore {
    async fn claim(&self, ns: &str, id: &str, lease: Duration) -> Result<Claim, StoreError> {
        self.inner.claim(ns, id, lease).await
    }
    async fn renew(&self, ns: &str, id: &str, t: ClaimToken, l: Duration) -> Result<bool, StoreError> {
        if self.renew_fails {
            return Ok(false);
        }
        self.inner.renew(ns, id, t, l).await
    }
    async fn complete(
        &self,
        ns: &str,
        id: &str,
        t: ClaimToken,
        r: Duration,
    ) -> Result<Completion, StoreError> {
        if self.settle_fails {
            return Err(StoreError::new("connection reset"));
        }
        self.inner.complete(ns, id, t, r).await
    }
    async fn release(&self, ns: &str, id: &str, t: ClaimToken) -> Result<bool, StoreError> {
        if self.settle_fails {
            return Err(StoreError::new("connection reset"));
        }
        self.inner.release(ns, id, t).await
    }
}

fn install() -> PrometheusHandle {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");
    handle
}

async fn deliver(receiver: &Receiver, signed: &SignedDelivery) -> ReceiveOutcome {
    receiver
        .receive(&headers(&signed.signature), signed.body.clone())
        .await
}

#[tokio::test]
async fn every_outcome_is_counted_once_with_its_label() {
    let prometheus = install();
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let new = |event: EventBuilder| SignedDelivery::now(event.to_json(), SECRET).unwrap();

    // Two events handled, one of them delivered again (duplicate).
    let paid = new(EventBuilder::payment_intent_succeeded());
    for signed in [&paid, &new(EventBuilder::other("customer.created"))] {
        let ReceiveOutcome::Deliver(delivery) = deliver(&receiver, signed).await else {
            panic!("not delivered")
        };
        tokio::time::sleep(Duration::from_millis(20)).await; // the handler's work
        delivery.into_claim().settle(http::StatusCode::OK).await;
    }
    assert!(matches!(deliver(&receiver, &paid).await, ReceiveOutcome::Respond(r) if r == Reply::received()));

    // One in flight while another delivery of it arrives; then its handler fails.
    let busy = new(EventBuilder::payment_intent_failed());
    let ReceiveOutcome::Deliver(first) = deliver(&receiver, &busy).await else {
        panic!("not delivered")
    };
    assert!(matches!(deliver(&receiver, &busy).await, ReceiveOutcome::Respond(r) if r.status() == 409));
    first.into_claim().settle(HandlerOutcome::Failed).await;
    // A handler that panicked or was cancelled: the guard is dropped unsettled.
    let ReceiveOutcome::Deliver(again) = deliver(&receiver, &busy).await else {
        panic!("not delivered after release")
    };
    drop(again);

    // Rejections, each with its reason.
    let body = EventBuilder::payment_intent_succeeded().to_json();
    let forged = SignedDelivery::now(body.clone(), "whsec_forger").unwrap();
    let stale = SignedDelivery::at(body.clone(), SECRET, unix_now() - 3600).unwrap();
    let not_an_event = SignedDelivery::now("[]", SECRET).unwrap();
    for signed in [&forged, &forged, &stale, &not_an_event] {
        assert!(matches!(deliver(&receiver, signed).await, ReceiveOutcome::Respond(r) if r.status() == 400));
    }
    let missing = receiver.receive(&HeaderMap::new(), body.clone().into()).await;
    assert!(matches!(missing, ReceiveOutcome::Respond(r) if r.status() == 400));

    // Refused by the source-IP allowlist, before any body: two strangers, and
    // a trusted proxy forwarding a malformed hop. An allowed source is not counted.
    let guarded = Receiver::builder()
        .secret(SECRET)
        .allowed_networks(["198.51.100.0/24"])
        .trusted_proxies(["10.0.0.0/8"])
        .build()
        .unwrap();
    let mut forwarded = HeaderMap::new();
    forwarded.insert("x-forwarded-for", "garbage".parse().unwrap());
    for (peer, headers) in [
        ("192.0.2.1", HeaderMap::new()),
        ("::1", HeaderMap::new()),
        ("10.0.0.2", forwarded),
    ] {
        let refused = guarded
            .check_source(Some(peer.parse().unwrap()), &headers, "")
            .unwrap_err();
        assert_eq!(refused.status(), 403);
    }
    assert!(guarded
        .check_source(Some("198.51.100.9".parse().unwrap()), &HeaderMap::new(), "")
        .is_ok());

    // The store down at the claim: 503.
    let down = Receiver::builder()
        .secret(SECRET)
        .store(FailingStore::down())
        .namespace("down")
        .build()
        .unwrap();
    assert!(
        matches!(deliver(&down, &new(EventBuilder::payment_intent_succeeded())).await, ReceiveOutcome::Respond(r) if r.status() == 503)
    );

    // The store gone after the claim: completion still acknowledged, release logged.
    let flaky = Receiver::builder()
        .secret(SECRET)
        .store(SwitchableStore {
            inner: MemoryStore::new(),
            settle_fails: true,
            renew_fails: false,
        })
        .namespace("flaky")
        .build()
        .unwrap();
    let ReceiveOutcome::Deliver(done) = deliver(&flaky, &new(EventBuilder::payment_intent_succeeded())).await
    else {
        panic!("not delivered")
    };
    done.into_claim().settle(http::StatusCode::OK).await;
    let ReceiveOutcome::Deliver(failed) =
        deliver(&flaky, &new(EventBuilder::payment_intent_succeeded())).await
    else {
        panic!("not delivered")
    };
    failed.into_claim().settle(HandlerOutcome::Failed).await;

    // A lease lost: the renewal is refused, then so is the completion; counted once.
    let losing = Receiver::builder()
        .secret(SECRET)
        .store(SwitchableStore {
            inner: MemoryStore::new(),
            settle_fails: false,
            renew_fails: true,
        })
        .namespace("losing")
        .lease(Duration::from_secs(1))
        .build()
        .unwrap();
    let slow = new(EventBuilder::payment_intent_succeeded());
    let ReceiveOutcome::Deliver(late) = deliver(&losing, &slow).await else {
        panic!("not delivered")
    };
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let ReceiveOutcome::Deliver(takeover) = deliver(&losing, &slow).await else {
        panic!("the expired claim was not handed on")
    };
    late.into_claim().settle(http::StatusCode::OK).await;
    takeover.into_claim().settle(http::StatusCode::OK).await;

    let text = prometheus.render();
    let deliveries = |labels: &str| count(&text, "payhook_deliveries_total", labels);
    // 2 + 1 duplicate, 1 + 1 (409) + 1 again, 1 (down), 2 (flaky), 2 (losing).
    assert_eq!(deliveries(r#"outcome="verified""#), 11.0, "{text}");
    assert_eq!(deliveries(r#"outcome="handled""#), 5.0, "{text}");
    assert_eq!(deliveries(r#"outcome="duplicate""#), 1.0, "{text}");
    assert_eq!(deliveries(r#"outcome="in_flight""#), 1.0, "{text}");
    assert_eq!(deliveries(r#"outcome="handler_failed""#), 3.0, "{text}");
    assert_eq!(deliveries(r#"outcome="store_error""#), 1.0, "{text}");
    assert_eq!(
        deliveries(r#"outcome="rejected",reason="signature_mismatch""#),
        2.0,
        "{text}"
    );
    assert_eq!(
        deliveries(r#"outcome="rejected",reason="timestamp_too_old""#),
        1.0,
        "{text}"
    );
    assert_eq!(
        deliveries(r#"outcome="rejected",reason="invalid_payload""#),
        1.0,
        "{text}"
    );
    assert_eq!(
        deliveries(r#"outcome="rejected",reason="missing_header""#),
        1.0,
        "{text}"
    );
    assert_eq!(
        deliveries(r#"outcome="rejected",reason="source_not_allowed""#),
        3.0,
        "{text}"
    );
    assert_eq!(samples(&text, "payhook_deliveries_total").len(), 11, "{text}");

    let handler = |name: &str, labels: &str| count(&text, name, labels);
    assert_eq!(
        handler("payhook_handler_seconds_count", r#"result="handled""#),
        5.0,
        "{text}"
    );
    assert_eq!(
        handler("payhook_handler_seconds_count", r#"result="failed""#),
        3.0,
        "{text}"
    );
    // The two 20 ms handlers and the 1.3 s one, at least.
    assert!(
        handler("payhook_handler_seconds_sum", r#"result="handled""#) >= 1.34,
        "{text}"
    );

    let store_errors = |labels: &str| count(&text, "payhook_store_errors_total", labels);
    assert_eq!(store_errors(r#"operation="complete""#), 1.0, "{text}");
    assert_eq!(store_errors(r#"operation="release""#), 1.0, "{text}");
    assert_eq!(count(&text, "payhook_leases_lost_total", ""), 1.0, "{text}");
    // Descriptions reach the exporter.
    assert!(
        text.contains("# HELP payhook_deliveries_total Webhook deliveries by outcome"),
        "{text}"
    );
}
