//! What can go wrong with a delivery, and with a configuration.
//!
//! [`Error`]'s `Display` is exactly the text a receiver puts after
//! `Webhook Error: ` in its reply, so tests can match it; [`Error::status`] is the
//! HTTP status that goes with it. Neither ever contains a secret or an expected
//! signature, and request-derived text in it (an event id, a quoted value) is
//! shown through [`Untrusted`]: control characters escaped, at most 64
//! characters of each value.

use http::{HeaderName, StatusCode};

use crate::untrusted::Untrusted;

/// Why a delivery was not handed to the handler.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The signature header is absent.
    #[error("missing {0} header")]
    MissingHeader(HeaderName),
    /// The signature header appears more than once.
    #[error("{0} header appears more than once")]
    RepeatedHeader(HeaderName),
    /// The signature header cannot be parsed; the reason says which rule it broke.
    #[error("malformed signature header: {0}")]
    MalformedHeader(&'static str),
    /// A header of a scheme with several headers (Standard Webhooks'
    /// `webhook-id`, `webhook-timestamp`, `webhook-signature`) is present but
    /// cannot be used; the reason says why.
    #[error("malformed {header} header: {reason}")]
    InvalidHeader {
        /// The header that is malformed.
        header: HeaderName,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// The header has a timestamp but no well-formed `v1` item.
    #[error("signature header has no v1 signature (64 lowercase hex digits)")]
    NoSignature,
    /// No `v1` item matches any configured secret for this body and timestamp.
    #[error("no signature matches the expected signature for this payload and timestamp")]
    NoSignatureMatch,
    /// The timestamp is older than the tolerance allows (a replay, or a very late retry).
    #[error("timestamp is {age} s old, outside the {tolerance} s tolerance")]
    TimestampTooOld {
        /// Seconds between the timestamp and now.
        age: u64,
        /// The configured tolerance in seconds.
        tolerance: u64,
    },
    /// The timestamp is further in the future than the tolerance allows.
    #[error("timestamp is {ahead} s in the future, outside the {tolerance} s tolerance")]
    TimestampInFuture {
        /// Seconds between now and the timestamp.
        ahead: u64,
        /// The configured tolerance in seconds.
        tolerance: u64,
    },
    /// The body is signed correctly but is not a valid event.
    #[error("invalid payload: {}", Untrusted::message(.0))]
    InvalidPayload(String),
    /// The body is larger than the configured limit.
    #[error("body is larger than the {limit}-byte limit")]
    BodyTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body did not arrive in full within the receiver's body timeout (a
    /// stalled or trickling upload); the connection is closed.
    #[error("the request body did not arrive within {0:?}")]
    BodyTimeout(std::time::Duration),
    /// The body could not be read completely (client went away, truncated upload).
    #[error("could not read the request body: {}", Untrusted::message(.0))]
    BodyRead(String),
    /// Another request is handling this event right now.
    #[error("event {} is being handled by another delivery; retry later", Untrusted::value(.0))]
    InFlight(String),
    /// The request's client address is outside the receiver's allowlist, or its
    /// forwarding headers could not be trusted to name one (see
    /// [`crate::source`]). The reply never says which address was seen; the
    /// `WARN` log line does.
    #[error("the source address is not allowed to deliver to this endpoint")]
    SourceNotAllowed,
    /// The dedupe store could not be reached; nothing was acknowledged or marked.
    #[error("dedupe store unavailable: {0}")]
    StoreUnavailable(String),
    /// The durable inbox could not store the delivery; nothing was
    /// acknowledged. The text names the kind of failure (for example "the
    /// database refused the write"), never the database's own message.
    #[error("inbox database unavailable: {0}")]
    InboxUnavailable(String),
}

impl Error {
    /// The HTTP status a receiver replies with for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Self::SourceNotAllowed => StatusCode::FORBIDDEN,
            Self::InFlight(_) => StatusCode::CONFLICT,
            Self::StoreUnavailable(_) | Self::InboxUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

/// A configuration mistake, reported when a verifier, receiver or store is built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No signing secret was given.
    #[error("no signing secret configured")]
    NoSecret,
    /// A signing secret is the empty string.
    #[error("a signing secret is empty")]
    EmptySecret,
    /// A Standard Webhooks verifier was built with neither a `whsec_` secret
    /// nor a `whpk_` public key.
    #[error("no whsec_ secret or whpk_ public key configured")]
    NoKey,
    /// A Standard Webhooks key cannot be used: which kind, its position in
    /// the order it was given (from 1), and why. Never its value.
    #[error("{kind} #{position} {reason}")]
    InvalidKey {
        /// `secret`, `public key` or `signing key`.
        kind: &'static str,
        /// The key's place among the keys of its kind, counting from 1.
        position: usize,
        /// What is wrong with it, for example "is not base64".
        reason: &'static str,
    },
    /// The signature header name is not a valid HTTP header name.
    #[error("invalid signature header name {0:?}")]
    InvalidHeaderName(String),
    /// A setting is out of its range; the text says which.
    #[error("invalid setting: {0}")]
    InvalidSetting(&'static str),
    /// An entry of [`allowed_networks`](crate::ReceiverBuilder::allowed_networks)
    /// or [`trusted_proxies`](crate::ReceiverBuilder::trusted_proxies) is not a
    /// network: the setting, the entry (escaped) and why.
    #[error("invalid {setting} entry {error}")]
    InvalidNetwork {
        /// `allowed_networks` or `trusted_proxies`.
        setting: &'static str,
        /// The entry and the reason.
        error: crate::source::NetworkError,
    },
    /// A store was given without a namespace. A store passed in may be shared
    /// with other endpoints (Redis always is), and under one default namespace
    /// whoever holds any endpoint's secret could mark another's events done.
    #[error(
        "a store set with store() or shared_store() needs namespace(...) too, \
         one per endpoint, so endpoints sharing it cannot mark each other's events done"
    )]
    NamespaceRequired,
    /// A [`SecretSet`](crate::SecretSet)'s file cannot be used: its path and
    /// why (a line by its number, never the file's content).
    #[error("secret file {}: {reason}", path.display())]
    SecretFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why it cannot be used, for example `line 2: the secret does not start with whsec_`.
        reason: String,
    },
}

