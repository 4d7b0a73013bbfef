//! The [`Webhook`] extractor: a verified, claimed delivery, parsed as the
//! handler's type; when the handler must not run it answers with a
//! [`Rejection`].

use std::fmt;
use std::ops::Deref;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpMessage, HttpRequest, HttpResponse};
use bytes::Bytes;
use futures_util::future::LocalBoxFuture;
use payhook_core::adapter::{not_configured, HandlerOutcome, ReceiveOutcome};
use payhook_core::{event, ClaimGuard, Event, Reply};
use serde::de::DeserializeOwned;

use crate::config::WebhookConfig;
use crate::intake::{read_body, ActixHeaders};
use crate::reply::{reply_to_response, Rejection};
use crate::settle::{ClaimSlot, Verified};

/// A verified, claimed webhook delivery, parsed as `T` ([`Event`] unless
/// chosen otherwise).
///
/// Extracting it reads the body up to the configured limit, verifies the
/// signature, parses the event and claims its id in the dedupe store. Every
/// request that should not reach the handler — a bad signature, an oversized
/// body, a duplicate of a handled event, an event in flight elsewhere, an
/// unreachable store — is answered by the extractor with a [`Rejection`], so the
/// handler only ever sees new, genuine events.
///
/// # Settling
///
/// The event is settled by the handler's response when the route is wrapped
/// in its [`WebhookConfig`] (`App::wrap`, `Scope::wrap`, `Resource::wrap`) or
/// run by [`EventHandlers`](crate::EventHandlers) — the axum adapter's rule: a
/// 2xx marks the event done (a 2xx without a body is sent as
/// `200 {"received":true}`), and everything else releases the claim, so the
/// sender's retry is handled rather than dropped:
///
/// * an error status, or an error (`?`),
/// * a panic in the handler (answered with `500 Webhook Error: the handler
///   panicked; …`),
/// * the request being dropped (client gone, server shutting down).
///
/// [`ack`](Self::ack) marks the event done at once and answers
/// `200 {"received":true}`, whatever the handler does next;
/// [`release`](Self::release) gives the claim back at once, waiting for the
/// store (useful with a networked store, where a release on drop runs in the
/// background).
///
/// With the `WebhookConfig` registered as plain app data (`App::app_data`)
/// instead, the extractor cannot see the response: only `ack` (or
/// [`acking`](crate::acking), whose `Ok` acknowledges) marks the event done,
/// and a handler that returns without it — even with a 2xx — releases the
/// event, costing a redelivery, never a lost event.
///
/// `T` other than [`Event`] is deserialized from the raw body; a body that does
/// not fit `T` is answered with `400 Webhook Error: invalid payload: …` and its
/// claim released.
///
/// ```
/// use actix_web::{web, App, HttpResponse};
/// use payhook::actix::{Webhook, WebhookConfig};
/// use payhook::{EventKind, Receiver};
///
/// async fn webhooks(webhook: Webhook) -> actix_web::Result<HttpResponse> {
///     if let EventKind::PaymentIntentSucceeded(intent) = webhook.kind() {
///         fulfil(&intent.id, intent.amount).await?; // an error releases the claim
///     }
///     Ok(HttpResponse::Ok().finish()) // done: 200 {"received":true}
/// }
/// # async fn fulfil(_: &str, _: u128) -> actix_web::Result<()> { Ok(()) }
///
/// let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
/// let app = App::new()
///     .wrap(WebhookConfig::new(receiver))
///     .route("/webhooks", web::post().to(webhooks));
/// # drop(app);
/// ```
pub struct Webhook<T = Event> {
    event: T,
    body: Bytes,
    claim: Deferred,
}

/// The claim a [`Webhook`] holds. Under the [`WebhookConfig`] middleware or
/// [`EventHandlers`](crate::EventHandlers), a claim the handler did not settle
/// goes back to their slot when the `Webhook` is dropped, to be settled by the
/// response; otherwise dropping it releases the claim.
struct Deferred {
    /// `Some` until [`into_guard`](Self::into_guard) or the drop takes it.
    claim: Option<ClaimGuard>,
    slot: Option<ClaimSlot>,
    event_id: Box<str>,
}

impl Deferred {
    fn new(claim: ClaimGuard, slot: Option<ClaimSlot>) -> Self {
        Self {
            event_id: claim.event_id().into(),
            claim: Some(claim),
            slot,
        }
    }

    fn into_guard(mut self) -> ClaimGuard {
        // Only `Drop` and this method take the claim, and both consume `self`.
        self.claim
            .take()
            .expect("a Webhook holds its claim until it is consumed")
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        if let (Some(claim), Some(slot)) = (self.claim.take(), &self.slot) {
            slot.put(claim);
        }
    }
}

