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
//! | the same event is being handled by another request | 409 | `Webhook Error: …` |
//! | the dedupe store is unreachable | 503 | `Webhook Error: …` |
//!
//! ```
//! use payhook::{Error, Reply};
//!
//! let reply = Reply::from(&Error::NoSignatureMatch);
//! assert_eq!(reply.status().as_u16(), 400);
//! assert!(reply.body().starts_with("Webhook Error: no signature matches"));
//! assert_eq!(Reply::received().body(), r#"{"received":true}"#);
//! ```

use std::borrow::Cow;

use http::StatusCode;

use crate::error::Error;

/// The JSON body that acknowledges a delivery.
pub const RECEIVED_BODY: &str = r#"{"received":true}"#;

/// A complete reply: status, content type and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    status: StatusCode,
    content_type: &'static str,
    body: Cow<'static, str>,
}

impl Reply {
    /// `200 application/json {"received":true}`.
    pub fn received() -> Self {
        Self {
            status: StatusCode::OK,
            content_type: "application/json",
            body: Cow::Borrowed(RECEIVED_BODY),
        }
    }

    /// The reply for a failed delivery: its status and `Webhook Error: <message>`.
    pub fn error(error: &Error) -> Self {
        Self {
            status: error.status(),
            content_type: "text/plain; charset=utf-8",
            body: Cow::Owned(format!("Webhook Error: {error}")),
        }
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
    /// made from a `String` or `&'static str`.
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
