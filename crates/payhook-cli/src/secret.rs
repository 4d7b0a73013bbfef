//! Where a secret comes from: `--secret VALUE`, `--secret -` (stdin),
//! `--secret-file PATH`, or the `PAYHOOK_SECRET` environment variable.
//!
//! A value on the command line is visible to every user of the machine in `ps`
//! and stays in shell history, so the file, stdin and the environment are the
//! ways to prefer. A secret read from a file or stdin loses one final line
//! break (editors and `echo` add it); anything else that makes it more than
//! one line is refused, since it cannot be a signing secret. The secret itself
//! never appears in a message.

use std::io::Read;
use std::path::{Path, PathBuf};

use clap::builder::NonEmptyStringValueParser;
use clap::Args;

use crate::failure::Failure;

/// Where the one secret of `sign` and `send` comes from.
#[derive(Debug, Args)]
pub struct SecretArgs {
    /// The endpoint signing secret (whsec_…), whole string including its prefix;
    /// `-` reads it from stdin (send only). [env: PAYHOOK_SECRET]
    #[arg(long, value_name = "SECRET", value_parser = NonEmptyStringValueParser::new())]
    pub secret: Option<String>,

    /// Read the secret from this file (one line; a final line break is ignored).
    #[arg(long, value_name = "PATH", conflicts_with = "secret")]
    pub secret_file: Option<PathBuf>,
}

/// The environment variable a secret is taken from when no flag names one.
pub const ENV_VAR: &str = "PAYHOOK_SECRET";

/// Whether stdin is free to carry the secret or carries the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdin {
    /// `--secret -` may read it.
    Free,
    /// The body is read from stdin, so `--secret -` is a usage error.
    Body,
}

/// The one secret of `sign` or `send`.
pub fn one(args: &SecretArgs, stdin: Stdin) -> Result<String, Failure> {
    match (&args.secret, &args.secret_file) {
        (Some(value), _) if value == "-" => from_stdin(stdin),
        (Some(value), _) => Ok(value.clone()),
        (None, Some(path)) => from_file(path),
        (None, None) => from_env(),
    }
}

/// The secrets of `verify`: every `--secret` and `--secret-file`, or else
/// `PAYHOOK_SECRET`. Stdin always carries the body there.
pub fn several(values: &[String], files: &[impl AsRef<Path>]) -> Result<Vec<String>, Failure> {
    let mut secrets = Vec::with_capacity(values.len() + files.len());
    for value in values {
        if value == "-" {
            secrets.push(from_stdin(Stdin::Body)?);
        } else {
            secrets.push(value.clone());
        }
    }
    for path in files {
        secrets.push(from_file(path.as_ref())?);
    }
    if secrets.is_empty() {
        secrets.push(from_env()?);
    }
    Ok(secrets)
}

fn from_env() -> Result<String, Failure> {
    match std::env::var(ENV_VAR) {
        Ok(value) if !value.is_empty() => Ok(value),
        Ok(_) => Err(Failure::usage(format_args!(
            "{ENV_VAR} is set but empty; give the endpoint's whsec_… secret"
        ))),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(Failure::usage(format_args!("{ENV_VAR} is not valid UTF-8")))
        }
        Err(std::env::VarError::NotPresent) => Err(Failure::usage(format_args!(
            "no secret given: set {ENV_VAR}, or pass --secret-file PATH or --secret - (stdin)"
        ))),
    }
}

fn from_file(path: &Path) -> Result<String, Failure> {
    line_of_file(path, "the secret file")
}

/// The one line of a file holding a secret value (a signing secret, an API
/// key), `what` naming it in messages; the value itself never appears in one.
pub fn line_of_file(path: &Path, what: &str) -> Result<String, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| Failure::usage(format_args!("cannot read {what} {}: {err}", path.display())))?;
    one_line(&text, &format!("{what} {}", path.display()))
}

fn from_stdin(stdin: Stdin) -> Result<String, Failure> {
    if stdin == Stdin::Body {
        return Err(Failure::usage(
            "--secret - reads the secret from stdin, but stdin carries the body here; \
             use --secret-file PATH or PAYHOOK_SECRET",
        ));
    }
    let mut text = String::new();
    std::io::stdin()
        .lock()
        .read_to_string(&mut text)
        .map_err(|err| Failure::usage(format_args!("cannot read the secret from stdin: {err}")))?;
    one_line(&text, "the secret on stdin")
}

/// The text without one final line break; refused if empty or several lines.
fn one_line(text: &str, source: &str) -> Result<String, Failure> {
    let line = text
        .strip_suffix('\n')
        .map(|rest| rest.strip_suffix('\r').unwrap_or(rest))
        .unwrap_or(text);
    if line.is_empty() {
        return Err(Failure::usage(format_args!("{source} is empty")));
    }
    if line.contains(['\n', '\r']) {
        return Err(Failure::usage(format_args!(
            "{source} has more than one line; put one secret in it (repeat the option for a rotation)"
        )));
    }
    Ok(line.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(failure: Failure) -> String {
        match failure {
            Failure::Usage(message) => message,
            other => panic!("not a usage error: {other:?}"),
        }
    }

    #[test]
    fn one_final_line_break_is_dropped() {
        assert_eq!(one_line("whsec_a\n", "x").ok().as_deref(), Some("whsec_a"));
        assert_eq!(one_line("whsec_a\r\n", "x").ok().as_deref(), Some("whsec_a"));
        assert_eq!(one_line("whsec_a", "x").ok().as_deref(), Some("whsec_a"));
    }

    #[test]
    fn empty_or_several_lines_are_refused_without_echoing_the_text() {
        assert!(message(one_line("\n", "the file f").unwrap_err()).contains("the file f is empty"));
        let why = message(one_line("whsec_a\nwhsec_b\n", "the file f").unwrap_err());
        assert!(why.contains("more than one line"), "{why}");
        assert!(!why.contains("whsec_"), "{why}");
    }

    #[test]
    fn stdin_is_not_read_when_it_carries_the_body() {
        let why = message(from_stdin(Stdin::Body).unwrap_err());
        assert!(why.contains("stdin carries the body"), "{why}");
    }
}
