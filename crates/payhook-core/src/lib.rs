//! The framework-neutral core of payhook: everything a webhook delivery from the
//! payment service goes through, with no web framework in sight.
//!
//! * [`signature`] — the `x-service-signature` scheme: parse, verify in constant
//!   time against several secrets with a replay tolerance, and [`sign`].
//! * [`event`] — typed events: [`Event`], [`EventKind`], [`PaymentIntent`] with
//!   exact amounts.
//! * [`store`] — dedupe by event id: the [`Store`] trait and [`MemoryStore`].
//! * [`receiver`] — one endpoint's configuration and pipeline: [`Receiver::receive`]
//!   turns headers and a raw body into a [`Reply`] or a claimed delivery.
//! * [`adapter`] — the one interface framework adapters use: body intake under
//!   the limit and timeout, settling a claim from the handler's outcome, replies.
//! * [`source`] — the source-IP allowlist behind trusted proxies.
//! * [`defaults`] — the defaults and bounds of [`ReceiverBuilder`]'s settings.
//! * [`reply`] and [`error`] — what is sent back, and why.
//! * [`sender`] — deliveries as the service makes them: event bodies and their
//!   signature header (the `payhook` CLI's `send` and `sign`).
//! * `testing` (feature `testing`) — signed `http::Request`s for users' tests,
//!   a store that fails on demand, and the store conformance suite.
//!
//! Most apps use an adapter (the `payhook` crate's `axum`, `tower` or `actix`
//! features) rather than this crate directly. The `payhook` crate re-exports
//! what an app uses from here, each item at one path, so the examples are
//! written with the `payhook::` paths an app writes.
//!
//! ```
//! use bytes::Bytes;
//! use payhook::adapter::ReceiveOutcome;
//! use payhook::{sign, EventKind, Receiver, Secret};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let receiver = Receiver::builder()
//!     .secret("whsec_test_secret")
//!     .build()
//!     .expect("valid configuration");
//!
//! // What the payment service sends:
//! let body = Bytes::from_static(br#"{"id":"evt_42","type":"payment_intent.failed",
//!   "data":{"object":{"id":"pi_7","amount":2500,"currency":"btc","status":"failed"}}}"#);
//! let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
//! let mut headers = http::HeaderMap::new();
//! let signature = sign(&body, &Secret::new("whsec_test_secret").unwrap(), now);
//! headers.insert("x-service-signature", signature.parse().unwrap());
//!
//! match receiver.receive(&headers, body).await {
//!     ReceiveOutcome::Deliver(delivery) => {
//!         if let EventKind::PaymentIntentFailed(pi) = delivery.event().kind() {
//!             assert_eq!((pi.amount, pi.currency.as_str()), (2500, "btc"));
//!         }
//!         // The handler answered 200: the event is marked done.
//!         delivery.into_claim().settle(http::StatusCode::OK).await;
//!     }
//!     ReceiveOutcome::Respond(reply) => panic!("rejected: {}", reply.body()),
//! }
//! # });
//! ```
//!
//! # Source map
//!
//! For contributors: where each part of this crate lives (ARCHITECTURE.md in the
//! repository has the workspace's map, its invariants and boundaries).
//!
//! ```text
//! lib.rs                 re-exports; this map
//! receiver/mod.rs        Receiver (one endpoint's configuration) and its accessors
//! receiver/builder.rs    ReceiverBuilder: every setting checked once, at build()
//! receiver/pipeline.rs   check_source, receive, check_or_reject, check; ReceiveOutcome, Delivery; the claim step
//! receiver/claim.rs      ClaimGuard, lease renewal, the one settle(HandlerOutcome), cancel-safe Settling
//! signature/mod.rs       SignatureScheme (the trait), the scheme registry (mod + pub use lines)
//! signature/stripe.rs    the built-in t=…,v1=… scheme: Signature (parse), Verifier, sign
//! signature/builder.rs   VerifierBuilder (secrets, header, tolerance, clock)
//! signature/standard.rs  Standard Webhooks: webhook-id/-timestamp/-signature, v1 (HMAC, whsec_) and v1a (Ed25519, whpk_)
//! signature/tolerance.rs Tolerance and its check: the replay window every scheme shares
//! signature/constant_time.rs  the constant-time compare every scheme shares
//! event/                 Event, EventKind, PaymentIntent, the event catalogue and the one-pass parser (its map: the event module)
//! store/                 the Store trait, DynStore, MemoryStore
//! adapter/mod.rs         the adapter interface: re-exports and its guide
//! adapter/intake.rs      BodyIntake: Content-Length, limit, body timeout
//! adapter/handler_table.rs  HandlerTable: which handler takes an event
//! adapter/split_store.rs SplitStoreCheck: the warning for per-worker in-memory stores
//! reject.rs              every rejection: counted, logged, answered (one place)
//! reply.rs               Reply: every reply's status, content type and body (one place)
//! error.rs               Error (why a delivery failed, its status), ConfigError, StoreError
//! untrusted.rs           escaping and shortening of request-derived text for logs, replies and pages
//! trace.rs               feature `otel`: the request span (continuing the sender's traceparent), messaging
//!                        attributes, the traceparent the inbox stores; no-ops without the feature
//! source.rs              the source-IP allowlist behind trusted proxies
//! sender.rs              building and signing deliveries (EventBuilder, SignedDelivery) for tests, the CLI, the emulator
//! sender/standard.rs     signing the Standard Webhooks way (whsec_ → v1, whsk_ → v1a)
//! time.rs                internal: now, UTC dates, ages and "since" times for the CLI, dashboard and emulator
//! secret_set/mod.rs     SecretSet: secrets replaced whole under running verifiers (one read per verification)
//! secret_set/file.rs     a SecretSet's file: one secret per line, reload, SIGHUP, watching for changes
//! headers.rs, secret.rs, clock.rs, metrics.rs, defaults.rs, testing/
//! ```
//!
//! The files import in one direction: `adapter/*` → `receiver` → `signature`,
//! `event`, `store`, `reject` → `reply`, `error`, `metrics`. Nothing in
//! `receiver/` or `signature/` imports `adapter`; `reject.rs` and `reply.rs`
//! import neither.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod adapter;
mod clock;
pub mod defaults;
pub mod error;
pub mod event;
mod headers;
pub mod metrics;
pub mod receiver;
mod reject;
pub mod reply;
mod secret;
mod secret_set;
pub mod sender;
pub mod signature;
pub mod source;
pub mod store;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod trace;
// Internal to payhook's crates (the dashboard, the emulator, the CLI, the
// inbox): one rule for dates, ages and "since" times; not public API.
#[doc(hidden)]
pub mod time;
pub mod untrusted;

pub use clock::{Clock, FixedClock, SystemClock};
pub use error::{ConfigError, Error, StoreError, StoreErrorKind};
pub use event::{Event, EventKind, Metadata, PaymentIntent, PaymentIntentStatus, PaymentMethod};
pub use receiver::{ClaimGuard, Receiver, ReceiverBuilder};
pub use reply::Reply;
pub use secret::Secret;
pub use secret_set::SecretSet;
pub use signature::{sign, SignatureScheme, Verifier};
pub use store::{Claim, ClaimToken, Completion, DynStore, MemoryStore, Store};
