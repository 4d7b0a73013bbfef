//! `payhook endpoints roll-secret WE`: a running emulator rolls a webhook
//! endpoint's signing secret (`POST /v1/webhook_endpoints/:id/roll_secret`)
//! with an overlap, and the new secret is appended to the receiver's secret
//! file (the file a `SecretSet` reads: one secret per line), never printed.
//! The output says until when the previous secret signs beside it, and what
//! to do next: reload the receiver, then drop the previous line once that
//! time has passed.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::builder::NonEmptyStringValueParser;
use clap::{Args, Subcommand};
use payhook_core::untrusted::Untrusted;

use crate::emulator_api::{path_id, Api, ApiArgs};
use crate::failure::Failure;
use crate::output::say;
use crate::runtime::{self, Threads};

/// The longest overlap the emulator takes: 7 days.
const MAX_EXPIRES_IN: u64 = 7 * 24 * 3600;

/// `payhook endpoints`.
#[derive(Debug, Args)]
pub struct EndpointsArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: EndpointsCommand,
}

/// The `payhook endpoints` subcommands.
#[derive(Debug, Subcommand)]
pub enum EndpointsCommand {
    /// Roll a webhook endpoint's signing secret in test mode: the new secret signs
    /// from now on, the previous one beside it for --expires-in seconds.
    ///
    /// The new secret is appended to --secret-file (one secret per line, the
    /// file a receiver's SecretSet or PAYHOOK_SECRET_FILE reads), never printed.
    /// Prints until when the previous secret keeps signing; then reload the
    /// receiver (`kill -HUP PID`), and once that time has passed remove the
    /// previous secret's line and reload again. Exits 0 once rolled, 2 if the
    /// emulator refused (an unknown endpoint, a bad key) or the file cannot be
    /// written, 3 if the emulator cannot be reached.
    #[command(after_help = crate::emulator_api::EMULATOR_CLIENT_HELP)]
    RollSecret(RollSecretArgs),
}

/// `payhook endpoints roll-secret`.
#[derive(Debug, Args)]
pub struct RollSecretArgs {
    /// The webhook endpoint (we_…), as `payhook emulate` prints it.
    #[arg(value_name = "WE", value_parser = NonEmptyStringValueParser::new())]
    pub endpoint: String,

    /// How long the previous secret keeps signing beside the new one, in seconds
    /// (0 to 604800, 7 days; 0: it stops at once).
    #[arg(long, value_name = "SECS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=MAX_EXPIRES_IN))]
    pub expires_in: u64,

    /// Append the new secret to this file, one secret per line (created, readable
    /// by its owner only, when missing). The file is rewritten whole and moved into
    /// place, so a receiver reloading it never reads half of it.
    #[arg(long, value_name = "PATH")]
    pub secret_file: PathBuf,

    /// The emulator and its key.
    #[command(flatten)]
    pub api: ApiArgs,
}

/// Runs `payhook endpoints`.
pub fn run(args: &EndpointsArgs) -> Result<(), Failure> {
    match &args.command {
        EndpointsCommand::RollSecret(args) => runtime::block_on(Threads::One, roll_secret(args)),
    }
}

async fn roll_secret(args: &RollSecretArgs) -> Result<(), Failure> {
    let endpoint = path_id(&args.endpoint, "a webhook endpoint id (we_…)")?;
    // Refuse an unusable file before the roll, so a roll is never left
    // without its secret written down.
    let existing = read_existing(&args.secret_file)?;
    let api = Api::new(&args.api)?;
    let expires_in = args.expires_in.to_string();
    let path = format!("/v1/webhook_endpoints/{endpoint}/roll_secret");
    let rolled = api
        .client()
        .post_form(&path, &[("expires_in", expires_in.as_str())])
        .await
        .map_err(|err| api.failure(&format!("the roll of {endpoint}'s secret"), err))?;
    let secret = rolled["secret"].as_str().unwrap_or_default();
    if !is_secret(secret) {
        return Err(Failure::usage(format_args!(
            "the emulator's reply to the roll of {endpoint} holds no whsec_ secret: is {} the emulator?",
            Untrusted::value(args.api.api.as_str())
        )));
    }
    let lines = append(&args.secret_file, existing, secret).map_err(|err| {
        Failure::usage(format_args!(
            "the secret of {endpoint} was rolled but could not be written to {}: {err}; \
             roll again once the file can be written",
            args.secret_file.display()
        ))
    })?;
    let now = payhook_core::time::now_secs().max(0).unsigned_abs();
    let until = rolled["previous_secret_expires_at"].as_u64().unwrap_or(now);
    say!(
        "rolled the signing secret of {endpoint}: the new secret is appended to {} ({lines} secret(s) listed)",
        args.secret_file.display()
    );
    let when = payhook_core::time::format_utc(i64::try_from(until).unwrap_or(i64::MAX).saturating_mul(1000));
    if until > now {
        say!(
            "the previous secret keeps signing beside it until {when} UTC (in {} s); then the new one alone",
            until - now
        );
        say!(
            "next: reload the receiver now (kill -HUP PID); after {when} UTC, remove the previous \
             secret's line from {} and reload again",
            args.secret_file.display()
        );
    } else {
        say!("the previous secret stopped signing at {when} UTC: deliveries carry the new one alone");
        say!("next: reload the receiver now (kill -HUP PID); until it has, it refuses deliveries");
    }
    Ok(())
}

/// A `whsec_` secret of visible ASCII, as the emulator makes them.
fn is_secret(secret: &str) -> bool {
    secret.len() > "whsec_".len()
        && secret.len() <= 255
        && secret.starts_with("whsec_")
        && secret.bytes().all(|b| b.is_ascii_graphic())
}

/// The file's text, or an empty one when it does not exist yet.
fn read_existing(path: &Path) -> Result<String, Failure> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes).map_err(|_| {
            Failure::usage(format_args!(
                "{} is not UTF-8 text: not a file of secrets",
                path.display()
            ))
        }),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(err) => Err(Failure::usage(format_args!(
            "cannot read {}: {err}",
            path.display()
        ))),
    }
}

/// Writes `existing` and `secret` on a line of its own to a file beside
/// `path`, owner-only, and moves it over `path`; returns how many secrets
/// the file lists.
fn append(path: &Path, mut text: String, secret: &str) -> std::io::Result<usize> {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(secret);
    text.push('\n');
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy())
        .unwrap_or_default();
    let next = path.with_file_name(format!(".{file_name}.rolling"));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&next)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&next, path)?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .count())
}
