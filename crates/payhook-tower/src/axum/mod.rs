//! axum integration (feature `axum`): the [`Webhook`] extractor, the
//! [`Received`] responder, [`EventHandlers`], and [`serve`] (axum's `serve`
//! with a header-read timeout and the peer address the source-IP allowlist
//! needs).
//!
//! Put [`WebhookLayer`](crate::WebhookLayer) on the webhook route with
//! `route_layer` (other routes stay untouched), and take the verified event in
//! the handler with [`Webhook`]. The handler's status decides the claim: a 2xx
//! marks the event done, anything else (or a panic) releases it so the
//! sender's retry runs the handler again.
//!
//! Where the layer goes:
//!
//! * `Router::route_layer(WebhookLayer::new(receiver))` guards every route
//!   added before it (including their "method not allowed" answer, so a `GET`
//!   on the webhook path gets `400 Webhook Error: missing … header`); routes
//!   added after it, nested routers' siblings and the 404 fallback are untouched;
//! * `post(handler).route_layer(WebhookLayer::new(receiver))` guards just that
//!   method, and other methods keep their plain `405`;
//! * `Router::layer` would also run the layer for unknown paths: avoid it.
//!
//! The layer has already read the body (up to the receiver's limit, which is
//! what counts; axum's `DefaultBodyLimit` does not apply to [`Webhook`]); the
//! handler can still take it again as `Bytes` or `String`.
//!
//! ```
//! use axum::{extract::State, http::StatusCode, routing::{get, post}, Router};
//! use payhook::sender::{EventBuilder, SignedDelivery};
//! use payhook::{Event, EventKind, Receiver};
//! use payhook::tower::axum::{Received, Webhook};
//! use payhook::tower::WebhookLayer;
//! use tower::ServiceExt;
//!
//! #[derive(Clone)]
//! struct Shop;
//!
//! async fn webhook(State(_shop): State<Shop>, Webhook(event): Webhook) -> Result<Received, StatusCode> {
//!     match event.kind() {
//!         EventKind::PaymentIntentSucceeded(intent) => println!("paid: {} {}", intent.amount, intent.currency),
//!         EventKind::PaymentIntentFailed(intent) => println!("failed: {}", intent.id),
//!         _ => {} // other types are acknowledged
//!     }
//!     Ok(Received)
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
//! let app = Router::new()
//!     .route("/webhooks", post(webhook))
//!     .route_layer(WebhookLayer::new(receiver))
//!     .route("/health", get(|| async { "ok" }))
//!     .with_state(Shop);
//!
//! // Testing the app: a signed delivery is a request the router takes as it is.
//! let delivery = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), "whsec_test_secret").unwrap();
//! let response = app.clone().oneshot(delivery.to_request("/webhooks")).await.unwrap();
//! assert_eq!(response.status(), StatusCode::OK);
//! // The same event again is acknowledged without running the handler.
//! let response = app.oneshot(delivery.to_request("/webhooks")).await.unwrap();
//! assert_eq!(response.status(), StatusCode::OK);
//! # });
//! ```

#[cfg(feature = "dashboard")]
mod dashboard;
mod extract;
mod handlers;
#[cfg(feature = "inbox")]
mod inbox;
mod serve;

#[cfg(feature = "dashboard")]
#[cfg_attr(docsrs, doc(cfg(feature = "dashboard")))]
pub use dashboard::dashboard_router;
pub use extract::{Received, Webhook, WebhookRejection};
pub use handlers::EventHandlers;
#[cfg(feature = "inbox")]
pub use inbox::inbox_route;
pub use serve::{serve, Serve, DEFAULT_HEADER_READ_TIMEOUT};
