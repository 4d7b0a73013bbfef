//! The payment intent model: [`PaymentIntent`], its status and payment methods,
//! and the exact reading of amounts and metadata.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;

use super::packed::{self, AppendStr, PackedMap};
use crate::untrusted::Untrusted;

/// A payment intent: one customer payment.
///
/// Amounts are in the currency's smallest unit (satoshi, wei, …) and exact.
///
/// A field a sender may leave out is an `Option` and is `None` when it was
/// not sent: payhook never fills in a value the sender did not give (an
/// intent without `amount_received` has `amount_received: None`, not 0).
/// `id`, `amount`, `currency` and `status` are required; `object` is assumed
/// `payment_intent` and `metadata` empty when absent (PROTOCOL.md,
/// "Omitted-field rules", has the table).
///
/// ```
/// use payhook::{Event, PaymentIntent};
///
/// let body = br#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":
///   {"id":"pi_1","amount":5,"currency":"btc","status":"succeeded"}}}"#;
/// let event = Event::from_slice(body).unwrap();
/// let pi: &PaymentIntent = event.payment_intent().unwrap();
/// assert_eq!(pi.amount_received, None); // not sent, not invented
/// assert_eq!(pi.payment_method_types, None);
/// ```
///
/// It deserializes from any `serde_json` source (text, a reader, a
/// `serde_json::Value`); an [`Event`](super::Event) reads it straight from the
/// body, without the copy that takes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PaymentIntent {
    /// Identifier, `pi_…`.
    pub id: String,
    /// Always `payment_intent` (assumed when absent; any other value is an error).
    pub object: String,
    /// The amount to pay, in the smallest unit of the currency.
    pub amount: u128,
    /// The amount received so far; `None` when the sender left it out (or
    /// sent `null`), which is not the same as `Some(0)`.
    pub amount_received: Option<u128>,
    /// Lowercase currency code (`btc`, `eth`, `usdc`, …).
    pub currency: String,
    /// Accepted payment methods; `None` when the sender left them out (or
    /// sent `null`).
    pub payment_method_types: Option<Vec<PaymentMethod>>,
    /// Lifecycle status.
    pub status: PaymentIntentStatus,
    /// Creation time, unix seconds; `None` when absent or `null`.
    pub created: Option<i64>,
    /// Free text, when set.
    pub description: Option<String>,
    /// The integrator's key–value pairs (empty when absent or null).
    pub metadata: Metadata,
}

impl PaymentIntent {
    /// The `object` value of every payment intent.
    pub const OBJECT: &'static str = "payment_intent";
}

/// The wire format: the fields in the service's order, amounts as exact JSON
/// integers (beyond 2^64 too), `amount_received`, `payment_method_types` and
/// `created` omitted when `None`, `description` written as `null` when `None`.
/// What it writes reads back as the same intent.
///
/// ```
/// use payhook::PaymentIntent;
///
/// let json = r#"{"id":"pi_1","object":"payment_intent","amount":340282366920938463463374607431768211455,"currency":"eth","status":"succeeded","description":null,"metadata":{"order":"42"}}"#;
/// let intent: PaymentIntent = serde_json::from_str(json).unwrap();
/// assert_eq!(serde_json::to_string(&intent).unwrap(), json);
/// ```
impl Serialize for PaymentIntent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let optional = usize::from(self.amount_received.is_some())
            + usize::from(self.payment_method_types.is_some())
            + usize::from(self.created.is_some());
        let mut out = serializer.serialize_struct("PaymentIntent", 7 + optional)?;
        out.serialize_field("id", &self.id)?;
        out.serialize_field("object", &self.object)?;
        out.serialize_field("amount", &self.amount)?;
        match self.amount_received {
            Some(received) => out.serialize_field("amount_received", &received)?,
            None => out.skip_field("amount_received")?,
        }
        out.serialize_field("currency", &self.currency)?;
        match &self.payment_method_types {
            Some(methods) => out.serialize_field("payment_method_types", methods)?,
            None => out.skip_field("payment_method_types")?,
        }
        out.serialize_field("status", &self.status)?;
        match self.created {
            Some(created) => out.serialize_field("created", &created)?,
            None => out.skip_field("created")?,
        }
        out.serialize_field("description", &self.description)?;
        out.serialize_field("metadata", &self.metadata)?;
        out.end()
    }
}

