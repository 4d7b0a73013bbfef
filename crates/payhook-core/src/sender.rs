//! Deliveries as the payment service makes them: an event's JSON body and its
//! signature header.
//!
//! This is what a sender does, so it is compiled in every build: the `payhook`
//! CLI's `send` and `sign` use it, and so can a forwarding or replay tool.
//!
//! * [`EventBuilder`] makes realistic events of every known type (and unknown
//!   ones), with sensible defaults and overrides;
//! * [`SignedDelivery`] signs a body with a secret at a chosen time, the
//!   service's `t=…,v1=…` header; with feature `testing` it also turns into an
//!   `http::Request` that an axum `Router` or any tower service takes as it is
//!   (`app.oneshot(delivery.to_request("/webhooks"))`);
//! * [`StandardDelivery`] and [`StandardSigner`] sign the Standard Webhooks
//!   way (`webhook-id`, `webhook-timestamp`, `webhook-signature`), `v1` with a
//!   `whsec_` secret or `v1a` with a `whsk_` Ed25519 key (feature `ed25519`);
//!   [`generate_standard_secret`] and `generate_standard_keypair` make fresh keys;
//! * [`unique_event_id`] and [`unix_now`] are the id and time a fresh event gets
//!   ([`unique_message_id`] a fresh `webhook-id`).
//!
//! ```
//! use payhook::sender::{EventBuilder, SignedDelivery};
//!
//! let event = EventBuilder::payment_intent_succeeded().amount(42_000).currency("btc");
//! let delivery = SignedDelivery::now(event.to_json(), "whsec_test_secret").unwrap();
//! assert!(delivery.signature.starts_with("t="));
//! // POST `delivery.body` with the header `x-service-signature: {delivery.signature}`.
//! ```

mod standard;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
#[cfg(feature = "testing")]
use http_body_util::Full;

use serde::Serialize;
use serde_json::value::RawValue;

use crate::error::ConfigError;
use crate::event::{Carries, EventType, PaymentIntent, PaymentIntentStatus, PaymentMethod};
use crate::event::{
    PAYMENT_INTENT_FAILED, PAYMENT_INTENT_PAYMENT_FAILED, PAYMENT_INTENT_SUCCEEDED, PAYMENT_SUCCEEDED,
};
use crate::secret::Secret;
use crate::signature::{sign, DEFAULT_HEADER};

#[cfg(feature = "ed25519")]
#[cfg_attr(docsrs, doc(cfg(feature = "ed25519")))]
pub use standard::{generate_standard_keypair, standard_public_key};
pub use standard::{generate_standard_secret, unique_message_id, StandardDelivery, StandardSigner};

/// The current unix time in seconds.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A fresh, unique event id: `evt_test_…`.
pub fn unique_event_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let random = crate::store::ClaimToken::random().as_u128() as u64;
    format!("evt_test_{random:016x}{n:04x}")
}

/// Builds the JSON body of an event.
///
/// Payment events carry a complete payment intent; every field can be
/// overridden. Amounts are written as exact integers, so wei amounts beyond
/// 2^64 come out as sent.
#[derive(Debug, Clone)]
pub struct EventBuilder {
    id: String,
    event_type: String,
    created: u64,
    intent: Option<IntentFields>,
    data: Option<String>,
}

#[derive(Debug, Clone)]
struct IntentFields {
    id: String,
    amount: u128,
    amount_received: Received,
    currency: String,
    methods: Vec<String>,
    status: String,
    description: Option<String>,
    metadata: BTreeMap<String, String>,
}

/// What a builder writes as `amount_received`.
#[derive(Debug, Clone, Copy)]
enum Received {
    /// The amount for a success, 0 otherwise.
    Default,
    Value(u128),
    /// Left out, as some senders do.
    Omitted,
}

