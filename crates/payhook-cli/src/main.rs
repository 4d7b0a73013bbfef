//! `payhook`: test a webhook receiver without the payment service.
//!
//! * `payhook sign` prints the signature header value for a body on stdin;
//! * `payhook verify` checks a header against a body exactly as a receiver does;
//! * `payhook send` builds, signs and POSTs test events and checks every reply;
//! * `payhook inbox` lists, shows, retries, replays and purges durable-inbox events.
//!
//! All protocol work (signing, verifying, parsing, the reply texts) is done by
//! `payhook-core`; this crate only reads input, talks HTTP and reports.

mod cli;
mod failure;
#[cfg(feature = "inbox")]
mod inbox;
mod input;
mod output;
mod send;
mod sign;
mod verify;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sign(args) => sign::run(&args),
        Command::Verify(args) => verify::run(&args),
        Command::Send(args) => send::run(&args),
        #[cfg(feature = "inbox")]
        Command::Inbox(args) => inbox::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(),
    }
}
