//! Typed events.
//!
//! An [`Event`] is parsed from the verified raw body in two steps: first an
//! envelope (`id`, `type`, `data` kept as raw JSON, every other top-level field
//! kept as raw JSON), then, for payment events, the payment intent straight from
//! the raw `data`. Parsing straight into the typed fields is what keeps amounts
//! exact: `amount` is read into a `u128` and never passes through `f64` (1 ETH is
//! 10^18 wei, so amounts beyond 2^64 are ordinary).
//!
//! | `type` | [`EventKind`] |
//! |---|---|
//! | `payment_intent.succeeded` | [`EventKind::PaymentIntentSucceeded`] |
//! | `payment.succeeded` (the other spelling the service uses) | [`EventKind::PaymentIntentSucceeded`] |
//! | `payment_intent.failed` | [`EventKind::PaymentIntentFailed`] |
//! | anything else | [`EventKind::Other`] with the raw `data` |
//!
//! Unknown fields anywhere are ignored, unknown `status` values and payment
//! methods are kept as strings, and an unknown event type is never an error.
//!
//! ```
//! use payhook::{Event, EventKind, PaymentIntentStatus};
//!
//! let body = br#"{"id":"evt_1","type":"payment.succeeded","livemode":false,
//!   "data":{"object":{"id":"pi_1","object":"payment_intent",
//!   "amount":1500000000000000000000,"currency":"eth","status":"succeeded",
//!   "payment_method_types":["ethereum"]}}}"#;
//! let event = Event::from_slice(body).unwrap();
//! assert_eq!(event.event_type(), "payment.succeeded");
//! match event.kind() {
//!     EventKind::PaymentIntentSucceeded(pi) => {
//!         assert_eq!(pi.amount, 1_500_000_000_000_000_000_000); // 1 500 ETH in wei, exact
//!         assert_eq!(pi.status, PaymentIntentStatus::Succeeded);
//!     }
//!     other => panic!("unexpected {other:?}"),
//! }
//! assert_eq!(event.field("livemode").map(|raw| raw.get()), Some("false"));
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::Error;

/// The type string of a succeeded payment intent.
pub const PAYMENT_INTENT_SUCCEEDED: &str = "payment_intent.succeeded";
/// The other spelling of the success event that the service may emit.
pub const PAYMENT_SUCCEEDED: &str = "payment.succeeded";
/// The type string of a failed payment intent.
pub const PAYMENT_INTENT_FAILED: &str = "payment_intent.failed";

/// A verified webhook event.
#[derive(Debug, Clone)]
pub struct Event {
    id: String,
    event_type: String,
    kind: EventKind,
    extra: BTreeMap<String, Box<RawValue>>,
}

/// What an event is about.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum EventKind {
    /// `payment_intent.succeeded` or `payment.succeeded`.
    PaymentIntentSucceeded(PaymentIntent),
    /// `payment_intent.failed`.
    PaymentIntentFailed(PaymentIntent),
    /// Any other type; [`Event::event_type`] has its type string.
    Other {
        /// The event's raw `data` (JSON `null` when absent).
        data: Box<RawValue>,
    },
}

impl Event {
    /// Parses a raw body into an event.
    ///
    /// # Errors
    /// [`Error::InvalidPayload`] saying what is wrong: not JSON, not an object, no
    /// `id` or `type`, or a payment event whose `data.object` is not a valid
    /// payment intent (for example a negative or fractional amount).
    pub fn from_slice(body: &[u8]) -> Result<Self, Error> {
        // JSON text is UTF-8 (RFC 8259). Checking the whole body once, up front,
        // rejects invalid bytes even inside fields that are skipped unread, and
        // lets serde_json read the body as text without checking each string.
        let text = std::str::from_utf8(body)
            .map_err(|err| Error::InvalidPayload(format!("body is not UTF-8 text: {err}")))?;
        let envelope = read_envelope(text)?;
        let id = envelope.id.ok_or_else(|| invalid("event has no id"))?;
        if id.is_empty() {
            return Err(invalid("event id is empty"));
        }
        let event_type = envelope.event_type.ok_or_else(|| invalid("event has no type"))?;
        let kind = match event_type.as_str() {
            PAYMENT_INTENT_SUCCEEDED | PAYMENT_SUCCEEDED => {
                EventKind::PaymentIntentSucceeded(payment_intent(envelope.data)?)
            }
            PAYMENT_INTENT_FAILED => EventKind::PaymentIntentFailed(payment_intent(envelope.data)?),
            _ => EventKind::Other {
                data: match envelope.data {
                    DataField::Raw(data) => data.to_owned(),
                    // Read as a payment intent only once `type` said so.
                    DataField::Absent | DataField::Intent(_) => null_raw(),
                },
            },
        };
        Ok(Self {
            id,
            event_type,
            kind,
            extra: envelope.extra,
        })
    }

