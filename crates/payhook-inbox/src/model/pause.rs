//! Paused event types, as the operator's tools see them.

/// An event type whose events are stored and acknowledged but not handled
/// until it is resumed ([`Admin::paused`](crate::admin::Admin::paused)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PausedType {
    /// The event type (`payment_intent.succeeded`).
    pub event_type: String,
    /// When it was paused (Unix milliseconds).
    pub paused_at: i64,
    /// Its events waiting (pending) now: they run, oldest first, once it is
    /// resumed.
    pub waiting: i64,
}
