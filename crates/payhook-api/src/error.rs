//! [`ApiError`]: why a call failed, sorted by what to do next.

use std::fmt;
use std::time::Duration;

/// Why a call to the service's API failed, sorted by what to do next.
///
/// Every text it holds came through [`ApiKey::scrub`](crate::ApiKey::scrub):
/// the key cut out, escaped, at most [`MAX_MESSAGE_BYTES`](crate::MAX_MESSAGE_BYTES).
/// `Debug` and `Display` show nothing else.
///
/// ```
/// use payhook::api::ApiError;
///
/// let err = ApiError::Throttled { status: 429, retry_after: None };
/// assert_eq!(err.to_string(), "the service answered 429");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApiError {
    /// `401` or `403`: the key is wrong, revoked or lacks the right.
    /// Retrying cannot help.
    Unauthorized {
        /// The status.
        status: u16,
        /// The error's `code`, for example `api_key_unknown`.
        code: Option<String>,
        /// The reply's message.
        message: String,
    },
    /// `429` or a `5xx`: try again later, after `retry_after` when the reply
    /// said (capped at [`MAX_RETRY_AFTER`](crate::MAX_RETRY_AFTER)).
    Throttled {
        /// The status.
        status: u16,
        /// The reply's `Retry-After`, in seconds.
        retry_after: Option<Duration>,
    },
    /// No reply: the connection failed or the request timed out.
    Unreachable(String),
    /// A reply that is not what was asked for: a redirect (never followed),
    /// another status, a body over the bound, JSON of another shape.
    BadReply(String),
    /// The service refused the request (`400`, `404`, `409`): its error
    /// `code`, `message` and `param`.
    Refused {
        /// The status.
        status: u16,
        /// The error's `code`, for example `resource_missing`.
        code: Option<String>,
        /// What failed and why.
        message: String,
        /// The parameter at fault.
        param: Option<String>,
    },
    /// The events list cannot be walked to its end: a page's cursor repeats
    /// one already followed, or its events do not move back in time (the
    /// list is newest first).
    BrokenList(String),
    /// A reply longer than the client's bound
    /// ([`Client::max_reply_bytes`](crate::Client::max_reply_bytes)): not read
    /// past it.
    TooLarge {
        /// The bound, in bytes.
        limit: usize,
    },
    /// The request cannot be sent as asked (an id that is not an id).
    Invalid(&'static str),
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unauthorized { status, message, .. } => write!(
                f,
                "the service refused the API key ({status}: {message}); check the key and its rights"
            ),
            Self::Throttled {
                status,
                retry_after: Some(after),
            } => write!(
                f,
                "the service answered {status}; retrying after {} s",
                after.as_secs()
            ),
            Self::Throttled {
                status,
                retry_after: None,
            } => write!(f, "the service answered {status}"),
            Self::Unreachable(reason) => write!(f, "the service could not be reached: {reason}"),
            Self::BadReply(reason) => write!(f, "the service's reply is not what was asked for: {reason}"),
            Self::Refused {
                status,
                code,
                message,
                ..
            } => write!(
                f,
                "the service refused the request: {status} {}: {message}",
                code.as_deref().unwrap_or("-")
            ),
            Self::BrokenList(reason) => write!(f, "the service's events list is broken: {reason}"),
            Self::TooLarge { limit } => write!(
                f,
                "the service's reply is not what was asked for: the reply is larger than {limit} bytes"
            ),
            Self::Invalid(reason) => f.write_str(reason),
        }
    }
}

impl std::error::Error for ApiError {}
