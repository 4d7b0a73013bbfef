//! The payment service in test mode: its payment intents API, events, webhook
//! endpoints and signed webhook deliveries with retries, on a loopback port, so a
//! receiver can be tested against a real sender.
//!
//! [`Emulator::builder`] configures and [`EmulatorBuilder::start`] runs it; the
//! returned [`Emulator`] gives the base URL and test key, registers endpoints
//! (handing back their signing secrets), shows every event and every delivery
//! attempt, and shuts it down. Everything is kept in memory, bounded by
//! [`Limits`]. The emulator is test mode only: live keys are refused. The
//! [Decisions](#decisions) below list everything it decides where the
//! service's document is silent.
//!
//! The HTTP API (JSON or form bodies, `Authorization: Bearer sk_test_…`):
//!
//! | method and path | does |
//! |---|---|
//! | `POST /v1/payment_intents` | creates a payment intent (`amount`, `currency`, optional `payment_method_types`, `description`, `metadata`) |
//! | `GET /v1/payment_intents/:id`, `GET /v1/payment_intents` | retrieve, list (newest first) |
//! | `POST /v1/test_helpers/payment_intents/:id/succeed` | the customer pays (optional `amount_received`): event `payment_intent.succeeded` |
//! | `POST /v1/test_helpers/payment_intents/:id/fail` | the payment fails: event `payment_intent.failed` |
//! | `GET /v1/events/:id`, `GET /v1/events` | events, exactly as delivered; the list filters by `type` or `types[]`, `created[gt]`, `created[gte]`, `created[lt]`, `created[lte]` (unix seconds) and `delivery_success` |
//! | `POST /v1/events/:id/resend` | delivers the event again (optional `webhook_endpoint`: to that endpoint only); answers `{"object":"event_resend","event","resend","webhook_endpoints"}` |
//! | `GET /v1/events/:id/delivery_attempts` | every attempt to deliver the event, newest first |
//! | `POST /v1/webhook_endpoints`, `GET /v1/webhook_endpoints[/:id]`, `DELETE /v1/webhook_endpoints/:id` | register (`url`, `enabled_events`, `description`; the reply alone shows the `secret`; a `url` with a user name or password is refused, as deliveries are authenticated by their signature and the URL is logged and listed), list, retrieve, remove |
//! | `POST /v1/webhook_endpoints/:id/roll_secret` | a new secret; the old one keeps signing beside it for `expires_in` seconds (the reply's `previous_secret_expires_at` says until when) |
//! | `GET /v1/test_helpers/faults`, `POST /v1/test_helpers/faults` | the [`Faults`] in force, read and changed while it runs (`duplicates`, `reorder`, `reorder_window_ms`, `delay_ms`, `skew`, `drop_first`, `undeliverable`; those not given stay) |
//!
//! Lists take `limit` (1–100, default 10), `starting_after` or `ending_before`
//! and answer `{"object":"list","data":[…],"has_more":…,"url":…}`. A `POST` with
//! an `Idempotency-Key` replays its first reply for the same parameters (24 h),
//! answers 400 `idempotency_error` for other parameters and 409 while the first
//! request runs. Errors are `{"error":{"type","code","message","param"}}`.
//!
//! Each event goes to every endpoint whose `enabled_events` match, as a `POST`
//! with `content-type: application/json` and an `x-service-signature` header
//! (or the [one chosen](EmulatorBuilder::signature_header)) signed with
//! payhook's own signer at the time of each attempt (two `v1` items during a
//! secret roll overlap). With [`DeliveryScheme::StandardWebhooks`]
//! ([`EmulatorBuilder::scheme`], `payhook emulate --scheme standard`) the
//! signature travels in Standard Webhooks' three headers instead, with a `v1`
//! and a `v1a` item. A 2xx acknowledges; anything else, a connection error
//! or no reply within the [attempt timeout](EmulatorBuilder::attempt_timeout)
//! is retried on the [`RetrySchedule`], honouring `Retry-After`. One log line
//! (`tracing`, target `payhook_emulator::delivery`) records each attempt; no
//! secret is ever logged. [`Faults`] adds duplicates, reordering, delays,
//! clock skew, lost first attempts and undeliverable events, reproducibly
//! from a seed.
//!
//! # Decisions
//!
//! Where the service's document says nothing, the emulator decides as follows.
//!
//! **Events emitted.** The event catalogue's kinds with a test helper
//! (`payhook::event::EventType::emulated`): `payment_intent.succeeded`, from the
//! succeed test helper, and `payment_intent.failed`, from the fail helper; each
//! helper is `POST /v1/test_helpers/payment_intents/:id/HELPER` and emits its
//! kind's canonical name. The sibling format's `payment_intent.payment_failed` is
//! not emitted (`payhook trigger payment_intent.payment_failed` drives the fail
//! helper, which emits `payment_intent.failed`). Each event's body is fixed when
//! it is created and every delivery of it carries the same bytes; keys are in
//! the order the sibling format writes them (`id`, `object`, `api_version`
//! `2024-06-20`, `created`, `data`, `livemode`, `type` last).
//!
//! **`enabled_events`.** Any type string is accepted, and `*` for all: 1 to
//! 100 entries, each 1 to 255 characters without control characters (anything
//! else is a 400 naming `enabled_events`). An event goes to an endpoint when an
//! entry is `*` or equals its type exactly; there are no other wildcards.
//!
//! **Validation.** `amount` is a positive integer, exact up to 2^128 − 1;
//! `currency` 3 to 10 lowercase letters; `metadata` at most 50 keys of 1–40
//! characters with values of at most 500; endpoint URLs `http://` only, at
//! most 2 048 bytes once normalized, without credentials. Unknown parameters
//! are refused by name. Request bodies are at most 64 KiB ([`Limits::body_bytes`]).
//!
//! **Lists and filters.** Newest first; a cursor must name an object in the
//! (filtered) list, or the reply is 404 (for events, see below). The events
//! list, `GET /v1/events`, takes `type` (one
//! exact type) or `types[]` (1 to 100 exact types: `types[]=a&types[]=b`, or
//! indexed `types[0]=a`), `created[gt|gte|lt|lte]` in unix seconds on the
//! event's `created`, and `delivery_success` (`false`: no endpoint has
//! acknowledged the event yet; `true`: at least one has), combined with AND,
//! and `has_more` says whether more events match. Events are in creation
//! order, so events of the same second keep one order and paging neither
//! skips nor repeats one. An events cursor may name any event still kept,
//! even one the filter no longer matches (acknowledged between two pages of
//! `delivery_success=false`). A bad value is a 400 `invalid_request_error`
//! naming its parameter: a `created[…]` value that is not a whole number or
//! another `created[…]` key, a `delivery_success` other than `true` or
//! `false`, an empty or too long `types[]` entry, or both `type` and `types[]`
//! (`param` `types`). The list items are the events' bodies, byte for byte
//! what their deliveries carry. Events are kept within [`Limits`] (the newest
//! 10 000 by default, fewer if they are large), not for the service's 30 days.
//!
//! **Undeliverable events.** [`Faults::undeliverable`] (`payhook emulate
//! --undeliverable P`) picks a share of events from the seed; every attempt
//! of one, to every endpoint, fails without a request being sent and is
//! recorded as `not sent: the injected fault undeliverable …` (no status, 0
//! ms), retried on the schedule until it gives up. Such an event stays
//! `delivery_success=false`; a resend is delivered as usual.
//!
//! **Idempotency.** Keys are scoped to the API key and bound to the route, the
//! object id, the content type and the exact body. A replay rebuilds the first
//! reply from what it returned: a payment intent as it was then (status and
//! amount received at that moment), a webhook endpoint with the secret shown
//! then; if that object is no longer kept (evicted, or the endpoint deleted),
//! the replay is a 404 `resource_missing` saying so, never another object.
//!
//! **Resends.** `POST /v1/events/:id/resend` delivers the same body, signed
//! afresh at each attempt, to the endpoint named by `webhook_endpoint` (any
//! endpoint, whatever its `enabled_events`) or to every endpoint enabled for
//! the type now. Resends are numbered across the emulator (1, 2, …); each
//! attempt record carries its number in `resend` (0 for the event's own
//! deliveries), and its attempts count from 1 again. A resend is a `POST`:
//! an `Idempotency-Key` makes a retried request resend once.
//!
//! **Secrets.** Each endpoint gets a fresh `whsec_` secret, shown only in the
//! create and roll replies, unless [`EmulatorBuilder::forward_secret`] fixes
//! the one of the [`forward_to`](EmulatorBuilder::forward_to) endpoint
//! (`whsec_` and 1–249 visible ASCII characters). With Standard Webhooks the
//! secret is `whsec_` and the base64 of 32 random bytes (a fixed one must be
//! `whsec_` and the base64 of 24 to 64 bytes), and each endpoint also gets an
//! Ed25519 key pair: the create and roll replies show its `public_key`
//! (`whpk_…`) beside the `secret`, and every delivery is signed with both
//! (see [`DeliveryScheme`]). No secret or API key is ever logged or echoed
//! in an error.
//!
//! **Exposure.** The emulator listens on loopback by default. A non-loopback
//! address is refused at start unless a fixed API key is set
//! ([`EmulatorBuilder::api_key`]): whoever reaches the port with a key can
//! register any URL (private ranges and metadata addresses included: there is
//! no filter), have the emulator POST to it, and read the first 200
//! characters of each reply in `GET /v1/events/:id/delivery_attempts`
//! (`response_body`). Treat the key as granting that, and keep the emulator
//! on loopback or a trusted network.
//!
//! **Log lines.** One line per attempt: `evt_… TYPE -> we_… URL attempt N: RESULT
//! in MS ms`, then `; next attempt in S s` or `; no more attempts`, with `
//! (resend N)` and ` (duplicate copy N)` when they apply. A real failure reads
//! as its cause (`could not connect`, `no reply within 10.0 s (timed out
//! sending)`, `failed reading the reply: …`); an injected fault reads as one
//! and only when it acted: `200, reply discarded by the injected fault
//! drop-first (the receiver got the request and answered)`. Values from the
//! receiver are escaped and shortened.
//!
//! **Memory.** Each payment intent is held once, each event body once (shared
//! by its deliveries), idempotency replies by reference (above), and a
//! waiting delivery does not keep its event alive: a delivery whose event was
//! evicted is abandoned ([`DeliveryStats::abandoned`]). Counts
//! ([`Limits::objects`] 10 000, [`Limits::attempts`] 50 000, …) and one byte
//! budget ([`Limits::stored_bytes`], 160 MiB, shared out between intents,
//! events, attempt records and idempotency replies) evict the oldest first.
//! [`Limits::worst_case_bytes`] is about 177 MiB with the defaults, so the
//! worst case stays under 256 MiB; [`Emulator::stats`] reports
//! [`stored_bytes`](DeliveryStats::stored_bytes) now. Filled to every limit
//! with the largest objects accepted, the whole process (emulator, receiver
//! and client) peaked at about 218 MiB resident (the `emulate_memory`
//! benchmark of `payhook-cli`).
//!
//! In a test, with a payhook receiver on another loopback port:
//!
//! ```
//! use std::time::Duration;
//!
//! use axum::routing::post;
//! use payhook::emulator::Emulator;
//! use payhook::tower::axum::{Received, Webhook};
//! use payhook::tower::WebhookLayer;
//! use payhook::{Event, Receiver};
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! let emulator = Emulator::builder().start().await.unwrap();
//!
//! // The receiver under test: its address first, then its secret from the emulator.
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! let url = format!("http://{}/webhooks", listener.local_addr().unwrap());
//! let endpoint = emulator.register_endpoint(&url).unwrap();
//! let (handled, mut handled_rx) = tokio::sync::mpsc::unbounded_channel();
//! let receiver = Receiver::builder().secret(&endpoint.secret).build().unwrap();
//! let app = axum::Router::new()
//!     .route("/webhooks", post(move |Webhook(event): Webhook<Event>| async move {
//!         let _ = handled.send(event.event_type().to_owned());
//!         Received
//!     }))
//!     .route_layer(WebhookLayer::new(receiver));
//! tokio::spawn(async move { axum::serve(listener, app).await });
//!
//! // The service's API, over HTTP, as the app's own code would call it.
//! let api = reqwest::Client::new();
//! let reply = api
//!     .post(format!("{}/v1/payment_intents", emulator.base_url()))
//!     .bearer_auth(emulator.api_key())
//!     .header("content-type", "application/x-www-form-urlencoded")
//!     .body("amount=1500000000000000000&currency=eth")
//!     .send().await.unwrap();
//! let intent: serde_json::Value = serde_json::from_str(&reply.text().await.unwrap()).unwrap();
//! let id = intent["id"].as_str().unwrap();
//! let succeeded = api
//!     .post(format!("{}/v1/test_helpers/payment_intents/{id}/succeed", emulator.base_url()))
//!     .bearer_auth(emulator.api_key())
//!     .send().await.unwrap();
//! assert_eq!(succeeded.status(), 200);
//!
//! // The signed payment_intent.succeeded reaches the handler.
//! let event_type = tokio::time::timeout(Duration::from_secs(10), handled_rx.recv()).await.unwrap();
//! assert_eq!(event_type.as_deref(), Some("payment_intent.succeeded"));
//! assert!(emulator.wait_idle(Duration::from_secs(10)).await);
//! assert!(emulator.attempts().iter().all(|attempt| attempt.succeeded));
//! emulator.shutdown().await;
//! # }
//! ```
//!
//! # Source map
//!
//! For contributors: one folder per concern, one role per file. Arrows only point
//! down the module tree or to the crate root (`Shared`, the facade); no two
//! emulator files import from each other. The API files know nothing of HTTP
//! delivery (they hand an event and its recipients to `delivery::enqueue`);
//! `delivery/` knows nothing of routes or request parameters; no file names an
//! event type (the types emitted are the event catalogue's kinds with a test
//! helper, `EventType::emulated()`).
//!
//! | file | what it is for |
//! |---|---|
//! | `lib.rs` | these docs (the API table and the Decisions), the facade: `Emulator`, `EmulatorBuilder`, `StartError`, `RequestError`, `DeliveryStats`, `Shared` (what handlers and delivery tasks share) |
//! | `config.rs` | the settings: `RetrySchedule`, `Faults`, `Limits` (and the byte budget's shares), `Config` as fixed at start (its `Debug` redacts the API key) |
//! | `api/mod.rs` | the router (every route in one table; one test-helper route per catalogue kind the emulator emits), the reply helpers all resources share (`to_json`, `required`, `reply`, `path_id`) |
//! | `api/idempotency.rs` | `Idempotency-Key` on every `POST`: scope, fingerprint, replay rebuilt from what the first reply referenced, 400/409 |
//! | `api/pagination.rs` | `limit` / `starting_after` / `ending_before` read, `{"object":"list",…}` written |
//! | `api/payment_intents.rs` | create, retrieve, list, the succeed / fail test helpers |
//! | `api/endpoints.rs` | register (secret shown once), retrieve, list, delete, roll the secret |
//! | `api/faults.rs` | the faults in force, read and changed while the emulator runs |
//! | `api/events.rs` | creating an event (body fixed once), retrieve, list with filters, delivery attempts, resend |
//! | `delivery/mod.rs` | the delivery queue: bounded slots, worker pool, duplicates / reordering / delays, retry scheduling |
//! | `delivery/send.rs` | one HTTP attempt: signed at attempt time (clock-skew fault), pooled client, `Retry-After`, the reply's first bytes; `AttemptOutcome` |
//! | `delivery/faults.rs` | the fault draws: pure functions of the seed and the subject, so a seed replays a run |
//! | `delivery/log.rs` | the one log line per attempt |
//! | `auth.rs` | API keys (`sk_test_…` only; live keys refused) |
//! | `error.rs` | API errors, `{"error":{"type","code","message","param"}}` |
//! | `ids.rs` | object ids and `whsec_` secrets |
//! | `keys.rs` | an endpoint's keys for the delivery scheme (`DeliveryScheme`): the service's secret, or a Standard Webhooks `whsec_` secret and an Ed25519 pair, and what the create/roll reply shows of them |
//! | `model.rs` | the objects kept and returned (payment intent view, event, endpoint, attempt) |
//! | `params.rs` | request parameters from JSON or form bodies, refused by name |
//! | `state.rs` | the in-memory state: bounded collections, eviction by count and bytes, cursor pagination |
//! | `text.rs` | request-derived text in replies and logs, escaped and shortened |
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod api;
mod auth;
mod config;
mod delivery;
mod error;
mod ids;
mod keys;
mod model;
mod params;
mod state;
mod text;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use payhook_api::NewPaymentIntent;
use payhook_core::event::{PAYMENT_INTENT_FAILED, PAYMENT_INTENT_SUCCEEDED};
use payhook_core::PaymentIntent;

