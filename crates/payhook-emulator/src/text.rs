//! Request-derived text in replies and logs: control characters escaped and the
//! length capped, so a hostile value can neither forge a log line nor bloat a reply.

use payhook_core::untrusted::Untrusted;

/// `value` quoted, escaped and capped by the core's [`Untrusted`] (control,
/// bidi and line-separator characters escaped, at most 64 characters, then an
/// ellipsis): one rule for every request-derived value payhook shows.
pub(crate) fn shown(value: &str) -> String {
    format!("\"{}\"", Untrusted::value(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_caps() {
        assert_eq!(shown("a\nb\u{1b}"), r#""a\nb\u{1b}""#);
        let long = "x".repeat(1000);
        let s = shown(&long);
        assert!(s.chars().count() < 70, "{s}");
        assert!(s.ends_with("…\""));
        assert_eq!(shown("\u{202e}x"), r#""\u{202e}x""#, "bidi overrides too");
    }
}
