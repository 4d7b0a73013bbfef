//! Writing to stdout and stderr without panicking.
//!
//! `say!` panics when stdout is closed (`payhook send … | head -1`). Here a
//! stdout that cannot be written ends the process with exit code 2 (quietly for
//! a closed pipe, which is the reader's choice), and stderr notes are best
//! effort: losing a note must not change the outcome.

use std::fmt;
use std::io::{ErrorKind, Write};

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
