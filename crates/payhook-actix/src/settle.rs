//! Settling a claim from the response: the slot a [`Webhook`](crate::Webhook)
//! leaves its claim in, and the rule both the
//! [`WebhookConfig`](crate::WebhookConfig) middleware and
//! [`EventHandlers`](crate::EventHandlers) apply.
//!
//! The rule is the axum adapter's: a 2xx response marks the event done, any
//! other status, an error or a panic releases the claim so the sender's retry
//! runs the handler again. A 2xx without a body is sent as the payment
//! service's `200 {"received":true}`.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use actix_web::body::{BodySize, MessageBody};
use actix_web::HttpResponse;
use bytes::Bytes;
use futures_util::FutureExt;
use payhook_core::adapter::HandlerOutcome;
use payhook_core::{ClaimGuard, Event, Reply};

use crate::reply::reply_to_response;

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
pub(crate) fn outcome(status: actix_web::http::StatusCode) -> HandlerOutcome {
    // The core is on `http` 1, actix-web 4 on `http` 0.2: the number is the bridge.
    match http::StatusCode::from_u16(status.as_u16()) {
        Ok(status) => HandlerOutcome::Responded(status),
        Err(_) => HandlerOutcome::Failed,
    }
}

/// A 2xx whose body is empty (`Ok(())`, `HttpResponse::Ok().finish()`): sent
/// as `{"received":true}`, what the payment service expects.
pub(crate) fn is_bare_success<B: MessageBody>(response: &HttpResponse<B>) -> bool {
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