pub use config::{DeliveryScheme, Faults, Limits, RetrySchedule};
// For the payhook CLI, which checks a key before it starts or calls an
// emulator; not part of the library's API (the builder checks keys itself).
#[doc(hidden)]
pub use auth::check_api_key;
pub use model::{DeliveryAttempt, EventRecord, RegisteredEndpoint};

use crate::config::Config;
use crate::delivery::Deliveries;
use crate::error::ApiError;
use crate::params::{BodyFormat, Params};
use crate::state::State;

/// The longest attempt timeout accepted.
const MAX_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3600);

/// Unix seconds now, from the clock every payhook tool reads.
pub(crate) fn unix_seconds() -> u64 {
    payhook_core::time::now_secs().unsigned_abs()
}

/// Unix milliseconds now, from the clock every payhook tool reads.
pub(crate) fn unix_millis() -> u64 {
    payhook_core::time::now_ms().unsigned_abs()
}

/// Why the emulator did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A setting is out of range; the message says which.
    #[error("invalid emulator setting: {0}")]
    Setting(String),
    /// The address could not be bound.
    #[error("could not listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The HTTP client for deliveries could not be built. No longer returned
    /// (the client now cannot fail to build); kept so that code matching on
    /// it still compiles.
    #[error("could not build the delivery HTTP client: {0}")]
    Client(String),
}

