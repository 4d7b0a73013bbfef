//! payhook: verified, deduplicated, typed webhook events from the crypto payment
//! service, for axum and actix-web apps.
//!
//! Mount one tower layer (axum) or take one extractor (actix-web): bad
//! signatures, stale or malformed deliveries, oversized bodies and duplicates
//! are answered for you, and your handler runs once per genuine event.
//!
//! | feature | what it adds |
//! |---|---|
//! | `axum` | [`tower::WebhookLayer`] plus the [`tower::axum`] extractor, [`Received`][tower::axum::Received] and [`EventHandlers`][tower::axum::EventHandlers] for axum 0.8 |
//! | `tower` | [`tower`]: the layer alone, for any tower/hyper server |
//! | `actix` | [`actix`]: the [`Webhook`][actix::Webhook] extractor for actix-web 4 |
//! | `redis` | [`redis`]: the [`RedisStore`][redis::RedisStore], for apps with several replicas |
//! | `redis-tls` | the Redis store with `rediss://` URLs |
//! | `sighup` | [`SecretSet::reload_on_sighup`]: re-read a receiver's secret file when the process gets `SIGHUP` (unix) |
//! | `emulator` | [`emulator`]: the payment service in test mode (its API and signed deliveries with retries and faults), for your tests |
//! | `api` | [`api`]: a client of the service's API — create and retrieve payment intents, the events list page by page, the test-mode helpers — that no reply can make leak the key, loop or flood |
//! | `inbox-sqlite`, `inbox-postgres` | [`inbox`]: a durable inbox — acknowledge at once, process after, effects exactly once |
//! | `reconcile` | with an inbox feature, `inbox::Reconcile`: every event the service created is handled once, the ones no delivery brought included (the inbox lists the service's events with the API key) |
//! | `ed25519` | Standard Webhooks' asymmetric `v1a` signatures: `whpk_` public keys on [`signature::StandardWebhooks`], `whsk_` signing keys in [`sender`] (the HMAC `v1` form needs no feature) |
//! | `dashboard` | [`dashboard`]: the inbox in the browser for the people on call (with `axum` or `actix`) |
//! | `otel` | [`otel`]: OpenTelemetry traces — each request's span continues the sender's `traceparent`, the inbox keeps it so every attempt joins the trace — exported as OTLP over HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set ([`otel::init`]) |
//! | `testing` | [`testing`]: signed `http::Request`s ([`SignedDelivery::to_request`][sender::SignedDelivery::to_request]) for your tests, a store that fails on demand, the store conformance suite, and [`actix::testing`] with `actix` |
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
//!
//! Each module named above exists only with its feature; without it, its link
//! goes to the page on docs.rs, which documents every feature.
//!
// The link targets of feature-gated items when their feature is off: rustdoc
// resolves intra-doc links only to items that exist in this build, so these
// reference definitions stand in for them (with the feature on, none is
// emitted and the intra-doc link resolves). The empty line above them keeps
// them out of the paragraph before.
#![cfg_attr(
    not(feature = "tower"),
    doc = "[`tower`]: https://docs.rs/payhook/latest/payhook/tower/index.html"
)]
#![cfg_attr(
    not(feature = "tower"),
    doc = "[`tower::WebhookLayer`]: https://docs.rs/payhook/latest/payhook/tower/struct.WebhookLayer.html"
)]
#![cfg_attr(
    not(feature = "axum"),
    doc = "[`tower::axum`]: https://docs.rs/payhook/latest/payhook/tower/axum/index.html"
)]
#![cfg_attr(
    not(feature = "axum"),
    doc = "[tower::axum::Received]: https://docs.rs/payhook/latest/payhook/tower/axum/struct.Received.html"
)]
#![cfg_attr(
    not(feature = "axum"),
    doc = "[tower::axum::EventHandlers]: https://docs.rs/payhook/latest/payhook/tower/axum/struct.EventHandlers.html"
)]
#![cfg_attr(
    not(feature = "actix"),
    doc = "[`actix`]: https://docs.rs/payhook/latest/payhook/actix/index.html"
)]
#![cfg_attr(
    not(feature = "actix"),
    doc = "[actix::Webhook]: https://docs.rs/payhook/latest/payhook/actix/struct.Webhook.html"
)]
#![cfg_attr(
    not(all(feature = "actix", feature = "testing")),
    doc = "[`actix::testing`]: https://docs.rs/payhook/latest/payhook/actix/testing/index.html"
)]
#![cfg_attr(
    not(feature = "redis"),
    doc = "[`redis`]: https://docs.rs/payhook/latest/payhook/redis/index.html"
)]
#![cfg_attr(
    not(feature = "redis"),
    doc = "[redis::RedisStore]: https://docs.rs/payhook/latest/payhook/redis/struct.RedisStore.html"
)]
#![cfg_attr(
    not(feature = "emulator"),
    doc = "[`emulator`]: https://docs.rs/payhook/latest/payhook/emulator/index.html"
)]
#![cfg_attr(
    not(feature = "sighup"),
    doc = "[`SecretSet::reload_on_sighup`]: https://docs.rs/payhook/latest/payhook/struct.SecretSet.html#method.reload_on_sighup"
)]
#![cfg_attr(
    not(feature = "api"),
    doc = "[`api`]: https://docs.rs/payhook/latest/payhook/api/index.html"
)]
#![cfg_attr(
    not(any(feature = "inbox-sqlite", feature = "inbox-postgres")),
    doc = "[`inbox`]: https://docs.rs/payhook/latest/payhook/inbox/index.html"
)]
#![cfg_attr(
    not(feature = "dashboard"),
    doc = "[`dashboard`]: https://docs.rs/payhook/latest/payhook/dashboard/index.html"
)]
#![cfg_attr(
    not(feature = "testing"),
    doc = "[`testing`]: https://docs.rs/payhook/latest/payhook/testing/index.html"
)]
#![cfg_attr(
    not(feature = "testing"),
    doc = "[sender::SignedDelivery::to_request]: https://docs.rs/payhook/latest/payhook/sender/struct.SignedDelivery.html#method.to_request"
)]
#![cfg_attr(
    not(feature = "otel"),
    doc = "[`otel`]: https://docs.rs/payhook/latest/payhook/otel/index.html"
)]
#![cfg_attr(
    not(feature = "otel"),
    doc = "[`otel::init`]: https://docs.rs/payhook/latest/payhook/otel/fn.init.html"
)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// What an app writes, at the root: the receiver and its configuration, the
// events, the store trait and the memory store, the errors, signing. Each item
// is listed here on purpose, and each has one path: an item at the root is in
// no module below. An item added to the core is not published by this crate
// until it is added here (and to public-api/payhook.txt, which CI compares).
#[doc(inline)]
pub use payhook_core::{
    sign, Clock, ConfigError, Error, Event, EventKind, FixedClock, MemoryStore, Metadata, PaymentIntent,
    PaymentIntentStatus, PaymentMethod, Receiver, ReceiverBuilder, Reply, Secret, SecretSet, SignatureScheme,
    Store, StoreError, StoreErrorKind, SystemClock, Verifier,
};

