//! The inbox's metrics, through the [`metrics`] facade: install any exporter
//! (Prometheus, StatsD, …) in the app and they appear there. Every metric has a
//! `namespace` label.
//!
//! | name | kind | what |
//! |---|---|---|
//! | `payhook_inbox_ingested_total` | counter | new events stored |
//! | `payhook_inbox_duplicates_total` | counter | deliveries of events already stored |
//! | `payhook_inbox_differing_duplicates_total` | counter | of those, the ones whose `type` or `data` differed from the stored event (acknowledged, the first body kept; [`Admin::differing_copies`](crate::admin::Admin::differing_copies)) |
//! | `payhook_inbox_processed_total` | counter | events whose handler succeeded and whose mark committed |
//! | `payhook_inbox_failed_total` | counter | failed attempts (error, panic, lost lease) |
//! | `payhook_inbox_dead_total` | counter | events that used their last attempt |
//! | `payhook_inbox_claims_total` | counter | claim transactions run by the workers (those that found nothing included) |
//! | `payhook_inbox_claimed_total` | counter | events taken by those claims: ÷ claims, the claim batch size |
//! | `payhook_inbox_pending` | gauge | events waiting (pending or running) |
//! | `payhook_inbox_oldest_pending_age_seconds` | gauge | age of the oldest waiting event |
//! | `payhook_inbox_paused_types` | gauge | event types paused ([`Admin::pause`](crate::admin::Admin::pause)) |
//! | `payhook_inbox_paused_pending` | gauge | events of paused types waiting (also counted in `payhook_inbox_pending`) |
//! | `payhook_inbox_handler_seconds` | histogram | time in the handler, commit included |
//! | `payhook_inbox_reconciled_total` | counter | events the reconciler stored because no delivery of them arrived, by `type` (feature `reconcile`): each one is a missed delivery; `type` is the catalogue's name, or `other` for a type outside it |
//! | `payhook_inbox_reconcile_requests_total` | counter | requests to the service's events list |
//! | `payhook_inbox_reconcile_failures_total` | counter | passes that failed, by `reason`: `unauthorized` (the reconciler stopped), `throttled`, `unreachable`, `bad_reply`, `broken_list` (a cursor came back, or the events stopped moving back in time), `database` |
//! | `payhook_inbox_reconcile_last_success_timestamp_seconds` | gauge | when the last pass reached its end (Unix seconds) |
//! | `payhook_inbox_reconcile_stopped` | gauge | 1 once the service refused the API key and the reconciler stopped |
//! | `payhook_inbox_database_errors_total` | counter | database failures, by `operation`: `ingest` (a delivery answered `503` because it could not be stored), `claim` (a worker's claim failed) |
//!
//! The counters of a namespace are exported at 0 from the moment its inbox is
//! built, so a rule such as `increase(payhook_inbox_dead_total[15m]) > 0` sees
//! the first dead event after a restart (a series that first appears at 1
//! shows no increase). The gauges are refreshed every 5 seconds by the
//! workers, busy or not. `docs/prometheus/alerts.yml` holds alert rules built
//! on these (`docs/guide/production.md`, "Alerting").

/// New events stored.
pub const INGESTED: &str = "payhook_inbox_ingested_total";
/// Deliveries of events already stored.
pub const DUPLICATES: &str = "payhook_inbox_duplicates_total";
/// Duplicate deliveries whose content (`type` or `data`) differed from the
/// stored event; also counted in [`DUPLICATES`].
pub const DIFFERING_DUPLICATES: &str = "payhook_inbox_differing_duplicates_total";
/// Events processed (handler succeeded, mark committed).
pub const PROCESSED: &str = "payhook_inbox_processed_total";
/// Failed attempts.
pub const FAILED: &str = "payhook_inbox_failed_total";
/// Events that became dead.
pub const DEAD: &str = "payhook_inbox_dead_total";
/// Claim transactions run by the workers, those that found nothing included.
pub const CLAIMS: &str = "payhook_inbox_claims_total";
/// Events taken by claims (an event claimed again after a failure counts
/// again); divided by [`CLAIMS`], the average claim batch.
pub const CLAIMED: &str = "payhook_inbox_claimed_total";
/// Events waiting to be processed.
pub const PENDING: &str = "payhook_inbox_pending";
/// Age of the oldest waiting event, in seconds.
pub const OLDEST_PENDING_AGE: &str = "payhook_inbox_oldest_pending_age_seconds";
/// Event types paused.
pub const PAUSED_TYPES: &str = "payhook_inbox_paused_types";
/// Events of paused types waiting for their type to be resumed.
pub const PAUSED_PENDING: &str = "payhook_inbox_paused_pending";
/// Handler time, in seconds.
pub const HANDLER_SECONDS: &str = "payhook_inbox_handler_seconds";
/// Events the reconciler stored, by `type`.
pub const RECONCILED: &str = "payhook_inbox_reconciled_total";
/// Requests to the service's events list.
pub const RECONCILE_REQUESTS: &str = "payhook_inbox_reconcile_requests_total";
/// Reconciliation passes that failed, by `reason`.
pub const RECONCILE_FAILURES: &str = "payhook_inbox_reconcile_failures_total";
/// When the last reconciliation pass reached its end, Unix seconds.
pub const RECONCILE_LAST_SUCCESS: &str = "payhook_inbox_reconcile_last_success_timestamp_seconds";
/// 1 once the reconciler stopped because the service refused the API key.
pub const RECONCILE_STOPPED: &str = "payhook_inbox_reconcile_stopped";
/// Counter: events of the service's events list the reconciler could not
/// take (they do not parse, are longer than a delivery may be, or cannot be
/// stored), each recorded and the rest of its page stored: `{namespace}`.
pub const RECONCILE_REFUSED: &str = "payhook_inbox_reconcile_refused_total";
/// Database failures, by `operation` ([`INGEST`], [`CLAIM`]).
pub const DATABASE_ERRORS: &str = "payhook_inbox_database_errors_total";
/// The `operation` of a delivery answered `503` because it could not be stored.
pub const INGEST: &str = "ingest";
/// The `operation` of a failed claim by the workers.
pub const CLAIM: &str = "claim";

