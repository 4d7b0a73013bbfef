//! `payhook`: test a webhook receiver without the payment service.
//!
//! * `payhook sign` prints the signature header value for a body on stdin;
//! * `payhook verify` checks a header against a body exactly as a receiver does;
//! * `payhook send` builds, signs and POSTs test events (http or https) and
//!   checks every reply;
//! * `payhook emulate` (feature `emulate`, on by default) runs the payment
//!   service in test mode: its API, and signed deliveries with retries and faults.
//! * `payhook trigger` and `payhook events resend` (feature `emulate`) produce
//!   and resend events through a running emulator, and follow their deliveries;
//!   `payhook endpoints roll-secret` rolls an endpoint's signing secret into a
//!   secret file, and `payhook faults show|set` reads and changes the faults
//!   of a running emulator;
//! * `payhook inbox` lists, shows, retries, replays and purges durable-inbox
//!   events, pauses and resumes event types, and acts on events in bulk;
//! * `payhook reconcile` lists the payment service's events and stores the
//!   ones an inbox lacks (or sends the undelivered ones to a receiver).
//!
//! All protocol work (signing, verifying, parsing, the reply texts) is done by
//! `payhook-core`; this crate only reads input, talks HTTP and reports.
//!
//! # Source map
//!
//! `main.rs` dispatches; `cli.rs` holds the clap definitions; one file per
//! command family (`sign.rs`, `verify.rs`, `send.rs`, `trigger.rs`,
//! `events.rs`, `endpoints.rs`, `faults.rs`, `emulate.rs`, `inbox.rs` with `inbox_bulk.rs`, and
//! `reconcile/`), with `client.rs` (the HTTP client that POSTs signed
//! deliveries, for `send` and `reconcile --forward-to`), `scheme.rs` (the
//! `--scheme service|standard` value `sign`, `verify` and `emulate` share),
//! `secret.rs` (reading secrets from flags, files or the environment, never
//! echoing them), `urls.rs` (the URLs options take), `input.rs` (bodies from
//! stdin and files, byte for byte), `output.rs`, `failure.rs` (exit codes),
//! `runtime.rs` and `emulator_api.rs` (the emulator's HTTP API as a client).
//! The CLI holds no protocol rule: it signs with `payhook::sender`, verifies
//! with the core's receiver, lists event types from the catalogue and reads
//! the inbox through `Admin`.

mod cli;
mod client;
#[cfg(feature = "emulate")]
mod emulate;
#[cfg(feature = "emulate")]
mod emulator_api;
#[cfg(feature = "emulate")]
mod endpoints;
#[cfg(feature = "emulate")]
mod events;
mod failure;
#[cfg(feature = "emulate")]
mod faults;
#[cfg(feature = "inbox")]
mod inbox;
#[cfg(feature = "inbox")]
mod inbox_bulk;
mod input;
mod output;
#[cfg(feature = "inbox")]
mod reconcile;
mod runtime;
mod scheme;
mod secret;
mod send;
mod sign;
#[cfg(feature = "emulate")]
mod trigger;
mod urls;
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
        #[cfg(feature = "emulate")]
        Command::Emulate(args) => emulate::run(&args),
        #[cfg(feature = "emulate")]
        Command::Trigger(args) => trigger::run(&args),
        #[cfg(feature = "emulate")]
        Command::Events(args) => events::run(&args),
        #[cfg(feature = "emulate")]
        Command::Endpoints(args) => endpoints::run(&args),
        #[cfg(feature = "emulate")]
        Command::Faults(args) => faults::run(&args),
        #[cfg(feature = "inbox")]
        Command::Inbox(args) => inbox::run(&args),
        #[cfg(feature = "inbox")]
        Command::Reconcile(args) => reconcile::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(),
    }
}