/// A request the emulator refused, from its in-process helpers
/// ([`Emulator::register_endpoint`], [`Emulator::create_payment_intent`], …):
/// the same status, code, message and parameter the HTTP API answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {message}")]
pub struct RequestError {
    /// The HTTP status the API answers.
    pub status: u16,
    /// The error `code`, for example `parameter_invalid_integer`.
    pub code: Option<String>,
    /// What failed and why.
    pub message: String,
    /// The parameter at fault.
    pub param: Option<String>,
}

impl From<ApiError> for RequestError {
    fn from(error: ApiError) -> Self {
        Self {
            status: error.status.as_u16(),
            code: error.code.map(str::to_owned),
            message: error.message,
            param: error.param,
        }
    }
}

/// Counters of the delivery machinery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DeliveryStats {
    /// Deliveries waiting or running now.
    pub pending: usize,
    /// Deliveries refused because [`Limits::pending_deliveries`] were pending.
    pub dropped: u64,
    /// HTTP attempts made.
    pub attempts: u64,
    /// Deliveries acknowledged with a 2xx.
    pub acknowledged: u64,
    /// Deliveries given up after the schedule's last attempt.
    pub gave_up: u64,
    /// Attempt records evicted to stay within [`Limits::attempts`].
    pub attempts_evicted: u64,
    /// Events evicted to stay within [`Limits::objects`] or their share of
    /// [`Limits::stored_bytes`].
    pub events_evicted: u64,
    /// Payment intents evicted likewise.
    pub intents_evicted: u64,
    /// Deliveries abandoned because their event was evicted before they
    /// were acknowledged (a waiting delivery does not keep an event alive).
    pub abandoned: u64,
    /// The estimated bytes kept now: payment intents, events, delivery
    /// attempt records and idempotency replies, the parts
    /// [`Limits::stored_bytes`] bounds.
    pub stored_bytes: u64,
    /// [`Limits::worst_case_bytes`] of the limits in force: the most the
    /// kept state can take.
    pub worst_case_bytes: u64,
}