impl IntentFields {
    fn new(status: &str) -> Self {
        Self {
            id: format!(
                "pi_test_{:016x}",
                crate::store::ClaimToken::random().as_u128() as u64
            ),
            amount: 250_000,
            amount_received: Received::Default,
            currency: "btc".to_owned(),
            methods: vec!["bitcoin".to_owned()],
            status: status.to_owned(),
            description: Some("Test payment".to_owned()),
            metadata: BTreeMap::new(),
        }
    }
}

impl EventBuilder {
    fn payment(event_type: &str, status: &str) -> Self {
        Self {
            id: unique_event_id(),
            event_type: event_type.to_owned(),
            created: unix_now(),
            intent: Some(IntentFields::new(status)),
            data: None,
        }
    }

    /// `payment_intent.succeeded`: 250 000 satoshi in `btc`, status `succeeded`.
    pub fn payment_intent_succeeded() -> Self {
        Self::of_type(PAYMENT_INTENT_SUCCEEDED)
    }

    /// `payment.succeeded`, the other spelling of the success event.
    pub fn payment_succeeded() -> Self {
        Self::of_type(PAYMENT_SUCCEEDED)
    }

    /// `payment_intent.failed`, status `requires_payment_method`.
    pub fn payment_intent_failed() -> Self {
        Self::of_type(PAYMENT_INTENT_FAILED)
    }

    /// `payment_intent.payment_failed`, the failure event under the name
    /// Stripe-style senders use; status `requires_payment_method`.
    pub fn payment_intent_payment_failed() -> Self {
        Self::of_type(PAYMENT_INTENT_PAYMENT_FAILED)
    }

    /// An event of any other type, with `data` `{}` unless set with [`data`](Self::data).
    pub fn other(event_type: &str) -> Self {
        Self {
            id: unique_event_id(),
            event_type: event_type.to_owned(),
            created: unix_now(),
            intent: None,
            data: None,
        }
    }