pub mod event {
    //! What goes beyond [`Event`](crate::Event) and [`PaymentIntent`](crate::PaymentIntent):
    //! the event catalogue ([`CATALOGUE`]: every type payhook types, its aliases
    //! and its data) and a constant per type name, the metadata iterator, and
    //! parsing a verified body into a type of your own.
    //!
    //! ```
    //! use payhook::event::{parse_as, PAYMENT_INTENT_SUCCEEDED};
    //!
    //! // Any `serde::Deserialize` type of yours; here a JSON value.
    //! let body = br#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{}}}"#;
    //! let value: serde_json::Value = parse_as(body).unwrap();
    //! assert_eq!(value["type"], PAYMENT_INTENT_SUCCEEDED);
    //! ```
    #[doc(inline)]
    pub use payhook_core::event::names::*;
    #[doc(inline)]
    pub use payhook_core::event::{
        parse_as, same_content, Carries, EventType, MetadataIter, TestHelper, TypeName, CATALOGUE,
    };
}

pub mod signature {
    //! The `x-service-signature` header beyond [`sign`](crate::sign) and
    //! [`Verifier`](crate::Verifier): the parsed header, the tolerance setting,
    //! the verifier's builder and the defaults. PROTOCOL.md gives every parsing
    //! rule. And the second scheme, Standard Webhooks ([`StandardWebhooks`]:
    //! `webhook-id`, `webhook-timestamp`, `webhook-signature`), selected on a
    //! receiver with [`ReceiverBuilder::scheme`](crate::ReceiverBuilder::scheme).
    //!
    //! ```
    //! use payhook::signature::{Signature, DEFAULT_HEADER};
    //!
    //! let header = b"t=1732264800,v1=47e6632c169b959135c86d19df2cb565cdbea26c53beb45123d38a1437d37287";
    //! let parsed = Signature::parse(header).unwrap();
    //! assert_eq!(parsed.timestamp(), 1732264800);
    //! assert_eq!(DEFAULT_HEADER, "x-service-signature");
    //! ```
    #[doc(inline)]
    pub use payhook_core::signature::{
        Signature, StandardWebhooks, StandardWebhooksBuilder, Tolerance, VerifierBuilder, DEFAULT_HEADER,
        DEFAULT_TOLERANCE, MAX_SIGNATURE_ITEMS, MAX_V1_SIGNATURES, WEBHOOK_ID, WEBHOOK_SIGNATURE,
        WEBHOOK_TIMESTAMP,
    };
}

