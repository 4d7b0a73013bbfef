//! Text from a request, made safe to put in a log line or a reply.
//!
//! Anything a sender controls — an event id or type, an amount, a fragment of the
//! body quoted in a parse error — may hold control characters (a newline and an
//! ESC can forge a log line or repaint a terminal) or be megabytes long (a log
//! line and a reply of the same size per delivery). Payhook never writes such a
//! value as it is: it goes through [`Untrusted`], which escapes control, bidi and
//! line-separator characters the way Rust writes them in a string literal
//! (`\n`, `\u{1b}`) and shows at most [`MAX_SHOWN_CHARS`] characters followed by
//! `…`.
//!
//! ```
//! use payhook::untrusted::Untrusted;
//!
//! let id = "evt_1\n2026-01-01T00:00:00Z  INFO payhook: forged\u{1b}[2J";
//! assert_eq!(
//!     Untrusted::value(id).to_string(),
//!     r"evt_1\n2026-01-01T00:00:00Z  INFO payhook: forged\u{1b}[2J"
//! );
//! let long = "9".repeat(200_000);
//! assert_eq!(Untrusted::value(&long).to_string(), format!("{}…", "9".repeat(64)));
//! ```

use std::fmt::{self, Write};

/// How many characters of one request-derived value are shown before `…`.
pub const MAX_SHOWN_CHARS: usize = 64;

/// How many characters of a message quoting request-derived values are shown:
/// room for the fixed wording around a few values of [`MAX_SHOWN_CHARS`].
pub const MAX_MESSAGE_CHARS: usize = 4 * MAX_SHOWN_CHARS;

/// Request-derived text, displayed escaped and shortened. See the [module docs](self).
#[derive(Debug, Clone, Copy)]
pub struct Untrusted<'a> {
    text: &'a str,
    kind: Kind,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Value,
    Message,
}

impl<'a> Untrusted<'a> {
    /// One value taken from a request (an event id, a type): control characters
    /// and backslashes escaped, at most [`MAX_SHOWN_CHARS`] characters shown.
    pub fn value(text: &'a str) -> Self {
        Self {
            text,
            kind: Kind::Value,
        }
    }

    /// A message that quotes request-derived values (a parse error): control
    /// characters escaped, each run of characters without whitespace cut after
    /// [`MAX_SHOWN_CHARS`] and the whole after [`MAX_MESSAGE_CHARS`], so the
    /// wording stays whole while a quoted value cannot make it long. Backslashes
    /// are kept, as such messages already quote strings with escapes.
    pub fn message(text: &'a str) -> Self {
        Self {
            text,
            kind: Kind::Message,
        }
    }
}

impl fmt::Display for Untrusted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (word_limit, total_limit) = match self.kind {
            Kind::Value => (MAX_SHOWN_CHARS, MAX_SHOWN_CHARS),
            Kind::Message => (MAX_SHOWN_CHARS, MAX_MESSAGE_CHARS),
        };
        let mut shown = 0usize;
        let mut word = 0usize;
        let mut skipping = false;
        for c in self.text.chars() {
            if c.is_whitespace() {
                skipping = false;
                word = 0;
            } else if skipping {
                continue;
            } else if word == word_limit {
                // Cut this run; the text goes on after the next whitespace.
                skipping = true;
                if shown == total_limit {
                    return f.write_char('…');
                }
                f.write_char('…')?;
                shown += 1;
                continue;
            } else {
                word += 1;
            }
            if shown == total_limit {
                return f.write_char('…');
            }
            shown += 1;
            write_escaped(f, c, matches!(self.kind, Kind::Value))?;
        }
        Ok(())
    }
}

fn write_escaped(f: &mut fmt::Formatter<'_>, c: char, escape_backslash: bool) -> fmt::Result {
    match c {
        '\n' => f.write_str("\\n"),
        '\r' => f.write_str("\\r"),
        '\t' => f.write_str("\\t"),
        '\\' if escape_backslash => f.write_str("\\\\"),
        c if needs_escape(c) => write!(f, "\\u{{{:x}}}", u32::from(c)),
        c => f.write_char(c),
    }
}

/// Control characters, and the ones that reorder or break a line on display
/// (bidi overrides and isolates, line and paragraph separators).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_and_capped() {
        assert_eq!(Untrusted::value("evt_1").to_string(), "evt_1");
        assert_eq!(
            Untrusted::value("a\\b\r\t\u{7f}\u{202e}").to_string(),
            r"a\\b\r\t\u{7f}\u{202e}"
        );
        let exact = "x".repeat(MAX_SHOWN_CHARS);
        assert_eq!(Untrusted::value(&exact).to_string(), exact);
        let over = "é".repeat(MAX_SHOWN_CHARS + 1);
        assert_eq!(
            Untrusted::value(&over).to_string(),
            format!("{}…", "é".repeat(64))
        );
        // Escapes count as one character of the value, so the output stays bounded.
        let escapes = "\u{1b}".repeat(10_000);
        let shown = Untrusted::value(&escapes).to_string();
        assert_eq!(shown, format!("{}…", r"\u{1b}".repeat(64)));
    }

    #[test]
    fn messages_keep_their_wording_and_cut_long_runs() {
        let amount = "1".repeat(200_000);
        let message = format!("amount {amount} is larger than 2^128 - 1");
        assert_eq!(
            Untrusted::message(&message).to_string(),
            format!("amount {}… is larger than 2^128 - 1", "1".repeat(64))
        );
        let spaced = "a ".repeat(100_000);
        let shown = Untrusted::message(&spaced).to_string();
        assert_eq!(shown.chars().count(), MAX_MESSAGE_CHARS + 1);
        assert!(shown.ends_with('…'));
        assert_eq!(
            Untrusted::message(r#"invalid type: string "a\"b", expected u64"#).to_string(),
            r#"invalid type: string "a\"b", expected u64"#
        );
        assert_eq!(Untrusted::message("line\nbreak").to_string(), r"line\nbreak");
    }
}