impl PaymentIntent {
    /// A payment intent with the required fields; the optional ones are
    /// `None` (not sent) and the metadata empty. Set fields directly after.
    ///
    /// ```
    /// use payhook::{PaymentIntent, PaymentIntentStatus};
    ///
    /// let mut intent = PaymentIntent::new("pi_1", 5_000, "btc", PaymentIntentStatus::Succeeded);
    /// intent.amount_received = Some(5_000);
    /// assert_eq!(serde_json::to_value(&intent).unwrap()["amount_received"], 5_000);
    /// ```
    pub fn new(
        id: impl Into<String>,
        amount: u128,
        currency: impl Into<String>,
        status: PaymentIntentStatus,
    ) -> Self {
        Self {
            id: id.into(),
            object: Self::OBJECT.to_owned(),
            amount,
            amount_received: None,
            currency: currency.into(),
            payment_method_types: None,
            status,
            created: None,
            description: None,
            metadata: Metadata::default(),
        }
    }
}

impl<'de> Deserialize<'de> for PaymentIntent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // The fields borrow their JSON text (amounts, metadata) from the input,
        // which only text deserializers can lend: take the intent's text first,
        // from whatever source, and read the fields from it.
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        let text = raw.get();
        serde_json::from_str::<IntentFields>(text)
            .and_then(|fields| {
                fields.into_intent(|| Ok(serde_json::from_str::<MetadataOnly>(text)?.metadata))
            })
            .map_err(de::Error::custom)
    }
}

/// The fields of a [`PaymentIntent`] as read from JSON text, borrowing what
/// they can from it: the event parser reads this straight from the body. One
/// field list with the public struct, whose `Deserialize` goes through it.
#[derive(Deserialize)]
pub(super) struct IntentFields {
    id: String,
    #[serde(default = "object_default")]
    object: String,
    #[serde(deserialize_with = "amount")]
    amount: u128,
    #[serde(default, deserialize_with = "optional_amount")]
    amount_received: Option<u128>,
    currency: String,
    #[serde(default)]
    payment_method_types: Option<Vec<PaymentMethod>>,
    status: PaymentIntentStatus,
    #[serde(default)]
    created: Option<i64>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default, deserialize_with = "metadata_in_place")]
    metadata: MetadataRead,
}

fn object_default() -> String {
    PaymentIntent::OBJECT.to_owned()
}

impl IntentFields {
    /// The payment intent. When a metadata value was of a type whose text
    /// the in-place read cannot keep exactly, `exact_metadata` reads the
    /// metadata again from the JSON text (rare: the service sends strings).
    pub(super) fn into_intent(
        self,
        exact_metadata: impl FnOnce() -> Result<Metadata, serde_json::Error>,
    ) -> Result<PaymentIntent, serde_json::Error> {
        let metadata = if self.metadata.needs_exact_text {
            exact_metadata()?
        } else {
            self.metadata.metadata
        };
        Ok(PaymentIntent {
            id: self.id,
            object: self.object,
            amount: self.amount,
            amount_received: self.amount_received,
            currency: self.currency,
            payment_method_types: self.payment_method_types,
            status: self.status,
            created: self.created,
            description: self.description,
            metadata,
        })
    }
}

/// Metadata as read in place, and whether a value needs its exact JSON text
/// read again (a number with a fraction or beyond 64 bits, an array, an
/// object): serde hands those over as `f64` or as parts, not as text.
#[derive(Default)]
struct MetadataRead {
    metadata: Metadata,
    needs_exact_text: bool,
}

/// The metadata of a payment intent's JSON text, read exactly.
#[derive(Deserialize)]
pub(super) struct MetadataOnly {
    #[serde(default, deserialize_with = "metadata_exact")]
    pub(super) metadata: Metadata,
}

/// The metadata of an event's `data`, read exactly.
#[derive(Deserialize)]
pub(super) struct DataMetadataOnly {
    object: MetadataOnly,
}

impl DataMetadataOnly {
    pub(super) fn into_metadata(self) -> Metadata {
        self.object.metadata
    }
}

/// The metadata of a whole event body, read exactly.
#[derive(Deserialize)]
pub(super) struct EventMetadataOnly {
    data: DataMetadataOnly,
}

impl EventMetadataOnly {
    pub(super) fn into_metadata(self) -> Metadata {
        self.data.into_metadata()
    }
}