    /// The event id (`evt_…`), the key deliveries are deduplicated by.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The literal `type` string, for example `payment.succeeded`.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// What the event is about.
    pub fn kind(&self) -> &EventKind {
        &self.kind
    }

    /// Takes the kind out of the event.
    pub fn into_kind(self) -> EventKind {
        self.kind
    }

    /// The payment intent of a payment event, if this is one.
    pub fn payment_intent(&self) -> Option<&PaymentIntent> {
        match &self.kind {
            EventKind::PaymentIntentSucceeded(pi) | EventKind::PaymentIntentFailed(pi) => Some(pi),
            EventKind::Other { .. } => None,
        }
    }

    /// Another top-level field (for example `created`, `livemode`,
    /// `api_version`), exactly as it was sent.
    pub fn field(&self, name: &str) -> Option<&RawValue> {
        self.extra.get(name).map(AsRef::as_ref)
    }

    /// Every other top-level field, by name.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &RawValue)> {
        self.extra.iter().map(|(k, v)| (k.as_str(), v.as_ref()))
    }

    /// The top-level `created` field as unix seconds, when present and an integer.
    pub fn created(&self) -> Option<i64> {
        self.field("created")
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
    }

    /// The top-level `livemode` field, when present and a boolean.
    pub fn livemode(&self) -> Option<bool> {
        self.field("livemode")
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
    }
}

/// Deserializes an event with exactly the rules of [`Event::from_slice`], so an
/// `Event` can stand wherever a `DeserializeOwned` type is expected (a generic
/// `parse_as::<T>`, a field of the caller's own struct). JSON only: the raw
/// `data` is kept as JSON text, which needs `serde_json`'s deserializer.
impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Event::from_slice(raw.get().as_bytes()).map_err(|err| match err {
            Error::InvalidPayload(message) => de::Error::custom(message),
            other => de::Error::custom(other),
        })
    }
}

/// Parses a verified body into the caller's own type instead of [`Event`].
///
/// # Errors
/// [`Error::InvalidPayload`] with serde's message.
pub fn parse_as<T: DeserializeOwned>(body: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(payload_error)
}

/// Turns a verified delivery into the type a handler asked for, reusing the
/// pipeline's parse where it can, so every adapter hands out payloads alike:
///
/// | `T` | result |
/// |---|---|
/// | [`Event`] | `event` itself (parsed from `body` when `None`) |
/// | [`PaymentIntent`] | the event's payment intent; a payload error for events without one |
/// | anything else | `body` parsed with [`parse_as`] |
///
/// # Errors
/// [`Error::InvalidPayload`] saying why the body does not fit `T`.
pub fn into_payload<T: DeserializeOwned + 'static>(event: Option<Event>, body: &[u8]) -> Result<T, Error> {
    use std::any::{Any, TypeId};
    let is = |id: TypeId| TypeId::of::<T>() == id;
    if is(TypeId::of::<Event>()) || is(TypeId::of::<PaymentIntent>()) {
        let event = match event {
            Some(event) => event,
            None => Event::from_slice(body)?,
        };
        let value: Box<dyn Any> = if is(TypeId::of::<Event>()) {
            Box::new(event)
        } else {
            let event_type = event.event_type().to_owned();
            match event.into_kind() {
                EventKind::PaymentIntentSucceeded(pi) | EventKind::PaymentIntentFailed(pi) => Box::new(pi),
                EventKind::Other { .. } => {
                    return Err(Error::InvalidPayload(format!(
                        "{event_type} events carry no payment intent"
                    )))
                }
            }
        };
        if let Ok(value) = value.downcast::<T>() {
            return Ok(*value);
        }
    }
    parse_as(body)
}

