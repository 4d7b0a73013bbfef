//! actix-web 4 integration for payhook: a [`Webhook`] extractor that hands your
//! handler verified, deduplicated, typed events from the payment service.
//!
//! Register a [`WebhookConfig`] wrapping a configured
//! [`Receiver`](payhook_core::Receiver) as app data, take [`Webhook`] (or
//! `Webhook<YourType>`) in the handler, and return [`Webhook::ack`] once the event
//! is handled. The extractor answers everything else itself — bad signatures,
//! oversized bodies, duplicates, events in flight elsewhere — with the core's
//! replies, so the handler only runs for new, genuine events; and a handler that
//! fails, panics or never acknowledges leaves the event to be delivered again.
//!
//! All protocol logic lives in `payhook-core`; this crate only reads the body,
//! translates headers and renders replies.
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
//!     Ok(webhook.ack().await)
//! }
//!
//! # actix_web::rt::System::new().block_on(async {
//! let receiver = Receiver::builder().secret("whsec_test_secret").build().expect("valid configuration");
//! let app = test::init_service(
//!     App::new()
//!         .app_data(WebhookConfig::new(receiver))
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
//! # Bodies over the limit
//!
//! A `Content-Length` over the receiver's body limit is answered with `413` before
//! anything is read; a chunked body is read only until it passes the limit. The
//! rest is never buffered: the connection is closed after the `413`, once
//! actix-web's lingering close (`HttpServer::client_disconnect_timeout`, 1 s by
//! default) has given the client time to read the reply — during which actix-web
//! reads and discards whatever the client still sends. Lower that timeout to
//! cut oversized uploads off sooner.
//!
//! # Tracing
//!
//! The core logs every delivery's outcome under target `payhook`; this
//! crate adds an error for a route without a [`WebhookConfig`] and a warning for
//! a verified body that does not fit the handler's payload type.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod config;
mod extract;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

pub use config::WebhookConfig;
pub use extract::{Rejection, Webhook};
