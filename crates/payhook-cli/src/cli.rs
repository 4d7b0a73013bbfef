//! The command line: subcommands, their arguments and how each value is checked.
//!
//! Everything a user can type wrong is rejected here, by clap, with exit code 2
//! and a message naming the argument: URLs, header names, amounts, counts.
//! Secrets are resolved afterwards (see `secret.rs`), because they may come from
//! the environment, a file or stdin.

use std::path::PathBuf;

use clap::builder::NonEmptyStringValueParser;
use clap::{Args, Parser, Subcommand};
use payhook_core::signature::DEFAULT_HEADER;
use url::Url;

use crate::scheme::Scheme;
use crate::secret::SecretArgs;

/// The exit codes and the secret's sources, shown at the end of the tool's
/// `--help` and of the commands that sign, verify or send.
const EXIT_CODES: &str = "\
Exit codes:
  0  success: signed, verified, or every reply was what a healthy receiver sends
  1  verification failed, or a reply was not what a healthy receiver sends
  2  usage error or unreadable input
  3  the endpoint could not be reached (refused, unknown host, TLS, no connection in time)

The secret comes from --secret-file PATH, --secret - (stdin, for send), or the
PAYHOOK_SECRET environment variable; --secret VALUE works too, but shows in `ps`.
Output is coloured on a terminal unless NO_COLOR is set.";

/// Test a webhook receiver without the payment service: sign bodies, check
/// signature headers, and send signed test events to an endpoint.
#[derive(Debug, Parser)]
#[command(name = "payhook", version, after_help = EXIT_CODES, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
// Parsed once per process and matched straight away: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Sign the body read on stdin and print the signature header value (t=…,v1=…).
    ///
    /// With --scheme standard, print the three Standard Webhooks headers instead:
    /// `webhook-id: ID`, `webhook-timestamp: T` and `webhook-signature: v1,…`
    /// (or `v1a,…` with a whsk_ signing key).
    #[command(after_help = EXIT_CODES)]
    Sign(SignArgs),
    /// Check a signature header against the body read on stdin, as a receiver would.
    ///
    /// The signature is checked first, then the body is parsed as an event. On
    /// success the event id and type are printed; on failure, exactly the body a
    /// payhook receiver would reply with (`Webhook Error: …`).
    ///
    /// With --scheme standard, the three Standard Webhooks headers are given with
    /// --webhook-id, --webhook-timestamp and --webhook-signature, and the keys
    /// with --secret whsec_… and --public-key whpk_… (each may repeat); the event
    /// id is the webhook-id.
    #[command(after_help = EXIT_CODES)]
    Verify(VerifyArgs),
    /// Build (or read) an event, sign it and POST it to a receiver; check each reply.
    ///
    /// Each reply's status and body is printed. A valid delivery must get
    /// `200 {"received":true}`; a repeat of the same event id must get 200 too
    /// (or 409 while a concurrent delivery of it is still being handled); a
    /// `--tamper`ed or `--stale` delivery must get 400 `Webhook Error: …`.
    /// `--distinct` gives every delivery its own event id, so each must get 200.
    #[command(after_help = EXIT_CODES)]
    Send(SendArgs),
    /// Run the payment service in test mode: its API, and signed deliveries with retries and faults.
    #[cfg(feature = "emulate")]
    Emulate(crate::emulate::EmulateArgs),
    /// Produce one event through a running emulator: create a payment intent, drive it
    /// through the test helper, and follow its deliveries.
    ///
    /// Prints the intent and event ids and every delivery attempt; exits 0 once every
    /// endpoint enabled for the type acknowledged it, 1 if one did not (the emulator
    /// gave up, or --wait ran out), 3 if the emulator cannot be reached.
    #[cfg(feature = "emulate")]
    #[command(after_help = crate::emulator_api::EMULATOR_CLIENT_HELP)]
    Trigger(crate::trigger::TriggerArgs),
    /// Act on a running emulator's events: `resend EVT` delivers one again.
    #[cfg(feature = "emulate")]
    #[command(after_help = crate::emulator_api::EMULATOR_CLIENT_HELP)]
    Events(crate::events::EventsArgs),
    /// Act on a running emulator's webhook endpoints: `roll-secret WE` rolls one's
    /// signing secret with an overlap, appending the new one to a secret file.
    #[cfg(feature = "emulate")]
    #[command(after_help = crate::emulator_api::EMULATOR_CLIENT_HELP)]
    Endpoints(crate::endpoints::EndpointsArgs),
    /// Read or change a running emulator's faults (`show`, `set --undeliverable P …`),
    /// keeping everything it holds.
    #[cfg(feature = "emulate")]
    #[command(after_help = crate::emulator_api::EMULATOR_CLIENT_HELP)]
    Faults(crate::faults::FaultsArgs),
    /// Look into a durable inbox: list, show, retry, replay and purge events.
    #[cfg(feature = "inbox")]
    Inbox(crate::inbox::InboxArgs),
    /// Find the events the payment service created that no delivery brought, and
    /// store them in an inbox (or send them to a receiver).
    ///
    /// Lists the events the service created in the last --since (every page of
    /// GET /v1/events, with the secret API key), compares them with the inbox at
    /// --database-url and prints how many it does not have (a line with
    /// `N event(s)`) and their types, one line per type. Nothing changes unless
    /// --yes is given: then they are stored in the inbox marked `reconciled`, and
    /// handled when a worker of the app runs, like any delivery.
    ///
    /// With --forward-to URL --secret-file FILE instead of --database-url, the
    /// events no endpoint acknowledged (delivery_success=false) are counted the
    /// same way; with --yes each is POSTed to that receiver (inline or inbox),
    /// its listed body signed as the service signs (x-service-signature), and
    /// each reply's status is printed, then a summary. The receiver deduplicates
    /// as usual: an event it already has runs once.
    #[cfg(feature = "inbox")]
    #[command(after_help = crate::reconcile::AFTER_HELP)]
    Reconcile(crate::reconcile::ReconcileArgs),
}

