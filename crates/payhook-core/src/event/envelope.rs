//! The envelope: [`Event`], [`EventKind`], and the parse of a body into them.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::catalogue::{self, read_speculated, EventType, ReadData};
use super::data::DataField;
use super::packed::PackedMap;
use super::{invalid, payload_error, EventKind, PaymentIntent};
use crate::error::Error;
use crate::untrusted::Untrusted;

/// A verified webhook event.
#[derive(Debug, Clone)]
pub struct Event {
    id: String,
    event_type: String,
    kind: EventKind,
    /// Every other top-level field: its name and its JSON text, exactly as sent.
    extra: PackedMap,
}

impl Event {
    /// Parses a raw body into an event.
    ///
    /// # Errors
    /// [`Error::InvalidPayload`] saying what is wrong: not JSON, not an object, no
    /// `id` or `type`, or a payment event whose `data.object` is not a valid
    /// payment intent (for example a negative or fractional amount).
    pub fn from_slice(body: &[u8]) -> Result<Self, Error> {
        Self::parse(body, None)
    }

    /// Parses the body of a delivery whose event id travels outside the body:
    /// Standard Webhooks' `webhook-id` header, whose bodies are
    /// `{"type", "timestamp", "data"}` without an `id`.
    ///
    /// `id` is the event's [`id`](Self::id); the body's own `id`, if any, is
    /// ignored. A payment event's intent is `data.object`, as in the service's
    /// format, or `data` itself when `data.object` is the string
    /// `"payment_intent"` or `data` has no `object` member (the intent sent
    /// bare, as Standard Webhooks senders send a resource). Every other rule
    /// is [`from_slice`](Self::from_slice)'s.
    ///
    /// ```
    /// use payhook::Event;
    ///
    /// let body = br#"{"type":"payment_intent.succeeded","timestamp":"2026-11-25T21:00:00Z",
    ///   "data":{"id":"pi_1","object":"payment_intent","amount":1500,"currency":"btc","status":"succeeded"}}"#;
    /// let event = Event::from_slice_with_id(body, "msg_1").unwrap();
    /// assert_eq!(event.id(), "msg_1");
    /// assert_eq!(event.payment_intent().unwrap().amount, 1500);
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidPayload`], as for [`from_slice`](Self::from_slice), and
    /// for an empty `id`.
    pub fn from_slice_with_id(body: &[u8], id: &str) -> Result<Self, Error> {
        let error = match Self::parse(body, Some(id)) {
            Ok(event) => return Ok(event),
            Err(error) => error,
        };
        // Only a failed parse pays for looking at a bare intent.
        match with_bare_intent_wrapped(body) {
            Some(wrapped) => Self::parse(wrapped.as_bytes(), Some(id)),
            None => Err(error),
        }
    }

    /// The parse; `external_id` replaces the body's `id` when given.
    fn parse(body: &[u8], external_id: Option<&str>) -> Result<Self, Error> {
        // JSON text is UTF-8 (RFC 8259). Checking the whole body once, up front,
        // rejects invalid bytes even inside fields that are skipped unread, and
        // lets serde_json read the body as text without checking each string.
        let text = std::str::from_utf8(body)
            .map_err(|err| Error::InvalidPayload(format!("body is not UTF-8 text: {err}")))?;
        let envelope = match read_envelope(text, DataFirst::Speculate) {
            Ok(envelope) if !envelope.needs_raw_data() => envelope,
            // Nothing was guessed, so a second read would fail alike.
            Err(Failed {
                error,
                speculated: false,
            }) => return Err(error),
            // `data` came first and was not the payment intent it was taken for.
            _ => read_envelope(text, DataFirst::KeepRaw).map_err(|failed| failed.error)?,
        };
        let id = match external_id {
            Some(id) => id.to_owned(),
            None => envelope.id.ok_or_else(|| invalid("event has no id"))?,
        };
        if id.is_empty() {
            return Err(invalid("event id is empty"));
        }
        let event_type = envelope.event_type.ok_or_else(|| invalid("event has no type"))?;
        let kind = match envelope.known {
            Some(entry) => EventKind::from_data(entry.index, envelope.data, text)?,
            None => EventKind::Other {
                data: match envelope.data {
                    DataField::Raw(data) => data.to_owned(),
                    // Read as typed data only once `type` said so.
                    DataField::Absent | DataField::Read(_) => null_raw(),
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
        self.kind.payment_intent()
    }

    /// The id of the payment intent this event is about, if its kind's data
    /// names one: a payment event's intent id, or the intent a data type of
    /// the catalogue names (say a refund's `payment_intent`). `None` for a
    /// type outside the catalogue. The durable inbox orders events by it:
    /// an event waits for its intent's earlier events.
    ///
    /// ```
    /// use payhook::Event;
    ///
    /// let body = br#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":
    ///   {"id":"pi_1","amount":5,"currency":"btc","status":"succeeded"}}}"#;
    /// assert_eq!(Event::from_slice(body).unwrap().payment_intent_id(), Some("pi_1"));
    ///
    /// let body = br#"{"id":"evt_2","type":"kyc.check.completed","data":{"object":
    ///   {"id":"chk_1","payment_intent":"pi_1"}}}"#;
    /// assert_eq!(Event::from_slice(body).unwrap().payment_intent_id(), None);
    /// ```
    pub fn payment_intent_id(&self) -> Option<&str> {
        self.kind.payment_intent_id()
    }

