//! payhook: verified, deduplicated, typed webhook events from the crypto payment
//! service, for axum and actix-web apps.
//!
//! Mount one tower layer (axum) or take one extractor (actix-web): bad
//! signatures, stale or malformed deliveries, oversized bodies and duplicates
//! are answered for you, and your handler runs once per genuine event.
//!
//! | feature | what it adds |
//! |---|---|
//! | `axum` | [`tower::WebhookLayer`] plus the [`tower::axum`] extractor, [`Received`](tower::axum::Received) and [`EventHandlers`](tower::axum::EventHandlers) for axum 0.8 |
//! | `tower` | [`tower`]: the layer alone, for any tower/hyper server |
//! | `actix` | [`actix`]: the [`Webhook`](actix::Webhook) extractor for actix-web 4 |
//! | `redis` | [`redis`]: the [`RedisStore`](redis::RedisStore), for apps with several replicas |
//! | `redis-tls` | the Redis store with `rediss://` URLs |
//! | `emulator` | [`emulator`]: the payment service in test mode (its API and signed deliveries with retries and faults), for your tests |
//! | `inbox-sqlite`, `inbox-postgres` | [`inbox`]: a durable inbox — acknowledge at once, process after, effects exactly once |
//! | `dashboard` | [`dashboard`]: the inbox in the browser for the people on call (with `axum` or `actix`) |
//! | `testing` | [`testing`]: signed `http::Request`s ([`SignedDelivery::to_request`](sender::SignedDelivery::to_request)) for your tests, a store that fails on demand, the store conformance suite, and [`actix::testing`] with `actix` |
//!
//! With feature `axum` (and `axum = "0.8"`, `tokio` with `macros`,
//! `rt-multi-thread` and `net`):
//!
//! ```no_run
//! use axum::{routing::post, Router};
//! use payhook::tower::axum::{Received, Webhook};
//! use payhook::tower::WebhookLayer;
//! use payhook::{Event, EventKind, Receiver};
//!
//! async fn webhooks(Webhook(event): Webhook<Event>) -> Received {
//!     if let EventKind::PaymentIntentSucceeded(intent) = event.kind() {
//!         println!("paid {} {}", intent.amount, intent.currency);
//!     }
//!     Received // 200 {"received":true}; any non-2xx releases the event for a retry
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let receiver = Receiver::builder().secret(std::env::var("PAYHOOK_SECRET")?).build()?;
//!     let app = Router::new()
//!         .route("/webhooks", post(webhooks))
//!         .route_layer(WebhookLayer::new(receiver));
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//!     payhook::tower::axum::serve(listener, app).await?; // with a header-read timeout
//!     Ok(())
//! }
//! ```
//!
//! The [`tower::axum`] and [`actix`] module pages show a complete app with its
//! test, and [`sender`] and [`testing`] the helpers those tests use. Everything is logged
//! through `tracing` under the target `payhook`; install a subscriber to see
//! it. The repository's README has the quick starts, and PROTOCOL.md every
//! protocol decision (signature format, tolerance, replies).
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// What an app writes, at the root: the receiver and its configuration, the
// events, the stores, the errors. Each item is listed here on purpose: an
// item added to the core is not published by this crate until it is added
// here (and to public-api/payhook.txt, which CI compares).
#[doc(inline)]
pub use payhook_core::{
    sign, Claim, ClaimGuard, ClaimToken, Clock, Completion, ConfigError, DynStore, Error, Event, EventKind,
    FixedClock, MemoryStore, Metadata, PaymentIntent, PaymentIntentStatus, PaymentMethod, Receiver,
    ReceiverBuilder, Reply, Secret, SignatureScheme, Store, StoreError, StoreErrorKind, SystemClock,
    Verifier,
};

// The modules for what goes beyond the root: the event parser's helpers, the
// store's constants and object-safe form, the signature header, the source
// allowlist, metric names and the escaping of request-derived text.
#[doc(inline)]
pub use payhook_core::{defaults, event, metrics, sender, signature, source, store, untrusted};

/// For authors of framework adapters (the `tower` and `actix` features are
/// built on it): body intake, the claim's settling, header lookup and the
/// handler table. Apps do not need it.
#[doc(inline)]
pub use payhook_core::adapter;

#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
#[doc(inline)]
pub use payhook_core::testing;

#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
#[doc(inline)]
pub use payhook_core::store_conformance_tests;

// The adapters are inlined so their pages (`payhook::tower::WebhookLayer`,
// `payhook::actix::Webhook`, `payhook::redis::RedisStore`, …) are part of these
// docs, at the paths a user writes, rather than links to other crates. Each
// module page is the adapter crate's own documentation, so no doc comment here.

#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
#[doc(inline)]
pub use payhook_tower as tower;

#[cfg(feature = "actix")]
#[cfg_attr(docsrs, doc(cfg(feature = "actix")))]
#[doc(inline)]
pub use payhook_actix as actix;

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
#[doc(inline)]
pub use payhook_redis as redis;

#[cfg(feature = "emulator")]
#[cfg_attr(docsrs, doc(cfg(feature = "emulator")))]
#[doc(inline)]
pub use payhook_emulator as emulator;

#[cfg(any(feature = "inbox-sqlite", feature = "inbox-postgres"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "inbox-sqlite", feature = "inbox-postgres"))))]
#[doc(inline)]
pub use payhook_inbox as inbox;

#[cfg(feature = "dashboard")]
#[cfg_attr(docsrs, doc(cfg(feature = "dashboard")))]
#[doc(inline)]
pub use payhook_dashboard as dashboard;

/// The README's code blocks, compiled (and the runnable ones run) as doctests so
/// the quick starts cannot drift from the API.
#[cfg(all(
    doctest,
    feature = "axum",
    feature = "actix",
    feature = "redis",
    feature = "testing",
    feature = "emulator",
    feature = "inbox-sqlite"
))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
