//! [`WebhookService`]: the middleware that turns requests into verified events.

use std::panic::AssertUnwindSafe;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::FutureExt;
use http::{Request, Response};
use http_body::Body;
use payhook_core::adapter::{HandlerOutcome, ReceiveOutcome};
use payhook_core::{trace, Receiver, Reply};
use tower_service::Service;
use tracing::Instrument;

use crate::body::{self, RawBody};
use crate::future::ResponseFuture;

/// Middleware that verifies, parses and deduplicates webhook deliveries before
/// the inner service sees them. Built by [`WebhookLayer`](crate::WebhookLayer).
///
/// For each request it:
///
/// 0. checks the source address when the receiver has an allowlist
///    ([`Receiver::check_source`], with the peer from the request extensions:
///    see [`PeerAddr`](crate::PeerAddr)): a refused source gets `403` and the
///    inner service never runs;
/// 1. reads the raw body up to the receiver's limit (`413` at once when
///    `Content-Length` is over it; a chunked body is read only until it passes
///    it; a body that breaks off is a `400`; a body that has not arrived in full
///    within the receiver's body timeout is a `408`; after a `413` or `408` the
///    connection is closed);
/// 2. runs [`Receiver::receive`]: rejections (`400`), duplicates of a handled
///    event (`200 {"received":true}`), events in flight elsewhere (`409`) and an
///    unreachable store (`503`) are answered here, without the inner service;
/// 3. calls the inner service for a new event, with the [`Event`](payhook_core::Event)
///    and the [`RawBody`] in the request extensions and the same bytes as the
///    request body (rebuilt with `B: From<Bytes>`);
/// 4. settles the claim on the event id by the inner response's status:
///    marked done for a 2xx, released otherwise. When the inner service returns
///    an error, panics (the reply is then a `500` with
///    [`HANDLER_PANICKED`](payhook_core::reply::HANDLER_PANICKED)) or its
///    future is dropped, the claim is released, so the sender's retry is handled.
#[derive(Debug, Clone)]
pub struct WebhookService<S> {
    inner: S,
    receiver: Receiver,
}

impl<S> WebhookService<S> {
    /// Wraps `inner`; see [`WebhookLayer`](crate::WebhookLayer) for the usual way in.
    pub fn new(inner: S, receiver: Receiver) -> Self {
        Self { inner, receiver }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B, ResBody> Service<Request<B>> for WebhookService<S>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body + From<Bytes> + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    ResBody: From<String> + From<&'static str> + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The clone may not be ready; the instance that was polled ready goes
        // into the future and the clone stays behind for the next call.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        // The request's span (feature `otel`; none otherwise), continuing the
        // sender's `traceparent`: the delivery span and the handler's are its children.
        let span = trace::request_span(request.method().as_str(), request.uri().path(), request.headers());
        let handled = handle(self.receiver.clone(), inner, request);
        let recorded = span.clone();
        ResponseFuture::new(
            async move {
                let response = handled.await;
                if let Ok(response) = &response {
                    trace::record_response(&recorded, response.status().as_u16());
                }
                response
            }
            .instrument(span),
        )
    }
}

async fn handle<S, B, ResBody>(
    receiver: Receiver,
    mut inner: S,
    request: Request<B>,
) -> Result<Response<ResBody>, S::Error>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    B: Body + From<Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    ResBody: From<String> + From<&'static str>,
{
    let (mut parts, body) = request.into_parts();
    let peer = crate::peer::peer_ip(&parts.extensions);
    if let Err(refusal) = receiver.check_source(peer, &parts.headers, crate::peer::PASS_THE_PEER) {
        return Ok(refusal.into_response());
    }
    let bytes = match body::read(&parts.headers, body, &receiver).await {
        Ok(bytes) => bytes,
        Err(refusal) => return Ok(refusal.into_response()),
    };
    let delivery = match receiver.receive(&parts.headers, bytes).await {
        ReceiveOutcome::Respond(reply) => return Ok(reply.into_response()),
        ReceiveOutcome::Deliver(delivery) => delivery,
    };
    // From here on the claim guard lives in this future: if the future is
    // dropped (the client went away), the guard releases the claim.
    let (event, bytes, claim) = delivery.into_parts();
    parts.extensions.insert(event);
    parts.extensions.insert(RawBody(bytes.clone()));
    let request = Request::from_parts(parts, B::from(bytes));

    let called = std::panic::catch_unwind(AssertUnwindSafe(|| inner.call(request)));
    let outcome = match called {
        Ok(future) => {
            AssertUnwindSafe(future)
                .catch_unwind()
                .instrument(claim.delivery_span())
                .await
        }
        Err(panic) => Err(panic),
    };
    match outcome {
        Ok(Ok(response)) => {
            claim.settle(HandlerOutcome::Responded(response.status())).await;
            Ok(response)
        }
        Ok(Err(error)) => {
            claim.settle(HandlerOutcome::Failed).await;
            Err(error)
        }
        Err(_panic) => {
            claim.settle(HandlerOutcome::Panicked).await;
            Ok(Reply::handler_panicked().into_response())
        }
    }
}