/// `payhook sign`.
#[derive(Debug, Args)]
pub struct SignArgs {
    /// The signature format: `service` (t=…,v1=…) or `standard` (Standard Webhooks).
    #[arg(long, value_enum, default_value_t = Scheme::Service)]
    pub scheme: Scheme,

    /// The secret: --secret, --secret-file or PAYHOOK_SECRET.
    #[command(flatten)]
    pub secret: SecretArgs,

    /// Unix time of signing, in seconds [default: now].
    #[arg(long, value_name = "UNIX_SECONDS")]
    pub timestamp: Option<u64>,

    /// The message id to sign (--scheme standard, where it is required).
    #[arg(
        long,
        value_name = "ID",
        value_parser = NonEmptyStringValueParser::new(),
        required_if_eq("scheme", "standard")
    )]
    pub webhook_id: Option<String>,

    /// A whsk_… Ed25519 signing key, to sign `v1a` instead of `v1` with a
    /// whsec_ secret (--scheme standard).
    #[arg(
        long,
        value_name = "KEY",
        value_parser = NonEmptyStringValueParser::new(),
        conflicts_with_all = ["secret", "secret_file"]
    )]
    pub signing_key: Option<String>,
}

/// `payhook verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The signature format: `service` (--header t=…,v1=…) or `standard`
    /// (Standard Webhooks: --webhook-id, --webhook-timestamp, --webhook-signature).
    #[arg(long, value_enum, default_value_t = Scheme::Service)]
    pub scheme: Scheme,

    /// An endpoint signing secret. Repeat for a rotation: any one may match.
    /// [env: PAYHOOK_SECRET, used when no --secret or --secret-file is given]
    #[arg(long, value_name = "SECRET", value_parser = NonEmptyStringValueParser::new())]
    pub secret: Vec<String>,

    /// Read a secret from this file (one line). Repeat for a rotation.
    #[arg(long, value_name = "PATH")]
    pub secret_file: Vec<PathBuf>,

    /// The signature header value to check, for example `t=1732264800,v1=47e6…`.
    // Required unless the Standard Webhooks headers are given (clap's
    // `required_if_eq` would not see `--scheme`'s default value).
    #[arg(
        long,
        value_name = "VALUE",
        required_unless_present_any = ["webhook_id", "webhook_timestamp", "webhook_signature"]
    )]
    pub header: Option<String>,

    /// A whpk_… Ed25519 public key, for `v1a` signatures (--scheme standard).
    /// Repeat for a rotation: any one may match.
    #[arg(long, value_name = "KEY", value_parser = NonEmptyStringValueParser::new())]
    pub public_key: Vec<String>,

    /// The `webhook-id` header value (--scheme standard).
    #[arg(
        long,
        value_name = "ID",
        required_if_eq("scheme", "standard"),
        conflicts_with = "header"
    )]
    pub webhook_id: Option<String>,

    /// The `webhook-timestamp` header value (--scheme standard).
    #[arg(
        long,
        value_name = "UNIX_SECONDS",
        required_if_eq("scheme", "standard"),
        conflicts_with = "header"
    )]
    pub webhook_timestamp: Option<String>,

    /// The `webhook-signature` header value, for example `v1,K5oZ…= v1a,hnO3…`
    /// (--scheme standard).
    #[arg(
        long,
        value_name = "VALUE",
        required_if_eq("scheme", "standard"),
        conflicts_with = "header"
    )]
    pub webhook_signature: Option<String>,

    /// How far the header's timestamp may be from now, in seconds, either way.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 300,
        conflicts_with = "no_timestamp_check"
    )]
    pub tolerance: u64,

    /// Skip the timestamp check (for replaying recorded deliveries).
    #[arg(long)]
    pub no_timestamp_check: bool,

    /// Stop after the signature check: do not require the body to be a valid event.
    #[arg(long)]
    pub signature_only: bool,
}