/// What the API handlers and delivery tasks share.
pub(crate) struct Shared {
    pub state: Mutex<State>,
    pub config: Config,
    pub deliveries: Deliveries,
    /// `true` (or the sender gone) once the emulator shuts down.
    pub shutdown: watch::Receiver<bool>,
    pub seed: u64,
}

/// Configures an [`Emulator`]; see [`Emulator::builder`].
#[derive(Clone)]
#[must_use]
pub struct EmulatorBuilder {
    addr: SocketAddr,
    api_key: Option<String>,
    retry: RetrySchedule,
    attempt_timeout: Duration,
    max_concurrent_attempts: usize,
    faults: Faults,
    limits: Limits,
    api_latency: Duration,
    signature_header: String,
    forward_to: Option<String>,
    forward_secret: Option<String>,
    scheme: DeliveryScheme,
}

// By hand: the API key is a secret and stays out of Debug output.
impl std::fmt::Debug for EmulatorBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulatorBuilder")
            .field("addr", &self.addr)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("retry", &self.retry)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("max_concurrent_attempts", &self.max_concurrent_attempts)
            .field("faults", &self.faults)
            .field("limits", &self.limits)
            .field("api_latency", &self.api_latency)
            .field("signature_header", &self.signature_header)
            .field("forward_to", &self.forward_to)
            .field(
                "forward_secret",
                &self.forward_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("scheme", &self.scheme)
            .finish()
    }
}

