//! The payment intent model: [`PaymentIntent`], its status and payment methods,
//! and the exact reading of amounts and metadata.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

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
    ///
    /// The service sends string values. A value of another JSON type (`42`,
    /// `true`, `null`, an array or an object) is kept as its JSON text exactly
    /// as sent (`"order_id": 42` gives `"42"`, `"tags": ["a", "b"]` gives
    /// `["a", "b"]`), so a correctly signed event is never refused over its
    /// metadata; a string value is kept unescaped, so `"42"` and `42` both read
    /// `42`.
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

/// Reads `metadata` (an object, or null) by collecting the entries and building
/// the map in one go: the service sends the keys sorted, and a sorted run is
/// built without the search per key that inserting one by one costs. A
/// repeated key keeps its last value, as inserting would.
fn metadata<'de, D: Deserializer<'de>>(deserializer: D) -> Result<BTreeMap<String, String>, D::Error> {
    struct MetadataVisitor;
    impl<'de> Visitor<'de> for MetadataVisitor {
        type Value = BTreeMap<String, String>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object or null")
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
            while let Some(entry) = map.next_entry::<String, MetadataValue>()? {
                let (key, MetadataValue(value)) = entry;
                entries.push((key, value));
            }
            Ok(entries.into_iter().collect())
        }
    }
    deserializer.deserialize_option(MetadataVisitor)
}

/// One metadata value: a string as its text, anything else as its JSON text.
struct MetadataValue(String);

impl<'de> Deserialize<'de> for MetadataValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // The raw text serves both cases: the service sends strings, whose
        // text is the value between the quotes when nothing is escaped.
        let raw: Box<str> = Box::<RawValue>::deserialize(deserializer)?.into();
        let mut text = String::from(raw);
        if !text.starts_with('"') {
            return Ok(Self(text));
        }
        if text.contains('\\') {
            return serde_json::from_str(&text).map(Self).map_err(de::Error::custom);
        }
        text.pop();
        text.remove(0);
        Ok(Self(text))
    }
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