/// A payment intent's metadata: the integrator's key–value pairs, in key order.
///
/// The service sends string values. A value of another JSON type (`42`,
/// `true`, `null`, an array or an object) is kept as its JSON text exactly as
/// sent (`"order_id": 42` reads `42`, `"tags": ["a", "b"]` reads
/// `["a", "b"]`), so a correctly signed event is never refused over its
/// metadata; a string value is kept unescaped, so `"42"` and `42` both read
/// `42`. A key sent twice makes the event invalid, as anywhere in an event
/// (PROTOCOL.md, "One rule for repeated keys"); built from pairs in code
/// ([`FromIterator`]), the last value of a key is kept.
///
/// A read-only map: every key and value live in one buffer, so reading an
/// event does not allocate per entry. [`to_map`](Self::to_map) gives a
/// `BTreeMap` to edit.
///
/// ```
/// use payhook::Metadata;
///
/// let metadata: Metadata = [("order_id", "ord_42"), ("plan", "pro")].into_iter().collect();
/// assert_eq!(metadata.get("order_id"), Some("ord_42"));
/// assert_eq!(metadata.get("coupon"), None);
/// assert_eq!(metadata.iter().map(|(key, _)| key).collect::<Vec<_>>(), ["order_id", "plan"]);
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Metadata(PackedMap);

impl Metadata {
    /// No entries.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.0.get(key).is_some()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }

    /// The entries in key order.
    pub fn iter(&self) -> MetadataIter<'_> {
        MetadataIter(self.0.iter())
    }

    /// The entries as a map of owned strings.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
    }
}

impl fmt::Debug for Metadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Metadata {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        let mut packed = PackedMap::default();
        for (key, value) in entries {
            packed.push(key.as_ref(), value.as_ref());
        }
        Self(packed.finish())
    }
}

impl From<BTreeMap<String, String>> for Metadata {
    fn from(map: BTreeMap<String, String>) -> Self {
        map.iter().collect()
    }
}

impl From<Metadata> for BTreeMap<String, String> {
    fn from(metadata: Metadata) -> Self {
        metadata.to_map()
    }
}

impl PartialEq<BTreeMap<String, String>> for Metadata {
    fn eq(&self, other: &BTreeMap<String, String>) -> bool {
        self.len() == other.len()
            && self
                .iter()
                .zip(other)
                .all(|((k, v), (other_k, other_v))| k == other_k && v == other_v)
    }
}

impl<'a> IntoIterator for &'a Metadata {
    type Item = (&'a str, &'a str);
    type IntoIter = MetadataIter<'a>;

    fn into_iter(self) -> MetadataIter<'a> {
        self.iter()
    }
}

impl Serialize for Metadata {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

/// The entries of a [`Metadata`], in key order.
#[derive(Clone, Debug)]
pub struct MetadataIter<'a>(packed::Iter<'a>);

impl<'a> Iterator for MetadataIter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for MetadataIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back()
    }
}

impl ExactSizeIterator for MetadataIter<'_> {}

/// Reads `metadata` (an object, or null) into one buffer in one pass: each
/// key, string, boolean, null and integer value is appended as it is read.
/// Another value (an array, an object, a number with a fraction or beyond 64
/// bits) cannot be kept exactly this way and marks the read for
/// [`metadata_exact`].
fn metadata_in_place<'de, D: Deserializer<'de>>(deserializer: D) -> Result<MetadataRead, D::Error> {
    deserializer.deserialize_option(MetadataVisitor { exact: false })
}

/// Reads `metadata` keeping every non-string value's JSON text exactly.
fn metadata_exact<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Metadata, D::Error> {
    deserializer
        .deserialize_option(MetadataVisitor { exact: true })
        .map(|read| read.metadata)
}

struct MetadataVisitor {
    /// Every value through its raw JSON text (borrowed from the input).
    exact: bool,
}

impl<'de> Visitor<'de> for MetadataVisitor {
    type Value = MetadataRead;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object or null")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(MetadataRead::default())
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(MetadataRead::default())
    }

    fn visit_some<D2: Deserializer<'de>>(self, deserializer: D2) -> Result<Self::Value, D2::Error> {
        deserializer.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // Room for a typical integrator's metadata without regrowing.
        let mut packed = PackedMap::with_capacity(16, 512);
        let mut needs_exact_text = false;
        loop {
            let start = packed.text_len();
            if map.next_key_seed(AppendStr(packed.text_mut()))?.is_none() {
                break;
            }
            let key_end = packed.text_len();
            if self.exact {
                let value = map.next_value::<&'de RawValue>()?;
                append_exact_value(packed.text_mut(), value.get())?;
            } else if !map.next_value_seed(AppendValue(packed.text_mut()))? {
                needs_exact_text = true;
            }
            packed.commit(start, key_end);
        }
        let packed = packed.finish_unique().map_err(|key| {
            de::Error::custom(format_args!(
                "duplicate key `{}` in metadata",
                Untrusted::value(&key)
            ))
        })?;
        Ok(MetadataRead {
            metadata: Metadata(packed),
            needs_exact_text,
        })
    }
}