/// Exports every counter of `namespace` at 0, so the first increase after a
/// start is seen by rate and increase rules.
pub(crate) fn register(namespace: &str) {
    for name in [
        INGESTED,
        DUPLICATES,
        DIFFERING_DUPLICATES,
        PROCESSED,
        FAILED,
        DEAD,
        CLAIMS,
        CLAIMED,
    ] {
        metrics::counter!(name, "namespace" => namespace.to_owned()).increment(0);
    }
    for operation in [INGEST, CLAIM] {
        metrics::counter!(DATABASE_ERRORS, "namespace" => namespace.to_owned(), "operation" => operation)
            .increment(0);
    }
}

pub(crate) fn database_error(namespace: String, operation: &'static str) {
    metrics::counter!(DATABASE_ERRORS, "namespace" => namespace, "operation" => operation).increment(1);
}

pub(crate) fn ingested(namespace: String) {
    metrics::counter!(INGESTED, "namespace" => namespace).increment(1);
}

pub(crate) fn duplicate(namespace: String) {
    metrics::counter!(DUPLICATES, "namespace" => namespace).increment(1);
}

pub(crate) fn differing_duplicate(namespace: String) {
    metrics::counter!(DIFFERING_DUPLICATES, "namespace" => namespace).increment(1);
}

pub(crate) fn claim(namespace: String, claimed: usize) {
    metrics::counter!(CLAIMED, "namespace" => namespace.clone())
        .increment(u64::try_from(claimed).unwrap_or(u64::MAX));
    metrics::counter!(CLAIMS, "namespace" => namespace).increment(1);
}

pub(crate) fn processed(namespace: String, seconds: f64) {
    metrics::histogram!(HANDLER_SECONDS, "namespace" => namespace.clone()).record(seconds);
    metrics::counter!(PROCESSED, "namespace" => namespace).increment(1);
}

pub(crate) fn failed(namespace: String, seconds: f64, dead: bool) {
    metrics::histogram!(HANDLER_SECONDS, "namespace" => namespace.clone()).record(seconds);
    if dead {
        metrics::counter!(DEAD, "namespace" => namespace.clone()).increment(1);
    }
    metrics::counter!(FAILED, "namespace" => namespace).increment(1);
}

pub(crate) fn depth(namespace: String, pending: i64, oldest_age_seconds: f64) {
    // Gauges are f64; a depth beyond 2^53 is not a concern.
    #[allow(clippy::cast_precision_loss)]
    let pending = pending as f64;
    metrics::gauge!(PENDING, "namespace" => namespace.clone()).set(pending);
    metrics::gauge!(OLDEST_PENDING_AGE, "namespace" => namespace).set(oldest_age_seconds);
}

pub(crate) fn paused(namespace: String, paused: &[crate::model::PausedType]) {
    let waiting: i64 = paused.iter().map(|paused| paused.waiting).sum();
    // Gauges are f64; counts beyond 2^53 are not a concern.
    #[allow(clippy::cast_precision_loss)]
    let (types, waiting) = (paused.len() as f64, waiting as f64);
    metrics::gauge!(PAUSED_TYPES, "namespace" => namespace.clone()).set(types);
    metrics::gauge!(PAUSED_PENDING, "namespace" => namespace).set(waiting);
}
