//! The event catalogue: every event type payhook knows, in one table.
//!
//! Each entry is one [`EventKind`] variant: its type names (the canonical one
//! first, then its aliases), the data it carries in `data.object`, the
//! adapters' handler method for it, whether the service emits each name, and
//! how the emulator produces it. Everything that knows event types takes them
//! from here: the parser ([`Event::from_slice`](super::Event::from_slice)), the
//! type-name constants, [`EventKind`], the adapters' per-kind handlers,
//! `EventBuilder::of_type`, `payhook trigger`, the emulator, and the tables of
//! README.md and PROTOCOL.md (a test compares them with [`CATALOGUE`]).
//!
//! The table is the macro `event_catalogue!` below; each user of it passes a
//! macro that turns the entries into its own items. Per-kind items elsewhere
//! (the handler methods of `HandlerTable` and of both adapters'
//! `EventHandlers`) go through `for_each_event_kind!`, which calls a one-kind
//! template once per kind.

use serde::de::MapAccess;

use super::data::{DataField, EventData};
use super::{invalid, PaymentIntent};
use crate::error::Error;

/// The catalogue. Called with the name of a macro, it calls that macro with
/// the catalogue's entries:
///
/// - `data [...]`: the data types events carry, each implementing the
///   crate's `EventData` in its own file: `Type "noun"` for one declared
///   elsewhere (the payment intent), `Type in module "noun"` for one in
///   `event/catalogue/module.rs`, which this file declares and
///   `payhook_core::event` re-exports;
/// - `kinds [...]`: one `{ … }` per kind: the variant's doc, `Variant(Data) =>
///   handler_method [ names ]`, then the [`EventType`] fields that differ from
///   [`EventType::BASE`]. Each name is `/// doc CONST = "type", emitted: bool;`.
///
/// Adding an event type is one entry here (and, for a data type of its own,
/// that type's file and its line under `data`).
///
/// `event_catalogue!(@call [path::to::callback] args…)` calls a macro by its
/// path (`$crate::…` included), with `args` before the entries: how
/// [`for_each_event_kind!`](crate::for_each_event_kind) reaches its own
/// per-kind arm from another crate.
#[doc(hidden)]
#[macro_export]
macro_rules! event_catalogue {
    ($callback:ident) => {
        $crate::event_catalogue! { @call [$callback] }
    };
    (@call [$($callback:tt)+] $($args:tt)*) => {
        $($callback)+! {
            $($args)*
            data [
                /// A payment intent, read with exact amounts.
                PaymentIntent "payment intent",
            ]
            kinds [
                {
                    /// A payment intent succeeded: `payment_intent.succeeded` or
                    /// `payment.succeeded`.
                    PaymentIntentSucceeded(PaymentIntent) => payment_succeeded [
                        /// The type string of a succeeded payment intent.
                        PAYMENT_INTENT_SUCCEEDED = "payment_intent.succeeded", emitted: true;
                        /// The other spelling of the success event that the service may emit.
                        PAYMENT_SUCCEEDED = "payment.succeeded", emitted: true;
                    ]
                    test_helper: Some(TestHelper { path: "succeed", status: "succeeded" }),
                    example_status: "succeeded",
                }
                {
                    /// A payment intent failed: `payment_intent.failed` or
                    /// `payment_intent.payment_failed`.
                    PaymentIntentFailed(PaymentIntent) => payment_failed [
                        /// The type string of a failed payment intent.
                        PAYMENT_INTENT_FAILED = "payment_intent.failed", emitted: true;
                        /// The name Stripe-style senders give the failure event; the same kind as
                        /// [`PAYMENT_INTENT_FAILED`].
                        PAYMENT_INTENT_PAYMENT_FAILED = "payment_intent.payment_failed", emitted: false;
                    ]
                    test_helper: Some(TestHelper { path: "fail", status: "failed" }),
                    example_status: "requires_payment_method",
                }
            ]
        }
    };
}

