//! The reconciler's metrics (names in [`crate::metrics`]).

use crate::metrics::{
    RECONCILED, RECONCILE_FAILURES, RECONCILE_LAST_SUCCESS, RECONCILE_REFUSED, RECONCILE_REQUESTS,
    RECONCILE_STOPPED,
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
    metrics::counter!(RECONCILE_REFUSED, "namespace" => namespace.to_owned()).increment(0);
}

/// A listed event refused (recorded, the rest of its page stored).
pub(crate) fn refused(namespace: &str) {
    metrics::counter!(RECONCILE_REFUSED, "namespace" => namespace.to_owned()).increment(1);
}

pub(crate) fn request(namespace: &str) {
    metrics::counter!(RECONCILE_REQUESTS, "namespace" => namespace.to_owned()).increment(1);
}

/// The `type` label of an event type outside the catalogue.
pub(crate) const OTHER_TYPE: &str = "other";

pub(crate) fn reconciled(namespace: &str, event_type: &str) {
    metrics::counter!(RECONCILED, "namespace" => namespace.to_owned(), "type" => type_label(event_type))
        .increment(1);
}

/// The `type` label: a type of the event catalogue by its name, any other
/// as [`OTHER_TYPE`], so a list sending a thousand made-up types makes one
/// series, not a thousand.
pub(crate) fn type_label(event_type: &str) -> &'static str {
    payhook_core::event::EventType::find(event_type)
        .and_then(|entry| {
            entry
                .names
                .iter()
                .find(|name| name.name == event_type)
                .map(|name| name.name)
        })
        .unwrap_or(OTHER_TYPE)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_type_label_is_a_catalogue_name_or_other() {
        assert_eq!(type_label("payment_intent.succeeded"), "payment_intent.succeeded");
        assert_eq!(
            type_label("payment_intent.payment_failed"),
            "payment_intent.payment_failed"
        );
        assert_eq!(type_label("made.up.type.1"), OTHER_TYPE);
        assert_eq!(type_label("payment_intent.succeeded\n"), OTHER_TYPE);
        assert_eq!(type_label(""), OTHER_TYPE);
    }
}