    /// Another top-level field (for example `created`, `livemode`,
    /// `api_version`, Standard Webhooks' `timestamp`), exactly as it was sent.
    ///
    /// `field("data")` is [`data`](Self::data): an event of a type outside the
    /// catalogue keeps its `data` as sent; a catalogue kind has it typed in
    /// [`kind`](Self::kind) instead, and answers `None`.
    pub fn field(&self, name: &str) -> Option<&RawValue> {
        if name == "data" {
            return self.data();
        }
        self.extra.get(name).and_then(raw_value)
    }

    /// The event's `data` exactly as it was sent (JSON `null` when the body
    /// had none), for an event of a type outside the catalogue
    /// ([`EventKind::Other`]). A catalogue kind has its data typed in
    /// [`kind`](Self::kind) — a payment event's intent is
    /// [`payment_intent`](Self::payment_intent) — and answers `None`.
    ///
    /// ```
    /// use payhook::Event;
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Check { id: String, passed: bool }
    ///
    /// // A Standard Webhooks sender's event, its resource in `data`.
    /// let body = br#"{"type":"kyc.check.completed","timestamp":"2026-11-25T21:00:00Z",
    ///   "data":{"id":"chk_1","passed":true}}"#;
    /// let event = Event::from_slice_with_id(body, "msg_1").unwrap();
    /// assert_eq!(event.data().unwrap().get(), r#"{"id":"chk_1","passed":true}"#);
    /// let check: Check = event.data_as().unwrap();
    /// assert!(check.passed && check.id == "chk_1");
    /// ```
    pub fn data(&self) -> Option<&RawValue> {
        match &self.kind {
            EventKind::Other { data } => Some(data),
            _ => None,
        }
    }

    /// The event's `data` read into `T`, for an event of a type outside the
    /// catalogue (see [`data`](Self::data)).
    ///
    /// # Errors
    /// [`Error::InvalidPayload`] naming `data` when it does not fit `T`, or
    /// when the event is a catalogue kind, whose data is typed in
    /// [`kind`](Self::kind).
    pub fn data_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, Error> {
        let data = self.data().ok_or_else(|| {
            Error::InvalidPayload(format!(
                "the data of a {} event is typed: read it from Event::kind",
                Untrusted::value(&self.event_type)
            ))
        })?;
        serde_json::from_str(data.get()).map_err(|err| Error::InvalidPayload(format!("data: {err}")))
    }

