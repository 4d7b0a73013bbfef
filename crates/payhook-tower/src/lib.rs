//! Tower middleware for payhook: a webhook route that only ever sees verified,
//! new events from the payment service, plus (feature `axum`) an extractor and
//! per-kind handler routing for axum 0.8.
//!
//! [`WebhookLayer`] wraps any `tower::Service<http::Request<B>>` whose body `B`
//! implements [`http_body::Body`] and `From<Bytes>` (axum's `Body`, hyper's
//! `Full<Bytes>`). For each request it reads the raw body under the limit,
//! runs the core pipeline ([`Receiver::receive`](payhook_core::Receiver::receive):
//! signature, timestamp, payload, dedupe claim) and answers rejections and
//! duplicates itself. A new event reaches the inner service with the
//! [`Event`](payhook_core::Event) and the [`RawBody`] in the request extensions;
//! the inner response's status then settles the claim (2xx: done; otherwise, an
//! error, a panic or a dropped request: released for the sender's retry).
//! See [`WebhookService`] for the details.
//!
//! | situation | reply |
//! |---|---|
//! | new event | the inner service's response |
//! | duplicate of an event handled before | `200 {"received":true}` |
//! | bad signature, stale timestamp, invalid event, body cut short | `400 Webhook Error: …` |
//! | body over the limit | `413 Webhook Error: …`, without reading the rest; connection closed |
//! | client address outside the receiver's source-IP allowlist | `403 Webhook Error: …`, before the body is read; connection closed |
//! | an allowlist is configured but the server passes no peer address ([`PeerAddr`]) | `500 Webhook Error: server misconfigured: …` |
//! | the same event in flight in another request | `409 Webhook Error: …` |
//! | dedupe store unreachable | `503 Webhook Error: …` |
//! | body not complete within the receiver's body timeout | `408 Webhook Error: …`, connection closed |
//! | inner service panicked | `500` [`HANDLER_PANICKED`](payhook_core::reply::HANDLER_PANICKED) |
//!
//! ```
//! use std::convert::Infallible;
//!
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use payhook::sender::{EventBuilder, SignedDelivery};
//! use payhook::{Event, Receiver};
//! use payhook::tower::WebhookLayer;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
//! let service = ServiceBuilder::new()
//!     .layer(WebhookLayer::new(receiver))
//!     .service(service_fn(|request: Request<Full<Bytes>>| async move {
//!         // Only new, verified events get here.
//!         let event = request.extensions().get::<Event>().expect("set by WebhookLayer");
//!         println!("{} {}", event.id(), event.event_type());
//!         Ok::<_, Infallible>(Response::new(Full::<Bytes>::from(r#"{"received":true}"#)))
//!     }));
//!
//! let event = EventBuilder::payment_intent_succeeded();
//! let delivery = SignedDelivery::now(event.to_json(), "whsec_test_secret").unwrap();
//! let request = delivery.to_request("/webhooks");
//! let response = service.clone().oneshot(request).await.unwrap();
//! assert_eq!(response.status(), 200);
//!
//! // A tampered body never reaches the inner service.
//! let request = delivery.to_request("/webhooks").map(|_| Full::from(event.to_json().replace("pi_", "px_")));
//! let response = service.oneshot(request).await.unwrap();
//! assert_eq!(response.status(), 400);
//! # });
//! ```
//!
//! # Source map
//!
//! For contributors: one role per file (ARCHITECTURE.md in the repository has
//! the workspace's map).
//!
//! ```text
//! layer.rs, service.rs, future.rs   WebhookLayer → WebhookService → ResponseFuture (check_source, intake, receive, settle)
//! body.rs                           the request body read through the core's BodyIntake
//! peer.rs                           PeerAddr: the client address the allowlist needs
//! axum/mod.rs, axum/extract.rs      the `Webhook` extractor for axum handlers
//! axum/handlers.rs                  EventHandlers: per-kind handlers (methods generated from the event catalogue)
//! axum/serve.rs                     hyper serving with a header-read timeout
//! axum/inbox.rs, axum/dashboard.rs  inbox_route, dashboard_router (features `inbox`, `dashboard`)
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod axum;
mod body;
mod future;
mod layer;
mod peer;
mod service;

pub use body::RawBody;
pub use future::ResponseFuture;
pub use layer::WebhookLayer;
pub use peer::PeerAddr;
pub use service::WebhookService;
