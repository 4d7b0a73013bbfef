//! Endpoint signing secrets.
//!
//! A [`Secret`] is checked when it is built (an empty secret is a configuration
//! error, never a per-request failure) and never shows its value through `Debug`
//! or `Display`. It keeps the HMAC key schedule computed once, so verifying a
//! delivery does not re-derive the key for every request.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::ConfigError;

pub(crate) type HmacSha256 = Hmac<Sha256>;

/// One endpoint signing secret (`whsec_…`).
///
/// The whole string, prefix included, is the HMAC key. Formatting a `Secret`
/// prints `Secret(<redacted>)`.
///
/// ```
/// use payhook::Secret;
///
/// let secret = Secret::new("whsec_test_secret").unwrap();
/// assert_eq!(format!("{secret:?}"), "Secret(<redacted>)");
/// assert!(Secret::new("").is_err());
/// ```
#[derive(Clone)]
pub struct Secret {
    mac: HmacSha256,
}

impl Secret {
    /// Checks and keeps a signing secret.
    ///
    /// # Errors
    /// [`ConfigError::EmptySecret`] when `secret` is empty.
    pub fn new(secret: impl AsRef<[u8]>) -> Result<Self, ConfigError> {
        let bytes = secret.as_ref();
        if bytes.is_empty() {
            return Err(ConfigError::EmptySecret);
        }
        // HMAC accepts keys of any length, so this cannot fail.
        let mac = HmacSha256::new_from_slice(bytes).map_err(|_| ConfigError::EmptySecret)?;
        Ok(Self { mac })
    }

    /// A fresh HMAC-SHA256 state keyed with this secret.
    pub(crate) fn mac(&self) -> HmacSha256 {
        self.mac.clone()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl TryFrom<&str> for Secret {
    type Error = ConfigError;
    fn try_from(value: &str) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl TryFrom<String> for Secret {
    type Error = ConfigError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}