/// Appends a metadata value read in place; `false` when its exact text is
/// not known (see [`metadata_in_place`]).
struct AppendValue<'b>(&'b mut String);

impl<'de> DeserializeSeed<'de> for AppendValue<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AppendValue<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<bool, E> {
        self.0.push_str(value);
        Ok(true)
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<bool, E> {
        self.0.push_str(if value { "true" } else { "false" });
        Ok(true)
    }

    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        self.0.push_str("null");
        Ok(true)
    }

    // JSON writes an integer one way only (no sign on positives, no leading
    // zeros), so printing it gives back the text sent.
    fn visit_u64<E: de::Error>(self, value: u64) -> Result<bool, E> {
        self.0.push_str(itoa::Buffer::new().format(value));
        Ok(true)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<bool, E> {
        self.0.push_str(itoa::Buffer::new().format(value));
        Ok(true)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(false)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
        Ok(false)
    }
}

/// Appends a metadata value from its JSON text: a string's text, anything
/// else's JSON text.
fn append_exact_value<E: de::Error>(text: &mut String, json: &str) -> Result<(), E> {
    match json.strip_prefix('"').and_then(|rest| rest.strip_suffix('"')) {
        // Nothing escaped: the text between the quotes is the value.
        Some(inner) if !inner.contains('\\') => {
            text.push_str(inner);
            Ok(())
        }
        Some(_) => AppendStr(text)
            .deserialize(&mut serde_json::Deserializer::from_str(json))
            .map_err(de::Error::custom),
        None => {
            text.push_str(json);
            Ok(())
        }
    }
}

/// An amount that may be absent (the field's `default`) or `null`.
fn optional_amount<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u128>, D::Error> {
    match Option::<&RawValue>::deserialize(deserializer)? {
        Some(raw) => amount_from_text(raw.get()).map(Some),
        None => Ok(None),
    }
}

/// Reads an amount exactly from its JSON text, with a message a person can act
/// on for everything that is not a non-negative integer. Going through the raw
/// text (rather than serde's number visitors) keeps integers beyond 2^64 exact
/// and tells a negative number apart from one that is too large.
fn amount<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u128, D::Error> {
    amount_from_text(<&RawValue>::deserialize(deserializer)?.get())
}

fn amount_from_text<E: de::Error>(text: &str) -> Result<u128, E> {
    let fail = |what: &str| {
        E::custom(format!(
            "amount must be a non-negative integer, got {what} {text}"
        ))
    };
    match text.as_bytes().first() {
        Some(b'-') => Err(fail("the negative number")),
        // Up to 19 digits fit a u64, whose parse costs a fraction of u128's.
        Some(b'0'..=b'9') if text.len() <= 19 && text.bytes().all(|b| b.is_ascii_digit()) => {
            text.parse::<u64>().map(u128::from).map_err(|_| fail("the value"))
        }
        Some(b'0'..=b'9') if text.bytes().all(|b| b.is_ascii_digit()) => text
            .parse::<u128>()
            .map_err(|_| E::custom(format!("amount {text} is larger than 2^128 - 1"))),
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

impl Serialize for PaymentMethod {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
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

impl Serialize for PaymentIntentStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl PaymentIntentStatus {
    /// The status a string names: [`Succeeded`](Self::Succeeded) for
    /// `succeeded`, [`Other`](Self::Other) for anything else.
    pub fn from_name(name: &str) -> Self {
        match name {
            "succeeded" => Self::Succeeded,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl PaymentMethod {
    /// The method a string names: the known ones, [`Other`](Self::Other) for
    /// anything else.
    pub fn from_name(name: &str) -> Self {
        match name {
            "bitcoin" => Self::Bitcoin,
            "ethereum" => Self::Ethereum,
            other => Self::Other(other.to_owned()),
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
