//! The objects the emulator keeps and returns: payment intents, events, webhook
//! endpoints and delivery attempts, serialized exactly as the API returns them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use payhook_core::PaymentIntent;
use serde::Serialize;

use crate::keys::{ShownKeys, Signers};

/// A payment intent as the API returns it: the core's [`PaymentIntent`] (one
/// model, one wire format) and `livemode`, always `false` (the emulator is
/// test mode only).
#[derive(Serialize)]
pub(crate) struct IntentObject<'a> {
    #[serde(flatten)]
    pub intent: &'a PaymentIntent,
    pub livemode: bool,
}

impl<'a> IntentObject<'a> {
    pub(crate) fn of(intent: &'a PaymentIntent) -> Self {
        Self {
            intent,
            livemode: false,
        }
    }
}

/// The status of a new payment intent.
pub(crate) const REQUIRES_PAYMENT: &str = "requires_payment";

/// An event (`evt_…`) exactly as delivered and as `GET /v1/events/:id` returns it.
#[derive(Debug)]
pub struct EventRecord {
    /// `evt_` and 24 alphanumerics.
    pub id: String,
    /// For example `payment_intent.succeeded`.
    pub event_type: String,
    /// Unix seconds.
    pub created: u64,
    /// The JSON body, byte for byte what every delivery of this event carries.
    pub body: Bytes,
    /// Creation order (0, 1, 2, …): fault decisions are derived from it and the
    /// seed, so one seed gives one fault pattern whatever the timing. Also the
    /// events list's order, so events created in the same second keep theirs.
    pub(crate) seq: u64,
    /// Set once any endpoint acknowledges a delivery of the event (the events
    /// list's `delivery_success`); never cleared.
    pub(crate) acknowledged: AtomicBool,
}

impl EventRecord {
    /// Whether an endpoint had acknowledged a delivery of this event (a 2xx
    /// the emulator did not drop) when the record was read: what the events
    /// list's `delivery_success` filter reads. An event the
    /// [`undeliverable`](crate::Faults::undeliverable) fault picked stays
    /// `false` unless it is resent.
    pub fn delivery_success(&self) -> bool {
        self.acknowledged.load(Ordering::SeqCst)
    }
}

// By hand: the acknowledgement flag is copied as it stands now.
impl Clone for EventRecord {
    fn clone(&self) -> Self {
        Self {
            id: self.id.clone(),
            event_type: self.event_type.clone(),
            created: self.created,
            body: self.body.clone(),
            seq: self.seq,
            acknowledged: AtomicBool::new(self.delivery_success()),
        }
    }
}

/// The event body. Keys in the order the service's sibling format writes them
/// (`type` after `data`), so a receiver that needs `type` first finds out here.
#[derive(Serialize)]
pub(crate) struct EventBody<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub api_version: &'static str,
    pub created: u64,
    pub data: EventData<'a>,
    pub livemode: bool,
    #[serde(rename = "type")]
    pub event_type: &'a str,
}

#[derive(Serialize)]
pub(crate) struct EventData<'a> {
    pub object: IntentObject<'a>,
}

/// The API version the emulator's events carry.
pub(crate) const API_VERSION: &str = "2024-06-20";

/// A webhook endpoint (`we_…`) and the keys that sign its deliveries.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub id: String,
    pub url: url::Url,
    /// `url` as a request target, parsed once at registration.
    pub uri: http::Uri,
    pub enabled_events: Vec<String>,
    pub description: Option<String>,
    pub created: u64,
    /// Registration order, for fault decisions.
    pub seq: u64,
    pub keys: Arc<SigningKeys>,
}

impl Endpoint {
    /// Whether this endpoint wants events of `event_type`.
    pub fn wants(&self, event_type: &str) -> bool {
        self.enabled_events.iter().any(|e| e == "*" || e == event_type)
    }

    /// The API object; the keys only right after create or roll.
    pub fn to_object<'a>(&'a self, shown: Option<&'a ShownKeys>) -> EndpointObject<'a> {
        EndpointObject {
            id: &self.id,
            object: "webhook_endpoint",
            url: self.url.as_str(),
            enabled_events: &self.enabled_events,
            description: self.description.as_deref(),
            status: "enabled",
            created: self.created,
            livemode: false,
            secret: shown.map(|shown| shown.secret.as_str()),
            public_key: shown.and_then(|shown| shown.public_key.as_deref()),
            previous_secret_expires_at: self.overlap_until(crate::unix_seconds()),
        }
    }

