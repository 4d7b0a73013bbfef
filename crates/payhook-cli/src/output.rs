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

/// Asks `question` on the terminal (`[y/N]`); `false` without one: a script
/// or a pipe cannot answer, so nothing is confirmed.
///
/// # Errors
/// The terminal could not be written or read.
#[cfg(feature = "inbox")]
pub fn confirmed(question: &str) -> std::io::Result<bool> {
    if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
        return Ok(false);
    }
    print!("{question} [y/N] ");
    std::io::stdout().flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
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