    /// An event of `event_type`: for a type of the event catalogue
    /// ([`EventType::find`]), an example of its data (a payment intent with the
    /// kind's [`example_status`](EventType::example_status)); for the rest, as
    /// [`other`](Self::other).
    pub fn of_type(event_type: &str) -> Self {
        match EventType::find(event_type) {
            Some(entry) if entry.carries == Carries::PaymentIntent => {
                Self::payment(event_type, entry.example_status)
            }
            Some(entry) => {
                Self::other(event_type).data(format!(r#"{{"object":{}}}"#, entry.carries.example_object()))
            }
            None => Self::other(event_type),
        }
    }

    /// The event id (default: a fresh `evt_test_…`).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// The event's `created` time (default: now).
    pub fn created(mut self, unix_seconds: u64) -> Self {
        self.created = unix_seconds;
        self
    }

    /// Replaces `data` with this raw JSON (for any type).
    pub fn data(mut self, raw_json: impl Into<String>) -> Self {
        self.data = Some(raw_json.into());
        self
    }

    fn intent(&mut self) -> &mut IntentFields {
        // Setting a payment field on an "other" event turns it into one with a
        // payment intent in `data.object`: a test may want exactly that.
        self.intent.get_or_insert_with(|| IntentFields::new("succeeded"))
    }

    /// The payment intent id.
    pub fn payment_intent_id(mut self, id: impl Into<String>) -> Self {
        self.intent().id = id.into();
        self
    }

    /// The amount, in the currency's smallest unit.
    pub fn amount(mut self, amount: u128) -> Self {
        self.intent().amount = amount;
        self
    }

    /// The amount received (default: the amount for a success, 0 otherwise).
    pub fn amount_received(mut self, amount: u128) -> Self {
        self.intent().amount_received = Received::Value(amount);
        self
    }

    /// Leaves `amount_received` out of the payment intent, as some senders
    /// do (the parsed intent then has `amount_received: None`).
    pub fn without_amount_received(mut self) -> Self {
        self.intent().amount_received = Received::Omitted;
        self
    }

    /// The currency code; also picks a matching payment method for `eth`.
    pub fn currency(mut self, currency: &str) -> Self {
        let intent = self.intent();
        intent.currency = currency.to_owned();
        if currency == "eth" {
            intent.methods = vec!["ethereum".to_owned()];
        }
        self
    }

    /// The status string.
    pub fn status(mut self, status: &str) -> Self {
        self.intent().status = status.to_owned();
        self
    }

    /// The payment methods.
    pub fn payment_method_types<I: IntoIterator<Item = S>, S: Into<String>>(mut self, methods: I) -> Self {
        self.intent().methods = methods.into_iter().map(Into::into).collect();
        self
    }

    /// The description (`None` writes `null`).
    pub fn description(mut self, description: Option<&str>) -> Self {
        self.intent().description = description.map(str::to_owned);
        self
    }

    /// Adds a metadata entry.
    pub fn metadata(mut self, key: &str, value: &str) -> Self {
        self.intent().metadata.insert(key.to_owned(), value.to_owned());
        self
    }

    /// The event id this builder writes.
    pub fn event_id(&self) -> &str {
        &self.id
    }

    /// The event type this builder writes.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The JSON body, compact, as the service sends it: serialized by serde
    /// from the core's [`PaymentIntent`], so it is the wire format an
    /// [`Event`](crate::Event) reads. Raw [`data`](Self::data) that is not JSON
    /// is written as a JSON string.
    pub fn to_json(&self) -> String {
        let data = match (&self.data, &self.intent) {
            (Some(raw), _) => match RawValue::from_string(raw.clone()) {
                Ok(raw) => Data::Raw(raw),
                Err(_) => Data::NotJson(raw),
            },
            (None, Some(fields)) => Data::Intent {
                object: Box::new(fields.to_intent(self.created)),
            },
            (None, None) => Data::Empty {},
        };
        let body = Body {
            id: &self.id,
            object: "event",
            event_type: &self.event_type,
            created: self.created,
            livemode: false,
            data,
        };
        // Strings, integers and maps of strings: serializing cannot fail.
        serde_json::to_string(&body).unwrap_or_default()
    }
}

impl EventBuilder {
    /// The event as a Standard Webhooks body: `{"type", "timestamp", "data"}`,
    /// with no `id` (the `webhook-id` header carries it), `timestamp` the
    /// creation time in RFC 3339 UTC, and a payment intent sent bare as
    /// `data` (the Standard Webhooks way; receivers read it as they read
    /// `data.object`, see PROTOCOL.md). Sign it with [`StandardDelivery`].
    ///
    /// ```
    /// use payhook::sender::EventBuilder;
    ///
    /// let json = EventBuilder::payment_intent_succeeded().created(1614265330).to_standard_json();
    /// assert!(json.starts_with(r#"{"type":"payment_intent.succeeded","timestamp":"2021-02-25T15:02:10Z","data":{"id":"pi_test_"#));
    /// ```
    pub fn to_standard_json(&self) -> String {
        let data = match (&self.data, &self.intent) {
            (Some(raw), _) => match RawValue::from_string(raw.clone()) {
                Ok(raw) => StandardData::Raw(raw),
                Err(_) => StandardData::NotJson(raw),
            },
            (None, Some(fields)) => StandardData::Intent(Box::new(fields.to_intent(self.created))),
            (None, None) => StandardData::Empty {},
        };
        let created = i64::try_from(self.created).unwrap_or(i64::MAX / 1000);
        let timestamp = crate::time::format_utc(created.saturating_mul(1000)).replace(' ', "T") + "Z";
        let body = StandardBody {
            event_type: &self.event_type,
            timestamp,
            data,
        };
        // Strings, integers and maps of strings: serializing cannot fail.
        serde_json::to_string(&body).unwrap_or_default()
    }
}

/// An event body as a Standard Webhooks sender writes it.
#[derive(Serialize)]
struct StandardBody<'a> {
    #[serde(rename = "type")]
    event_type: &'a str,
    timestamp: String,
    data: StandardData<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum StandardData<'a> {
    Raw(Box<RawValue>),
    NotJson(&'a str),
    Intent(Box<PaymentIntent>),
    Empty {},
}

/// An event body as the service writes it (keys in its order).
#[derive(Serialize)]
struct Body<'a> {
    id: &'a str,
    object: &'static str,
    #[serde(rename = "type")]
    event_type: &'a str,
    created: u64,
    livemode: bool,
    data: Data<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Data<'a> {
    Raw(Box<RawValue>),
    NotJson(&'a str),
    Intent { object: Box<PaymentIntent> },
    Empty {},
}

impl IntentFields {
    fn to_intent(&self, created: u64) -> PaymentIntent {
        let received = match self.amount_received {
            Received::Default if self.status == "succeeded" => Some(self.amount),
            Received::Default => Some(0),
            Received::Value(amount) => Some(amount),
            Received::Omitted => None,
        };
        let mut intent = PaymentIntent::new(
            self.id.clone(),
            self.amount,
            self.currency.clone(),
            PaymentIntentStatus::from_name(&self.status),
        );
        intent.amount_received = received;
        intent.payment_method_types =
            Some(self.methods.iter().map(|m| PaymentMethod::from_name(m)).collect());
        intent.created = Some(i64::try_from(created).unwrap_or(i64::MAX));
        intent.description = self.description.clone();
        intent.metadata = self
            .metadata
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        intent
    }
}

/// A body and the signature header that makes it a genuine delivery.
#[derive(Debug, Clone)]
pub struct SignedDelivery {
    /// The raw body.
    pub body: Bytes,
    /// The signature header value (`t=…,v1=…`).
    pub signature: String,
}

impl SignedDelivery {
    /// Signs `body` with `secret` at `timestamp` (unix seconds).
    ///
    /// # Errors
    /// [`ConfigError::EmptySecret`] for an empty secret.
    pub fn at(body: impl Into<Bytes>, secret: &str, timestamp: u64) -> Result<Self, ConfigError> {
        let body = body.into();
        let signature = sign(&body, &Secret::new(secret)?, timestamp);
        Ok(Self { body, signature })
    }

    /// Signs `body` with `secret` now.
    ///
    /// # Errors
    /// [`ConfigError::EmptySecret`] for an empty secret.
    pub fn now(body: impl Into<Bytes>, secret: &str) -> Result<Self, ConfigError> {
        Self::at(body, secret, unix_now())
    }

    /// The headers a sender puts beside the body: `content-type:
    /// application/json` and the signature in `x-service-signature`. For
    /// calling an entry point that takes headers and a body directly
    /// (`Inbox::ingest`, [`Receiver::receive`](crate::Receiver::receive)).
    ///
    /// ```
    /// use payhook::sender::SignedDelivery;
    ///
    /// let delivery = SignedDelivery::now(r#"{"id":"evt_1"}"#, "whsec_test").unwrap();
    /// let headers = delivery.headers();
    /// assert_eq!(headers["x-service-signature"], delivery.signature.as_str());
    /// ```
    pub fn headers(&self) -> http::HeaderMap {
        self.headers_with(DEFAULT_HEADER)
    }

    /// [`headers`](Self::headers) with the signature under `header` (left out
    /// when `header` is not a valid header name).
    fn headers_with(&self, header: &str) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(header.as_bytes()),
            http::HeaderValue::from_str(&self.signature),
        ) {
            headers.insert(name, value);
        }
        headers
    }

