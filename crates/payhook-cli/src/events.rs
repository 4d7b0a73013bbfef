//! `payhook events resend EVT`: the emulator delivers an event again (the
//! same body, signed afresh, recorded as new attempts) through
//! `POST /v1/events/:id/resend`, and the new deliveries are followed until
//! acknowledged or given up.

use std::time::Duration;

use clap::builder::NonEmptyStringValueParser;
use clap::{Args, Subcommand};
use payhook_core::untrusted::Untrusted;

use crate::emulator_api::{follow_deliveries, path_id, Api, ApiArgs};
use crate::failure::Failure;
use crate::output::say;
use crate::runtime::{self, Threads};

/// `payhook events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: EventsCommand,
}

/// The `payhook events` subcommands.
#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// Have the emulator deliver an event again: the same body, signed afresh.
    ///
    /// Prints every attempt of the resend; exits 0 once every endpoint it went to
    /// acknowledged it, 1 if one did not (the emulator gave up, or --wait ran out),
    /// 2 if the emulator refused the request (an unknown event or endpoint), 3 if it
    /// cannot be reached.
    #[command(after_help = crate::emulator_api::EMULATOR_CLIENT_HELP)]
    Resend(ResendArgs),
}

/// `payhook events resend`.
#[derive(Debug, Args)]
pub struct ResendArgs {
    /// The event id (evt_…).
    #[arg(value_name = "EVT", value_parser = NonEmptyStringValueParser::new())]
    pub event: String,

    /// Deliver to this endpoint only [default: every endpoint enabled for the event's type].
    #[arg(long, value_name = "we_…", value_parser = NonEmptyStringValueParser::new())]
    pub webhook_endpoint: Option<String>,

    /// The emulator and its key.
    #[command(flatten)]
    pub api: ApiArgs,
}

/// Runs `payhook events`.
pub fn run(args: &EventsArgs) -> Result<(), Failure> {
    match &args.command {
        EventsCommand::Resend(args) => runtime::block_on(Threads::One, resend(args)),
    }
}

async fn resend(args: &ResendArgs) -> Result<(), Failure> {
    let api = Api::new(&args.api)?;
    let event = path_id(&args.event, "an event id (evt_…)")?;
    let resent = api
        .client()
        .resend_event(event, args.webhook_endpoint.as_deref())
        .await
        .map_err(|err| api.failure(&format!("the resend of {event}"), err))?;
    let number = resent.resend;
    let endpoints = resent.webhook_endpoints;
    say!(
        "resend {number} of event {} to {} endpoint{}",
        Untrusted::value(&args.event),
        endpoints.len(),
        if endpoints.len() == 1 { "" } else { "s" }
    );
    if endpoints.is_empty() {
        say!("no webhook endpoint is enabled for the event's type: nothing was delivered");
        return Err(Failure::Rejected);
    }
    let wait = Duration::from_secs(args.api.wait);
    if follow_deliveries(&api, &args.event, number, &endpoints, wait).await? {
        Ok(())
    } else {
        Err(Failure::Rejected)
    }
}
