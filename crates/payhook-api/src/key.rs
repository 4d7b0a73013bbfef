//! The API key, and the one way any text from the service is made safe to
//! keep: the key cut out first, then the project's escaping rule, then the
//! byte bound.

use std::fmt;
use std::sync::Arc;

use payhook_core::untrusted::Untrusted;

/// The most bytes of a message from the service that any error, log line or
/// stored record keeps: 1 KiB.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// What a redacted key reads as.
pub(crate) const REDACTED: &str = "<redacted>";

/// A secret API key (`sk_…`): sent only in the `Authorization` header, never
/// shown by `Debug` or in any message.
///
/// ```
/// use payhook::api::ApiKey;
///
/// let key = ApiKey::new(" sk_test_123 \n").unwrap();
/// assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
/// assert!(ApiKey::new("  ").is_err());
/// ```
#[derive(Clone)]
pub struct ApiKey(Arc<str>);

impl ApiKey {
    /// A key, its surrounding whitespace trimmed (a key file's final line
    /// break, stray spaces); refused when empty or not a header value.
    ///
    /// # Errors
    /// A static reason, never the key.
    pub fn new(key: &str) -> Result<Self, &'static str> {
        let key = key.trim();
        if key.is_empty() {
            return Err("the API key is empty");
        }
        if http::HeaderValue::from_str(&format!("Bearer {key}")).is_err() {
            return Err("the API key has characters a header cannot carry");
        }
        Ok(Self(key.into()))
    }

    /// `text` with every occurrence of the key replaced by `<redacted>`,
    /// then escaped by the project's rule for untrusted text
    /// ([`Untrusted::message`]) and cut to [`MAX_MESSAGE_BYTES`]. The key
    /// goes first, so no shortening can leave a part of it behind.
    ///
    /// ```
    /// use payhook::api::ApiKey;
    ///
    /// let key = ApiKey::new("sk_test_abc").unwrap();
    /// assert_eq!(key.scrub("bad key xsk_test_abcx\n"), r"bad key x<redacted>x\n");
    /// ```
    pub fn scrub(&self, text: &str) -> String {
        let redacted = text.replace(&*self.0, REDACTED);
        bounded(Untrusted::message(&redacted).to_string())
    }

    /// `text` with every occurrence of the key replaced by `<redacted>`,
    /// nothing else changed (for a value shown later through the escaping
    /// rule, such as a refused event's id).
    pub(crate) fn redact(&self, text: &str) -> String {
        text.replace(&*self.0, REDACTED)
    }

    /// The `Authorization` header's value.
    pub(crate) fn bearer(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// `text` cut to at most [`MAX_MESSAGE_BYTES`] bytes, on a character boundary.
pub(crate) fn bounded(text: String) -> String {
    if text.len() <= MAX_MESSAGE_BYTES {
        return text;
    }
    payhook_core::untrusted::cut(&text, MAX_MESSAGE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_goes_before_anything_shortens_the_text() {
        let long = format!("sk_test_{}", "k".repeat(92));
        let key = ApiKey::new(&long).unwrap();
        // Whole, inside a long word, and at the end of a 1 MB word.
        for text in [
            format!("Invalid API key: {long}"),
            format!("x{long}y"),
            format!("{}{long}", "a".repeat(1_000_000)),
        ] {
            let shown = key.scrub(&text);
            assert!(!shown.contains(&long[..20]), "{shown}");
            assert!(shown.len() <= MAX_MESSAGE_BYTES, "{}", shown.len());
        }
        assert_eq!(key.scrub(&format!("key {long}")), "key <redacted>");
    }

    #[test]
    fn a_message_is_at_most_a_kibibyte() {
        let key = ApiKey::new("sk_test_x").unwrap();
        let wide = "\u{1f600} ".repeat(10_000);
        assert!(key.scrub(&wide).len() <= MAX_MESSAGE_BYTES);
        let escaped = "\u{1b} ".repeat(10_000);
        assert!(key.scrub(&escaped).len() <= MAX_MESSAGE_BYTES);
        assert_eq!(bounded("é".repeat(600)).len(), 1023);
    }

    #[test]
    fn the_key_is_trimmed_and_checked() {
        let key = ApiKey::new("  sk_test_secret \n").unwrap();
        assert_eq!(key.bearer(), "Bearer sk_test_secret");
        assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
        assert!(ApiKey::new("  ").is_err());
        assert!(ApiKey::new("sk_test_\nx").is_err());
    }
}
