//! The rows the queue passes between intake, workers and the database:
//! crate-internal, never shown to a user.

use crate::model::{AttemptOutcome, Source};

/// The columns ingest writes.
#[derive(Debug, Clone)]
pub struct NewRow {
    pub(crate) event_id: String,
    pub(crate) event_type: String,
    pub(crate) intent_id: Option<String>,
    pub(crate) created: i64,
    pub(crate) body: String,
    pub(crate) received_at: i64,
    /// The delivery's W3C `traceparent` (feature `otel`), or `None`.
    pub(crate) trace_context: Option<String>,
}

/// What a later copy of a stored event is compared with: the stored body,
/// where it came from, and when a delivery of a reconciled one arrived.
#[derive(Debug, Clone)]
pub struct StoredCopy {
    pub(crate) body: String,
    pub(crate) source: Source,
    pub(crate) delivered_at: Option<i64>,
}

/// An offered event the inbox could not take, as the refused events record
/// keeps it: one row per `key` (its id when one could be read, else its
/// reason), the id and reason bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedRow {
    pub(crate) key: String,
    pub(crate) event_id: Option<String>,
    pub(crate) reason: String,
    pub(crate) bytes: i64,
}

#[cfg(feature = "reconcile")]
impl RefusedRow {
    /// The row of an event refused for `reason`, with its id if it had one.
    pub(crate) fn new(event_id: Option<&str>, reason: &str, bytes: usize) -> Self {
        let event_id = event_id.map(|id| bounded(id, crate::model::MAX_ID_BYTES));
        let reason = bounded(reason, 1024);
        let key = match &event_id {
            Some(id) => format!("id:{id}"),
            None => format!("reason:{reason}"),
        };
        Self {
            key,
            event_id,
            reason,
            bytes: i64::try_from(bytes).unwrap_or(i64::MAX),
        }
    }
}

/// `text` cut to at most `limit` bytes on a character boundary, ending in
/// `…` when cut, its NUL characters (which PostgreSQL's text cannot hold)
/// replaced by U+FFFD.
#[cfg(feature = "reconcile")]
fn bounded(text: &str, limit: usize) -> String {
    payhook_core::untrusted::cut(&text.replace('\0', "\u{FFFD}"), limit)
}

/// A claimed row.
#[derive(Debug)]
pub struct Claimed {
    pub(crate) arrival: i64,
    pub(crate) event_id: String,
    pub(crate) body: String,
    pub(crate) attempts: i64,
    pub(crate) token: i64,
    /// The `traceparent` stored with the event, which its attempts continue.
    pub(crate) trace_context: Option<String>,
    /// Whether a delivery or the reconciler stored it.
    pub(crate) source: Source,
    /// 0 for most events; 1 when taken back uncounted from a process that
    /// died or hung holding it: its attempt is counted by a start mark
    /// before its handler runs; 2 when such a counted attempt started (and,
    /// claimed again, was cut short: a repeat suspect, which runs alone).
    /// See the queue's and the worker's docs.
    pub(crate) suspect: i64,
}

/// One attempt at a claimed event, as the writes that end it name it: the
/// row, the claim's lease token, the attempt's number and when it started.
/// The claim counted nothing: the number and start time are written with the
/// attempt's end (the done mark or the failure).
#[derive(Debug, Clone, Copy)]
pub struct ClaimedAttempt {
    pub(crate) arrival: i64,
    pub(crate) token: i64,
    pub(crate) number: i64,
    pub(crate) started_at: i64,
}

/// How a failed attempt ends: dead (its last), or due again at `due` (for a
/// dead event, when it died), at `ended_at`, with its error.
#[derive(Debug, Clone, Copy)]
pub struct Failure<'a> {
    pub(crate) dead: bool,
    pub(crate) due: i64,
    pub(crate) ended_at: i64,
    pub(crate) message: &'a str,
}

/// What one claim statement did.
#[derive(Debug, Default)]
pub struct ClaimResult {
    pub(crate) claimed: Vec<Claimed>,
    /// Events whose lease ran out on their last attempt, now dead: (id, attempts).
    pub(crate) died: Vec<(String, i64)>,
}

/// The parameters of one claim.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) now: i64,
    pub(crate) lease_until: i64,
    pub(crate) token: i64,
    pub(crate) limit: i64,
    /// How many of `limit` the handlers free now would start at once: a
    /// PostgreSQL claim that finds fewer in the first due events reads the
    /// whole queue (see the queue's module docs, "The claim's window").
    pub(crate) needed: i64,
    /// Put events whose lease ran out back in the queue first (or make them
    /// dead when that was their last attempt, out of this many).
    pub(crate) requeue: Option<u32>,
}

/// One ended attempt, as the worker records it.
#[derive(Debug)]
pub struct AttemptRecord {
    pub(crate) arrival: i64,
    pub(crate) attempt: i64,
    pub(crate) started_at: i64,
    pub(crate) duration_ms: i64,
    pub(crate) outcome: AttemptOutcome,
    pub(crate) error: Option<String>,
}