fn invalid(message: &str) -> Error {
    Error::InvalidPayload(message.to_owned())
}

fn payload_error(err: serde_json::Error) -> Error {
    Error::InvalidPayload(err.to_string())
}

fn null_raw() -> Box<RawValue> {
    RawValue::from_string("null".to_owned()).unwrap_or_else(|_| unreachable_null())
}

#[cold]
fn unreachable_null() -> Box<RawValue> {
    // `null` is always valid JSON; this path exists only to avoid a panic path.
    serde_json::value::to_raw_value(&()).unwrap_or_default()
}

/// The `data` of a payment event.
#[derive(Deserialize)]
struct Data {
    object: Option<PaymentIntent>,
}

/// Reads the envelope and checks that nothing follows it. An error met while
/// reading a payment intent in the same pass is reported as a `data.object`
/// error, as it is when the intent is read from the kept raw `data`.
fn read_envelope(text: &str) -> Result<Envelope<'_>, Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let mut in_intent = false;
    let envelope = EnvelopeSeed {
        in_intent: &mut in_intent,
    }
    .deserialize(&mut de)
    .and_then(|envelope| de.end().map(|()| envelope));
    envelope.map_err(|err| match (in_intent, err.classify()) {
        (true, serde_json::error::Category::Data) => Error::InvalidPayload(format!("data.object: {err}")),
        _ => payload_error(err),
    })
}

fn payment_intent(data: DataField<'_>) -> Result<PaymentIntent, Error> {
    let object = match data {
        DataField::Absent => return Err(invalid("payment event has no data")),
        DataField::Intent(object) => object,
        DataField::Raw(data) => {
            serde_json::from_str::<Data>(data.get())
                .map_err(|e| Error::InvalidPayload(format!("data.object: {e}")))?
                .object
        }
    };
    let pi = object.ok_or_else(|| invalid("payment event has no data.object"))?;
    if pi.object != PaymentIntent::OBJECT {
        return Err(Error::InvalidPayload(format!(
            "data.object is a {:?}, not a payment_intent",
            pi.object
        )));
    }
    Ok(pi)
}

/// The first parsing step: the fields every event has, with every other field
/// kept as raw JSON.
struct Envelope<'a> {
    id: Option<String>,
    event_type: Option<String>,
    data: DataField<'a>,
    extra: BTreeMap<String, Box<RawValue>>,
}

/// How `data` was read. When `type` comes first (the order the service
/// documents) and names a payment event, `data` is read straight into the
/// payment intent: one pass over the body instead of a scan to keep it raw and
/// a second to parse it.
// Lives on the stack for one parse and is moved once: boxing the intent would
// add an allocation to every payment event.
#[allow(clippy::large_enum_variant)]
enum DataField<'a> {
    Absent,
    Raw(&'a RawValue),
    Intent(Option<PaymentIntent>),
}

fn is_payment_type(event_type: &str) -> bool {
    matches!(
        event_type,
        PAYMENT_INTENT_SUCCEEDED | PAYMENT_SUCCEEDED | PAYMENT_INTENT_FAILED
    )
}

/// Deserializes an [`Envelope`], noting whether an error came from inside a
/// payment intent.
struct EnvelopeSeed<'f> {
    in_intent: &'f mut bool,
}

enum EnvelopeKey {
    Id,
    Type,
    Data,
    Other(String),
}

impl<'de> Deserialize<'de> for EnvelopeKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = EnvelopeKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<EnvelopeKey, E> {
                Ok(match key {
                    "id" => EnvelopeKey::Id,
                    "type" => EnvelopeKey::Type,
                    "data" => EnvelopeKey::Data,
                    other => EnvelopeKey::Other(other.to_owned()),
                })
            }
        }
        deserializer.deserialize_identifier(KeyVisitor)
    }
}