    /// Every other top-level field, by name.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &RawValue)> {
        self.extra
            .iter()
            .filter_map(|(name, json)| Some((name, raw_value(json)?)))
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

/// The body with a bare payment intent in `data` (its `object` the string
/// `"payment_intent"`, or no `object` at all, as the Standard Webhooks
/// examples send a resource) wrapped as `{"object": …}`, the service's shape;
/// `None` when `data` is not such an intent.
fn with_bare_intent_wrapped(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct DataOnly<'a> {
        #[serde(borrow)]
        data: Option<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct ObjectTag {
        object: Option<String>,
    }
    let text = std::str::from_utf8(body).ok()?;
    let data = serde_json::from_str::<DataOnly<'_>>(text).ok()?.data?.get();
    // A JSON object whose `object` is absent or the intent's tag; a `data`
    // whose `object` is anything else (another resource's tag, or the
    // service's wrapper) keeps the first parse's error.
    let tag = serde_json::from_str::<ObjectTag>(data).ok()?.object;
    if tag.is_some_and(|tag| tag != PaymentIntent::OBJECT) {
        return None;
    }
    // `data` borrows from `text`: its place in it, to splice the wrapper in.
    let start = (data.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let end = start.checked_add(data.len())?;
    Some(format!(
        r#"{}{{"object":{data}}}{}"#,
        text.get(..start)?,
        text.get(end..)?
    ))
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

/// A field's kept JSON text as a `RawValue`. The text was read as one JSON
/// value by the parse, so this only re-scans it; `None` cannot happen.
fn raw_value(json: &str) -> Option<&RawValue> {
    serde_json::from_str(json).ok()
}

fn null_raw() -> Box<RawValue> {
    RawValue::from_string("null".to_owned()).unwrap_or_else(|_| unreachable_null())
}

#[cold]
fn unreachable_null() -> Box<RawValue> {
    // `null` is always valid JSON; this path exists only to avoid a panic path.
    serde_json::value::to_raw_value(&()).unwrap_or_default()
}

/// What [`read_envelope`] does with a `data` that comes before `type`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum DataFirst {
    /// Reads it as the catalogue's guessed data type (a payment intent), on
    /// the guess that the event carries it. If the guess is wrong the body is
    /// read again with [`KeepRaw`](Self::KeepRaw).
    Speculate,
    /// Keeps it as raw JSON, to read as the kind's data once `type` says so.
    KeepRaw,
}

/// A failed envelope read, and whether it read `data` on a guess (then a
/// [`DataFirst::KeepRaw`] read may succeed, or fail with another message).
struct Failed {
    error: Error,
    speculated: bool,
}

/// Reads the envelope and checks that nothing follows it. An error met while
/// reading typed data (a payment intent) in the same pass is reported as a `data.object`
/// error, as it is when the intent is read from the kept raw `data`.
fn read_envelope(text: &str, data_first: DataFirst) -> Result<Envelope<'_>, Failed> {
    let mut de = serde_json::Deserializer::from_str(text);
    let mut progress = Progress {
        in_data: false,
        speculated: false,
    };
    let envelope = EnvelopeSeed {
        data_first,
        progress: &mut progress,
    }
    .deserialize(&mut de)
    .and_then(|envelope| de.end().map(|()| envelope));
    envelope.map_err(|err| Failed {
        error: match (progress.in_data, err.classify()) {
            (true, serde_json::error::Category::Data) => Error::InvalidPayload(format!("data.object: {err}")),
            _ => payload_error(err),
        },
        speculated: progress.speculated,
    })
}

/// The first parsing step: the fields every event has, with every other field
/// kept as raw JSON.
struct Envelope<'a> {
    id: Option<String>,
    event_type: Option<String>,
    /// The catalogue's entry for `event_type`, looked up once when it is read.
    known: Option<&'static EventType>,
    data: DataField<'a, ReadData>,
    extra: PackedMap,
    /// `data` came before `type` and was read as the guessed data type.
    speculated: bool,
}

