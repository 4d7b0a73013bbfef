//! Request-derived text in replies and logs: control characters escaped and the
//! length capped, so a hostile value can neither forge a log line nor bloat a reply.

/// The most characters of a request-derived value shown in a message.
const SHOWN_CHARS: usize = 64;

/// `value` quoted, with control characters escaped and at most 64 characters
/// (then an ellipsis).
pub(crate) fn shown(value: &str) -> String {
    let mut out = String::with_capacity(value.len().min(SHOWN_CHARS * 2) + 2);
    out.push('"');
    for (i, c) in value.chars().enumerate() {
        if i == SHOWN_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() || c == '"' || c == '\\' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push('"');
    out
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
    }
}
