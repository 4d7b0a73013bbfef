//! The [`Webhook`] extractor and the [`Rejection`] it answers with when the
//! handler must not run.

use std::cell::RefCell;
use std::convert::Infallible;
use std::fmt;
use std::ops::Deref;
use std::pin::Pin;
use std::task::{Context, Poll};

use actix_web::body::{BodySize, MessageBody};
use actix_web::dev::Payload;
use actix_web::http::header::{self, HeaderMap};
use actix_web::http::StatusCode;
use actix_web::{FromRequest, HttpRequest, HttpResponse, ResponseError};
use bytes::{Bytes, BytesMut};
use futures_util::future::LocalBoxFuture;
use futures_util::StreamExt;
use payhook_core::{event, ClaimGuard, Error, Event, HeaderLookup, Headers, Outcome, Receiver, Reply};
use serde::de::DeserializeOwned;

use crate::config::WebhookConfig;

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
/// # Acknowledging
///
/// Return [`ack`](Self::ack)'s response when the event is handled: it marks the
/// id done and answers `200 {"received":true}`. Everything else releases the
/// claim, so the sender's retry is handled rather than dropped:
///
/// * returning early with an error (`?`) or any response of your own,
/// * a panic in the handler (the claim is released while unwinding; actix-web
///   then closes the connection without a response, which the sender treats
///   as a failed delivery and retries),
/// * the request being dropped (client gone, server shutting down).
///
/// `ack` is explicit because an extractor cannot see the handler's response:
/// acknowledging only when asked means a forgotten `ack` costs a redelivery,
/// never a lost event. [`release`](Self::release) gives the claim back
/// explicitly, waiting for the store (useful with a networked store, where the
/// release on drop runs in the background).
///
/// `T` other than [`Event`] is deserialized from the raw body; a body that does
/// not fit `T` is answered with `400 Webhook Error: invalid payload: …` and its
/// claim released.
///
/// ```
/// use actix_web::{post, HttpResponse};
/// use payhook::actix::Webhook;
/// use payhook::EventKind;
///
/// #[post("/webhooks")]
/// async fn webhooks(webhook: Webhook) -> actix_web::Result<HttpResponse> {
///     if let EventKind::PaymentIntentSucceeded(intent) = webhook.kind() {
///         fulfil(&intent.id, intent.amount).await?; // an error releases the claim
///     }
///     Ok(webhook.ack().await)
/// }
/// # async fn fulfil(_: &str, _: u128) -> actix_web::Result<()> { Ok(()) }
/// ```
pub struct Webhook<T = Event> {
    event: T,
    body: Bytes,
    claim: ClaimGuard,
}

impl<T> Webhook<T> {
    /// The parsed event.
    pub fn event(&self) -> &T {
        &self.event
    }

    /// The event id the claim is held on.
    pub fn event_id(&self) -> &str {
        self.claim.event_id()
    }

    /// The raw body, exactly as signed.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Marks the event handled and returns `200 application/json {"received":true}`.
    ///
    /// Call it once the work is done: a later failure in the same handler is no
    /// longer retried.
    pub async fn ack(self) -> HttpResponse {
        reply_to_response(self.claim.complete().await)
    }

    /// Gives the claim back now, so the next delivery of the event is handled.
    pub async fn release(self) {
        self.claim.release().await;
    }

    /// The event, the raw body and the claim, for settling the claim yourself
    /// (for example with [`ClaimGuard::finish`] and the status you answer with).
    pub fn into_parts(self) -> (T, Bytes, ClaimGuard) {
        (self.event, self.body, self.claim)
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
            .field("claim", &self.claim)
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
    mut payload: Payload,
) -> Result<Webhook<T>, Rejection> {
    let Some(config) = WebhookConfig::of(&req) else {
        tracing::error!(
            target: "payhook",
            path = req.path(),
            "no WebhookConfig in the app data; register one with App::app_data(WebhookConfig::new(receiver))"
        );
        return Err(Rejection::new(Answer::MissingConfig));
    };
    let receiver = config.receiver().clone();
    let content_length = req.headers().get(header::CONTENT_LENGTH).map(|v| v.as_bytes());
    let body = match read_body(&receiver, content_length, &mut payload).await {
        Ok(body) => body,
        Err(error @ Error::BodyTooLarge { .. }) => {
            return Err(Rejection::with_unread(receiver.body_error(&error), payload))
        }
        Err(error) => return Err(Rejection::from(receiver.body_error(&error))),
    };
    let delivery = match receiver.receive(&ActixHeaders(req.headers()), body).await {
        Outcome::Respond(reply) => return Err(Rejection::from(reply)),
        Outcome::Deliver(delivery) => delivery,
    };
    let (event, body, claim) = delivery.into_parts();
    match event::into_payload::<T>(Some(event), &body) {
        Ok(event) => Ok(Webhook { event, body, claim }),
        Err(error) => {
            tracing::warn!(
                target: "payhook",
                event_id = claim.event_id(),
                status = 400,
                reason = %error,
                payload_type = std::any::type_name::<T>(),
                "delivery rejected: the body does not fit the handler's payload type"
            );
            claim.release().await;
            Err(Rejection::from(Reply::error(&error)))
        }
    }
}

/// Smaller than most limits, so a `Content-Length` alone cannot make every open
/// connection allocate a full limit's worth up front.
const MAX_INITIAL_CAPACITY: usize = 64 * 1024;

/// Reads the whole body, answering [`Error::BodyTooLarge`] from `Content-Length`
/// before reading anything, and otherwise as soon as the chunks read pass the
/// limit: the rest of an oversized body is never buffered.
async fn read_body(
    receiver: &Receiver,
    content_length: Option<&[u8]>,
    payload: &mut Payload,
) -> Result<Bytes, Error> {
    receiver.check_content_length(content_length)?;
    let limit = receiver.body_limit();
    let declared = content_length
        .and_then(|value| std::str::from_utf8(value).ok())
        .and_then(|value| value.trim().parse::<usize>().ok());
    let capacity = declared.unwrap_or(0).min(MAX_INITIAL_CAPACITY);
    let mut body = BytesMut::with_capacity(capacity);
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|err| Error::BodyRead(err.to_string()))?;
        if chunk.len() > limit - body.len() {
            return Err(Error::BodyTooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// actix-web 4's header map (on `http` 0.2) seen through the core's [`Headers`].
struct ActixHeaders<'a>(&'a HeaderMap);

impl Headers for ActixHeaders<'_> {
    fn lookup(&self, name: &str) -> HeaderLookup<'_> {
        HeaderLookup::from_values(self.0.get_all(name).map(|value| value.as_bytes()))
    }
}

