//! Rendering the core's [`Reply`] as an actix-web response, and [`Rejection`],
//! the extractor's error that carries one.

use std::cell::RefCell;
use std::convert::Infallible;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use actix_web::body::{BodySize, MessageBody};
use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use bytes::Bytes;
use payhook_core::Reply;

/// The core's reply as an actix-web response (closing the connection when the
/// reply asks for it, with `Retry-After` when it has one).
pub(crate) fn reply_to_response(reply: Reply) -> HttpResponse {
    let mut response = HttpResponse::build(actix_status(&reply));
    response.insert_header((header::CONTENT_TYPE, reply.content_type()));
    if reply.closes_connection() {
        response.force_close();
    }
    if let Some(wait) = reply.retry_after() {
        response.insert_header((header::RETRY_AFTER, wait.as_secs()));
    }
    response.body(reply.into_body())
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
/// that was already handled. A route without a [`WebhookConfig`](crate::WebhookConfig) gets `500`
/// naming what is missing.
///
/// Extract `Result<Webhook, Rejection>` to see it in the handler.
pub struct Rejection {
    reply: Reply,
    /// The rest of an unread body (over the limit, or stalled), held until the
    /// reply is written so that actix-web closes the connection instead of
    /// draining it.
    unread: RefCell<Option<Payload>>,
}

impl Rejection {
    pub(crate) fn with_unread(reply: Reply, unread: Payload) -> Self {
        Self {
            reply,
            unread: RefCell::new(Some(unread)),
        }
    }

    /// The reply sent instead of running the handler.
    pub fn reply(&self) -> &Reply {
        &self.reply
    }

    /// `true` for a duplicate of an already handled event, acknowledged with 200.
    pub fn is_duplicate(&self) -> bool {
        self.reply.status().is_success()
    }
}

impl From<Reply> for Rejection {
    fn from(reply: Reply) -> Self {
        Self {
            reply,
            unread: RefCell::new(None),
        }
    }
}

impl fmt::Debug for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Rejection").field(&self.reply).finish()
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reply.body())
    }
}

impl ResponseError for Rejection {
    fn status_code(&self) -> StatusCode {
        actix_status(&self.reply)
    }

    fn error_response(&self) -> HttpResponse {
        let reply = &self.reply;
        match self.unread.borrow_mut().take() {
            None => reply_to_response(reply.clone()),
            Some(unread) => HttpResponse::build(actix_status(reply))
                .insert_header((header::CONTENT_TYPE, reply.content_type()))
                .force_close()
                .body(ClosingBody {
                    len: reply.body().len() as u64,
                    reply: Some(Bytes::copy_from_slice(reply.body().as_bytes())),
                    _unread: unread,
                }),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_503_carries_retry_after_and_other_replies_do_not() {
        let unavailable = payhook_core::Error::StoreUnavailable("timed out".to_owned());
        let response = reply_to_response(Reply::error(&unavailable));
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers().get(header::RETRY_AFTER).unwrap(), "5");
        let response = reply_to_response(Reply::error(&payhook_core::Error::NoSignatureMatch));
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert!(response.headers().get(header::RETRY_AFTER).is_none());
    }
}
