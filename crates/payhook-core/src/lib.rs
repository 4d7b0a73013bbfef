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
pub use signature::{sign, SignatureScheme, Verifier};
pub use store::{Claim, ClaimToken, Completion, DynStore, MemoryStore, Store};
