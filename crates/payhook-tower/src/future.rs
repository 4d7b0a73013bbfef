//! [`ResponseFuture`]: the future [`WebhookService`](crate::WebhookService) returns.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;

type BoxedResponse<ResBody, E> = Pin<Box<dyn Future<Output = Result<Response<ResBody>, E>> + Send>>;

/// Response future of [`WebhookService`](crate::WebhookService).
///
/// It owns the claim on the event id while the inner service runs: dropping it
/// before it finishes (the client went away) releases the claim, so the
/// sender's retry is handled.
pub struct ResponseFuture<ResBody, E> {
    // Boxed: the steps (read the body, verify, claim, call the inner service,
    // settle the claim) are one `async` block, and one allocation per delivery
    // is nothing next to the body it has to buffer.
    inner: BoxedResponse<ResBody, E>,
}

impl<ResBody, E> ResponseFuture<ResBody, E> {
    pub(crate) fn new(future: impl Future<Output = Result<Response<ResBody>, E>> + Send + 'static) -> Self {
        Self {
            inner: Box::pin(future),
        }
    }
}

impl<ResBody, E> Future for ResponseFuture<ResBody, E> {
    type Output = Result<Response<ResBody>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<ResBody, E> fmt::Debug for ResponseFuture<ResBody, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