impl<T> Webhook<T> {
    /// The parsed event.
    pub fn event(&self) -> &T {
        &self.event
    }

    /// The event id the claim is held on.
    pub fn event_id(&self) -> &str {
        &self.claim.event_id
    }

    /// The raw body, exactly as signed.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Marks the event handled now and returns `200 application/json {"received":true}`.
    ///
    /// Under the [`WebhookConfig`] middleware the response does this already;
    /// `ack` still marks the event done at once, so a later failure in the same
    /// handler is no longer retried. With the config as plain app data it is
    /// the way to acknowledge.
    pub async fn ack(self) -> HttpResponse {
        self.claim.into_guard().settle(http::StatusCode::OK).await;
        reply_to_response(Reply::received())
    }

    /// Gives the claim back now, so the next delivery of the event is handled.
    pub async fn release(self) {
        self.claim.into_guard().settle(HandlerOutcome::Failed).await;
    }

    /// The event, the raw body and the claim, for settling the claim yourself
    /// (with [`ClaimGuard::settle`] and the status you answer with).
    pub fn into_parts(self) -> (T, Bytes, ClaimGuard) {
        (self.event, self.body, self.claim.into_guard())
    }
}

impl<T> Deref for Webhook<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.event
    }
}

impl<T: fmt::Debug> fmt::Debug for Webhook<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhook")
            .field("event", &self.event)
            .field(
                "event_id",
                &payhook_core::untrusted::Untrusted::value(&self.claim.event_id),
            )
            .finish_non_exhaustive()
    }
}

impl<T: DeserializeOwned + 'static> FromRequest for Webhook<T> {
    type Error = Rejection;
    type Future = LocalBoxFuture<'static, Result<Self, Rejection>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        Box::pin(extract(req.clone(), payload.take()))
    }
}

async fn extract<T: DeserializeOwned + 'static>(
    req: HttpRequest,
    payload: Payload,
) -> Result<Webhook<T>, Rejection> {
    let slot = req.extensions().get::<ClaimSlot>().cloned();
    let verified = req.extensions().get::<Verified>().cloned();
    if let Some(Verified { event, body }) = verified {
        // EventHandlers verified and claimed this delivery already, and left
        // the claim in the slot for the handler it picked.
        let Some(claim) = slot.as_ref().and_then(ClaimSlot::take) else {
            return Err(Rejection::from(not_configured(ONE_WEBHOOK)));
        };
        return into_webhook(Some(event), body, claim, slot).await;
    }
    let Some(config) = WebhookConfig::of(&req) else {
        return Err(Rejection::from(not_configured(ADD_THE_CONFIG)));
    };
    config.check_split_store(&req);
    let receiver = config.receiver().clone();
    let headers = ActixHeaders(req.headers());
    let body = read_body(&receiver, req.peer_addr(), &headers, payload).await?;
    let delivery = match receiver.receive(&headers, body).await {
        ReceiveOutcome::Respond(reply) => return Err(Rejection::from(reply)),
        ReceiveOutcome::Deliver(delivery) => delivery,
    };
    let (event, body, claim) = delivery.into_parts();
    into_webhook(Some(event), body, claim, slot).await
}

/// The delivery as a `Webhook<T>`; a body that does not fit `T` is a `400` and
/// its claim released.
async fn into_webhook<T: DeserializeOwned + 'static>(
    event: Option<Event>,
    body: Bytes,
    claim: ClaimGuard,
    slot: Option<ClaimSlot>,
) -> Result<Webhook<T>, Rejection> {
    match event::into_payload::<T>(event, &body) {
        Ok(event) => Ok(Webhook {
            event,
            body,
            claim: Deferred::new(claim, slot),
        }),
        Err(error) => {
            tracing::warn!(
                target: "payhook",
                event_id = %payhook_core::untrusted::Untrusted::value(claim.event_id()),
                status = 400,
                reason = %error,
                payload_type = std::any::type_name::<T>(),
                "delivery rejected: the body does not fit the handler's payload type"
            );
            claim.settle(HandlerOutcome::Failed).await;
            Err(Rejection::from(Reply::error(&error)))
        }
    }
}

/// A second `Webhook` extractor in a handler [`EventHandlers`](crate::EventHandlers)
/// runs, while the first holds the claim.
const ONE_WEBHOOK: &str = "a handler run by EventHandlers takes one Webhook extractor, \
    and another one in this handler holds the delivery's claim";

/// What a route without a [`WebhookConfig`] is missing, in the
/// `500 Webhook Error: server misconfigured: …` reply.
const ADD_THE_CONFIG: &str =
    "register a payhook_actix::WebhookConfig with App::app_data(WebhookConfig::new(receiver))";