/// What kind of failure a [`StoreError`] (or an inbox error) is, for code
/// that reacts to the cause rather than the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store could not be reached, or the connection was lost.
    Unavailable,
    /// The store did not answer within the configured timeout.
    TimedOut,
    /// The store answered but refused the operation: authentication, a
    /// read-only replica, no room left for another in-flight claim.
    Refused,
    /// The request or the store's answer was not valid: a bad setting, an
    /// unexpected reply, data that does not decode.
    Invalid,
}

/// A dedupe store failure: unreachable, timed out, refused or invalid
/// ([`kind`](Self::kind)), with a message for the reply and the logs.
///
/// The message must not contain credentials (a store builds it from the failure
/// kind, never from its connection URL).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
}

impl StoreError {
    /// A store error of kind [`StoreErrorKind::Unavailable`] with a message for
    /// the reply and the logs. Prefer [`with_kind`](Self::with_kind) or a
    /// shortcut when the cause is known.
    pub fn new(message: impl Into<String>) -> Self {
        Self::with_kind(StoreErrorKind::Unavailable, message)
    }

    /// A store error of the given kind.
    pub fn with_kind(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// [`StoreErrorKind::Unavailable`]: unreachable, or the connection was lost.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::with_kind(StoreErrorKind::Unavailable, message)
    }

    /// [`StoreErrorKind::TimedOut`]: no answer in time.
    pub fn timed_out(message: impl Into<String>) -> Self {
        Self::with_kind(StoreErrorKind::TimedOut, message)
    }

    /// [`StoreErrorKind::Refused`]: the store said no.
    pub fn refused(message: impl Into<String>) -> Self {
        Self::with_kind(StoreErrorKind::Refused, message)
    }

    /// [`StoreErrorKind::Invalid`]: a bad request or an unexpected answer.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::with_kind(StoreErrorKind::Invalid, message)
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// The message, as displayed.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<StoreError> for Error {
    fn from(err: StoreError) -> Self {
        Self::StoreUnavailable(err.message)
    }
}
