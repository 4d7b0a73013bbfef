//! Where the [`Webhook`](crate::Webhook) extractor finds its receiver: actix app data.
//!
//! Register a [`WebhookConfig`] on the `App`, a scope or a single resource; the
//! innermost registration wins, so one app can serve several endpoints with
//! different secrets or namespaces.
//!
//! # Build the receiver once, outside `HttpServer::new`
//!
//! actix-web calls the `HttpServer::new` closure once per worker thread. A
//! [`Receiver`] built *inside* it gets one in-memory dedupe store per worker, so
//! a duplicate delivery that lands on another worker runs the handler again.
//! Build it (or the `WebhookConfig`) once before the server and clone it into
//! the closure — every clone shares one store:
//!
//! ```no_run
//! use actix_web::{web, App, HttpResponse, HttpServer};
//! use payhook::actix::{Webhook, WebhookConfig};
//! use payhook::Receiver;
//!
//! async fn webhooks(webhook: Webhook) -> HttpResponse {
//!     webhook.ack().await
//! }
//!
//! #[actix_web::main]
//! async fn main() -> std::io::Result<()> {
//!     // Once, for every worker:
//!     let config = WebhookConfig::new(Receiver::builder().secret("whsec_test_secret").build().expect("valid"));
//!     HttpServer::new(move || {
//!         App::new()
//!             .app_data(config.clone())
//!             .route("/webhooks", web::post().to(webhooks))
//!     })
//!     .bind(("127.0.0.1", 8080))?
//!     .run()
//!     .await
//! }
//! ```
//!
//! When a route is served by receivers with distinct in-memory stores (built per
//! worker), the first request on each worker checks it and a warning is logged
//! under target `payhook`.
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

use std::future::{ready, Ready};
use std::panic::AssertUnwindSafe;
use std::rc::Rc;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::{web, HttpMessage, HttpRequest};
use futures_util::future::LocalBoxFuture;
use futures_util::FutureExt;
use payhook_core::adapter::{HandlerOutcome, SplitStoreCheck};
use payhook_core::{trace, Receiver, Reply};
use tracing::Instrument;

use crate::intake::ActixHeaders;
use crate::reply::{reply_to_response, Rejection};
use crate::settle::{is_bare_success, outcome, ClaimSlot};

/// A configured [`Receiver`] for the [`Webhook`](crate::Webhook) extractor.
///
/// Wrap routes in it (`App::wrap`, `Scope::wrap`, `Resource::wrap`): it then
/// also settles each delivery from the handler's response (a 2xx marks the
/// event done, anything else releases it), through [`WebhookMiddleware`](crate::WebhookMiddleware).
/// Registered with `App::app_data` (or in `web::Data`) it only configures the
/// extractor, and handlers acknowledge with [`Webhook::ack`](crate::Webhook::ack).
///
/// The receiver holds everything a delivery is checked against: the secrets,
/// the tolerance, the body limit, the dedupe store and the header name. Build
/// it once, outside `HttpServer::new`, and clone it into the app factory:
/// actix-web calls that closure once per worker thread, so a receiver built
/// inside it gets one in-memory dedupe store per worker, and a duplicate that
/// lands on another worker runs the handler again (payhook logs a `WARN` when
/// it sees one route served by several such stores).
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    receiver: Receiver,
    split_store_check: SplitStoreCheck,
}

impl WebhookConfig {
    /// Wraps a configured receiver.
    pub fn new(receiver: Receiver) -> Self {
        Self {
            receiver,
            split_store_check: SplitStoreCheck::new(),
        }
    }

    /// Warns (once per configuration) when `req`'s route is also served by a
    /// receiver with another in-memory store.
    pub(crate) fn check_split_store(&self, req: &HttpRequest) {
        let route = req.match_pattern().unwrap_or_default();
        self.split_store_check.check(&self.receiver, &route);
    }

    /// The receiver deliveries go through.
    pub fn receiver(&self) -> &Receiver {
        &self.receiver
    }

    /// The configuration visible to `req`: the one wrapping the route (as a
    /// middleware) first, then plain app data, then `web::Data`.
    pub(crate) fn of(req: &HttpRequest) -> Option<Self> {
        if let Some(wrapping) = req.extensions().get::<Self>() {
            return Some(wrapping.clone());
        }
        req.app_data::<Self>()
            .or_else(|| req.app_data::<web::Data<Self>>().map(|data| data.get_ref()))
            .cloned()
    }
}

impl From<Receiver> for WebhookConfig {
    fn from(receiver: Receiver) -> Self {
        Self::new(receiver)
    }
}

/// `WebhookConfig` as a middleware: `App::wrap`, `Scope::wrap` or
/// `Resource::wrap` it to configure the [`Webhook`](crate::Webhook) extractor
/// of every route inside *and* settle each claim from the response, as the
/// axum adapter does.
impl<S, B> Transform<S, ServiceRequest> for WebhookConfig
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Transform = WebhookMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(WebhookMiddleware {
            service: Rc::new(service),
            config: self.clone(),
        }))
    }
}

/// The service [`WebhookConfig`] wraps a route in (see its `Transform` impl).
pub struct WebhookMiddleware<S> {
    service: Rc<S>,
    config: WebhookConfig,
}

impl<S> std::fmt::Debug for WebhookMiddleware<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookMiddleware")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<S, B> Service<ServiceRequest> for WebhookMiddleware<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    actix_web::dev::forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let slot = ClaimSlot::default();
        req.extensions_mut().insert(slot.clone());
        req.extensions_mut().insert(self.config.clone());
        // The request's span (feature `otel`; none otherwise), continuing the
        // sender's `traceparent`: the delivery span and the handler's are its children.
        let span = trace::request_span(req.method().as_str(), req.path(), &ActixHeaders(req.headers()));
        let served = span.in_scope(|| self.service.call(req));
        let recorded = span.clone();
        let settled = async move {
            match AssertUnwindSafe(served).catch_unwind().await {
                Ok(Ok(response)) => {
                    let Some(claim) = slot.take() else {
                        return Ok(response.map_into_left_body());
                    };
                    let bare = is_bare_success(response.response());
                    claim.settle(outcome(response.status())).await;
                    if bare {
                        let (req, _) = response.into_parts();
                        let received = reply_to_response(Reply::received());
                        return Ok(ServiceResponse::new(req, received).map_into_right_body());
                    }
                    Ok(response.map_into_left_body())
                }
                Ok(Err(error)) => {
                    if let Some(claim) = slot.take() {
                        claim.settle(HandlerOutcome::Failed).await;
                    }
                    Err(error)
                }
                Err(_panic) => {
                    if let Some(claim) = slot.take() {
                        claim.settle(HandlerOutcome::Panicked).await;
                    }
                    Err(Rejection::from(Reply::handler_panicked()).into())
                }
            }
        };
        Box::pin(
            async move {
                let response = settled.await;
                let status = match &response {
                    Ok(response) => response.status(),
                    Err(error) => error.as_response_error().status_code(),
                };
                trace::record_response(&recorded, status.as_u16());
                response
            }
            .instrument(span),
        )
    }
}