pub mod store {
    //! For store authors, beyond [`Store`](crate::Store) and
    //! [`MemoryStore`](crate::MemoryStore): what the trait's methods answer
    //! ([`Claim`], [`ClaimToken`], [`Completion`]), its object-safe form
    //! [`DynStore`] (what [`ReceiverBuilder::shared_store`](crate::ReceiverBuilder::shared_store)
    //! takes, and what one store shared by several receivers is held as), the
    //! memory store's builder and the longest lease or retention a store applies.
    //! Every store must pass `payhook::store_conformance_tests!` (feature `testing`).
    //!
    //! ```
    //! use std::sync::Arc;
    //! use std::time::Duration;
    //! use payhook::store::{Claim, Completion, DynStore};
    //! use payhook::{MemoryStore, Store};
    //!
    //! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    //! let store = MemoryStore::new();
    //! let Claim::Claimed(token) = store.claim("payments", "evt_1", Duration::from_secs(60)).await.unwrap() else {
    //!     panic!("a new id is claimed");
    //! };
    //! assert!(matches!(store.claim("payments", "evt_1", Duration::from_secs(60)).await.unwrap(), Claim::InFlight));
    //! let done = store.complete("payments", "evt_1", token, Duration::from_secs(3600)).await.unwrap();
    //! assert_eq!(done, Completion::Completed);
    //!
    //! // One store for several receivers, each under its own namespace.
    //! let shared: Arc<dyn DynStore> = Arc::new(store);
    //! # let _ = shared;
    //! # });
    //! ```
    #[doc(inline)]
    pub use payhook_core::store::{
        Claim, ClaimToken, Completion, DynStore, MemoryStoreBuilder, StoreFuture, MAX_TTL,
    };
}

// Modules with nothing at the root are re-exported whole: each of their items
// has this one path, and their pages are the core's module docs (written with
// the `payhook::` paths). The source-IP allowlist, metric names, the escaping of
// request-derived text, building and signing deliveries, and the receiver's
// defaults.
#[doc(inline)]
pub use payhook_core::{defaults, metrics, sender, source, trace, untrusted};

pub mod adapter {
    //! For authors of framework adapters (the `tower` and `actix` features are
    //! built on it): body intake, the claim's settling, header lookup, the
    //! handler table and payload conversion. Apps do not need it.
    //!
    //! [`Receiver::receive`](crate::Receiver::receive) answers a [`ReceiveOutcome`]:
    //! a reply to send at once, or a [`Delivery`] whose [`ClaimGuard`] the
    //! adapter settles from the handler's outcome.
    //!
    //! ```
    //! use payhook::adapter::ReceiveOutcome;
    //! use payhook::sender::{EventBuilder, SignedDelivery};
    //! use payhook::Receiver;
    //!
    //! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    //! let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
    //! let signed = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), "whsec_test_secret").unwrap();
    //! let mut headers = http::HeaderMap::new();
    //! headers.insert("x-service-signature", signed.signature.parse().unwrap());
    //! let ReceiveOutcome::Deliver(delivery) = receiver.receive(&headers, signed.body.clone()).await else {
    //!     panic!("a genuine delivery");
    //! };
    //! // The handler answered 200: the event is marked done.
    //! delivery.into_claim().settle(http::StatusCode::OK).await;
    //! let again = receiver.receive(&headers, signed.body).await;
    //! assert!(matches!(again, ReceiveOutcome::Respond(reply) if reply.status() == 200));
    //! # });
    //! ```
    #[doc(inline)]
    pub use payhook_core::adapter::{
        not_configured, peer_address_unknown, reject, BodyIntake, Delivery, HandlerOutcome, HandlerTable,
        HeaderLookup, Headers, ReceiveOutcome, SplitStoreCheck,
    };
    #[doc(inline)]
    pub use payhook_core::event::into_payload;
    #[doc(inline)]
    pub use payhook_core::ClaimGuard;
}

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

#[cfg(feature = "api")]
#[cfg_attr(docsrs, doc(cfg(feature = "api")))]
#[doc(inline)]
pub use payhook_api as api;

