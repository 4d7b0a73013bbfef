//! Who may look, and which form posts are the dashboard's own.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// How long one anti-forgery token is issued for; a page's token is accepted
/// for one more window after it (between one and two hours in all).
pub(crate) const CSRF_WINDOW_SECS: u64 = 3600;

/// The dashboard's secret token, kept as its SHA-256 (compared in constant
/// time, whatever the length of the guess) and as the key of the
/// anti-forgery tokens.
pub(crate) struct Secret {
    digest: [u8; 32],
    key: Vec<u8>,
}

impl Secret {
    pub(crate) fn new(token: &str) -> Self {
        Self {
            digest: Sha256::digest(token.as_bytes()).into(),
            key: token.as_bytes().to_vec(),
        }
    }

    /// Whether `password` is the token, in time independent of where they
    /// differ and of the guess's length (the digests are compared).
    pub(crate) fn matches(&self, password: &[u8]) -> bool {
        let guess: [u8; 32] = Sha256::digest(password).into();
        bool::from(guess.ct_eq(&self.digest))
    }

    /// Whether the request carries `Authorization: Basic` with any user name
    /// and the token as the password.
    pub(crate) fn authorizes(&self, headers: &HeaderMap) -> bool {
        let Some(value) = headers.get(http::header::AUTHORIZATION) else {
            return false;
        };
        let Ok(value) = value.to_str() else { return false };
        let Some((scheme, encoded)) = value.trim().split_once(' ') else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case("basic") || encoded.len() > 4096 {
            return false;
        }
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            return false;
        };
        let Some(colon) = decoded.iter().position(|&b| b == b':') else {
            return false;
        };
        self.matches(&decoded[colon + 1..])
    }

    /// The anti-forgery token of the window `window`: an HMAC of the window
    /// under the dashboard's token, hex.
    pub(crate) fn csrf_token(&self, window: u64) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes keys of any length");
        mac.update(b"payhook-dashboard-form:");
        mac.update(window.to_string().as_bytes());
        let tag = mac.finalize().into_bytes();
        let mut hex = String::with_capacity(64);
        for byte in tag {
            hex.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
            hex.push(char::from(b"0123456789abcdef"[usize::from(byte & 15)]));
        }
        hex
    }

    /// Whether `token` is this window's or the previous one's.
    pub(crate) fn csrf_valid(&self, token: &str, now_secs: u64) -> bool {
        let window = now_secs / CSRF_WINDOW_SECS;
        let mut valid = subtle::Choice::from(0);
        for w in [window, window.saturating_sub(1)] {
            let expected = self.csrf_token(w);
            valid |= expected.as_bytes().ct_eq(token.as_bytes());
        }
        bool::from(valid)
    }
}

/// Why a form post is refused as cross-site, when it is.
///
/// `Sec-Fetch-Site` decides when the browser sends it (every current one
/// does, and no page script can set it): only `same-origin` (and `none`, a
/// request the user typed) pass. Without it, an `Origin` naming another host
/// than `Host` is refused. `Origin: null` is what browsers send for the
/// dashboard's own forms under `Referrer-Policy: no-referrer`, so it proves
/// nothing either way; the form token then decides.
pub(crate) fn cross_site(headers: &HeaderMap) -> Option<&'static str> {
    if let Some(site) = headers.get("sec-fetch-site") {
        return match site.to_str().unwrap_or("") {
            "same-origin" | "none" => None,
            _ => Some("the browser reports this form as sent from another site"),
        };
    }
    if let Some(origin) = headers.get(http::header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if origin == "null" {
            return None;
        }
        let host = headers
            .get(http::header::HOST)
            .and_then(|host| host.to_str().ok())
            .unwrap_or("");
        let origin_host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .unwrap_or("");
        if host.is_empty() || !origin_host.eq_ignore_ascii_case(host) {
            return Some("the form was sent from another origin");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn basic(user_password: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let encoded = base64::engine::general_purpose::STANDARD.encode(user_password);
        headers.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {encoded}")).unwrap(),
        );
        headers
    }

    #[test]
    fn the_token_is_the_password_of_any_user() {
        let secret = Secret::new("a-long-dashboard-token");
        assert!(secret.authorizes(&basic("oncall:a-long-dashboard-token")));
        assert!(secret.authorizes(&basic(":a-long-dashboard-token")));
        // A colon in the token belongs to the password.
        assert!(Secret::new("to:ken-with-colon").authorizes(&basic("u:to:ken-with-colon")));
        assert!(!secret.authorizes(&basic("oncall:a-long-dashboard-toke")));
        assert!(!secret.authorizes(&basic("oncall:a-long-dashboard-tokenX")));
        assert!(!secret.authorizes(&basic("a-long-dashboard-token")));
        assert!(!secret.authorizes(&HeaderMap::new()));
        let mut bearer = HeaderMap::new();
        bearer.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer a-long-dashboard-token"),
        );
        assert!(!secret.authorizes(&bearer));
        let mut garbage = HeaderMap::new();
        garbage.insert(http::header::AUTHORIZATION, HeaderValue::from_static("Basic %%%"));
        assert!(!secret.authorizes(&garbage));
    }

    #[test]
    fn the_comparison_is_of_fixed_length_digests() {
        let secret = Secret::new("token-token-token");
        // Guesses of every length are reduced to 32 bytes before the
        // constant-time comparison, so none ends it early.
        for guess in [
            "",
            "t",
            "token-token-toke",
            "token-token-tokenn",
            &"x".repeat(10_000),
        ] {
            assert!(!secret.matches(guess.as_bytes()));
        }
        assert!(secret.matches(b"token-token-token"));
    }

    #[test]
    fn form_tokens_last_one_more_window_and_are_bound_to_the_secret() {
        let secret = Secret::new("token-token-token");
        let now = 1_800_000_000;
        let token = secret.csrf_token(now / CSRF_WINDOW_SECS);
        assert_eq!(token.len(), 64);
        assert!(secret.csrf_valid(&token, now));
        assert!(secret.csrf_valid(&token, now + CSRF_WINDOW_SECS));
        assert!(!secret.csrf_valid(&token, now + 2 * CSRF_WINDOW_SECS));
        assert!(!Secret::new("another-token-here").csrf_valid(&token, now));
        assert!(!secret.csrf_valid("", now));
    }

    #[test]
    fn cross_site_posts_are_recognised() {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert_eq!(cross_site(&headers), None);
        headers.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        headers.insert(
            http::header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        assert_eq!(cross_site(&headers), None);
        headers.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(cross_site(&headers).is_some());
        headers.insert("sec-fetch-site", HeaderValue::from_static("same-site"));
        assert!(cross_site(&headers).is_some());
        headers.remove("sec-fetch-site");
        headers.insert(
            http::header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(cross_site(&headers).is_some());
        headers.insert(
            http::header::ORIGIN,
            HeaderValue::from_static("https://127.0.0.1:8080.evil.example"),
        );
        assert!(cross_site(&headers).is_some());
        // `null` (the dashboard's own forms under `Referrer-Policy:
        // no-referrer`) proves nothing: the form token decides.
        headers.insert(http::header::ORIGIN, HeaderValue::from_static("null"));
        assert_eq!(cross_site(&headers), None);
        // The browser's word wins over the Origin.
        headers.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert_eq!(cross_site(&headers), None);
        headers.insert(
            http::header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        headers.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(cross_site(&headers).is_some());
    }
}
