//! Stored events as the operator's tools see them, the filters that select
//! them, and their attempts.

use std::time::Duration;

// The model's own names, unqualified (as the API listing shows them too).
use super::*;

/// The longest event id, event type and payment-intent id the inbox stores,
/// in bytes, on every backend (real ids are a few dozen bytes). A delivery with
/// a longer one is refused at intake with `400` naming the field.
pub const MAX_ID_BYTES: usize = 255;

/// Which events [`Admin::list`](crate::admin::Admin::list) returns; every field narrows.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only events in this state.
    pub state: Option<State>,
    /// Only events of this type.
    pub event_type: Option<String>,
    /// Only events received at least this long ago.
    pub older_than: Option<Duration>,
    /// Only events received at most this long ago.
    pub newer_than: Option<Duration>,
    /// Only events of this source: [`Source::Reconciled`] lists the events no
    /// delivery brought.
    pub source: Option<Source>,
    /// At most this many (newest first); `None` means 1000.
    pub limit: Option<u32>,
}

/// One stored event, as [`Admin::list`](crate::admin::Admin::list) and [`Admin::show`](crate::admin::Admin::show) report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// The event id.
    pub event_id: String,
    /// The event type.
    pub event_type: String,
    /// The payment intent it is about, if any.
    pub intent_id: Option<String>,
    /// Its state (one this version does not know fails the read: see
    /// [`State`]).
    pub state: State,
    /// Attempts so far.
    pub attempts: i64,
    /// The event's `created` (Unix seconds), or its arrival when it had none.
    pub created: i64,
    /// When it was received (Unix milliseconds).
    pub received_at: i64,
    /// When it is due (Unix milliseconds), for pending events; for a dead
    /// event, when it died (an event made dead by an earlier version keeps
    /// the retry time it had).
    pub due_at: i64,
    /// When the lease of a running event runs out (Unix milliseconds): if its
    /// worker stopped, the event is taken up again (or, after its last
    /// attempt, made dead) soon after.
    pub lease_until: Option<i64>,
    /// When the last attempt started (Unix milliseconds).
    pub last_attempt_at: Option<i64>,
    /// The last failure's text.
    pub last_error: Option<String>,
    /// When it was marked done (Unix milliseconds).
    pub done_at: Option<i64>,
    /// The raw body as received (only filled by [`Admin::show`](crate::admin::Admin::show)).
    pub body: Option<String>,
    /// Whether a delivery stored it or the reconciler did.
    pub source: Source,
    /// For an event the reconciler stored ([`Source::Reconciled`]): when a
    /// delivery of it arrived afterwards (Unix milliseconds), acknowledged
    /// as a duplicate; `None` while none has (and for a delivered event).
    pub delivered_at: Option<i64>,
}

impl StoredEvent {
    /// Where it came from, as the operator's tools show it (the SOURCE
    /// column): `delivered`, `reconciled` (no delivery of it has arrived:
    /// recovered by the reconciler), or `reconciled, delivered later` (the
    /// reconciler stored it first; a delivery arrived afterwards, at
    /// [`delivered_at`](Self::delivered_at)).
    ///
    /// ```
    /// use payhook::inbox::admin::{Source, State, StoredEvent};
    ///
    /// let mut event = StoredEvent {
    ///     event_id: "evt_1".to_owned(), event_type: "customer.created".to_owned(), intent_id: None,
    ///     state: State::Done, attempts: 1, created: 1, received_at: 1000, due_at: 1000,
    ///     lease_until: None, last_attempt_at: None, last_error: None, done_at: None, body: None,
    ///     source: Source::Reconciled, delivered_at: None,
    /// };
    /// assert_eq!(event.source_label(), "reconciled");
    /// event.delivered_at = Some(2000);
    /// assert_eq!(event.source_label(), "reconciled, delivered later");
    /// ```
    pub fn source_label(&self) -> &'static str {
        match (self.source, self.delivered_at) {
            (Source::Delivered, _) => "delivered",
            (Source::Reconciled, None) => "reconciled",
            (Source::Reconciled, Some(_)) => "reconciled, delivered later",
        }
    }

    /// Whether the reconciler recovered it: stored from the events list and
    /// no delivery of it has arrived since (the overview counts these apart,
    /// [`Stats::recovered`](crate::admin::Stats::recovered)).
    pub fn is_recovered(&self) -> bool {
        self.source == Source::Reconciled && self.delivered_at.is_none()
    }
}

/// One ended attempt of an event ([`Admin::attempts`](crate::admin::Admin::attempts)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Its number (1 for the first).
    pub attempt: i64,
    /// When it started (Unix milliseconds).
    pub started_at: i64,
    /// How long the handler and the done mark took.
    pub duration_ms: i64,
    /// `done`, `failed` (retried later), `dead` or `interrupted` (its process
    /// died or lost the lease) ([`AttemptOutcome`]).
    pub outcome: String,
    /// The failure's text.
    pub error: Option<String>,
}

/// Another event of the same payment intent ([`Admin::intent_events`](crate::admin::Admin::intent_events)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntentEvent {
    /// The event id.
    pub event_id: String,
    /// The event type.
    pub event_type: String,
    /// Its state (one this version does not know fails the read: see
    /// [`State`]).
    pub state: State,
    /// Its `created` (Unix seconds).
    pub created: i64,
}

/// Duplicate deliveries of an event whose content differed from the stored
/// one ([`Admin::differing_copies`](crate::admin::Admin::differing_copies)):
/// the same id with another `type` or `data`. Each was acknowledged like any
/// duplicate; the first body stays the event's, and is what its handler got.
/// A copy that differs only in how it was serialised (key order, spacing,
/// escapes, the envelope's own fields) is an ordinary duplicate, not one of
/// these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DifferingCopies {
    /// How many such copies arrived.
    pub copies: i64,
    /// When the first arrived (Unix milliseconds).
    pub first_at: i64,
    /// When the last arrived (Unix milliseconds).
    pub last_at: i64,
    /// The last one's raw body.
    pub last_body: String,
}

/// An event the inbox was offered and could not take
/// ([`Admin::refused`](crate::admin::Admin::refused)): a listed event of the
/// service's events list that does not parse as a delivery's body must, is
/// longer than a delivery's body may be, or cannot be stored (an id over
/// [`MAX_ID_BYTES`], a NUL). The rest of its page was stored. One record per
/// event, seen again on later passes.
///
/// Its texts came from the service: show them through the escaping rule
/// ([`Untrusted`](payhook_core::untrusted::Untrusted)); the reason is
/// bounded, the id at most [`MAX_ID_BYTES`] bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The event's id, when one could be read.
    pub event_id: Option<String>,
    /// Where it was offered from ([`Source::Reconciled`]: the events list).
    pub source: Source,
    /// Why it was refused.
    pub reason: String,
    /// Its length in bytes.
    pub bytes: i64,
    /// When it was first refused (Unix milliseconds).
    pub first_at: i64,
    /// When it was last refused (Unix milliseconds).
    pub last_at: i64,
    /// How many times it was refused (once per pass that listed it).
    pub times: i64,
}
