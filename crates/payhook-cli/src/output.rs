//! Writing to stdout and stderr without panicking.
//!
//! `say!` panics when stdout is closed (`payhook send … | head -1`). Here a
//! stdout that cannot be written ends the process with exit code 2 (quietly for
//! a closed pipe, which is the reader's choice), and stderr notes are best
//! effort: losing a note must not change the outcome. Colour is added only
//! where a terminal (or `CLICOLOR_FORCE`) asks for it and `NO_COLOR` does not
//! forbid it.

use std::fmt;
use std::io::{ErrorKind, IsTerminal, Write};
use std::sync::OnceLock;

/// The colours the tool's own output uses.
#[derive(Debug, Clone, Copy)]
pub enum Colour {
    /// What a healthy receiver does, a valid signature.
    Green,
    /// Unexpected replies, rejections, errors.
    Red,
}

/// Whether output to a stream that is (or is not) a terminal gets colour:
/// never with `NO_COLOR` set to anything non-empty (<https://no-color.org>),
/// always with `CLICOLOR_FORCE` (for pagers that understand it), otherwise only
/// on a terminal that is not `TERM=dumb`. The same rules clap applies to help.
fn colour_wanted(is_terminal: bool) -> bool {
    let set = |name: &str| std::env::var_os(name).is_some_and(|value| !value.is_empty());
    if set("NO_COLOR") {
        return false;
    }
    if std::env::var_os("CLICOLOR_FORCE").is_some_and(|value| !value.is_empty() && value != "0") {
        return true;
    }
    is_terminal && std::env::var_os("TERM").is_none_or(|term| term != "dumb")
}

fn paint(text: &str, colour: Colour, enabled: bool) -> String {
    if !enabled {
        return text.to_owned();
    }
    let code = match colour {
        Colour::Green => "32",
        Colour::Red => "31",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// `text` in `colour` if stdout gets colour (decided once per process).
pub fn paint_stdout(text: &str, colour: Colour) -> String {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    paint(
        text,
        colour,
        *ENABLED.get_or_init(|| colour_wanted(std::io::stdout().is_terminal())),
    )
}

/// Whether stderr gets colour (decided once per process): the tool's own
/// notes and the log lines of `payhook emulate` alike, so a log redirected to
/// a file holds no escape codes.
pub fn stderr_gets_colour() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| colour_wanted(std::io::stderr().is_terminal()))
}

/// `text` in `colour` if stderr gets colour.
pub fn paint_stderr(text: &str, colour: Colour) -> String {
    paint(text, colour, stderr_gets_colour())
}

/// Writes one line to stdout, or exits with code 2 if stdout is gone.
pub fn stdout_line(args: fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let written = out
        .write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    if let Err(err) = written {
        if err.kind() != ErrorKind::BrokenPipe {
            stderr_line(format_args!("error: cannot write to stdout: {err}"));
        }
        std::process::exit(2);
    }
}

/// Writes one line to stderr, ignoring failure.
pub fn stderr_line(args: fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
}

/// `say!` that cannot panic: see [`stdout_line`].
macro_rules! say {
    ($($arg:tt)*) => { $crate::output::stdout_line(format_args!($($arg)*)) };
}

/// `note!` that cannot panic: see [`stderr_line`].
macro_rules! note {
    ($($arg:tt)*) => { $crate::output::stderr_line(format_args!($($arg)*)) };
}

pub(crate) use {note, say};

/// A JSON body pretty-printed for a terminal, with nothing in it that a sender
/// could use to forge a line or drive the terminal.
///
/// The text is re-laid out token by token rather than printed as stored: the
/// whitespace between tokens (where a sender can put CR/LF) is dropped and
/// replaced by this layout, and inside strings every character the core's
/// [`Untrusted`](payhook_core::untrusted::Untrusted) rule escapes (controls,
/// C1 controls, bidi overrides, line separators) is written as a JSON `\uXXXX`
/// escape, so the result is still JSON with the same meaning. Numbers keep
/// their exact text (wei amounts beyond 2^64 included). Text that is not JSON
/// is laid out the same way and escaped alike. Every line starts with
/// `indent`, so no line of a body can pose as a line of the tool's own.
#[cfg(any(feature = "inbox", test))]
pub fn pretty_json(text: &str, indent: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    // A line is open once something was written on it after the indent.
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(indent);
        for _ in 0..depth {
            out.push_str("  ");
        }
    };
    out.push_str(indent);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            match c {
                _ if escaped => {
                    escaped = false;
                    push_safe(&mut out, c);
                }
                '\\' => {
                    escaped = true;
                    out.push('\\');
                }
                '"' => {
                    in_string = false;
                    out.push('"');
                }
                c => push_safe(&mut out, c),
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
                while chars.peek().is_some_and(|next| next.is_whitespace()) {
                    chars.next();
                }
                if matches!(chars.peek(), Some('}' | ']')) {
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
            c => push_safe(&mut out, c),
        }
    }
    out
}

/// Appends `c`, or its JSON escape when the core's rule for request-derived
/// text would escape it.
#[cfg(any(feature = "inbox", test))]
fn push_safe(out: &mut String, c: char) {
    let mut buf = [0u8; 4];
    let as_text = c.encode_utf8(&mut buf);
    let safe = (c.is_ascii_graphic() || c == ' ')
        || payhook_core::untrusted::Untrusted::message(as_text).to_string() == *as_text;
    if safe {
        out.push(c);
    } else {
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            out.push_str(&format!("\\u{unit:04x}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_json_lays_out_and_escapes() {
        let body = "{\"id\":\"evt_1\",\r\n\"a\": [1, {}, []],\"n\":18446744073709551617,\"s\":\"x\\\"\u{1b}\u{9b}\u{202e}\u{2028}\u{7}y\"}";
        let shown = pretty_json(body, "  ");
        assert_eq!(
            shown,
            "  {\n    \"id\": \"evt_1\",\n    \"a\": [\n      1,\n      {},\n      []\n    ],\n    \"n\": 18446744073709551617,\n    \"s\": \"x\\\"\\u001b\\u009b\\u202e\\u2028\\u0007y\"\n  }"
        );
        // Still JSON, with the same strings.
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back["s"], "x\"\u{1b}\u{9b}\u{202e}\u{2028}\u{7}y");
        assert_eq!(back["a"], serde_json::json!([1, {}, []]));
        // Not JSON at all: escaped just the same, every line indented.
        let shown = pretty_json("x\r\nstate: dead\u{1b}[2J", "| ");
        assert!(shown.lines().all(|line| line.starts_with("| ")), "{shown}");
        assert!(!shown.contains('\u{1b}') && !shown.contains('\r'), "{shown}");
    }
}
