//! What the receiver counts, through the [`metrics`](https://docs.rs/metrics)
//! crate's facade.
//!
//! Every delivery is counted once it is decided, whichever adapter received it,
//! so dashboards and alerts need no code in the app. Nothing is recorded until
//! the app installs a `metrics` recorder (for example
//! `metrics-exporter-prometheus`); without one, recording costs next to nothing.
//! Label values come from a fixed set — never from the request — so a sender
//! cannot blow up the number of series.
//!
//! | name | kind | labels | counts |
//! |---|---|---|---|
//! | `payhook_deliveries_total` | counter | `outcome="verified"` | signature and event valid: handed on to the dedupe store |
//! | | | `outcome="rejected"`, `reason` (below) | refused before the store: 400, 403, 408, 413 |
//! | | | `outcome="duplicate"` | the event was handled before: 200 without the handler |
//! | | | `outcome="in_flight"` | another delivery is handling the event: 409 |
//! | | | `outcome="store_error"` | the dedupe store could not be reached: 503 |
//! | | | `outcome="handled"` | the handler succeeded and the event was acknowledged |
//! | | | `outcome="handler_failed"` | the handler failed, panicked or was cancelled: the claim was released |
//! | `payhook_handler_seconds` | histogram | `result="handled"` or `"failed"` | seconds from handing the event to the handler until it settled |
//! | `payhook_store_errors_total` | counter | `operation="renew"`, `"complete"` or `"release"` | store failures after the claim (the claim's own are `outcome="store_error"`) |
//! | `payhook_leases_lost_total` | counter | | claims whose lease ran out while the handler ran (a renewal or the completion was refused), so the event may be handled twice; once per claim |
//! | `payhook_secret_reloads_total` | counter | `result="ok"` or `"failed"` | reloads of a [`SecretSet`](crate::SecretSet)'s file; a failed one keeps the secrets in force |
//!
//! `reason` is one of `missing_header`, `repeated_header`, `malformed_header`,
//! `no_signature`, `signature_mismatch`, `timestamp_too_old`,
//! `timestamp_in_future`, `invalid_payload`, `body_too_large`, `body_read`,
//! `body_timeout`, `source_not_allowed` (the source-IP allowlist refused the
//! client address, `403`, counted before the body is read),
//! `store_unavailable` or `in_flight` (see [`reason`]). [`reason`] names the
//! inbox's `503` `inbox_unavailable`; such a delivery was verified first, so it
//! is counted as `verified`, not as `rejected`.
//!
//! A delivery refused by the allowlist is counted as `rejected` only: it never
//! reaches `verified`.
//!
//! So `verified` = `duplicate` + `in_flight` + `store_error` + `handled` +
//! `handler_failed` + the deliveries whose handler is still running.
//!
//! ```
//! use payhook::metrics::{reason, DELIVERIES_TOTAL, HANDLER_SECONDS};
//! use payhook::Error;
//!
//! assert_eq!(DELIVERIES_TOTAL, "payhook_deliveries_total");
//! assert_eq!(HANDLER_SECONDS, "payhook_handler_seconds");
//! assert_eq!(reason(&Error::NoSignatureMatch), "signature_mismatch");
//! ```

use std::time::Duration;

use crate::error::Error;

/// Counter of deliveries by `outcome` (and `reason` for rejections).
pub const DELIVERIES_TOTAL: &str = "payhook_deliveries_total";
/// Histogram of handler time in seconds, by `result`.
pub const HANDLER_SECONDS: &str = "payhook_handler_seconds";
/// Counter of store failures after the claim, by `operation`.
pub const STORE_ERRORS_TOTAL: &str = "payhook_store_errors_total";
/// Counter of claims whose lease was lost while the handler ran.
pub const LEASES_LOST_TOTAL: &str = "payhook_leases_lost_total";
/// Counter of secret file reloads, by `result` (`ok`, `failed`).
pub const SECRET_RELOADS_TOTAL: &str = "payhook_secret_reloads_total";

/// Describes payhook's metrics (help text and units) to the installed
/// recorder, for exporters that show descriptions. Call it once after
/// installing the recorder; recording works without it.
pub fn describe() {
    metrics::describe_counter!(
        DELIVERIES_TOTAL,
        "Webhook deliveries by outcome (verified, rejected by reason, duplicate, in_flight, store_error, handled, handler_failed)"
    );
    metrics::describe_histogram!(
        HANDLER_SECONDS,
        metrics::Unit::Seconds,
        "Time from handing a verified event to the handler until its claim was settled"
    );
    metrics::describe_counter!(
        STORE_ERRORS_TOTAL,
        "Dedupe store failures while renewing, completing or releasing a claim"
    );
    metrics::describe_counter!(
        LEASES_LOST_TOTAL,
        "Claims whose lease ran out while the handler ran"
    );
    metrics::describe_counter!(
        SECRET_RELOADS_TOTAL,
        "Reloads of a secret file by result (ok, failed: the secrets in force stay)"
    );
}

/// The `reason` label of a rejected delivery: one fixed word per kind of error.
pub fn reason(error: &Error) -> &'static str {
    match error {
        Error::MissingHeader(_) => "missing_header",
        Error::RepeatedHeader(_) => "repeated_header",
        Error::MalformedHeader(_) | Error::InvalidHeader { .. } => "malformed_header",
        Error::NoSignature => "no_signature",
        Error::NoSignatureMatch => "signature_mismatch",
        Error::TimestampTooOld { .. } => "timestamp_too_old",
        Error::TimestampInFuture { .. } => "timestamp_in_future",
        Error::InvalidPayload(_) => "invalid_payload",
        Error::BodyTooLarge { .. } => "body_too_large",
        Error::BodyRead(_) => "body_read",
        Error::BodyTimeout(_) => "body_timeout",
        Error::SourceNotAllowed => "source_not_allowed",
        Error::InFlight(_) => "in_flight",
        Error::StoreUnavailable(_) => "store_unavailable",
        Error::InboxUnavailable(_) => "inbox_unavailable",
    }
}

fn delivery(outcome: &'static str) {
    metrics::counter!(DELIVERIES_TOTAL, "outcome" => outcome).increment(1);
}

pub(crate) fn verified() {
    delivery("verified");
}

pub(crate) fn rejected(error: &Error) {
    metrics::counter!(DELIVERIES_TOTAL, "outcome" => "rejected", "reason" => reason(error)).increment(1);
}

pub(crate) fn duplicate() {
    delivery("duplicate");
}

pub(crate) fn in_flight() {
    delivery("in_flight");
}

pub(crate) fn store_error() {
    delivery("store_error");
}

/// The handler succeeded (`handled`) or not; `elapsed` is its time.
pub(crate) fn settled(handled: bool, elapsed: Duration) {
    let (outcome, result) = if handled {
        ("handled", "handled")
    } else {
        ("handler_failed", "failed")
    };
    delivery(outcome);
    metrics::histogram!(HANDLER_SECONDS, "result" => result).record(elapsed.as_secs_f64());
}

pub(crate) fn store_failed(operation: &'static str) {
    metrics::counter!(STORE_ERRORS_TOTAL, "operation" => operation).increment(1);
}

pub(crate) fn lease_lost() {
    metrics::counter!(LEASES_LOST_TOTAL).increment(1);
}