impl<'de> de::DeserializeSeed<'de> for EnvelopeSeed<'_> {
    type Value = Envelope<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Envelope<'de>, D::Error> {
        struct EnvelopeVisitor<'f> {
            in_intent: &'f mut bool,
        }
        impl<'de> Visitor<'de> for EnvelopeVisitor<'_> {
            type Value = Envelope<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an event object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope<'de>, A::Error> {
                let mut envelope = Envelope {
                    id: None,
                    event_type: None,
                    data: DataField::Absent,
                    extra: BTreeMap::new(),
                };
                while let Some(key) = map.next_key::<EnvelopeKey>()? {
                    match key {
                        EnvelopeKey::Id => {
                            if envelope.id.is_some() {
                                return Err(de::Error::duplicate_field("id"));
                            }
                            envelope.id = Some(map.next_value::<String>()?);
                        }
                        EnvelopeKey::Type => {
                            if envelope.event_type.is_some() {
                                return Err(de::Error::duplicate_field("type"));
                            }
                            envelope.event_type = Some(map.next_value::<String>()?);
                        }
                        EnvelopeKey::Data => {
                            if !matches!(envelope.data, DataField::Absent) {
                                return Err(de::Error::duplicate_field("data"));
                            }
                            envelope.data = if envelope.event_type.as_deref().is_some_and(is_payment_type) {
                                *self.in_intent = true;
                                let data = map.next_value::<Data>()?;
                                *self.in_intent = false;
                                DataField::Intent(data.object)
                            } else {
                                DataField::Raw(map.next_value::<&'de RawValue>()?)
                            };
                        }
                        EnvelopeKey::Other(name) => {
                            let value = map.next_value::<Box<RawValue>>()?;
                            envelope.extra.insert(name, value);
                        }
                    }
                }
                Ok(envelope)
            }
        }
        deserializer.deserialize_map(EnvelopeVisitor {
            in_intent: self.in_intent,
        })
    }
}

/// A payment intent: one customer payment.
///
/// Amounts are in the currency's smallest unit (satoshi, wei, …) and exact.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct PaymentIntent {
    /// Identifier, `pi_…`.
    pub id: String,
    /// Always `payment_intent` (assumed when absent; any other value is an error).
    #[serde(default = "PaymentIntent::object_default")]
    pub object: String,
    /// The amount to pay, in the smallest unit of the currency.
    #[serde(deserialize_with = "amount")]
    pub amount: u128,
    /// The amount received so far (0 when absent).
    #[serde(default, deserialize_with = "amount")]
    pub amount_received: u128,
    /// Lowercase currency code (`btc`, `eth`, `usdc`, …).
    pub currency: String,
    /// Accepted payment methods (empty when absent).
    #[serde(default, deserialize_with = "null_as_default")]
    pub payment_method_types: Vec<PaymentMethod>,
    /// Lifecycle status.
    pub status: PaymentIntentStatus,
    /// Creation time, unix seconds.
    #[serde(default)]
    pub created: Option<i64>,
    /// Free text, when set.
    #[serde(default)]
    pub description: Option<String>,
    /// The integrator's key–value pairs (empty when absent or null).
    #[serde(default, deserialize_with = "metadata")]
    pub metadata: BTreeMap<String, String>,
}

impl PaymentIntent {
    /// The `object` value of every payment intent.
    pub const OBJECT: &'static str = "payment_intent";

    fn object_default() -> String {
        Self::OBJECT.to_owned()
    }
}

/// Reads `metadata` (an object of strings, or null) by collecting the entries
/// and building the map in one go: the service sends the keys sorted, and a
/// sorted run is built without the search per key that inserting one by one
/// costs. A repeated key keeps its last value, as inserting would.
fn metadata<'de, D: Deserializer<'de>>(deserializer: D) -> Result<BTreeMap<String, String>, D::Error> {
    struct MetadataVisitor;
    impl<'de> Visitor<'de> for MetadataVisitor {
        type Value = BTreeMap<String, String>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of strings or null")
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }

        fn visit_some<D2: Deserializer<'de>>(self, deserializer: D2) -> Result<Self::Value, D2::Error> {
            deserializer.deserialize_map(self)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
            while let Some(entry) = map.next_entry::<String, String>()? {
                entries.push(entry);
            }
            Ok(entries.into_iter().collect())
        }
    }
    deserializer.deserialize_option(MetadataVisitor)
}

fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Reads an amount exactly from its JSON text, with a message a person can act
/// on for everything that is not a non-negative integer. Going through the raw
/// text (rather than serde's number visitors) keeps integers beyond 2^64 exact
/// and tells a negative number apart from one that is too large.
fn amount<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u128, D::Error> {
    let raw = Box::<RawValue>::deserialize(deserializer)?;
    let text = raw.get();
    let fail = |what: &str| {
        de::Error::custom(format!(
            "amount must be a non-negative integer, got {what} {text}"
        ))
    };
    match text.as_bytes().first() {
        Some(b'-') => Err(fail("the negative number")),
        Some(b'0'..=b'9') if text.bytes().all(|b| b.is_ascii_digit()) => text
            .parse::<u128>()
            .map_err(|_| de::Error::custom(format!("amount {text} is larger than 2^128 - 1"))),
        Some(b'0'..=b'9') => Err(fail("the non-integer number")),
        _ => Err(fail("the value")),
    }
}

/// A payment method; unknown future methods are kept as they were sent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PaymentMethod {
    /// `bitcoin`
    Bitcoin,
    /// `ethereum`
    Ethereum,
    /// Any other method, as sent.
    Other(String),
}

impl PaymentMethod {
    /// The method as the service writes it.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Bitcoin => "bitcoin",
            Self::Ethereum => "ethereum",
            Self::Other(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for PaymentMethod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KnownOrOther {
            known: |s| match s {
                "bitcoin" => Some(Self::Bitcoin),
                "ethereum" => Some(Self::Ethereum),
                _ => None,
            },
            other: Self::Other,
        })
    }
}

/// Reads a string into an enum whose known values carry no text: only an
/// unknown value is copied into a `String`.
struct KnownOrOther<T> {
    known: fn(&str) -> Option<T>,
    other: fn(String) -> T,
}

impl<T> Visitor<'_> for KnownOrOther<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
        Ok((self.known)(s).unwrap_or_else(|| (self.other)(s.to_owned())))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<T, E> {
        Ok(match (self.known)(&s) {
            Some(known) => known,
            None => (self.other)(s),
        })
    }
}

/// A payment intent's status; `succeeded` is the one known value, any other is
/// kept as sent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PaymentIntentStatus {
    /// `succeeded`
    Succeeded,
    /// Any other status, as sent.
    Other(String),
}

