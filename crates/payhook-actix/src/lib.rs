//! actix-web 4 integration for payhook: a [`Webhook`] extractor that hands your
//! handler verified, deduplicated, typed events from the payment service.
//!
//! Wrap the webhook route (or the app) in a [`WebhookConfig`] holding a
//! configured [`Receiver`](payhook_core::Receiver) (`.wrap(WebhookConfig::new(receiver))`),
//! take [`Webhook`] (or `Webhook<YourType>`) in the handler, and answer: a 2xx
//! marks the event done, anything else releases it for the sender's retry —
//! the same rule as the axum adapter. [`EventHandlers`] routes by event type to
//! ordinary actix-web handlers, settled the same way. [`Webhook::ack`] marks an
//! event done at once; with the config registered as plain app data it is the
//! way to acknowledge (see [`Webhook`]). The extractor answers everything else itself — bad signatures,
//! oversized bodies, duplicates, events in flight elsewhere — with the core's
//! replies, so the handler only runs for new, genuine events; and a handler that
//! fails, panics or never acknowledges leaves the event to be delivered again.
//!
//! All protocol logic lives in `payhook-core` (its `adapter` module is the whole
//! interface this crate uses); this crate only translates actix-web's payload,
//! headers and responses.
//!
//! ```
//! use actix_web::{test, web, App, HttpResponse};
//! use payhook::actix::{Webhook, WebhookConfig};
//! use payhook::{sign, EventKind, Receiver, Secret};
//!
//! async fn webhooks(webhook: Webhook) -> actix_web::Result<HttpResponse> {
//!     match webhook.kind() {
//!         EventKind::PaymentIntentSucceeded(intent) => println!("paid: {} {}", intent.amount, intent.currency),
//!         EventKind::PaymentIntentFailed(intent) => println!("failed: {}", intent.id),
//!         _ => {} // other types are acknowledged too
//!     }
//!     Ok(HttpResponse::Ok().finish()) // a 2xx marks the event done
//! }
//!
//! # actix_web::rt::System::new().block_on(async {
//! let receiver = Receiver::builder().secret("whsec_test_secret").build().expect("valid configuration");
//! let app = test::init_service(
//!     App::new()
//!         .wrap(WebhookConfig::new(receiver))
//!         .route("/webhooks", web::post().to(webhooks)),
//! )
//! .await;
//!
//! // A delivery as the payment service sends it.
//! let body = r#"{"id":"evt_1","type":"payment_intent.failed","data":{"object":
//!   {"id":"pi_1","object":"payment_intent","amount":900,"currency":"btc","status":"failed"}}}"#;
//! let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
//! let signature = sign(body.as_bytes(), &Secret::new("whsec_test_secret").unwrap(), now);
//! let request = || {
//!     test::TestRequest::post()
//!         .uri("/webhooks")
//!         .insert_header(("x-service-signature", signature.as_str()))
//!         .set_payload(body)
//!         .to_request()
//! };
//! let response = test::call_service(&app, request()).await;
//! assert_eq!(response.status(), 200);
//! assert_eq!(test::read_body(response).await, r#"{"received":true}"#);
//!
//! // The same event again is acknowledged without running the handler.
//! assert_eq!(test::call_service(&app, request()).await.status(), 200);
//! # });
//! ```
//!
//! # Bodies over the limit, and stalled bodies
//!
//! A `Content-Length` over the receiver's body limit is answered with `413` before
//! anything is read; a chunked body is read only until it passes the limit. A body
//! that has not arrived in full within the receiver's
//! [body timeout](payhook_core::ReceiverBuilder::body_timeout) (5 s by default)
//! is answered with `408`. In both cases the rest is never buffered and the
//! connection is closed after the reply.
//!
//! # Source-IP allowlist
//!
//! With a receiver built with
//! [`allowed_networks`](payhook_core::ReceiverBuilder::allowed_networks), the
//! extractor and the inbox route (`inbox_route`, feature `inbox`) check the
//! client address first, from
//! `HttpRequest::peer_addr` and, when that peer is a trusted proxy, the
//! forwarding headers (see `payhook::source`): a refused source gets
//! `403 Webhook Error: …` before its body is read, and the handler never runs.
//! actix-web's own `ConnectionInfo::realip_remote_addr` is not used: it
//! believes `Forwarded` / `X-Forwarded-For` from any client.
//!
//! # Header timeout
//!
//! actix-web closes a connection whose request head has not arrived within
//! `HttpServer::client_request_timeout` (5 s by default) and an idle
//! kept-alive one after `keep_alive` (5 s); keep both short on a public
//! webhook endpoint.
//!
//! # Client disconnects
//!
//! actix-web keeps running a handler whose client has closed its connection
//! unless the server is told not to allow half-closed connections. With
//! `HttpServer::h1_allow_half_closed(false)` a disconnect cancels the handler and
//! its claim is released, so the sender's retry runs it again; with actix-web's
//! default the handler runs on, the event stays in flight (`409` to a retry)
//! until it finishes, and its response still settles it.
//!
//! # Tracing
//!
//! The core logs every delivery's outcome under target `payhook`; this
//! crate adds an error for a route without a [`WebhookConfig`] and a warning for
//! a verified body that does not fit the handler's payload type.
//!
//! # Source map
//!
//! For contributors: one role per file (ARCHITECTURE.md in the repository has
//! the workspace's map).
//!
//! ```text
//! extract.rs     the `Webhook` extractor (ack / release)
//! intake.rs      actix headers seen as the core's Headers, the body read through BodyIntake
//! config.rs      WebhookConfig (app data) and its Transform (the settling middleware)
//! settle.rs      settling by the handler's response (run_and_settle, settle_by_response)
//! reply.rs       Reply → HttpResponse, Rejection
//! handlers.rs    EventHandlers (methods generated from the event catalogue)
//! expect.rs      `Expect: 100-continue` answered before the body
//! inbox.rs       inbox_route (feature `inbox`)
//! dashboard.rs   dashboard_scope (feature `dashboard`)
//! testing.rs     SignedDeliveryExt (feature `testing`)
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod config;
#[cfg(feature = "dashboard")]
mod dashboard;
mod expect;
mod extract;
mod handlers;
#[cfg(feature = "inbox")]
mod inbox;
mod intake;
mod reply;
mod settle;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

pub use config::{WebhookConfig, WebhookMiddleware};
#[cfg(feature = "dashboard")]
#[cfg_attr(docsrs, doc(cfg(feature = "dashboard")))]
pub use dashboard::dashboard_scope;
pub use expect::ExpectContinue;
pub use extract::Webhook;
pub use handlers::{acking, Acking, EventHandlers};
#[cfg(feature = "inbox")]
pub use inbox::inbox_route;
pub use reply::Rejection;