#[cfg(any(feature = "inbox-sqlite", feature = "inbox-postgres"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "inbox-sqlite", feature = "inbox-postgres"))))]
#[doc(inline)]
pub use payhook_inbox as inbox;

#[cfg(feature = "dashboard")]
#[cfg_attr(docsrs, doc(cfg(feature = "dashboard")))]
#[doc(inline)]
pub use payhook_dashboard as dashboard;

#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub mod otel;

// The guide's pages (docs/guide/*.md) are written for GitHub as much as for
// rustdoc: they link to each other with reference links labelled by file name
// (`[the inbox][inbox.md]`, defined at the page's end as `[inbox.md]: inbox.md`).
// Rustdoc takes the first definition of a label, so the definitions placed
// before each page here turn those links into links between the guide's
// modules; a page's own definitions are the fallback for a label missing here.
macro_rules! guide_page {
    ($file:literal) => {
        concat!(
            "[production.md]: crate::guide::production\n",
            "[production.md#https]: crate::guide::production#https\n",
            "[production.md#alerting]: crate::guide::production#alerting\n",
            "[production.md#configuration-at-a-glance]: crate::guide::production#configuration-at-a-glance\n",
            "[inbox.md]: crate::guide::inbox\n",
            "[inbox.md#configuration]: crate::guide::inbox#configuration\n",
            "[inbox.md#what-the-inbox-guarantees]: crate::guide::inbox#what-the-inbox-guarantees\n",
            "[inbox.md#no-event-missed-reconciliation]: crate::guide::inbox#no-event-missed-reconciliation\n",
            "[operating.md]: crate::guide::operating\n",
            "[operating.md#the-dashboard]: crate::guide::operating#the-dashboard\n",
            "[operating.md#the-command-line-payhook-inbox]: crate::guide::operating#the-command-line-payhook-inbox\n",
            "[operating.md#pausing-an-event-type]: crate::guide::operating#pausing-an-event-type\n",
            "[replicas.md]: crate::guide::replicas\n",
            "[testing.md]: crate::guide::testing\n",
            "[testing.md#testing-inbox-mode]: crate::guide::testing#testing-inbox-mode\n",
            "[emulator.md]: crate::guide::emulator\n",
            "[emulator.md#what-it-does]: crate::guide::emulator#what-it-does\n",
            "[cli.md]: crate::guide::cli\n",
            "[cli.md#payhook-sign-and-payhook-verify]: crate::guide::cli#payhook-sign-and-payhook-verify\n",
            "[cli.md#secrets-exit-codes-and-output]: crate::guide::cli#secrets-exit-codes-and-output\n",
            "[standard-webhooks.md]: crate::guide::standard_webhooks\n",
            "[api.md]: crate::guide::api\n",
            "\n",
            include_str!(concat!("../docs/guide/", $file)),
        )
    };
}

// Shown in every documentation build. Under `cargo test --doc` the pages are
// compiled (and the runnable ones run) as doctests when every feature their
// examples use is on, as the README's are, and left out otherwise.
#[cfg(any(
    not(doctest),
    all(
        feature = "axum",
        feature = "actix",
        feature = "redis",
        feature = "testing",
        feature = "emulator",
        feature = "inbox-sqlite",
        feature = "inbox-postgres",
        feature = "ed25519",
        feature = "otel",
        feature = "dashboard",
        feature = "reconcile",
        feature = "api"
    )
))]
#[doc = guide_page!("README.md")]
pub mod guide {
    #[doc = guide_page!("production.md")]
    pub mod production {}
    #[doc = guide_page!("inbox.md")]
    pub mod inbox {}
    #[doc = guide_page!("operating.md")]
    pub mod operating {}
    #[doc = guide_page!("replicas.md")]
    pub mod replicas {}
    #[doc = guide_page!("testing.md")]
    pub mod testing {}
    #[doc = guide_page!("emulator.md")]
    pub mod emulator {}
    #[doc = guide_page!("cli.md")]
    pub mod cli {}
    #[doc = guide_page!("standard-webhooks.md")]
    pub mod standard_webhooks {}
    #[doc = guide_page!("api.md")]
    pub mod api {}
}

/// The README's code blocks, compiled (and the runnable ones run) as doctests so
/// the quick starts cannot drift from the API.
#[cfg(all(
    doctest,
    feature = "axum",
    feature = "actix",
    feature = "redis",
    feature = "testing",
    feature = "emulator",
    feature = "inbox-sqlite",
    feature = "inbox-postgres",
    feature = "ed25519",
    feature = "otel"
))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