impl EmulatorBuilder {
    /// Where to listen; default `127.0.0.1:0` (a free loopback port).
    ///
    /// An address that is not loopback (`0.0.0.0`, a LAN address, …) needs a
    /// fixed [`api_key`](Self::api_key): [`start`](Self::start) refuses it
    /// otherwise, before binding. Anyone who can reach the port and holds the
    /// key can register endpoints, have the emulator POST to any URL they
    /// name, and read the first 200 characters of each reply in the delivery
    /// attempts.
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Registers a webhook endpoint for every event type (`*`) at start, as
    /// `payhook emulate --forward-to URL` does; [`Emulator::forward_endpoint`]
    /// gives its id and secret.
    pub fn forward_to(mut self, url: impl Into<String>) -> Self {
        self.forward_to = Some(url.into());
        self
    }

    /// Fixes the signing secret of the [`forward_to`](Self::forward_to)
    /// endpoint (as `payhook emulate --secret whsec_…` does), so a receiver
    /// can be configured once and keep working across emulator restarts.
    /// Without it a fresh `whsec_…` secret is drawn at every start.
    ///
    /// [`start`](Self::start) refuses a secret without `forward_to`, and one
    /// that is not `whsec_` followed by 1 to 249 visible ASCII characters.
    pub fn forward_secret(mut self, secret: impl Into<String>) -> Self {
        self.forward_secret = Some(secret.into());
        self
    }

    /// How deliveries are signed: the service's `t=…,v1=…` header (the
    /// default) or Standard Webhooks, where every endpoint also gets an
    /// Ed25519 key pair and shows its `whpk_` public key (see
    /// [`DeliveryScheme`]).
    pub fn scheme(mut self, scheme: DeliveryScheme) -> Self {
        self.scheme = scheme;
        self
    }

    /// Accept only this key (`sk_test_…`). Without it any well-formed test key
    /// is accepted and [`Emulator::api_key`] is a fresh one.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// When failed deliveries are retried; default [`RetrySchedule::test`].
    pub fn retry_schedule(mut self, schedule: RetrySchedule) -> Self {
        self.retry = schedule;
        self
    }

    /// How long an attempt may wait for the receiver's whole reply; default
    /// 10 s, at most one hour.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// How many delivery attempts may be on the wire at once; default 64.
    pub fn max_concurrent_attempts(mut self, n: usize) -> Self {
        self.max_concurrent_attempts = n;
        self
    }

