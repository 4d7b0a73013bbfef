//! API keys: `Authorization: Bearer sk_test_…`, or HTTP Basic with the key as
//! the user name and an empty password. Live keys are refused: the emulator is
//! test mode only. No key is ever echoed in a reply.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use subtle::ConstantTimeEq;

use std::sync::Arc;

use crate::error::ApiError;
use crate::Shared;

/// The longest API key accepted.
const MAX_KEY_CHARS: usize = 255;

/// The API key a request authenticated with.
#[derive(Clone)]
pub(crate) struct ApiKey(pub String);

// By hand: the key is a secret and stays out of Debug output.
impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Whether `key` is a well-formed test key: `sk_test_` and 1–247 letters, digits or `_`.
pub(crate) fn is_test_key(key: &str) -> bool {
    key.strip_prefix("sk_test_").is_some_and(|rest| {
        !rest.is_empty()
            && key.len() <= MAX_KEY_CHARS
            && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
}

/// Checks a key to fix with [`EmulatorBuilder::api_key`](crate::EmulatorBuilder::api_key)
/// (or `payhook emulate --key`): `Err` says why it is refused.
///
/// ```
/// assert!(payhook::emulator::check_api_key("sk_test_abc").is_ok());
/// assert!(payhook::emulator::check_api_key("sk_live_abc").unwrap_err().contains("test mode only"));
/// ```
///
/// # Errors
/// A live key (`sk_live_…`), or anything but `sk_test_` and 1–247 letters,
/// digits or `_`.
pub fn check_api_key(key: &str) -> Result<(), &'static str> {
    if key.starts_with("sk_live_") {
        return Err("the emulator is test mode only: give an sk_test_ key");
    }
    if !is_test_key(key) {
        return Err("the API key must be sk_test_ followed by letters, digits or underscores");
    }
    Ok(())
}

/// The key a request carries, or why it is refused.
pub(crate) fn authenticate(authorization: Option<&[u8]>, fixed: Option<&str>) -> Result<String, ApiError> {
    let Some(value) = authorization else {
        return Err(ApiError::unauthenticated(
            "api_key_missing",
            "You did not provide an API key: send `Authorization: Bearer sk_test_…` \
             (or HTTP Basic with the key as the user name and an empty password)",
        ));
    };
    let malformed = || {
        ApiError::unauthenticated(
            "api_key_malformed",
            "The Authorization header is malformed: expected `Bearer sk_test_…` or \
             HTTP Basic with the key as the user name and an empty password",
        )
    };
    let text = std::str::from_utf8(value).map_err(|_| malformed())?;
    let (scheme, credentials) = text.split_once(' ').ok_or_else(malformed)?;
    let key = if scheme.eq_ignore_ascii_case("bearer") {
        credentials.trim().to_owned()
    } else if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(credentials.trim())
            .map_err(|_| malformed())?;
        let decoded = String::from_utf8(decoded).map_err(|_| malformed())?;
        let (user, password) = decoded.split_once(':').ok_or_else(malformed)?;
        if !password.is_empty() {
            return Err(ApiError::unauthenticated(
                "api_key_malformed",
                "HTTP Basic authentication takes the API key as the user name and an empty password",
            ));
        }
        user.to_owned()
    } else {
        return Err(malformed());
    };
    if key.starts_with("sk_live_") {
        return Err(ApiError::unauthenticated(
            "livemode_key_refused",
            "This is the payment service's emulator, which runs in test mode only: \
             live keys (sk_live_…) are refused; use a test key (sk_test_…)",
        ));
    }
    if !is_test_key(&key) {
        return Err(ApiError::unauthenticated(
            "api_key_invalid",
            "Invalid API key: a test key is sk_test_ followed by letters, digits or underscores",
        ));
    }
    if let Some(fixed) = fixed {
        if !bool::from(key.as_bytes().ct_eq(fixed.as_bytes())) {
            return Err(ApiError::unauthenticated(
                "api_key_unknown",
                "Invalid API key provided: this emulator accepts only the key it was started with",
            ));
        }
    }
    Ok(key)
}

/// The middleware in front of every route.
pub(crate) async fn require_key(
    State(shared): State<Arc<Shared>>,
    mut request: Request,
    next: Next,
) -> Response {
    let header = request.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
    match authenticate(header, shared.config.fixed_key.as_deref()) {
        Ok(key) => {
            request.extensions_mut().insert(ApiKey(key));
            next.run(request).await
        }
        Err(error) => error.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_stays_out_of_debug_output() {
        let shown = format!("{:?}", ApiKey("sk_test_do_not_print".to_owned()));
        assert!(!shown.contains("do_not_print"), "{shown}");
    }

    #[test]
    fn keys_are_checked() {
        assert_eq!(
            authenticate(Some(b"Bearer sk_test_abc"), None).unwrap(),
            "sk_test_abc"
        );
        // "sk_test_abc:" in base64
        assert_eq!(
            authenticate(Some(b"Basic c2tfdGVzdF9hYmM6"), None).unwrap(),
            "sk_test_abc"
        );
        assert_eq!(
            authenticate(None, None).unwrap_err().code,
            Some("api_key_missing")
        );
        assert_eq!(
            authenticate(Some(b"Bearer sk_live_abc"), None).unwrap_err().code,
            Some("livemode_key_refused")
        );
        assert_eq!(
            authenticate(Some(b"Bearer sk_test_"), None).unwrap_err().code,
            Some("api_key_invalid")
        );
        assert_eq!(
            authenticate(Some(b"Token x"), None).unwrap_err().code,
            Some("api_key_malformed")
        );
        assert_eq!(
            authenticate(Some(b"Bearer sk_test_other"), Some("sk_test_abc"))
                .unwrap_err()
                .code,
            Some("api_key_unknown")
        );
    }
}