    /// A `POST` request to `uri` with the body, `content-type: application/json`
    /// and the signature in `x-service-signature`.
    ///
    /// Its body is an [`http_body_util::Full`]`<Bytes>`, an `http_body::Body`: an
    /// axum `Router` takes the request as it is (`app.oneshot(request)`), and so
    /// does any tower service over `http::Request<B>` with such a body.
    #[cfg(feature = "testing")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
    pub fn to_request(&self, uri: &str) -> http::Request<Full<Bytes>> {
        self.to_request_with_header(uri, DEFAULT_HEADER)
    }

    /// The same, with the signature in another header.
    #[cfg(feature = "testing")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
    pub fn to_request_with_header(&self, uri: &str, header: &str) -> http::Request<Full<Bytes>> {
        let mut request = http::Request::new(Full::new(self.body.clone()));
        *request.method_mut() = http::Method::POST;
        if let Ok(uri) = uri.parse() {
            *request.uri_mut() = uri;
        }
        *request.headers_mut() = self.headers_with(header);
        request
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Event, EventKind};

    #[test]
    fn builders_produce_events_the_parser_accepts() {
        for builder in [
            EventBuilder::payment_intent_succeeded(),
            EventBuilder::payment_succeeded(),
            EventBuilder::payment_intent_failed(),
            EventBuilder::payment_intent_payment_failed(),
            EventBuilder::other("customer.created"),
        ] {
            let event = Event::from_slice(builder.to_json().as_bytes()).unwrap();
            assert_eq!(event.id(), builder.event_id());
            assert_eq!(event.event_type(), builder.event_type());
        }
        let json = EventBuilder::payment_intent_succeeded()
            .amount(u128::MAX)
            .currency("eth")
            .metadata("order", "A \"quoted\" id")
            .description(None)
            .to_json();
        let event = Event::from_slice(json.as_bytes()).unwrap();
        let EventKind::PaymentIntentSucceeded(pi) = event.kind() else {
            panic!()
        };
        assert_eq!(pi.amount, u128::MAX);
        assert_eq!(pi.metadata.get("order"), Some("A \"quoted\" id"));
        assert_eq!(
            pi.payment_method_types.as_deref().unwrap()[0].as_str(),
            "ethereum"
        );
        assert_eq!(pi.amount_received, Some(u128::MAX));
        let failed = EventBuilder::payment_intent_payment_failed().without_amount_received();
        let event = Event::from_slice(failed.to_json().as_bytes()).unwrap();
        assert_eq!(event.event_type(), "payment_intent.payment_failed");
        let EventKind::PaymentIntentFailed(pi) = event.kind() else {
            panic!()
        };
        assert_eq!(pi.amount_received, None);
        assert!(!failed.to_json().contains("amount_received"));
        let failed = EventBuilder::of_type("payment_intent.payment_failed").amount(9);
        let event = Event::from_slice(failed.to_json().as_bytes()).unwrap();
        assert_eq!(event.payment_intent().unwrap().amount_received, Some(0));
    }