    /// The unix second the secret before the last roll stops signing, while
    /// it still signs at `now`.
    pub fn overlap_until(&self, now: u64) -> Option<u64> {
        self.keys
            .previous
            .as_ref()
            .map(|(_, until)| *until)
            .filter(|until| *until > now)
    }
}

/// The keys deliveries to one endpoint are signed with.
pub(crate) struct SigningKeys {
    pub current: Signers,
    /// The keys before the last roll and the unix second they stop signing.
    pub previous: Option<(Signers, u64)>,
}

impl std::fmt::Debug for SigningKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKeys(<redacted>)")
    }
}

/// A webhook endpoint as the API returns it.
#[derive(Serialize)]
pub(crate) struct EndpointObject<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub url: &'a str,
    pub enabled_events: &'a [String],
    pub description: Option<&'a str>,
    pub status: &'static str,
    pub created: u64,
    pub livemode: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<&'a str>,
    /// The `whpk_` public key (Standard Webhooks deliveries only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_key: Option<&'a str>,
    /// When the secret before the last roll stops signing (unix seconds):
    /// in a roll's reply always (the roll's own second for `expires_in=0`),
    /// elsewhere while that secret still signs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_secret_expires_at: Option<u64>,
}

/// A webhook endpoint registered through [`Emulator::register_endpoint`](crate::Emulator::register_endpoint).
#[derive(Clone)]
pub struct RegisteredEndpoint {
    /// `we_` and 24 alphanumerics.
    pub id: String,
    /// The signing secret (`whsec_…`) to configure the receiver with.
    pub secret: String,
    /// With [`DeliveryScheme::StandardWebhooks`](crate::DeliveryScheme::StandardWebhooks),
    /// the Ed25519 public key (`whpk_…`) that verifies the deliveries' `v1a`
    /// items: a receiver may be configured with it instead of the secret.
    pub public_key: Option<String>,
}

impl std::fmt::Debug for RegisteredEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredEndpoint")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .field("public_key", &self.public_key)
            .finish()
    }
}

/// One HTTP attempt to deliver an event to an endpoint, as recorded and as
/// `GET /v1/events/:id/delivery_attempts` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveryAttempt {
    /// `da_` and 24 alphanumerics.
    pub id: String,
    /// Always `delivery_attempt`.
    pub object: &'static str,
    /// The event delivered.
    pub event: String,
    /// Its type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The endpoint (`we_…`).
    pub webhook_endpoint: String,
    /// Where it was sent.
    pub url: String,
    /// 0 for the delivery itself, 1… for copies the `duplicates` fault added.
    pub copy: u32,
    /// 0 for the event's own deliveries; `n` for those of the n-th resend
    /// (`POST /v1/events/:id/resend`, numbered across the emulator).
    pub resend: u64,
    /// 1 for the first attempt of this delivery, 2 for the first retry, …
    pub attempt: u32,
    /// When the attempt started, unix milliseconds.
    pub started_at_ms: u64,
    /// The `t` of the signature header (differs from the start time by the `skew` fault).
    pub signed_at: u64,
    /// How many `v1` items the header carried (2 during a secret roll overlap).
    pub signatures: u32,
    /// How long until the reply (or the failure), milliseconds.
    pub duration_ms: u64,
    /// The reply's HTTP status, if one came.
    pub status: Option<u16>,
    /// Why the attempt failed without a reply, or what a fault did to it.
    pub error: Option<String>,
    /// Whether the endpoint acknowledged it (a 2xx the emulator did not drop).
    pub succeeded: bool,
    /// The first 200 characters of the reply body, control characters
    /// escaped. Whoever holds an API key the emulator accepts can read it
    /// (`GET /v1/events/:id/delivery_attempts`): the target's reply, whatever
    /// URL the endpoint names. See the crate docs' *Exposure* decision.
    pub response_body: Option<String>,
    /// When the next attempt is due, unix milliseconds; `null` when none follows.
    pub next_attempt_at_ms: Option<u64>,
}

#[cfg(test)]
impl DeliveryAttempt {
    /// An acknowledged first attempt of `evt_x` to `we_x`, for unit tests.
    pub(crate) fn example(id: &str) -> Self {
        Self {
            id: id.into(),
            object: "delivery_attempt",
            event: "evt_x".into(),
            event_type: "t".into(),
            webhook_endpoint: "we_x".into(),
            url: "http://127.0.0.1:9/".into(),
            copy: 0,
            resend: 0,
            attempt: 1,
            started_at_ms: 0,
            signed_at: 0,
            signatures: 1,
            duration_ms: 0,
            status: Some(200),
            error: None,
            succeeded: true,
            response_body: None,
            next_attempt_at_ms: None,
        }
    }
}