impl Envelope<'_> {
    /// Whether `data` was read on the guess, but `type` (or its absence)
    /// says the event needs it raw.
    fn needs_raw_data(&self) -> bool {
        self.speculated && !self.known.is_some_and(EventType::takes_speculated_data)
    }
}

/// Deserializes an [`Envelope`], noting where it got to.
struct EnvelopeSeed<'f> {
    data_first: DataFirst,
    progress: &'f mut Progress,
}

/// Where an envelope read got to, for its error.
struct Progress {
    /// Inside typed data whose `type` is known.
    in_data: bool,
    /// `data` was read as the guessed data type before `type` was known.
    speculated: bool,
}

enum EnvelopeKey {
    Id,
    Type,
    Data,
    /// Another field, whose name was appended to the envelope's kept fields.
    Other,
}

/// Reads a top-level key; the name of a field other than `id`, `type` and
/// `data` is appended to `extra`'s buffer, so keeping it costs no allocation.
struct EnvelopeKeySeed<'m>(&'m mut PackedMap);

impl<'de> DeserializeSeed<'de> for EnvelopeKeySeed<'_> {
    type Value = EnvelopeKey;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<EnvelopeKey, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl Visitor<'_> for EnvelopeKeySeed<'_> {
    type Value = EnvelopeKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<EnvelopeKey, E> {
        Ok(match key {
            "id" => EnvelopeKey::Id,
            "type" => EnvelopeKey::Type,
            "data" => EnvelopeKey::Data,
            other => {
                self.0.text_mut().push_str(other);
                EnvelopeKey::Other
            }
        })
    }
}

impl<'de> de::DeserializeSeed<'de> for EnvelopeSeed<'_> {
    type Value = Envelope<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Envelope<'de>, D::Error> {
        struct EnvelopeVisitor<'f> {
            data_first: DataFirst,
            progress: &'f mut Progress,
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
                    known: None,
                    data: DataField::Absent,
                    extra: PackedMap::with_capacity(8, 128),
                    speculated: false,
                };
                loop {
                    let start = envelope.extra.text_len();
                    let Some(key) = map.next_key_seed(EnvelopeKeySeed(&mut envelope.extra))? else {
                        break;
                    };
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
                            let event_type = map.next_value::<String>()?;
                            envelope.known = EventType::find(&event_type);
                            envelope.event_type = Some(event_type);
                        }
                        EnvelopeKey::Data => {
                            if !matches!(envelope.data, DataField::Absent) {
                                return Err(de::Error::duplicate_field("data"));
                            }
                            envelope.data = match (envelope.known, envelope.event_type.is_some()) {
                                (Some(entry), _) => {
                                    self.progress.in_data = true;
                                    let data = catalogue::read_data(entry.carries, &mut map)?;
                                    self.progress.in_data = false;
                                    DataField::Read(data)
                                }
                                (None, false) if self.data_first == DataFirst::Speculate => {
                                    self.progress.speculated = true;
                                    envelope.speculated = true;
                                    DataField::Read(read_speculated(&mut map)?)
                                }
                                _ => DataField::Raw(map.next_value::<&'de RawValue>()?),
                            };
                        }
                        EnvelopeKey::Other => {
                            let name_end = envelope.extra.text_len();
                            let value = map.next_value::<&'de RawValue>()?;
                            envelope.extra.text_mut().push_str(value.get());
                            envelope.extra.commit(start, name_end);
                        }
                    }
                }
                envelope.extra = envelope.extra.finish_unique().map_err(|key| {
                    de::Error::custom(format_args!("duplicate field `{}`", Untrusted::value(&key)))
                })?;
                Ok(envelope)
            }
        }
        deserializer.deserialize_map(EnvelopeVisitor {
            data_first: self.data_first,
            progress: self.progress,
        })
    }
}