impl PaymentIntentStatus {
    /// The status as the service writes it.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Other(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for PaymentIntentStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KnownOrOther {
            known: |s| (s == "succeeded").then_some(Self::Succeeded),
            other: Self::Other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pi_body(event_type: &str, amount: &str) -> String {
        format!(
            r#"{{"id":"evt_9","type":"{event_type}","created":1732264800,"api_version":"v1",
            "data":{{"object":{{"id":"pi_9","object":"payment_intent","amount":{amount},
            "amount_received":{amount},"currency":"eth","payment_method_types":["ethereum","lightning"],
            "status":"requires_capture","created":1732264000,"description":null,
            "metadata":{{"order":"42"}},"new_field":{{"x":[1,2]}}}},"previous_attributes":{{}}}}}}"#
        )
    }

    #[test]
    fn deserialize_matches_from_slice() {
        let body = pi_body("payment_intent.failed", "10000000000000000000000");
        let direct = Event::from_slice(body.as_bytes()).unwrap();
        let generic: Event = parse_as(body.as_bytes()).unwrap();
        assert_eq!(
            (generic.id(), generic.event_type()),
            (direct.id(), direct.event_type())
        );
        assert_eq!(generic.payment_intent(), direct.payment_intent());
        assert_eq!(generic.field("api_version").map(RawValue::get), Some(r#""v1""#));
        let err = parse_as::<Event>(br#"{"type":"x"}"#).unwrap_err();
        assert_eq!(err.to_string(), "invalid payload: event has no id");
    }

    #[test]
    fn wei_amounts_beyond_u64_stay_exact() {
        let amount = "340282366920938463463374607431768211455"; // u128::MAX
        let event = Event::from_slice(pi_body(PAYMENT_INTENT_SUCCEEDED, amount).as_bytes()).unwrap();
        let pi = event.payment_intent().unwrap();
        assert_eq!(pi.amount, u128::MAX);
        assert_eq!(pi.amount_received, u128::MAX);
        let big = "18446744073709551617"; // 2^64 + 1
        let event = Event::from_slice(pi_body(PAYMENT_INTENT_FAILED, big).as_bytes()).unwrap();
        assert!(matches!(event.kind(), EventKind::PaymentIntentFailed(pi) if pi.amount == (1u128 << 64) + 1));
    }

    #[test]
    fn unknown_values_are_kept_not_errors() {
        let event = Event::from_slice(pi_body(PAYMENT_SUCCEEDED, "5").as_bytes()).unwrap();
        assert_eq!(event.event_type(), PAYMENT_SUCCEEDED);
        let pi = event.payment_intent().unwrap();
        assert_eq!(pi.status, PaymentIntentStatus::Other("requires_capture".into()));
        assert_eq!(
            pi.payment_method_types,
            vec![PaymentMethod::Ethereum, PaymentMethod::Other("lightning".into())]
        );
        assert_eq!(pi.metadata.get("order").map(String::as_str), Some("42"));
        assert_eq!(pi.description, None);
        assert_eq!(event.created(), Some(1732264800));
        assert_eq!(event.field("api_version").unwrap().get(), r#""v1""#);
    }

    #[test]
    fn bad_amounts_are_payload_errors_with_a_reason() {
        for (amount, needle) in [
            ("-5", "got the negative number -5"),
            ("-0", "negative"),
            ("1.5", "got the non-integer number 1.5"),
            ("1e3", "non-integer"),
            ("2.0", "non-integer"),
            (r#""100""#, r#"got the value "100""#),
            ("null", "got the value null"),
            ("340282366920938463463374607431768211456", "larger than 2^128 - 1"), // u128::MAX + 1
        ] {
            let err = Event::from_slice(pi_body(PAYMENT_INTENT_SUCCEEDED, amount).as_bytes()).unwrap_err();
            let Error::InvalidPayload(msg) = &err else {
                panic!("{err:?}")
            };
            assert!(msg.contains(needle), "{amount}: {msg}");
        }
    }

    #[test]
    fn other_types_keep_raw_data() {
        let event = Event::from_slice(br#"{"id":"evt_2","type":"transfer.created","data":{"amount":1e400}}"#)
            .unwrap();
        let EventKind::Other { data } = event.kind() else {
            panic!()
        };
        assert_eq!(data.get(), r#"{"amount":1e400}"#);
        let event = Event::from_slice(br#"{"type":"x.y","id":"evt_3"}"#).unwrap();
        assert!(matches!(event.kind(), EventKind::Other { data } if data.get() == "null"));
    }

    #[test]
    fn envelope_errors_say_what_is_missing() {
        let msg = |body: &str| match Event::from_slice(body.as_bytes()) {
            Err(Error::InvalidPayload(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(msg("not json").contains("expected"));
        assert!(msg("[1,2]").contains("an event object"));
        assert_eq!(msg(r#"{"type":"a"}"#), "event has no id");
        assert_eq!(msg(r#"{"id":"evt_1"}"#), "event has no type");
        assert_eq!(msg(r#"{"id":"","type":"a"}"#), "event id is empty");
        assert!(msg(r#"{"id":"evt_1","id":"evt_2","type":"a"}"#).contains("duplicate field `id`"));
        assert_eq!(
            msg(r#"{"id":"evt_1","type":"payment_intent.failed"}"#),
            "payment event has no data"
        );
        assert_eq!(
            msg(r#"{"id":"evt_1","type":"payment_intent.failed","data":{}}"#),
            "payment event has no data.object"
        );
        assert!(msg(r#"{"id":"evt_1","type":"payment_intent.failed","data":{"object":{"id":"pi_1","object":"charge","amount":1,"currency":"btc","status":"succeeded"}}}"#)
            .contains("not a payment_intent"));
        assert!(msg(r#"{"id":"evt_1","type":"payment_intent.failed","data":{"object":{"id":"pi_1","currency":"btc","status":"succeeded"}}}"#)
            .contains("missing field `amount`"));
        assert!(
            msg(r#"{"id":"evt_1","type":"payment_intent.failed","data":{"object":{"id":"pi_1"#)
                .contains("EOF")
        );
    }

    #[test]
    fn custom_types_parse_from_the_same_body() {
        #[derive(Deserialize)]
        struct Mine {
            id: String,
        }
        let mine: Mine = parse_as(br#"{"id":"evt_5","type":"x"}"#).unwrap();
        assert_eq!(mine.id, "evt_5");
        assert!(matches!(parse_as::<Mine>(b"{}"), Err(Error::InvalidPayload(_))));
    }
}