/// Expands the macro it is given once per kind of the catalogue, with
/// `Variant => handler_method [ "type" … ]`: the kind's
/// [`EventKind`](crate::event::EventKind) variant, its handler method, and
/// every type name (canonical first). The per-kind items outside this file
/// (the handler methods of [`HandlerTable`] and of both adapters'
/// `EventHandlers`) are each one such template, so a kind added to the
/// catalogue reaches all of them.
///
/// It may be called where items or associated items go (inside an `impl`):
///
/// ```text
/// macro_rules! kind_method {
///     ($Variant:ident => $handler:ident [ $($name:literal)+ ]) => {
///         pub fn $handler(&mut self) { /* … */ }
///     };
/// }
/// impl Handlers {
///     payhook_core::for_each_event_kind!(kind_method);
/// }
/// ```
///
/// [`HandlerTable`]: crate::adapter::HandlerTable
#[doc(hidden)]
#[macro_export]
macro_rules! for_each_event_kind {
    ($each:ident) => {
        $crate::event_catalogue! { @call [$crate::for_each_event_kind] @kinds $each }
    };
    (@kinds $each:ident data [ $($data:tt)* ] kinds [ $( {
        $(#[doc = $doc:literal])*
        $Variant:ident($Data:ident) => $handler:ident [
            $( $(#[doc = $name_doc:literal])* $CONST:ident = $name:literal, emitted: $emitted:literal; )+
        ]
        $($fields:tt)*
    } )* ]) => {
        $( $each! { $Variant => $handler [ $($name)+ ] } )*
    };
}

/// When `data` comes before `type`, the envelope reads it as this data type on
/// the guess that the event carries it (the typed events, and the ones with
/// large bodies); a wrong guess costs a second read of the body.
const SPECULATED: Carries = Carries::PaymentIntent;

/// One kind of event in the [`CATALOGUE`].
#[derive(Debug)]
#[non_exhaustive]
pub struct EventType {
    /// Its type names: the canonical one first, then its aliases. Each
    /// reaches the same [`EventKind`] variant and the same handler.
    pub names: &'static [TypeName],
    /// The name of its [`EventKind`] variant, for example `PaymentIntentSucceeded`.
    pub kind: &'static str,
    /// What its `data.object` is read into.
    pub carries: Carries,
    /// The adapters' `EventHandlers` method (and [`HandlerTable`]'s) that
    /// takes every name of this kind, for example `payment_succeeded`.
    ///
    /// [`HandlerTable`]: crate::adapter::HandlerTable
    pub handler: &'static str,
    /// The emulator's test helper that emits the canonical name, if it emits
    /// this kind.
    pub test_helper: Option<TestHelper>,
    /// The payment intent status of the example events `EventBuilder` makes
    /// of this kind (for kinds that carry a payment intent).
    pub example_status: &'static str,
    pub(crate) index: KindIndex,
}

/// One type name of an [`EventType`].
#[derive(Debug)]
#[non_exhaustive]
pub struct TypeName {
    /// The `type` string, matched exactly (case and spaces included).
    pub name: &'static str,
    /// Whether the service emits this name; `false` for an alias only
    /// senders modelled on Stripe's format use.
    pub emitted: bool,
}

/// How the emulator produces an event kind: `POST
/// /v1/test_helpers/payment_intents/:id/PATH` moves the payment intent to
/// `status` and emits the kind's canonical name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TestHelper {
    /// The last segment of the helper's path, for example `succeed`.
    pub path: &'static str,
    /// The payment intent's status after it, for example `succeeded`.
    pub status: &'static str,
}

impl EventType {
    /// The catalogue entry `event_type` names, if any (an exact match).
    #[inline]
    pub fn find(event_type: &str) -> Option<&'static EventType> {
        CATALOGUE.iter().find(|entry| entry.has_name(event_type))
    }

    /// The kinds the emulator emits (each by its canonical name).
    pub fn emulated() -> impl Iterator<Item = &'static EventType> {
        CATALOGUE.iter().filter(|entry| entry.test_helper.is_some())
    }

    /// The canonical type name.
    pub fn name(&self) -> &'static str {
        self.names.first().map_or("", |name| name.name)
    }

    /// Whether `event_type` is one of this kind's names.
    pub fn has_name(&self, event_type: &str) -> bool {
        self.names.iter().any(|name| name.name == event_type)
    }
}

impl TypeName {
    const fn new(name: &'static str, emitted: bool) -> Self {
        Self { name, emitted }
    }
}