    /// Faults to inject; default none.
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// Memory bounds; default [`Limits::default`].
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Every `POST` waits this long before it is carried out (after its
    /// `Idempotency-Key` is claimed): a slow service, to test clients' timeouts
    /// and concurrent retries. Default zero.
    pub fn api_latency(mut self, latency: Duration) -> Self {
        self.api_latency = latency;
        self
    }

    /// The header carrying the signature; default `x-service-signature`.
    pub fn signature_header(mut self, name: impl Into<String>) -> Self {
        self.signature_header = name.into();
        self
    }

    /// Checks the settings, binds the address and starts serving on the
    /// current tokio runtime.
    ///
    /// # Errors
    /// [`StartError`] for an invalid setting (a malformed fixed key, an empty
    /// retry schedule, a zero timeout, a probability outside 0–1, zero
    /// limits, a non-loopback address without a fixed key, a malformed
    /// `forward_to` URL or secret), or an address that cannot be bound.
    pub async fn start(self) -> Result<Emulator, StartError> {
        if let Some(key) = &self.api_key {
            auth::check_api_key(key).map_err(|problem| StartError::Setting(problem.into()))?;
        }
        if !self.addr.ip().is_loopback() && self.api_key.is_none() {
            return Err(StartError::Setting(format!(
                "{} is not a loopback address: listening there needs a fixed API key \
                 (EmulatorBuilder::api_key), or anyone who reaches the port could make \
                 the emulator send requests to any URL and read the replies",
                self.addr.ip()
            )));
        }
        if let Some(secret) = &self.forward_secret {
            if self.forward_to.is_none() {
                return Err(StartError::Setting(
                    "a forward secret needs a forward_to URL: it is that endpoint's signing secret".into(),
                ));
            }
            keys::check_secret(self.scheme, secret).map_err(|problem| StartError::Setting(problem.into()))?;
        }
        let forward_url = match &self.forward_to {
            Some(url) => Some(
                api::parse_endpoint_url(url)
                    .map_err(|error| StartError::Setting(format!("forward_to: {}", error.message)))?,
            ),
            None => None,
        };
        self.retry.check()?;
        self.faults.check()?;
        if self.attempt_timeout.is_zero() || self.attempt_timeout > MAX_ATTEMPT_TIMEOUT {
            return Err(StartError::Setting(
                "the attempt timeout must be more than zero and at most one hour".into(),
            ));
        }
        let limits = &self.limits;
        if [
            limits.objects,
            limits.endpoints,
            limits.attempts,
            limits.pending_deliveries,
            limits.idempotency_keys,
            limits.body_bytes,
            limits.stored_bytes,
            self.max_concurrent_attempts,
        ]
        .contains(&0)
        {
            return Err(StartError::Setting("limits must not be zero".into()));
        }
        let signature_header =
            http::HeaderName::from_bytes(self.signature_header.as_bytes()).map_err(|_| {
                StartError::Setting("the signature header name is not a valid HTTP header name".into())
            })?;
        let client = delivery::http_client(self.attempt_timeout);
        let listener = tokio::net::TcpListener::bind(self.addr)
            .await
            .map_err(|source| StartError::Bind {
                addr: self.addr,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: self.addr,
            source,
        })?;
        let (stop, shutdown) = watch::channel(false);
        let seed = self.faults.seed.unwrap_or_else(ids::random_u64);
        let api_key = self
            .api_key
            .clone()
            .unwrap_or_else(|| ids::random_string("sk_test_", ids::ID_RANDOM_CHARS));
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(&self.limits)),
            deliveries: Deliveries::new(client, self.max_concurrent_attempts),
            config: Config {
                fixed_key: self.api_key,
                retry: self.retry,
                attempt_timeout: self.attempt_timeout,
                faults: std::sync::RwLock::new(self.faults),
                limits: self.limits,
                api_latency: self.api_latency,
                signature_header,
                scheme: self.scheme,
            },
            shutdown: shutdown.clone(),
            seed,
        });
        let forward_endpoint = match forward_url {
            Some((url, uri)) => {
                let (id, shown) = api::insert_endpoint(
                    &shared,
                    url,
                    uri,
                    vec!["*".to_owned()],
                    None,
                    self.forward_secret.as_deref(),
                )
                .map_err(|error| StartError::Setting(format!("forward_to: {}", error.message)))?;
                Some(RegisteredEndpoint {
                    id,
                    secret: shown.secret,
                    public_key: shown.public_key,
                })
            }
            None => None,
        };
        let router = api::router(Arc::clone(&shared));
        let mut stopped = shutdown;
        let server = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                })
                .await
        });
        Ok(Emulator {
            addr,
            api_key,
            forward_endpoint,
            shared,
            stop,
            server: Some(server),
        })
    }
}

