//! The reconciler's metrics (names in [`crate::metrics`]).

use crate::metrics::{
    RECONCILED, RECONCILE_FAILURES, RECONCILE_LAST_SUCCESS, RECONCILE_REQUESTS, RECONCILE_STOPPED,
};

/// The `reason` of a pass the service refused the key for.
pub(crate) const UNAUTHORIZED: &str = "unauthorized";
/// The `reason` of a pass the service answered `429` or `5xx`.
pub(crate) const THROTTLED: &str = "throttled";
/// The `reason` of a pass that got no reply.
pub(crate) const UNREACHABLE: &str = "unreachable";
/// The `reason` of a pass whose page was not a page of events.
pub(crate) const BAD_REPLY: &str = "bad_reply";
/// The `reason` of a pass whose events list would not end: a cursor came
/// back, or the events stopped moving back in time.
pub(crate) const BROKEN_LIST: &str = "broken_list";
/// The `reason` of a pass the inbox's database failed.
pub(crate) const DATABASE: &str = "database";

/// Exports the namespace's series at 0, so the first failure or stored
/// event after a start is seen by `increase` rules.
pub(crate) fn register(namespace: &str) {
    metrics::counter!(RECONCILE_REQUESTS, "namespace" => namespace.to_owned()).increment(0);
    for reason in [
        UNAUTHORIZED,
        THROTTLED,
        UNREACHABLE,
        BAD_REPLY,
        BROKEN_LIST,
        DATABASE,
    ] {
        metrics::counter!(RECONCILE_FAILURES, "namespace" => namespace.to_owned(), "reason" => reason)
            .increment(0);
    }
    metrics::gauge!(RECONCILE_STOPPED, "namespace" => namespace.to_owned()).set(0.0);
}

pub(crate) fn request(namespace: &str) {
    metrics::counter!(RECONCILE_REQUESTS, "namespace" => namespace.to_owned()).increment(1);
}

pub(crate) fn reconciled(namespace: &str, event_type: &str) {
    // The type is the event's, which the service sent: a label, escaped like
    // every value shown from a request.
    let event_type = payhook_core::untrusted::Untrusted::value(event_type).to_string();
    metrics::counter!(RECONCILED, "namespace" => namespace.to_owned(), "type" => event_type).increment(1);
}

#[allow(clippy::cast_precision_loss)]
pub(crate) fn succeeded(namespace: &str, now_ms: i64) {
    metrics::gauge!(RECONCILE_LAST_SUCCESS, "namespace" => namespace.to_owned()).set(now_ms as f64 / 1000.0);
}

pub(crate) fn failed(namespace: &str, reason: &'static str) {
    metrics::counter!(RECONCILE_FAILURES, "namespace" => namespace.to_owned(), "reason" => reason)
        .increment(1);
}

pub(crate) fn stopped(namespace: &str) {
    metrics::gauge!(RECONCILE_STOPPED, "namespace" => namespace.to_owned()).set(1.0);
}