/// Turns the catalogue's entries into the core's items.
macro_rules! define_catalogue {
    (
        data [ $( $(#[doc = $data_doc:literal])* $Data:ident $(in $module:ident)? $noun:literal, )* ]
        kinds [ $( {
            $(#[doc = $doc:literal])*
            $Variant:ident($KindData:ident) => $handler:ident [
                $( $(#[doc = $name_doc:literal])* $CONST:ident = $name:literal, emitted: $emitted:literal; )+
            ]
            $( $field:ident: $value:expr, )*
        } )* ]
    ) => {
        /// The type names of the [`CATALOGUE`], one constant each.
        pub mod names {
            $( $( $(#[doc = $name_doc])* pub const $CONST: &str = $name; )+ )*
        }
        use names::*;

        $( $( mod $module; )? )*

        /// The data types declared under the catalogue, re-exported by `event`.
        pub(super) mod data_types {
            $( $( pub use super::$module::$Data; )? )*
        }
        #[allow(unused_imports)] // when every data type is declared elsewhere
        use data_types::*;

        /// What an event kind carries in `data.object`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[non_exhaustive]
        pub enum Carries {
            $( $(#[doc = $data_doc])* $Data, )*
        }

        impl Carries {
            /// What the data is, in words (for example `payment intent`).
            pub fn noun(self) -> &'static str {
                match self { $( Carries::$Data => $noun, )* }
            }

            /// An example `data.object` of this data type, JSON text.
            pub(crate) fn example_object(self) -> &'static str {
                match self { $( Carries::$Data => <$Data as EventData>::EXAMPLE_OBJECT, )* }
            }
        }

        /// `data` as read in the envelope's pass: one variant per data type.
        // As `DataField`: on the stack for one parse, moved once; boxing the
        // payment intent's large read form would allocate for every typed
        // event once a second, smaller data type joins.
        #[allow(clippy::large_enum_variant)]
        pub(crate) enum ReadData {
            $( $Data(<$Data as EventData>::Read), )*
        }

        /// Reads the next map value (`data`) as `carries`' data type.
        pub(crate) fn read_data<'de, A: MapAccess<'de>>(carries: Carries, map: &mut A) -> Result<ReadData, A::Error> {
            match carries {
                $( Carries::$Data => map.next_value::<<$Data as EventData>::Read>().map(ReadData::$Data), )*
            }
        }

        /// Each kind's place in the [`CATALOGUE`], and in per-kind tables.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum KindIndex {
            $( $Variant, )*
        }

        /// How many kinds the catalogue has.
        pub(crate) const KIND_COUNT: usize = [$( KindIndex::$Variant ),*].len();

        /// What an event is about: the catalogue's kind of its `type`, with
        /// its data, or [`Other`](Self::Other).
        ///
        /// Each kind may have several type names (aliases), and they all mean the
        /// same thing to every handler; [`Event::event_type`](super::Event::event_type)
        /// keeps the name as sent:
        ///
        /// | `type` | kind |
        /// |---|---|
        $( $( #[doc = concat!("| `", $name, "` | [`", stringify!($Variant), "`](Self::", stringify!($Variant), ") |")] )+ )*
        /// | anything else | [`Other`](Self::Other) |
        ///
        /// ```
        /// use payhook::{Event, EventKind};
        ///
        /// let body = br#"{"id":"evt_1","type":"payment_intent.payment_failed","data":{"object":
        ///   {"id":"pi_1","amount":5,"currency":"btc","status":"requires_payment_method"}}}"#;
        /// let event = Event::from_slice(body).unwrap();
        /// assert!(matches!(event.kind(), EventKind::PaymentIntentFailed(_)));
        /// assert_eq!(event.event_type(), "payment_intent.payment_failed");
        /// ```
        #[derive(Debug, Clone)]
        #[non_exhaustive]
        pub enum EventKind {
            $( $(#[doc = $doc])* $Variant($KindData), )*
            /// Any other type; [`Event::event_type`](super::Event::event_type) has its type string.
            Other {
                /// The event's raw `data` (JSON `null` when absent).
                data: Box<serde_json::value::RawValue>,
            },
        }

        impl EventKind {
            /// The kind of a catalogue entry, from the envelope's `data`.
            #[allow(unreachable_patterns)] // a data type's read arm, when there is one data type
            pub(crate) fn from_data(index: KindIndex, data: DataField<'_, ReadData>, body: &str) -> Result<Self, Error> {
                match index {
                    $( KindIndex::$Variant => Ok(EventKind::$Variant(data_of::<$KindData>(data, body, |read| match read {
                        ReadData::$KindData(read) => Some(read),
                        _ => None,
                    })?)), )*
                }
            }

            /// The kind's place in the catalogue (`None` for `Other`).
            pub(crate) fn index(&self) -> Option<KindIndex> {
                match self {
                    $( EventKind::$Variant(_) => Some(KindIndex::$Variant), )*
                    EventKind::Other { .. } => None,
                }
            }

            /// The payment intent of a kind that carries one.
            pub(crate) fn payment_intent(&self) -> Option<&PaymentIntent> {
                match self {
                    $( EventKind::$Variant(data) => EventData::payment_intent(data), )*
                    EventKind::Other { .. } => None,
                }
            }

            /// The id of the payment intent a kind's data is about
            /// ([`EventData::payment_intent_id`]).
            pub(crate) fn payment_intent_id(&self) -> Option<&str> {
                match self {
                    $( EventKind::$Variant(data) => EventData::payment_intent_id(data), )*
                    EventKind::Other { .. } => None,
                }
            }

            /// The payment intent of a kind that carries one.
            pub(crate) fn into_payment_intent(self) -> Option<PaymentIntent> {
                match self {
                    $( EventKind::$Variant(data) => EventData::into_payment_intent(data), )*
                    EventKind::Other { .. } => None,
                }
            }
        }

        /// Every kind of event payhook types, in the order of [`EventKind`]'s variants.
        pub static CATALOGUE: &[EventType] = &[
            $( EventType {
                names: &[ $( TypeName::new($CONST, $emitted), )+ ],
                kind: stringify!($Variant),
                carries: Carries::$KindData,
                handler: stringify!($handler),
                index: KindIndex::$Variant,
                $( $field: $value, )*
                ..EventType::BASE
            }, )*
        ];
    };
}

#[cfg(not(test))]
event_catalogue!(define_catalogue);

/// In the crate's unit tests the catalogue has one more kind,
/// `test.refund.created`, whose data type is its own (`tests::TestRefund`) and
/// names a payment intent, so the paths such a kind takes (its read, the second
/// read when `data` comes first, its example object, its payment-intent id) are
/// tested before one ships. Other crates and the core's integration tests
/// never see it.
#[cfg(test)]
macro_rules! with_test_kind {
    (data [ $($data:tt)* ] kinds [ $($kinds:tt)* ]) => {
        define_catalogue! {
            data [
                $($data)*
                /// A refund (unit tests only).
                TestRefund "test refund",
            ]
            kinds [
                $($kinds)*
                {
                    /// A refund was created (unit tests only).
                    TestRefundCreated(TestRefund) => test_refund_created [
                        /// The type string of a created refund (unit tests only).
                        TEST_REFUND_CREATED = "test.refund.created", emitted: true;
                    ]
                }
            ]
        }
    };
}
#[cfg(test)]
use tests::TestRefund;
#[cfg(test)]
event_catalogue!(with_test_kind);

impl EventType {
    /// The fields an entry does not set: no emulator helper, no example status.
    const BASE: EventType = EventType {
        names: &[],
        kind: "",
        carries: SPECULATED,
        handler: "",
        test_helper: None,
        example_status: "",
        index: KindIndex::PaymentIntentSucceeded,
    };

    /// Whether `data` read on the envelope's guess fits this kind.
    pub(crate) fn takes_speculated_data(&self) -> bool {
        self.carries == SPECULATED
    }
}

/// Reads `data` as the guessed data type, when it came before `type`.
pub(crate) fn read_speculated<'de, A: MapAccess<'de>>(map: &mut A) -> Result<ReadData, A::Error> {
    read_data(SPECULATED, map)
}

/// A kind's data from the envelope's `data`; `take` picks this data type's
/// read form (it always matches: a guess that does not is read again raw).
fn data_of<D: EventData>(
    data: DataField<'_, ReadData>,
    body: &str,
    take: fn(ReadData) -> Option<D::Read>,
) -> Result<D, Error> {
    match data {
        DataField::Absent => Err(invalid(D::NO_DATA)),
        DataField::Raw(raw) => D::from_raw(raw),
        DataField::Read(read) => match take(read) {
            Some(read) => D::from_read(read, body),
            None => Err(invalid(D::NO_DATA)),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use serde::Deserialize;
    use serde_json::value::RawValue;

    use super::*;
    use crate::event::data::Object;
    use crate::event::Event;

    /// The data of the unit tests' `test.refund.created`: a data type of its own
    /// that names the payment intent it is about.
    #[derive(Debug, Clone, Deserialize)]
    pub struct TestRefund {
        id: String,
        payment_intent: Option<String>,
    }

    const NO_REFUND: &str = "refund event has no data.object";

    impl EventData for TestRefund {
        type Read = Object<Self>;
        const NO_DATA: &'static str = "refund event has no data";
        const EXAMPLE_OBJECT: &'static str = r#"{"id":"re_1","payment_intent":"pi_1"}"#;

        fn from_read(read: Object<Self>, _body: &str) -> Result<Self, Error> {
            read.into_object(NO_REFUND)
        }

        fn from_raw(data: &RawValue) -> Result<Self, Error> {
            Object::from_raw(data, NO_REFUND)
        }

        fn payment_intent_id(&self) -> Option<&str> {
            self.payment_intent.as_deref()
        }
    }

    /// A kind with data of its own joins its intent's per-intent order
    /// through `EventData::payment_intent_id`: it carries no payment intent,
    /// yet names one, in either key order.
    #[test]
    fn a_data_type_of_its_own_names_the_payment_intent_it_is_about() {
        let object =
            r#"{"id":"re_1","payment_intent":"pi_7","amount":5,"currency":"btc","status":"succeeded"}"#;
        for body in [
            format!(r#"{{"id":"evt_1","type":"test.refund.created","data":{{"object":{object}}}}}"#),
            format!(r#"{{"id":"evt_1","data":{{"object":{object}}},"type":"test.refund.created"}}"#),
        ] {
            let event = Event::from_slice(body.as_bytes()).unwrap();
            let EventKind::TestRefundCreated(refund) = event.kind() else {
                panic!("{body}: {:?}", event.kind());
            };
            assert_eq!(refund.id, "re_1");
            assert!(event.payment_intent().is_none(), "{body}");
            assert_eq!(event.payment_intent_id(), Some("pi_7"), "{body}");
        }

        let unrelated = br#"{"id":"evt_2","type":"test.refund.created","data":{"object":{"id":"re_2"}}}"#;
        assert_eq!(Event::from_slice(unrelated).unwrap().payment_intent_id(), None);
        // A payment intent's is its own id (the trait's default).
        let payment = br#"{"id":"evt_3","type":"payment.succeeded","data":{"object":
            {"id":"pi_9","amount":1,"currency":"btc","status":"succeeded"}}}"#;
        assert_eq!(
            Event::from_slice(payment).unwrap().payment_intent_id(),
            Some("pi_9")
        );
        // A type outside the catalogue names none, whatever its data holds.
        let other = br#"{"id":"evt_4","type":"refund.updated","data":{"object":{"id":"re_1","payment_intent":"pi_7"}}}"#;
        assert_eq!(Event::from_slice(other).unwrap().payment_intent_id(), None);
    }

    #[test]
    fn every_name_is_unique_and_finds_its_kind() {
        let mut seen = HashSet::new();
        for (position, entry) in CATALOGUE.iter().enumerate() {
            assert_eq!(entry.index as usize, position, "{}", entry.kind);
            assert!(
                !entry.names.is_empty() && !entry.handler.is_empty(),
                "{}",
                entry.kind
            );
            assert!(
                entry.names[0].emitted,
                "{}: the canonical name is the service's",
                entry.kind
            );
            for name in entry.names {
                assert!(seen.insert(name.name), "{} is in the catalogue twice", name.name);
                assert!(std::ptr::eq(EventType::find(name.name).unwrap(), entry));
            }
        }
        assert!(EventType::find("payment_intent.succeeded ").is_none());
        assert!(EventType::find("").is_none());
        assert_eq!(KIND_COUNT, CATALOGUE.len());
    }

    /// Every name of every kind parses into that kind, with `type` before
    /// `data` and after it, and its data carried.
    #[test]
    fn every_name_parses_into_its_kind_in_either_order() {
        for entry in CATALOGUE {
            for name in entry.names {
                let object = match entry.carries {
                    Carries::PaymentIntent => r#"{"id":"pi_1","amount":7,"currency":"btc","status":"x"}"#,
                    other => other.example_object(),
                };
                for body in [
                    format!(
                        r#"{{"id":"evt_1","type":"{}","data":{{"object":{object}}}}}"#,
                        name.name
                    ),
                    format!(
                        r#"{{"id":"evt_1","data":{{"object":{object}}},"type":"{}"}}"#,
                        name.name
                    ),
                ] {
                    let event = Event::from_slice(body.as_bytes()).unwrap();
                    assert_eq!(event.kind().index(), Some(entry.index), "{body}");
                    assert_eq!(
                        event.payment_intent().is_some(),
                        entry.carries == Carries::PaymentIntent,
                        "{body}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_emulator_emits_canonical_names_through_a_helper() {
        let emulated: Vec<&str> = EventType::emulated().map(EventType::name).collect();
        assert!(emulated.starts_with(&["payment_intent.succeeded", "payment_intent.failed"]));
        for entry in EventType::emulated() {
            let helper = entry.test_helper.unwrap();
            assert!(!helper.path.is_empty() && !helper.status.is_empty());
        }
    }
}