/// A running emulator. Dropping it stops it; [`shutdown`](Self::shutdown)
/// stops it gracefully.
pub struct Emulator {
    addr: SocketAddr,
    api_key: String,
    forward_endpoint: Option<RegisteredEndpoint>,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Emulator {
    /// A builder with the defaults: a free loopback port, any test key, the
    /// test retry schedule, a 10 s attempt timeout, no faults.
    pub fn builder() -> EmulatorBuilder {
        EmulatorBuilder {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            api_key: None,
            retry: RetrySchedule::test(),
            attempt_timeout: Duration::from_secs(10),
            max_concurrent_attempts: 64,
            faults: Faults::default(),
            limits: Limits::default(),
            api_latency: Duration::ZERO,
            signature_header: payhook_core::signature::DEFAULT_HEADER.to_owned(),
            forward_to: None,
            forward_secret: None,
            scheme: DeliveryScheme::Service,
        }
    }

    /// The endpoint registered at start with [`EmulatorBuilder::forward_to`]:
    /// its id and signing secret (the fixed one, if
    /// [`forward_secret`](EmulatorBuilder::forward_secret) gave one).
    pub fn forward_endpoint(&self) -> Option<&RegisteredEndpoint> {
        self.forward_endpoint.as_ref()
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, the API's base URL.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A test key the API accepts (the fixed one, if it was started with one).
    pub fn api_key(&self) -> &str {
        &self.api_key
    }

    /// The seed of the fault decisions (chosen at random unless set).
    pub fn seed(&self) -> u64 {
        self.shared.seed
    }

    /// The faults in force now, as `GET /v1/test_helpers/faults` shows them
    /// (with the [seed](Self::seed)).
    pub fn faults(&self) -> Faults {
        self.shared.config.faults().seed(self.shared.seed)
    }

    /// Changes the faults while the emulator runs, as
    /// `POST /v1/test_helpers/faults` does: every attempt from now on (the
    /// retries of earlier events too) follows them, and nothing it holds —
    /// intents, events, endpoints, attempts — is lost. The seed stays the
    /// one it started with.
    ///
    /// ```
    /// use payhook::emulator::{Emulator, Faults};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let emulator = Emulator::builder().start().await.unwrap();
    /// // Now the endpoint goes down: every event undeliverable…
    /// emulator.set_faults(emulator.faults().undeliverable(1.0)).unwrap();
    /// // …and back up.
    /// emulator.set_faults(Faults::default()).unwrap();
    /// assert_eq!(emulator.faults().undeliverable_value(), 0.0);
    /// # emulator.shutdown().await;
    /// # }
    /// ```
    ///
    /// # Errors
    /// A `400` naming the setting for a probability outside 0–1, a delay or
    /// reorder window over one hour (or a zero window), a skew over 366 days,
    /// or a seed other than the emulator's.
    pub fn set_faults(&self, faults: Faults) -> Result<(), RequestError> {
        api::put_faults(&self.shared, faults).map_err(RequestError::from)
    }

    /// Registers a webhook endpoint for every event type and returns its id and
    /// signing secret, as `POST /v1/webhook_endpoints` does.
    ///
    /// # Errors
    /// The API's error for an invalid `url` or too many endpoints.
    pub fn register_endpoint(&self, url: &str) -> Result<RegisteredEndpoint, RequestError> {
        self.register_endpoint_for(url, &["*"])
    }

    /// Registers a webhook endpoint for the given event types (`*` for all;
    /// any type string is accepted, matched exactly).
    ///
    /// # Errors
    /// The API's error for an invalid `url`, an event type that is empty,
    /// longer than 255 characters or holds control characters, or too many endpoints.
    pub fn register_endpoint_for(
        &self,
        url: &str,
        events: &[&str],
    ) -> Result<RegisteredEndpoint, RequestError> {
        let body = serde_json::json!({ "url": url, "enabled_events": events }).to_string();
        let reply = api::create_endpoint_op(&self.shared, "", json_params(&body)?)?.body;
        #[derive(serde::Deserialize)]
        struct Created {
            id: String,
            secret: String,
            public_key: Option<String>,
        }
        let created: Created = serde_json::from_slice(&reply).map_err(|_| internal_error())?;
        Ok(RegisteredEndpoint {
            id: created.id,
            secret: created.secret,
            public_key: created.public_key,
        })
    }

    /// Creates a payment intent, as `POST /v1/payment_intents` does.
    ///
    /// # Errors
    /// The API's error for an invalid amount or currency.
    pub fn create_payment_intent(&self, amount: u128, currency: &str) -> Result<PaymentIntent, RequestError> {
        Ok(api::new_payment_intent_of(&self.shared, amount, currency)?)
    }

    /// Creates a payment intent with every field the API takes — payment
    /// method types, description, metadata — as `POST /v1/payment_intents`
    /// does, from the API client's own request type.
    ///
    /// ```
    /// use payhook::api::NewPaymentIntent;
    /// use payhook::emulator::Emulator;
    ///
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() {
    /// let emulator = Emulator::builder().start().await.unwrap();
    /// let intent = emulator
    ///     .create_payment_intent_with(&NewPaymentIntent::new(5000, "btc").metadata("order", "42"))
    ///     .unwrap();
    /// assert_eq!(intent.metadata.get("order"), Some("42"));
    /// # }
    /// ```
    ///
    /// # Errors
    /// The API's error for an invalid field, naming it.
    pub fn create_payment_intent_with(
        &self,
        intent: &NewPaymentIntent,
    ) -> Result<PaymentIntent, RequestError> {
        let mut body = serde_json::json!({
            "amount": intent.amount.to_string(),
            "currency": intent.currency,
        });
        if !intent.payment_method_types.is_empty() {
            body["payment_method_types"] = intent
                .payment_method_types
                .iter()
                .map(|method| serde_json::Value::from(method.as_str()))
                .collect();
        }
        if let Some(description) = &intent.description {
            body["description"] = description.as_str().into();
        }
        if !intent.metadata.is_empty() {
            body["metadata"] = intent
                .metadata
                .iter()
                .map(|(key, value)| (key.clone(), serde_json::Value::from(value.as_str())))
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        Ok(api::new_payment_intent(
            &self.shared,
            json_params(&body.to_string())?,
        )?)
    }

    /// A client of this emulator's HTTP API with its key: the same client an
    /// app uses against the service.
    ///
    /// # Errors
    /// When the emulator listens on an address other than loopback: the
    /// client sends a key over plain `http://` to loopback only.
    ///
    /// ```
    /// use payhook::api::NewPaymentIntent;
    /// use payhook::emulator::Emulator;
    ///
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() {
    /// let emulator = Emulator::builder().start().await.unwrap();
    /// let api = emulator.api().unwrap();
    /// let intent = api.create_payment_intent(&NewPaymentIntent::new(5000, "btc")).await.unwrap();
    /// assert_eq!(api.retrieve_payment_intent(&intent.id).await.unwrap().id, intent.id);
    /// # }
    /// ```
    pub fn api(&self) -> Result<payhook_api::Client, &'static str> {
        payhook_api::Client::new(&self.base_url(), payhook_api::ApiKey::new(&self.api_key)?)
    }

    /// Succeeds a payment intent and emits `payment_intent.succeeded`, as the test helper does.
    ///
    /// # Errors
    /// 404 for an unknown id, 400 `payment_intent_unexpected_state` unless it requires payment.
    pub fn succeed_payment_intent(&self, id: &str) -> Result<PaymentIntent, RequestError> {
        Ok(api::settle(
            &self.shared,
            id,
            "succeeded",
            None,
            PAYMENT_INTENT_SUCCEEDED,
        )?)
    }

    /// Fails a payment intent and emits `payment_intent.failed`, as the test helper does.
    ///
    /// # Errors
    /// 404 for an unknown id, 400 `payment_intent_unexpected_state` unless it requires payment.
    pub fn fail_payment_intent(&self, id: &str) -> Result<PaymentIntent, RequestError> {
        Ok(api::settle(
            &self.shared,
            id,
            "failed",
            None,
            PAYMENT_INTENT_FAILED,
        )?)
    }

    /// Delivers an event again, as `POST /v1/events/:id/resend` does: the same
    /// body, signed afresh, to `endpoint` or (with `None`) to every endpoint
    /// enabled for its type now. Returns the resend's number, which the
    /// attempts' [`resend`](DeliveryAttempt::resend) field carries.
    ///
    /// # Errors
    /// 404 for an unknown event or endpoint.
    pub fn resend_event(&self, id: &str, endpoint: Option<&str>) -> Result<u64, RequestError> {
        let body = serde_json::json!({ "webhook_endpoint": endpoint }).to_string();
        let body = if endpoint.is_some() { body } else { "{}".to_owned() };
        let reply = api::resend_op(&self.shared, id, json_params(&body)?)?.body;
        #[derive(serde::Deserialize)]
        struct Resent {
            resend: u64,
        }
        let resent: Resent = serde_json::from_slice(&reply).map_err(|_| internal_error())?;
        Ok(resent.resend)
    }

    /// A payment intent by id.
    pub fn payment_intent(&self, id: &str) -> Option<PaymentIntent> {
        self.lock().intents.get(id).cloned()
    }

    /// Every event kept, oldest first.
    pub fn events(&self) -> Vec<EventRecord> {
        self.lock()
            .events
            .iter()
            .map(|event| EventRecord::clone(event))
            .collect()
    }

    /// Every delivery attempt kept, oldest first.
    pub fn attempts(&self) -> Vec<DeliveryAttempt> {
        self.lock().attempts.iter().cloned().collect()
    }

    /// The delivery counters.
    pub fn stats(&self) -> DeliveryStats {
        let deliveries = &self.shared.deliveries;
        let state = self.lock();
        DeliveryStats {
            pending: deliveries.pending.load(Ordering::SeqCst),
            dropped: deliveries.dropped.load(Ordering::SeqCst),
            attempts: deliveries.attempts.load(Ordering::SeqCst),
            acknowledged: deliveries.acknowledged.load(Ordering::SeqCst),
            gave_up: deliveries.gave_up.load(Ordering::SeqCst),
            attempts_evicted: state.attempts.evicted,
            events_evicted: state.events.evicted,
            intents_evicted: state.intents.evicted,
            abandoned: deliveries.abandoned.load(Ordering::SeqCst),
            stored_bytes: u64::try_from(
                state.intents.bytes()
                    + state.events.bytes()
                    + state.attempts.bytes()
                    + state.idempotency.bytes(),
            )
            .unwrap_or(u64::MAX),
            worst_case_bytes: self.shared.config.limits.worst_case_bytes(),
        }
    }

    /// Waits until no delivery is waiting or running (every one acknowledged
    /// or given up); `false` if that did not happen within `timeout`.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let deliveries = &self.shared.deliveries;
        let deadline = tokio::time::Instant::now() + timeout.min(Duration::from_secs(365 * 24 * 3600));
        loop {
            let notified = deliveries.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if deliveries.pending.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return deliveries.pending.load(Ordering::SeqCst) == 0;
            }
        }
    }

    /// Stops gracefully: no new connections, requests in progress answered,
    /// attempts on the wire finished (pending retries are abandoned).
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
        let _ = self
            .wait_idle(self.shared.config.attempt_timeout + Duration::from_secs(1))
            .await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Checks a signing secret to fix with [`EmulatorBuilder::forward_secret`]
/// (or `payhook emulate --secret`): `Err` says why it is refused, without
/// quoting it.
///
/// ```
/// assert!(payhook::emulator::check_endpoint_secret("whsec_local_test").is_ok());
/// assert!(payhook::emulator::check_endpoint_secret("local_test").is_err());
/// ```
///
/// # Errors
/// Anything but `whsec_` followed by 1 to 249 visible ASCII characters.
pub fn check_endpoint_secret(secret: &str) -> Result<(), &'static str> {
    let Some(rest) = secret.strip_prefix("whsec_") else {
        return Err("the signing secret must start with whsec_");
    };
    if rest.is_empty() || secret.len() > 255 || !rest.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the signing secret must be whsec_ followed by 1 to 249 visible ASCII characters");
    }
    Ok(())
}

fn json_params(body: &str) -> Result<Params, RequestError> {
    Ok(Params::from_body(Some(BodyFormat::Json), body.as_bytes())?)
}

fn internal_error() -> RequestError {
    RequestError {
        status: 500,
        code: None,
        message: "internal error".to_owned(),
        param: None,
    }
}
