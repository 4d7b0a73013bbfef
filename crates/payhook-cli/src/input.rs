//! Reading bodies from stdin and files, byte for byte.
//!
//! Nothing is trimmed: the signature covers the exact bytes, so a trailing
//! newline from `echo` is part of the body. [`newline_hint`] says so when it
//! may explain a mismatch.

use std::io::{IsTerminal, Read};
use std::path::Path;

use bytes::Bytes;

use crate::failure::Failure;
use crate::output::note;

/// Reads all of stdin.
pub fn stdin() -> Result<Bytes, Failure> {
    let mut stdin = std::io::stdin().lock();
    if stdin.is_terminal() {
        note!("reading the body from stdin; end it with Ctrl-D");
    }
    let mut body = Vec::new();
    stdin
        .read_to_end(&mut body)
        .map_err(|err| Failure::usage(format_args!("cannot read the body from stdin: {err}")))?;
    if body.is_empty() {
        // Often a mistake (a pipe from a command that failed), and an empty body is
        // never a valid event; still signed or checked as asked.
        note!("warning: stdin was empty, so the body is 0 bytes");
    }
    Ok(body.into())
}

/// Reads a whole file, or stdin for `-`.
pub fn file(path: &Path) -> Result<Bytes, Failure> {
    if path == Path::new("-") {
        return stdin();
    }
    std::fs::read(path)
        .map(Bytes::from)
        .map_err(|err| Failure::usage(format_args!("cannot read {}: {err}", path.display())))
}

/// A note for stderr when `body` ends with a line break, which is signed like
/// any other byte but is easy to add by accident (`echo`, editors).
pub fn newline_hint(body: &[u8]) -> Option<&'static str> {
    body.ends_with(b"\n").then_some(
        "note: the body ends with a line break, which is part of the signed bytes; \
         if the sender's body has none, use `printf '%s'` or `echo -n` instead of `echo`",
    )
}
