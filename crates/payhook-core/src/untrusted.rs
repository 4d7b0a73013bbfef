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
//!
//! A whole body is shown through [`lay_out_json`]: laid out token by token,
//! every character the same rule escapes written as a JSON `\uXXXX` escape
//! inside its string, the indentation and the total size bounded.

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
        // Most values (ids, types, paths) are short printable ASCII, which
        // the rule below writes unchanged: write them in one piece.
        let escape_backslash = matches!(self.kind, Kind::Value);
        if self.text.len() <= word_limit
            && self
                .text
                .bytes()
                .all(|b| (b' '..=b'~').contains(&b) && !(escape_backslash && b == b'\\'))
        {
            return f.write_str(self.text);
        }
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
            write_escaped(f, c, escape_backslash)?;
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

/// How deep a body laid out by [`lay_out_json`] is indented: anything nested
/// deeper stays on the line of its container (still escaped), so a body
/// nested half a million levels deep takes no more room than its own text.
pub const MAX_LAID_OUT_DEPTH: usize = 32;

/// The most bytes of layout [`lay_out_json`] writes (a few more to end the
/// token it stops in); the rest of the body is counted, not shown.
pub const MAX_LAID_OUT_BYTES: usize = 256 * 1024;

/// A body laid out by [`lay_out_json`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LaidOutJson {
    /// The layout, at most about [`MAX_LAID_OUT_BYTES`] long.
    pub text: String,
    /// How many bytes at the end of the body were not laid out (0: all of it
    /// was): a viewer says so beside the text.
    pub omitted_bytes: usize,
}

/// `text` cut to at most `limit` bytes on a character boundary, ending in
/// `…` when it was cut (the `…` counted in the limit; a limit too small to
/// hold it cuts without one), so that a value from a request or a reply is
/// stored or logged bounded by one rule.
///
/// ```
/// use payhook::untrusted::cut;
///
/// assert_eq!(cut("evt_short", 16), "evt_short");
/// assert_eq!(cut("évènement", 7), "év…"); // never inside a character
/// assert_eq!(cut("evt_short", 2), "ev"); // no room for the `…`
/// ```
pub fn cut(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mark = if limit >= '…'.len_utf8() { "…" } else { "" };
    let mut end = limit - mark.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{mark}", &text[..end])
}

/// A JSON body laid out for a person to read — in a terminal or a web page —
/// with nothing in it that its sender could use to forge a line, reorder the
/// text or make the view huge.
///
/// The text is laid out token by token rather than shown as stored: the
/// whitespace between tokens (where a sender can put CR/LF) is dropped and
/// replaced by this layout, and every character [`Untrusted`] escapes
/// (controls, C1 controls, bidi overrides and isolates, line and paragraph
/// separators) is written as a JSON `\uXXXX` escape, so the result is still
/// JSON with the same meaning. Keys keep their order and numbers their exact
/// text (nothing is parsed into values). Text that is not JSON is laid out
/// the same way and escaped alike. Every line starts with `indent`, then two
/// spaces per level up to [`MAX_LAID_OUT_DEPTH`]; deeper levels stay on
/// their container's line. The layout stops after [`MAX_LAID_OUT_BYTES`]
/// and says how much of the body it left out.
///
/// ```
/// use payhook::untrusted::lay_out_json;
///
/// let shown = lay_out_json("{\"id\":\"evt_\u{202e}1\",\"n\":[1.50]}", "");
/// assert_eq!(shown.text, "{\n  \"id\": \"evt_\\u202e1\",\n  \"n\": [\n    1.50\n  ]\n}");
/// assert_eq!(shown.omitted_bytes, 0);
/// ```
pub fn lay_out_json(text: &str, indent: &str) -> LaidOutJson {
    let mut out =
        String::with_capacity(text.len().min(MAX_LAID_OUT_BYTES) + text.len().min(MAX_LAID_OUT_BYTES) / 4);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let newline = |out: &mut String, depth: usize| {
        if depth <= MAX_LAID_OUT_DEPTH {
            out.push('\n');
            out.push_str(indent);
            for _ in 0..depth {
                out.push_str("  ");
            }
        }
    };
    out.push_str(indent);
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if out.len() >= MAX_LAID_OUT_BYTES {
            return LaidOutJson {
                text: out,
                omitted_bytes: text.len() - at,
            };
        }
        if in_string {
            match c {
                _ if escaped => {
                    escaped = false;
                    push_json_safe(&mut out, c);
                }
                '\\' => {
                    escaped = true;
                    out.push('\\');
                }
                '"' => {
                    in_string = false;
                    out.push('"');
                }
                c => push_json_safe(&mut out, c),
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push('"');
            }
            '{' | '[' => {
                out.push(c);
                // An empty object or array stays on its line.
                while chars.peek().is_some_and(|(_, next)| next.is_whitespace()) {
                    chars.next();
                }
                if matches!(chars.peek(), Some((_, '}' | ']'))) {
                    continue;
                }
                depth += 1;
                newline(&mut out, depth);
            }
            '}' | ']' => {
                if !matches!(out.chars().last(), Some('{' | '[')) {
                    depth = depth.saturating_sub(1);
                    newline(&mut out, depth);
                }
                out.push(c);
            }
            ',' => {
                out.push(',');
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => push_json_safe(&mut out, c),
        }
    }
    LaidOutJson {
        text: out,
        omitted_bytes: 0,
    }
}

