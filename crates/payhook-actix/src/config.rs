//! Where the [`Webhook`](crate::Webhook) extractor finds its receiver: actix app data.
//!
//! Register a [`WebhookConfig`] on the `App`, a scope or a single resource; the
//! innermost registration wins, so one app can serve several endpoints with
//! different secrets or namespaces.
//!
//! ```
//! use actix_web::{web, App};
//! use payhook::actix::WebhookConfig;
//! use payhook::Receiver;
//!
//! let orders = Receiver::builder().secret("whsec_orders").namespace("orders").build().unwrap();
//! let payouts = Receiver::builder().secret("whsec_payouts").namespace("payouts").build().unwrap();
//! let app = App::new()
//!     .app_data(WebhookConfig::new(orders))
//!     .service(web::scope("/payouts").app_data(WebhookConfig::new(payouts)));
//! # drop(app);
//! ```

use actix_web::{web, HttpRequest};
use payhook_core::Receiver;

/// A configured [`Receiver`] for the [`Webhook`](crate::Webhook) extractor,
/// registered with `App::app_data` (or wrapped in `web::Data`).
///
/// The receiver holds everything a delivery is checked against: the secrets,
/// the tolerance, the body limit, the dedupe store and the header name.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    receiver: Receiver,
}

impl WebhookConfig {
    /// Wraps a configured receiver.
    pub fn new(receiver: Receiver) -> Self {
        Self { receiver }
    }

    /// The receiver deliveries go through.
    pub fn receiver(&self) -> &Receiver {
        &self.receiver
    }

    /// The configuration visible to `req`: plain app data first, then `web::Data`.
    pub(crate) fn of(req: &HttpRequest) -> Option<&Self> {
        req.app_data::<Self>()
            .or_else(|| req.app_data::<web::Data<Self>>().map(|data| data.get_ref()))
    }
}

impl From<Receiver> for WebhookConfig {
    fn from(receiver: Receiver) -> Self {
        Self::new(receiver)
    }
}
