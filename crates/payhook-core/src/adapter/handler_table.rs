//! Which of an adapter's handlers takes an event: the routing rule written once
//! for every framework, with one handler slot per kind of the event catalogue.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::event::{Event, KindIndex, CATALOGUE, KIND_COUNT};

/// Which of several handlers takes an event: the routing rule behind each
/// adapter's `EventHandlers`, written once so every framework routes alike.
///
/// For an event, [`handler_for`](Self::handler_for) picks, in order:
/// 1. the handler registered with [`on`](Self::on) for its exact `type` (any
///    string, known to payhook or not);
/// 2. the handler of its kind: one method per kind of the event catalogue
///    ([`payment_succeeded`](Self::payment_succeeded) for
///    `payment_intent.succeeded` or `payment.succeeded`,
///    [`payment_failed`](Self::payment_failed), …), which takes every type
///    name of that kind;
/// 3. the [`other`](Self::other) handler, which takes what nothing else does;
/// 4. none: the adapter acknowledges the event without running anything.
///
/// `H` is the adapter's boxed handler type. Cloning is cheap (the by-type map is
/// shared), because some frameworks clone their handler for every request.
///
/// ```
/// use payhook::adapter::HandlerTable;
/// use payhook::Event;
///
/// let mut table = HandlerTable::new();
/// table.on("payment_intent.succeeded", "exact");
/// table.payment_succeeded("success");
/// table.other("fallback");
///
/// let event = |ty: &str| {
///     let body = format!(
///         r#"{{"id":"evt_1","type":"{ty}","data":{{"object":{{"id":"pi_1","amount":1,"currency":"btc","status":"succeeded"}}}}}}"#
///     );
///     Event::from_slice(body.as_bytes()).unwrap()
/// };
/// assert_eq!(table.handler_for(&event("payment_intent.succeeded")), Some(&"exact"));
/// assert_eq!(table.handler_for(&event("payment.succeeded")), Some(&"success"));
/// assert_eq!(table.handler_for(&event("payment_intent.failed")), Some(&"fallback"));
/// assert_eq!(table.handler_for(&event("payout.paid")), Some(&"fallback"));
/// ```
pub struct HandlerTable<H> {
    by_type: Arc<HashMap<String, H>>,
    /// One slot per kind of the catalogue.
    by_kind: [Option<H>; KIND_COUNT],
    other: Option<H>,
}

impl<H: Clone> HandlerTable<H> {
    /// No handlers: every event is acknowledged without running anything.
    pub fn new() -> Self {
        Self {
            by_type: Arc::default(),
            by_kind: std::array::from_fn(|_| None),
            other: None,
        }
    }

    /// Routes events whose `type` is exactly `event_type` to `handler`,
    /// replacing an earlier handler for that type.
    pub fn on(&mut self, event_type: impl Into<String>, handler: H) {
        Arc::make_mut(&mut self.by_type).insert(event_type.into(), handler);
    }

    /// Routes every event that no other handler takes.
    pub fn other(&mut self, handler: H) {
        self.other = Some(handler);
    }
}

/// The method of one kind of the event catalogue (`HandlerTable::payment_succeeded`,
/// …), expanded for every kind by `for_each_event_kind!`.
macro_rules! kind_method {
    ($Variant:ident => $handler:ident [ $($name:literal)+ ]) => {
        #[doc = concat!("Routes the [`", stringify!($Variant), "`](crate::EventKind::", stringify!($Variant), ") kind without an exact-type handler: ")]
        #[doc = concat!($("`", $name, "` ",)+ "(every name the catalogue gives it).")]
        pub fn $handler(&mut self, handler: H) {
            self.by_kind[KindIndex::$Variant as usize] = Some(handler);
        }
    };
}

impl<H: Clone> HandlerTable<H> {
    crate::for_each_event_kind!(kind_method);
}

impl<H> HandlerTable<H> {
    /// The handler for `event` (see the type's docs for the order), if any.
    pub fn handler_for(&self, event: &Event) -> Option<&H> {
        self.by_type
            .get(event.event_type())
            .or_else(|| {
                let index = event.kind().index()?;
                self.by_kind[index as usize].as_ref()
            })
            .or(self.other.as_ref())
    }
}

impl<H: Clone> Default for HandlerTable<H> {
    fn default() -> Self {
        Self::new()
    }
}

impl<H: Clone> Clone for HandlerTable<H> {
    fn clone(&self) -> Self {
        Self {
            by_type: Arc::clone(&self.by_type),
            by_kind: self.by_kind.clone(),
            other: self.other.clone(),
        }
    }
}

impl<H> fmt::Debug for HandlerTable<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut types: Vec<&String> = self.by_type.keys().collect();
        types.sort();
        let kinds: Vec<&str> = CATALOGUE
            .iter()
            .zip(&self.by_kind)
            .filter(|(_, handler)| handler.is_some())
            .map(|(entry, _)| entry.handler)
            .collect();
        f.debug_struct("HandlerTable")
            .field("types", &types)
            .field("kinds", &kinds)
            .field("other", &self.other.is_some())
            .finish()
    }
}
