//! How a command fails, and the exit code each kind of failure gets.

use std::fmt;
use std::process::ExitCode;

use crate::output::{note, paint_stderr, Colour};

/// Why a command did not succeed.
#[derive(Debug)]
pub enum Failure {
    /// The check failed: a signature did not verify or a reply was not what a
    /// healthy receiver sends. The details are already on stdout. Exit code 1.
    Rejected,
    /// The command's work failed for a reason it prints on stderr (the
    /// payment service answered an error). Exit code 1.
    #[cfg(feature = "inbox")]
    Failed(String),
    /// The command could not do its work: bad arguments or unreadable input.
    /// Exit code 2, as for the usage errors clap reports.
    Usage(String),
    /// The endpoint could not be reached at all (refused, no such host, TLS
    /// failure, no connection in time): the receiver was never asked. Exit code 3,
    /// so scripts can tell "receiver down" from "receiver wrong" (1).
    Unreachable(String),
}

impl Failure {
    /// A usage or I/O failure with this message.
    pub fn usage(message: impl fmt::Display) -> Self {
        Self::Usage(message.to_string())
    }

    /// Prints what the user needs to know and gives the exit code.
    pub fn report(self) -> ExitCode {
        match self {
            Self::Rejected => ExitCode::from(1),
            #[cfg(feature = "inbox")]
            Self::Failed(message) => {
                note!("{}: {message}", paint_stderr("error", Colour::Red));
                ExitCode::from(1)
            }
            Self::Usage(message) => {
                note!("{}: {message}", paint_stderr("error", Colour::Red));
                ExitCode::from(2)
            }
            Self::Unreachable(message) => {
                note!("{}: {message}", paint_stderr("error", Colour::Red));
                ExitCode::from(3)
            }
        }
    }
}