/// Appends `c`, or its JSON `\uXXXX` escape when [`needs_escape`] says so.
fn push_json_safe(out: &mut String, c: char) {
    if c.is_ascii_graphic() || c == ' ' || !needs_escape(c) {
        out.push(c);
    } else {
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            let _ = write!(out, "\\u{unit:04x}");
        }
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
    fn a_cut_value_is_never_longer_than_its_limit() {
        for text in ["", "a", "évènement", "evt_0123456789", "€€€€"] {
            for limit in 0..20 {
                let cut = cut(text, limit);
                if text.len() <= limit {
                    assert_eq!(cut, text);
                } else {
                    assert!(cut.len() <= limit, "{text:?} at {limit}: {cut:?}");
                    assert!(
                        text.starts_with(cut.trim_end_matches('…')),
                        "{text:?} at {limit}: {cut:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn values_are_escaped_and_capped() {
        assert_eq!(Untrusted::value("evt_1").to_string(), "evt_1");
        assert_eq!(
            Untrusted::value("a\\b\r\t\u{7f}\u{202e}").to_string(),
            r"a\\b\r\t\u{7f}\u{202e}"
        );
        let exact = "x".repeat(MAX_SHOWN_CHARS);
        assert_eq!(Untrusted::value(&exact).to_string(), exact);
        // Short printable ASCII is written whole, but still by the rule.
        assert_eq!(Untrusted::value(r"a\b").to_string(), r"a\\b");
        assert_eq!(Untrusted::value("a\u{7f}").to_string(), r"a\u{7f}");
        let ascii_over = "x".repeat(MAX_SHOWN_CHARS + 1);
        assert_eq!(Untrusted::value(&ascii_over).to_string(), format!("{exact}…"));
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

    #[test]
    fn bodies_are_laid_out_escaped_and_bounded() {
        let body = "{\"id\":\"evt_1\",\r\n\"a\": [1, {}, []],\"n\":18446744073709551617,\"s\":\"x\\\"\u{1b}\u{9b}\u{202e}\u{2066}\u{2028}\u{7}y\"}";
        let shown = lay_out_json(body, "  ");
        assert_eq!(
            shown.text,
            "  {\n    \"id\": \"evt_1\",\n    \"a\": [\n      1,\n      {},\n      []\n    ],\n    \"n\": 18446744073709551617,\n    \"s\": \"x\\\"\\u001b\\u009b\\u202e\\u2066\\u2028\\u0007y\"\n  }"
        );
        assert_eq!(shown.omitted_bytes, 0);
        // Not JSON at all: escaped just the same, every line indented.
        let shown = lay_out_json("x\r\nstate: dead\u{1b}[2J", "| ");
        assert!(shown.text.lines().all(|line| line.starts_with("| ")), "{shown:?}");
        assert!(
            !shown.text.contains('\u{1b}') && !shown.text.contains('\r'),
            "{shown:?}"
        );
        // Structure inside strings is text; keys keep their order.
        let body = r#"{"b":1,"a":{"s":"x, {y}: \"z\"","e":[],"o":{}},"n":[1.50,2]}"#;
        assert_eq!(
            lay_out_json(body, "").text,
            "{\n  \"b\": 1,\n  \"a\": {\n    \"s\": \"x, {y}: \\\"z\\\"\",\n    \"e\": [],\n    \"o\": {}\n  },\n  \"n\": [\n    1.50,\n    2\n  ]\n}"
        );
        // Unbalanced text does not panic.
        let _ = lay_out_json("]]]}}{{[\"", "");
    }

    #[test]
    fn deep_and_long_bodies_stay_small() {
        // A 1 MB body nested 500 000 deep: indented to the cap only, then cut.
        let deep = format!("{}{}", "[".repeat(500_000), "]".repeat(500_000));
        let shown = lay_out_json(&deep, "");
        assert!(shown.text.len() <= MAX_LAID_OUT_BYTES + 8, "{}", shown.text.len());
        assert_eq!(
            shown.omitted_bytes + shown.text.matches(['[', ']']).count(),
            deep.len()
        );
        let widest = shown
            .text
            .lines()
            .map(|line| line.len() - line.trim_start().len())
            .max();
        assert_eq!(widest, Some(2 * MAX_LAID_OUT_DEPTH));
        // A body that fits is shown whole, a longer one up to the cap.
        let long = format!("[\"{}\"]", "\u{2028}".repeat(200_000));
        let shown = lay_out_json(&long, "");
        assert!(shown.text.len() <= MAX_LAID_OUT_BYTES + 12);
        assert!(shown.omitted_bytes > 0 && !shown.text.contains('\u{2028}'));
    }
}
