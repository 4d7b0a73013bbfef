//! Signed `actix_web::test::TestRequest`s for testing your webhook handlers
//! without the payment service (feature `testing`).
//!
//! ```
//! use actix_web::{test, web, App, HttpResponse};
//! use payhook::actix::testing::SignedDeliveryExt;
//! use payhook::actix::{Webhook, WebhookConfig};
//! use payhook::sender::{EventBuilder, SignedDelivery};
//! use payhook::Receiver;
//!
//! async fn webhooks(webhook: Webhook) -> HttpResponse {
//!     webhook.ack().await
//! }
//!
//! # actix_web::rt::System::new().block_on(async {
//! let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
//! let app = test::init_service(
//!     App::new()
//!         .app_data(WebhookConfig::new(receiver))
//!         .route("/webhooks", web::post().to(webhooks)),
//! )
//! .await;
//!
//! let event = EventBuilder::payment_intent_succeeded().amount(42_000);
//! let delivery = SignedDelivery::now(event.to_json(), "whsec_test_secret").unwrap();
//! let response = test::call_service(&app, delivery.to_test_request("/webhooks").to_request()).await;
//! assert_eq!(response.status(), 200);
//! # });
//! ```

use actix_web::http::header::{self, HeaderName};
use actix_web::test::TestRequest;
use payhook_core::sender::SignedDelivery;
use payhook_core::signature::DEFAULT_HEADER;

/// Turns a [`SignedDelivery`] into an actix-web test request.
pub trait SignedDeliveryExt {
    /// A `POST` to `uri` with the body, `content-type: application/json` and
    /// the signature in `x-service-signature`.
    fn to_test_request(&self, uri: &str) -> TestRequest;

    /// The same, with the signature in `header` (an invalid header name is left
    /// out, so the request is rejected for its missing signature).
    fn to_test_request_with_header(&self, uri: &str, header: &str) -> TestRequest;
}

impl SignedDeliveryExt for SignedDelivery {
    fn to_test_request(&self, uri: &str) -> TestRequest {
        self.to_test_request_with_header(uri, DEFAULT_HEADER)
    }

    fn to_test_request_with_header(&self, uri: &str, header: &str) -> TestRequest {
        let mut request = TestRequest::post()
            .uri(uri)
            .insert_header((header::CONTENT_TYPE, "application/json"))
            .set_payload(self.body.clone());
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(header.as_bytes()),
            header::HeaderValue::from_str(&self.signature),
        ) {
            request = request.insert_header((name, value));
        }
        request
    }
}