fn reply_to_response(reply: Reply) -> HttpResponse {
    HttpResponse::build(actix_status(&reply))
        .insert_header((header::CONTENT_TYPE, reply.content_type()))
        .body(reply.into_body())
}

/// The core is on `http` 1, actix-web 4 on `http` 0.2: the number is the bridge.
fn actix_status(reply: &Reply) -> StatusCode {
    StatusCode::from_u16(reply.status().as_u16()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Why the handler did not run, and the reply the extractor sends instead.
///
/// Most are the core's replies: `400`/`413 Webhook Error: …` for a delivery
/// that fails a check, `409` for an event in flight elsewhere, `503` for an
/// unreachable store, and `200 {"received":true}` for a duplicate of an event
/// that was already handled. A route without a [`WebhookConfig`] gets `500`
/// naming what is missing.
///
/// Extract `Result<Webhook, Rejection>` to see it in the handler.
pub struct Rejection {
    answer: Answer,
    /// The rest of an oversized body, held until the reply is written.
    unread: RefCell<Option<Payload>>,
}

#[derive(Debug)]
enum Answer {
    Reply(Reply),
    MissingConfig,
}

impl Rejection {
    fn new(answer: Answer) -> Self {
        Self {
            answer,
            unread: RefCell::new(None),
        }
    }

    fn with_unread(reply: Reply, unread: Payload) -> Self {
        Self {
            answer: Answer::Reply(reply),
            unread: RefCell::new(Some(unread)),
        }
    }
}

impl From<Reply> for Rejection {
    fn from(reply: Reply) -> Self {
        Self::new(Answer::Reply(reply))
    }
}

impl fmt::Debug for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Rejection").field(&self.answer).finish()
    }
}

const MISSING_CONFIG: &str =
    "Webhook Error: server misconfigured: no payhook_actix::WebhookConfig in the app data \
     (register one with App::app_data(WebhookConfig::new(receiver)))";

impl Rejection {
    /// The core's reply, unless the route has no [`WebhookConfig`].
    pub fn reply(&self) -> Option<&Reply> {
        match &self.answer {
            Answer::Reply(reply) => Some(reply),
            Answer::MissingConfig => None,
        }
    }

    /// `true` for a duplicate of an already handled event, acknowledged with 200.
    pub fn is_duplicate(&self) -> bool {
        self.reply().is_some_and(|reply| reply.status().is_success())
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.answer {
            Answer::Reply(reply) => f.write_str(reply.body()),
            Answer::MissingConfig => f.write_str(MISSING_CONFIG),
        }
    }
}

impl ResponseError for Rejection {
    fn status_code(&self) -> StatusCode {
        match &self.answer {
            Answer::Reply(reply) => actix_status(reply),
            Answer::MissingConfig => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        match (&self.answer, self.unread.borrow_mut().take()) {
            (Answer::Reply(reply), None) => reply_to_response(reply.clone()),
            (Answer::Reply(reply), Some(unread)) => HttpResponse::build(actix_status(reply))
                .insert_header((header::CONTENT_TYPE, reply.content_type()))
                .body(ClosingBody {
                    len: reply.body().len() as u64,
                    reply: Some(Bytes::copy_from_slice(reply.body().as_bytes())),
                    _unread: unread,
                }),
            (Answer::MissingConfig, _) => HttpResponse::InternalServerError()
                .content_type("text/plain; charset=utf-8")
                .body(MISSING_CONFIG),
        }
    }
}

/// A reply body that keeps the unread rest of an oversized request alive until
/// the reply is written.
///
/// actix-web drains a request payload that was dropped unread, to keep the
/// connection alive — for a chunked upload that means reading all of it, however
/// long it goes on. A payload still held when the reply goes out makes actix-web
/// close the connection instead, after its lingering close
/// (`HttpServer::client_disconnect_timeout`, 1 s by default).
struct ClosingBody {
    len: u64,
    reply: Option<Bytes>,
    _unread: Payload,
}

impl MessageBody for ClosingBody {
    type Error = Infallible;

    fn size(&self) -> BodySize {
        BodySize::Sized(self.len)
    }

    fn poll_next(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Bytes, Infallible>>> {
        Poll::Ready(self.get_mut().reply.take().map(Ok))
    }
}