    #[test]
    fn the_wire_format_is_the_core_models_serialization() {
        let builder = EventBuilder::payment_intent_succeeded()
            .id("evt_1")
            .created(1_700_000_000)
            .payment_intent_id("pi_1")
            .amount(u128::MAX)
            .metadata("order", "42");
        let json = builder.to_json();
        assert_eq!(
            json,
            format!(
                r#"{{"id":"evt_1","object":"event","type":"payment_intent.succeeded","created":1700000000,"livemode":false,"data":{{"object":{{"id":"pi_1","object":"payment_intent","amount":{max},"amount_received":{max},"currency":"btc","payment_method_types":["bitcoin"],"status":"succeeded","created":1700000000,"description":"Test payment","metadata":{{"order":"42"}}}}}}}}"#,
                max = u128::MAX
            )
        );
        // The parsed intent serializes back to the same text.
        let event = Event::from_slice(json.as_bytes()).unwrap();
        let object = serde_json::to_string(event.payment_intent().unwrap()).unwrap();
        assert!(
            json.contains(&format!(r#""data":{{"object":{object}}}"#)),
            "{object}"
        );
        // Raw data is kept as given, and text that is not JSON becomes a string.
        let raw = EventBuilder::other("payout.paid").data(r#"{"object":{"amount":1e400}}"#);
        assert!(raw.to_json().ends_with(r#""data":{"object":{"amount":1e400}}}"#));
        let not_json = EventBuilder::other("payout.paid").data("{oops");
        assert!(not_json.to_json().ends_with(r#""data":"{oops"}"#));
    }
}
