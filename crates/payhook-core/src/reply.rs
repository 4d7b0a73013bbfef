//! The reply a receiver sends, independent of any web framework.
//!
//! Adapters only render a [`Reply`]: status, content type and body. The mapping
//! from outcome to reply lives here once.
//!
//! | outcome | status | body |
//! |---|---|---|
//! | handled, duplicate of a handled event, or no handler for its type | 200 | `application/json` `{"received":true}` |
//! | bad or missing signature, timestamp outside tolerance, invalid event, unreadable body | 400 | `text/plain` `Webhook Error: …` |
//! | body over the limit | 413 | `Webhook Error: …` |
//! | the client address is outside the source-IP allowlist (see [`crate::source`]) | 403 | `Webhook Error: the source address is not allowed to deliver to this endpoint`, before the body is read; connection closed |
//! | the same event is being handled by another request | 409 | `Webhook Error: …` |
//! | the dedupe store (or the inbox's database) is unreachable or did not answer in time | 503, with `Retry-After: 5` ([`UNAVAILABLE_RETRY_AFTER`]) | `Webhook Error: …` |
//! | the body did not arrive within the body timeout | 408 | `Webhook Error: …`, connection closed |
//! | the handler panicked | 500 | [`HANDLER_PANICKED`] |
//! | the route has no receiver (adapter not set up), or an allowlist is on and the server does not pass the peer address | 500 | `Webhook Error: server misconfigured: …` |
//!
//! ```
//! use payhook::{Error, Reply};
//!
//! let reply = Reply::from(&Error::NoSignatureMatch);
//! assert_eq!(reply.status().as_u16(), 400);
//! assert!(reply.body().starts_with("Webhook Error: no signature matches"));
//! assert_eq!(Reply::received().body(), r#"{"received":true}"#);
//! assert_eq!(reply.retry_after(), None);
//!
//! // A 503 asks the sender to come back a little later.
//! let unavailable = Reply::from(&Error::InboxUnavailable("the database did not answer in time".into()));
//! assert_eq!(unavailable.status().as_u16(), 503);
//! assert_eq!(unavailable.retry_after(), Some(payhook::defaults::UNAVAILABLE_RETRY_AFTER));
//! let response = unavailable.into_response::<String>();
//! assert_eq!(response.headers()["retry-after"], "5");
//! ```

use std::borrow::Cow;

use http::StatusCode;

use crate::defaults::UNAVAILABLE_RETRY_AFTER;
use crate::error::Error;

/// The JSON body that acknowledges a delivery.
pub const RECEIVED_BODY: &str = r#"{"received":true}"#;

/// The body of the `500` reply sent when the handler panicked.
pub const HANDLER_PANICKED: &str =
    "Webhook Error: the handler panicked; the event was not acknowledged and will be delivered again";

/// A complete reply: status, content type and body (and `Retry-After` for a
/// `503`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    status: StatusCode,
    content_type: &'static str,
    body: Cow<'static, str>,
    close: bool,
    retry_after: Option<std::time::Duration>,
}

const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

impl Reply {
    /// `200 application/json {"received":true}`.
    pub fn received() -> Self {
        Self {
            status: StatusCode::OK,
            content_type: "application/json",
            body: Cow::Borrowed(RECEIVED_BODY),
            close: false,
            retry_after: None,
        }
    }

    /// The reply for a failed delivery: its status and `Webhook Error: <message>`.
    /// A `503` (the store or the inbox's database unavailable) also carries
    /// `Retry-After` ([`UNAVAILABLE_RETRY_AFTER`]).
    pub fn error(error: &Error) -> Self {
        let status = error.status();
        Self {
            status,
            content_type: TEXT_PLAIN,
            body: Cow::Owned(format!("Webhook Error: {error}")),
            close: false,
            retry_after: (status == StatusCode::SERVICE_UNAVAILABLE).then_some(UNAVAILABLE_RETRY_AFTER),
        }
    }

    /// `500` [`HANDLER_PANICKED`]: the handler panicked, so the event was not
    /// acknowledged (its claim is released and the sender's retry is handled).
    pub fn handler_panicked() -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            content_type: TEXT_PLAIN,
            body: Cow::Borrowed(HANDLER_PANICKED),
            close: false,
            retry_after: None,
        }
    }

    /// `500 Webhook Error: server misconfigured: …`: a webhook handler was reached
    /// without a receiver for its route. `fix` names the adapter's missing setup
    /// step, for example "add `.route_layer(WebhookLayer::new(receiver))` to its router".
    pub fn not_configured(fix: &str) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            content_type: TEXT_PLAIN,
            body: Cow::Owned(format!(
                "Webhook Error: server misconfigured: this webhook route has no payhook receiver; {fix}"
            )),
            close: false,
            retry_after: None,
        }
    }

    /// `500 Webhook Error: server misconfigured: …`: the receiver has a
    /// source-IP allowlist but the server did not give the adapter the
    /// connection's peer address, so no source can be checked (and none is
    /// let in unchecked). `fix` names how to pass it, in the adapter's terms.
    pub fn peer_address_unknown(fix: &str) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            content_type: TEXT_PLAIN,
            body: Cow::Owned(format!(
                "Webhook Error: server misconfigured: the source-IP allowlist needs the connection's \
                 peer address, which this server does not pass on; {fix}"
            )),
            close: false,
            retry_after: None,
        }
    }

    /// The same reply, asking the adapter to close the connection after it (for
    /// a request whose body was not read to its end).
    pub fn closing_connection(mut self) -> Self {
        self.close = true;
        self
    }

    /// Whether the connection must be closed after this reply: the request body
    /// was left unread (over the limit) or never arrived (timed out).
    pub fn closes_connection(&self) -> bool {
        self.close
    }

    /// How long the sender is asked to wait before delivering again, sent as
    /// `Retry-After` in whole seconds: set on `503` replies.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.retry_after
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The `Content-Type` header value.
    pub fn content_type(&self) -> &'static str {
        self.content_type
    }

    /// The body text.
    pub fn body(&self) -> &str {
        &self.body
    }

    /// The body, owned, for frameworks that take ownership.
    pub fn into_body(self) -> Cow<'static, str> {
        self.body
    }

    /// Renders the reply as an `http::Response` with any body type that can be
    /// made from a `String` or `&'static str` (with `connection: close` when
    /// [`closes_connection`](Self::closes_connection), and `Retry-After` when
    /// [`retry_after`](Self::retry_after) is set).
    pub fn into_response<B>(self) -> http::Response<B>
    where
        B: From<String> + From<&'static str>,
    {
        let body = match self.body {
            Cow::Borrowed(s) => B::from(s),
            Cow::Owned(s) => B::from(s),
        };
        let mut response = http::Response::new(body);
        *response.status_mut() = self.status;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(self.content_type),
        );
        if self.close {
            response
                .headers_mut()
                .insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
        }
        if let Some(wait) = self.retry_after {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, http::HeaderValue::from(wait.as_secs()));
        }
        response
    }
}

impl From<&Error> for Reply {
    fn from(error: &Error) -> Self {
        Self::error(error)
    }
}

impl From<Error> for Reply {
    fn from(error: Error) -> Self {
        Self::error(&error)
    }
}