/// `payhook send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The receiver's URL, for example http://127.0.0.1:3000/webhooks or
    /// https://staging.example.com/webhooks.
    #[arg(long, value_name = "URL", value_parser = crate::urls::parse_url)]
    pub to: Url,

    /// The secret the receiver is configured with: --secret, --secret-file or PAYHOOK_SECRET.
    #[command(flatten)]
    pub secret: SecretArgs,

    /// The event type to build.
    #[arg(
        long = "type",
        value_name = "TYPE",
        default_value = "payment_intent.succeeded",
        value_parser = NonEmptyStringValueParser::new()
    )]
    pub event_type: String,

    /// Send this file's contents as the body instead of a built event (`-` reads stdin).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["event_type", "amount", "currency", "id"])]
    pub data: Option<PathBuf>,

    /// The payment amount in the currency's smallest unit (satoshi, wei, …); up to 2^128−1.
    #[arg(long, value_name = "N", value_parser = parse_amount, allow_negative_numbers = true)]
    pub amount: Option<u128>,

    /// The currency code, for example btc or eth.
    #[arg(long, value_name = "CODE", value_parser = NonEmptyStringValueParser::new())]
    pub currency: Option<String>,

    /// The event id [default: a fresh evt_test_…].
    #[arg(long, value_name = "EVT", value_parser = NonEmptyStringValueParser::new())]
    pub id: Option<String>,

    /// Deliver the same event (same id, same body) this many times in all
    /// [default: the --concurrency value]. With --distinct, this many distinct events.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), allow_negative_numbers = true)]
    pub repeat: Option<u32>,

    /// Make every delivery a distinct event: each gets a fresh event id, its body
    /// built and signed when it is sent. The receiver must handle each one (200,
    /// never 409): a load test of the whole receive path, not of its duplicate answer.
    #[arg(long, conflicts_with_all = ["data", "id"])]
    pub distinct: bool,

    /// How many deliveries are in flight at once.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024), allow_negative_numbers = true)]
    pub concurrency: u32,

    /// Change the body after signing it (raises a payment's amount by one): expect 400.
    #[arg(long)]
    pub tamper: bool,

    /// Sign with a timestamp one hour old: expect 400.
    #[arg(long)]
    pub stale: bool,

    /// The header that carries the signature.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_HEADER, value_parser = parse_header_name)]
    pub header: http::HeaderName,

    /// Give up on a reply after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub timeout: u64,

    /// Print only unexpected replies and the summary.
    #[arg(long, short)]
    pub quiet: bool,
}

fn parse_amount(value: &str) -> Result<u128, String> {
    value.parse::<u128>().map_err(|_| {
        format!(
            "must be a whole number of the currency's smallest unit, from 0 to {}",
            u128::MAX
        )
    })
}

fn parse_header_name(value: &str) -> Result<http::HeaderName, String> {
    http::HeaderName::from_bytes(value.as_bytes()).map_err(|_| "not a valid HTTP header name".to_owned())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn amounts_beyond_u64_are_exact() {
        assert_eq!(
            parse_amount("340282366920938463463374607431768211455"),
            Ok(u128::MAX)
        );
        assert_eq!(parse_amount("18446744073709551616"), Ok(1 << 64));
        for bad in [
            "-1",
            "1.5",
            "1e18",
            "",
            "abc",
            "340282366920938463463374607431768211456",
        ] {
            assert!(parse_amount(bad).is_err(), "{bad:?} accepted");
        }
    }
}
