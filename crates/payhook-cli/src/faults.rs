//! `payhook faults show` and `payhook faults set …`: the faults a running
//! emulator injects, read and changed through `GET` and
//! `POST /v1/test_helpers/faults`, without a restart (the emulator keeps its
//! intents, events, endpoints and attempts).

use clap::{Args, Subcommand};
use payhook_core::untrusted::Untrusted;
use serde_json::Value;

use crate::emulator_api::{Api, ApiArgs};
use crate::failure::Failure;
use crate::output::say;
use crate::runtime::{self, Threads};

/// `payhook faults`.
#[derive(Debug, Args)]
pub struct FaultsArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: FaultsCommand,
}

/// The `payhook faults` subcommands.
#[derive(Debug, Subcommand)]
pub enum FaultsCommand {
    /// Print the faults a running emulator injects now.
    #[command(after_help = crate::emulator_api::EMULATOR_CLIENT_HELP)]
    Show(ShowArgs),
    /// Change the faults of a running emulator: those given change, the others
    /// stay; every attempt from now on follows them (the retries of earlier events
    /// too). Prints the faults then in force.
    #[command(after_help = crate::emulator_api::EMULATOR_CLIENT_HELP)]
    Set(SetArgs),
}

/// `payhook faults show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The emulator and its key.
    #[command(flatten)]
    pub api: ApiArgs,
}

/// `payhook faults set`.
#[derive(Debug, Args)]
pub struct SetArgs {
    /// The share of events (0 to 1) whose every attempt fails without being sent,
    /// as when the endpoint is down longer than the retries last.
    #[arg(long, value_name = "P", value_parser = probability)]
    pub undeliverable: Option<f64>,

    /// The share of deliveries (0 to 1) sent twice, half of the copies at once.
    #[arg(long, value_name = "P", value_parser = probability)]
    pub duplicates: Option<f64>,

    /// Deliver out of order: true or false.
    #[arg(long, value_name = "BOOL")]
    pub reorder: Option<bool>,

    /// Drop the reply of every first attempt: true or false.
    #[arg(long, value_name = "BOOL")]
    pub drop_first: Option<bool>,

    /// Wait this long before every first attempt, in milliseconds (at most an hour).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    pub delay_ms: Option<u64>,

    /// Sign with a clock this many seconds off (negative: behind).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub skew: Option<i64>,

    /// The emulator and its key.
    #[command(flatten)]
    pub api: ApiArgs,
}

fn probability(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err("must be a probability from 0 to 1".to_owned()),
    }
}

/// Runs `payhook faults`.
pub fn run(args: &FaultsArgs) -> Result<(), Failure> {
    match &args.command {
        FaultsCommand::Show(args) => runtime::block_on(Threads::One, show(args)),
        FaultsCommand::Set(args) => runtime::block_on(Threads::One, set(args)),
    }
}

async fn show(args: &ShowArgs) -> Result<(), Failure> {
    let api = Api::new(&args.api)?;
    let faults = api.get("/v1/test_helpers/faults").await?;
    print(&faults);
    Ok(())
}

async fn set(args: &SetArgs) -> Result<(), Failure> {
    let mut fields: Vec<(&str, String)> = Vec::new();
    if let Some(p) = args.undeliverable {
        fields.push(("undeliverable", p.to_string()));
    }
    if let Some(p) = args.duplicates {
        fields.push(("duplicates", p.to_string()));
    }
    if let Some(on) = args.reorder {
        fields.push(("reorder", on.to_string()));
    }
    if let Some(on) = args.drop_first {
        fields.push(("drop_first", on.to_string()));
    }
    if let Some(ms) = args.delay_ms {
        fields.push(("delay_ms", ms.to_string()));
    }
    if let Some(secs) = args.skew {
        fields.push(("skew", secs.to_string()));
    }
    if fields.is_empty() {
        return Err(Failure::usage(
            "name at least one fault to change (--undeliverable, --duplicates, --reorder, \
             --drop-first, --delay-ms, --skew); `payhook faults show` prints them",
        ));
    }
    let api = Api::new(&args.api)?;
    let form: Vec<(&str, &str)> = fields
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    let faults = api
        .client()
        .post_form("/v1/test_helpers/faults", &form)
        .await
        .map_err(|err| api.failure("the change of faults", err))?;
    print(&faults);
    Ok(())
}

/// One line per fault, from the emulator's reply (escaped: it is untrusted).
fn print(faults: &Value) {
    let number = |name: &str| Untrusted::value(&faults[name].to_string()).to_string();
    let on = |name: &str| {
        if faults[name].as_bool() == Some(true) {
            "on"
        } else {
            "off"
        }
    };
    say!("faults in force (seed {}):", number("seed"));
    say!("  undeliverable {}", number("undeliverable"));
    say!("  duplicates {}", number("duplicates"));
    say!(
        "  reorder {} (window {} ms)",
        on("reorder"),
        number("reorder_window_ms")
    );
    say!("  drop-first {}", on("drop_first"));
    say!("  delay {} ms", number("delay_ms"));
    say!("  skew {} s", number("skew"));
}
