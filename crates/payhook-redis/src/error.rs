//! Failure messages that are safe to show: built from the kind of failure,
//! never from the connection URL, so a password in the URL cannot leak into a
//! reply or a log line.

use std::time::Duration;

use payhook_core::{StoreError, StoreErrorKind};
use redis::{ErrorKind, RedisError};

/// Why a [`RedisStore`](crate::RedisStore) could not be built or connected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The URL is not a Redis URL the client accepts; the text says which part is wrong.
    #[error("invalid Redis URL: {0}")]
    InvalidUrl(String),
    /// A builder setting is out of range; the text says which.
    #[error("invalid setting: {0}")]
    InvalidSetting(&'static str),
    /// [`connect`](crate::RedisStoreBuilder::connect) could not reach the server.
    #[error("Redis unavailable: {0}")]
    Unavailable(StoreError),
    /// [`connect`](crate::RedisStoreBuilder::connect) found that Redis refuses
    /// the store's commands: a server older than 7.0 (no `SET … NX GET`), or a
    /// user not allowed to run `SET`, `GET`, `DEL` and `EVAL`.
    #[error(
        "Redis refused the store's commands ({0}); payhook-redis needs Redis 7.0 or later and a user \
         allowed to run SET, GET, DEL and EVAL"
    )]
    Unsupported(String),
}

/// Describes a URL parse error without echoing the URL.
pub(crate) fn invalid_url(err: &RedisError) -> BuildError {
    // The client's parse errors read "<what is wrong> - <kind>[: <detail>]"; the
    // part before " - " names the broken part ("Invalid database number",
    // "Missing hostname", …). The detail can quote pieces of the URL, so it is cut.
    let text = err.to_string();
    let reason = match err.kind() {
        ErrorKind::InvalidClientConfig => text.split(" - ").next().unwrap_or("").to_owned(),
        _ => "not a Redis URL".to_owned(),
    };
    BuildError::InvalidUrl(reason)
}

pub(crate) fn timed_out(timeout: Duration) -> StoreError {
    StoreError::timed_out(format!("Redis did not answer within {} ms", timeout.as_millis()))
}

pub(crate) fn no_runtime() -> StoreError {
    StoreError::invalid("the Redis store was called outside a tokio runtime")
}

/// Whether `err` means the connection failed (so nothing or only the request
/// was lost) rather than Redis answering with an error.
pub(crate) fn is_connection_failure(err: &RedisError) -> bool {
    !err.is_timeout() && (err.is_connection_refusal() || err.is_connection_dropped())
}

/// `NOAUTH` (no password given) and `WRONGPASS` (wrong one) replies, which the
/// client reports as generic server errors.
fn is_auth_failure(err: &RedisError) -> bool {
    matches!(err.code(), Some("NOAUTH" | "WRONGPASS"))
        || err.detail().is_some_and(|detail| {
            detail.starts_with("Authentication required") || detail.contains("username-password pair")
        })
}

/// A [`StoreError`] for a failed Redis call.
pub(crate) fn store_error(err: &RedisError, timeout: Duration) -> StoreError {
    if err.is_timeout() {
        return timed_out(timeout);
    }
    if err.is_connection_refusal() {
        return StoreError::unavailable("Redis refused the connection");
    }
    if err.is_connection_dropped() {
        return StoreError::unavailable("the connection to Redis was lost");
    }
    let (kind, message) = match err.kind() {
        // I/O errors ("invalid peer certificate: UnknownIssuer", "failed to
        // lookup address information: …") name no address or credentials.
        ErrorKind::Io => (
            StoreErrorKind::Unavailable,
            format!("could not talk to Redis: {err}"),
        ),
        ErrorKind::AuthenticationFailed => (
            StoreErrorKind::Refused,
            "Redis rejected the credentials".to_owned(),
        ),
        ErrorKind::UnexpectedReturnType | ErrorKind::Parse => {
            (StoreErrorKind::Invalid, "unexpected reply from Redis".to_owned())
        }
        ErrorKind::InvalidClientConfig => (
            StoreErrorKind::Invalid,
            "invalid Redis client configuration".to_owned(),
        ),
        _ if is_auth_failure(err) => (
            StoreErrorKind::Refused,
            format!(
                "Redis rejected the credentials ({})",
                err.detail()
                    .unwrap_or("authentication failed")
                    .trim_end_matches('.')
            ),
        ),
        _ => match err.code() {
            // Server replies ("READONLY …", "OOM …", "ERR syntax error") come from
            // Redis itself and carry no credentials; they say what to fix.
            Some(code) => {
                let detail: String = err.detail().unwrap_or("").chars().take(120).collect();
                (
                    StoreErrorKind::Refused,
                    format!("Redis replied {code} {detail}").trim_end().to_owned(),
                )
            }
            None => (
                StoreErrorKind::Unavailable,
                format!("Redis call failed ({})", err.category()),
            ),
        },
    };
    StoreError::with_kind(kind, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::IntoConnectionInfo;

    #[test]
    fn url_errors_never_quote_the_url() {
        for url in [
            "redis://:hunter2-secret@127.0.0.1:6379/notanumber",
            "http://user:hunter2-secret@example.com",
            "redis://:hunter2-secret@0.0.0.0:6379",
            "redis://:hunter2-secret@127.0.0.1:6379/?protocol=hunter2-secret-x",
        ] {
            let err = url.into_connection_info().expect_err(url);
            let message = invalid_url(&err).to_string();
            assert!(!message.contains("hunter2-secret"), "{message}");
            assert!(message.starts_with("invalid Redis URL: "), "{message}");
        }
    }

    #[test]
    fn io_errors_are_described_by_kind() {
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(
            store_error(&refused, Duration::from_secs(1)).to_string(),
            "Redis refused the connection"
        );
        assert!(is_connection_failure(&refused));
        let timeout = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert_eq!(
            store_error(&timeout, Duration::from_millis(1500)).to_string(),
            "Redis did not answer within 1500 ms"
        );
        assert!(
            !is_connection_failure(&timeout),
            "a timeout has used up the deadline"
        );
    }
}
