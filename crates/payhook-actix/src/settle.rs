//! Settling a claim from the response: [`WebhookConfig`] as a middleware
//! (`.wrap(WebhookConfig::new(receiver))`), the slot a [`Webhook`](crate::Webhook)
//! leaves its claim in, and the rule both the middleware and
//! [`EventHandlers`](crate::EventHandlers) apply.
//!
//! The rule is the axum adapter's: a 2xx response marks the event done, any
//! other status, an error or a panic releases the claim so the sender's retry
//! runs the handler again. A 2xx without a body is sent as the payment
//! service's `200 {"received":true}`.

use std::future::{ready, Ready};
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use actix_web::body::{BodySize, EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::{HttpMessage, HttpResponse};
use bytes::Bytes;
use futures_util::future::LocalBoxFuture;
use futures_util::FutureExt;
use payhook_core::adapter::HandlerOutcome;
use payhook_core::{ClaimGuard, Event, Reply};

use crate::config::WebhookConfig;
use crate::extract::{reply_to_response, Rejection};

/// Where a [`Webhook`](crate::Webhook) leaves its claim when the handler
/// returns without settling it, for whoever sees the response to settle.
#[derive(Clone, Default)]
pub(crate) struct ClaimSlot(Arc<Mutex<Option<ClaimGuard>>>);

impl ClaimSlot {
    pub(crate) fn put(&self, claim: ClaimGuard) {
        // A poisoned lock only means a panic elsewhere held it; the slot's
        // value is still a claim to settle.
        *self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(claim);
    }

    pub(crate) fn take(&self) -> Option<ClaimGuard> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }
}

/// A delivery already verified for this request, for the extractors of the
/// handler [`EventHandlers`](crate::EventHandlers) picked.
#[derive(Clone)]
pub(crate) struct Verified {
    pub(crate) event: Event,
    pub(crate) body: Bytes,
}

/// Whether the response was a success, and the claim's outcome.
fn outcome(status: actix_web::http::StatusCode) -> HandlerOutcome {
    // The core is on `http` 1, actix-web 4 on `http` 0.2: the number is the bridge.
    match http::StatusCode::from_u16(status.as_u16()) {
        Ok(status) => HandlerOutcome::Responded(status),
        Err(_) => HandlerOutcome::Failed,
    }
}

/// A 2xx whose body is empty (`Ok(())`, `HttpResponse::Ok().finish()`): sent
/// as `{"received":true}`, what the payment service expects.
fn is_bare_success<B: MessageBody>(response: &HttpResponse<B>) -> bool {
    response.status().is_success() && matches!(response.body().size(), BodySize::None | BodySize::Sized(0))
}

/// Settles `claim` by `response`'s status, and turns a bare 2xx into the
/// received reply.
pub(crate) async fn settle_by_response(claim: ClaimGuard, response: HttpResponse) -> HttpResponse {
    let bare = is_bare_success(&response);
    claim.settle(outcome(response.status())).await;
    if bare {
        reply_to_response(Reply::received())
    } else {
        response
    }
}

/// Runs a handler's response future under `slot`, then settles the claim left
/// in it: by the status, released on a panic (answered with
/// [`Reply::handler_panicked`]).
pub(crate) async fn run_and_settle(
    slot: ClaimSlot,
    response: impl std::future::Future<Output = HttpResponse>,
) -> HttpResponse {
    match AssertUnwindSafe(response).catch_unwind().await {
        Ok(response) => match slot.take() {
            Some(claim) => settle_by_response(claim, response).await,
            None => response,
        },
        Err(_panic) => {
            if let Some(claim) = slot.take() {
                claim.settle(HandlerOutcome::Panicked).await;
            }
            reply_to_response(Reply::handler_panicked())
        }
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
        let served = self.service.call(req);
        Box::pin(async move {
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
        })
    }
}
