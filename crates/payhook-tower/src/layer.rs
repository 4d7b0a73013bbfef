//! [`WebhookLayer`]: wraps a service so it only sees verified, new events.

use payhook_core::Receiver;
use tower_layer::Layer;

use crate::service::WebhookService;

/// Applies [`WebhookService`] to a service: put it on the webhook route only
/// (with axum, `Router::route_layer` or `MethodRouter::layer`).
///
/// Everything a delivery goes through is configured on the
/// [`Receiver`](payhook_core::Receiver): secrets, tolerance, body limit, store,
/// header name, namespace, lease and retention.
#[derive(Debug, Clone)]
pub struct WebhookLayer {
    receiver: Receiver,
}

impl WebhookLayer {
    /// A layer that runs every request through `receiver`.
    pub fn new(receiver: Receiver) -> Self {
        Self { receiver }
    }

    /// The receiver this layer runs requests through.
    pub fn receiver(&self) -> &Receiver {
        &self.receiver
    }
}

impl<S> Layer<S> for WebhookLayer {
    type Service = WebhookService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WebhookService::new(inner, self.receiver.clone())
    }
}
