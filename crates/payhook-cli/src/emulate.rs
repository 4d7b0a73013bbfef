//! `payhook emulate`: the payment service in test mode on a local port — its
//! API, and signed deliveries with retries and faults on request (the
//! `payhook-emulator` crate does the work; this module reads the arguments,
//! prints where it listens and waits for Ctrl-C).
//!
//! Once the server is bound (and the `--forward-to` endpoint registered) the
//! first stdout line is exactly `listening on http://ADDR`; one line per
//! delivery attempt then goes to stderr.
//!
//! `--secret`/`--secret-file` fix the forward endpoint's signing secret (never
//! printed then), so a receiver configured once survives restarts.
//! `--scheme standard` delivers in the Standard Webhooks format: each
//! endpoint's secret is then `whsec_` and base64, and it also gets an Ed25519
//! pair whose `whpk_` public key is printed (for the forward endpoint) or
//! shown in the endpoint's create reply; every delivery carries a `v1` and a
//! `v1a` signature, so a receiver configured with either key verifies it. An
//! `--addr` that is not loopback is refused before anything is bound unless
//! `--key` fixes the API key: the key is what stands between the network and
//! an emulator that POSTs wherever it is told and shows the replies.

use std::net::SocketAddr;
use std::time::Duration;

use std::path::PathBuf;

use clap::builder::NonEmptyStringValueParser;
use clap::{Args, ValueEnum};
use payhook_core::signature::DEFAULT_HEADER;
use payhook_emulator::{DeliveryScheme, Emulator, Faults, RetrySchedule};
use url::Url;

use crate::failure::Failure;
use crate::output::say;
use crate::runtime::{self, Threads};
use crate::scheme::Scheme;
use crate::secret::{self, SecretArgs, Stdin};

/// `payhook emulate`.
#[derive(Debug, Args)]
pub struct EmulateArgs {
    /// Where to listen (port 0: any free port; the line `listening on http://ADDR` tells which).
    /// An address that is not loopback needs --key.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:12111")]
    pub addr: SocketAddr,

    /// Accept only this API key [default: any well-formed sk_test_… key].
    #[arg(long, value_name = "sk_test_…", value_parser = parse_key)]
    pub key: Option<String>,

    /// How deliveries are signed: `service` (the x-service-signature header,
    /// t=…,v1=…) or `standard` (Standard Webhooks: webhook-id, webhook-timestamp,
    /// webhook-signature with a v1 and a v1a item; endpoints then get a whsec_
    /// secret and a whpk_ public key).
    #[arg(long, value_enum, default_value_t = Scheme::Service)]
    pub scheme: Scheme,

    /// Register a webhook endpoint for every event at start and print its signing secret.
    #[arg(long, value_name = "URL", value_parser = parse_forward_url)]
    pub forward_to: Option<Url>,

    /// The --forward-to endpoint's signing secret (whsec_…), the same at every start
    /// [default: a fresh one, printed]. `-` reads it from stdin.
    #[arg(long, value_name = "SECRET", requires = "forward_to", value_parser = NonEmptyStringValueParser::new())]
    pub secret: Option<String>,

    /// Read the --forward-to endpoint's signing secret from this file (one line).
    #[arg(long, value_name = "PATH", requires = "forward_to", conflicts_with = "secret")]
    pub secret_file: Option<PathBuf>,

    /// The header that carries the signature of each delivery, for example
    /// stripe-signature.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_HEADER, value_parser = parse_header_name)]
    pub signature_header: http::HeaderName,

    /// When failed deliveries are retried: `test` (1 s, 2 s, 4 s … capped at 1 min,
    /// 8 attempts) or `service` (1 min doubling, capped at 6 h, 20 attempts: ~3 days).
    #[arg(long, value_name = "SCHEDULE", value_enum, default_value_t = Schedule::Test)]
    pub retry_schedule: Schedule,

    /// How long an attempt waits for the receiver's reply, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600), allow_negative_numbers = true)]
    pub attempt_timeout: u64,

    /// Fault: duplicate each delivery with this probability (0–1); half the copies are concurrent.
    #[arg(long, value_name = "P", value_parser = parse_probability, allow_negative_numbers = true)]
    pub duplicates: Option<f64>,

    /// Fault: deliver the events of each 250 ms window newest first.
    #[arg(long)]
    pub reorder: bool,

    /// Fault: hold every delivery back this many milliseconds.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(0..=3_600_000), allow_negative_numbers = true)]
    pub delay: Option<u64>,

    /// Fault: sign with a clock this many seconds off (negative: behind).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub skew: Option<i64>,

    /// Fault: drop the reply to each delivery's first attempt, so it is retried.
    #[arg(long)]
    pub drop_first: bool,

    /// Fault: make this share of events (0–1) undeliverable: every attempt to every
    /// endpoint fails without a request being sent, retries included, so the
    /// event stays delivery_success=false and only reconciling against
    /// GET /v1/events finds it. The events picked follow --seed.
    #[arg(long, value_name = "P", value_parser = parse_probability, allow_negative_numbers = true)]
    pub undeliverable: Option<f64>,

    /// Seed of the fault decisions, to repeat a run [default: random, printed].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub seed: Option<u64>,
}

/// `--retry-schedule`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Schedule {
    /// 1 s, 2 s, 4 s … capped at 1 min, 8 attempts.
    Test,
    /// 1 min, 2 min, 4 min … capped at 6 h, 20 attempts (about 3 days).
    Service,
}

fn parse_key(value: &str) -> Result<String, String> {
    // The emulator's own rule, so the flag and the library agree.
    payhook_emulator::check_api_key(value)
        .map(|()| value.to_owned())
        .map_err(str::to_owned)
}

fn parse_forward_url(value: &str) -> Result<Url, String> {
    let url = Url::parse(value).map_err(|err| format!("not a valid URL ({err})"))?;
    match url.scheme() {
        "http" if url.host().is_some() => Ok(url),
        "http" => Err("the URL has no host".to_owned()),
        "https" => {
            Err("https is not supported: the emulator delivers plain HTTP to a local receiver".to_owned())
        }
        other => Err(format!("unsupported URL scheme {other:?}; use http://")),
    }
}

fn parse_header_name(value: &str) -> Result<http::HeaderName, String> {
    http::HeaderName::from_bytes(value.as_bytes()).map_err(|_| "not a valid HTTP header name".to_owned())
}

fn parse_probability(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err("must be a probability from 0 to 1, for example 0.5".to_owned()),
    }
}

impl EmulateArgs {
    fn faults(&self) -> (Faults, Vec<String>) {
        let mut faults = Faults::default();
        let mut named = Vec::new();
        if let Some(p) = self.duplicates {
            faults = faults.duplicates(p);
            named.push(format!("duplicates {p}"));
        }
        if self.reorder {
            faults = faults.reorder();
            named.push("reorder".to_owned());
        }
        if let Some(ms) = self.delay {
            faults = faults.delay(Duration::from_millis(ms));
            named.push(format!("delay {ms} ms"));
        }
        if let Some(secs) = self.skew {
            faults = faults.skew(secs);
            named.push(format!("skew {secs} s"));
        }
        if self.drop_first {
            faults = faults.drop_first();
            named.push("drop-first".to_owned());
        }
        if let Some(p) = self.undeliverable {
            faults = faults.undeliverable(p);
            named.push(format!("undeliverable {p}"));
        }
        if let Some(seed) = self.seed {
            faults = faults.seed(seed);
        }
        (faults, named)
    }
}

/// Runs the emulator until Ctrl-C (or SIGTERM).
pub fn run(args: &EmulateArgs) -> Result<(), Failure> {
    // Checked before anything is bound: an emulator reachable from other
    // machines with any key accepted would send requests wherever a caller
    // asks and show them the replies.
    if !args.addr.ip().is_loopback() && args.key.is_none() {
        return Err(Failure::usage(format_args!(
            "--addr {} is not a loopback address: give a fixed API key with --key sk_test_… \
             (anyone who reaches the port and holds the key can have the emulator POST to \
             any URL and read the start of each reply)",
            args.addr
        )));
    }
    let secret = fixed_secret(args)?;
    runtime::block_on(Threads::PerCore, serve(args, secret))
}

/// The `--secret` or `--secret-file` value, checked (never quoted in an error).
fn fixed_secret(args: &EmulateArgs) -> Result<Option<String>, Failure> {
    if args.secret.is_none() && args.secret_file.is_none() {
        return Ok(None);
    }
    let given = SecretArgs {
        secret: args.secret.clone(),
        secret_file: args.secret_file.clone(),
    };
    let secret = secret::one(&given, Stdin::Free)?;
    // A Standard Webhooks secret is checked by the emulator at start, by the
    // rules of that scheme (base64 of 24 to 64 bytes).
    if args.scheme == Scheme::Service {
        payhook_emulator::check_endpoint_secret(&secret)
            .map_err(|problem| Failure::usage(format_args!("--secret: {problem}")))?;
    }
    Ok(Some(secret))
}

async fn serve(args: &EmulateArgs, secret: Option<String>) -> Result<(), Failure> {
    // One line per delivery attempt on stderr; RUST_LOG can change the filter.
    // Coloured only on a terminal (and never with NO_COLOR), like the rest of
    // the tool's output.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("payhook_emulator=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(crate::output::stderr_gets_colour())
        .with_target(false)
        .try_init();

    let (faults, named) = args.faults();
    let schedule = match args.retry_schedule {
        Schedule::Test => RetrySchedule::test(),
        Schedule::Service => RetrySchedule::service(),
    };
    let mut builder = Emulator::builder()
        .addr(args.addr)
        .retry_schedule(schedule)
        .attempt_timeout(Duration::from_secs(args.attempt_timeout))
        .signature_header(args.signature_header.as_str())
        .scheme(match args.scheme {
            Scheme::Service => DeliveryScheme::Service,
            Scheme::Standard => DeliveryScheme::StandardWebhooks,
        })
        .faults(faults);
    if let Some(key) = &args.key {
        builder = builder.api_key(key.clone());
    }
    if let Some(url) = &args.forward_to {
        builder = builder.forward_to(url.as_str());
    }
    let fixed = secret.is_some();
    if let Some(secret) = secret {
        builder = builder.forward_secret(secret);
    }
    let emulator = builder.start().await.map_err(Failure::usage)?;
    let endpoint = emulator.forward_endpoint();

    say!("listening on http://{}", emulator.addr());
    match &args.key {
        Some(_) => say!("api key: the one given with --key"),
        None => say!("api key: any sk_test_… key, for example {}", emulator.api_key()),
    }
    if let (Some(url), Some(endpoint)) = (&args.forward_to, endpoint) {
        say!(
            "forwarding every event to {url} (webhook endpoint {})",
            endpoint.id
        );
        if fixed {
            say!("signing secret: the one given with --secret");
        } else {
            say!("signing secret: {}", endpoint.secret);
        }
        if let Some(public_key) = &endpoint.public_key {
            say!("public key: {public_key}");
        }
    }
    if args.scheme == Scheme::Standard {
        say!("signature scheme: standard (webhook-id, webhook-timestamp, webhook-signature: v1 and v1a)");
    }
    if args.scheme == Scheme::Service && args.signature_header.as_str() != DEFAULT_HEADER {
        say!("signature header: {}", args.signature_header);
    }
    let schedule_name = match args.retry_schedule {
        Schedule::Test => "test",
        Schedule::Service => "service",
    };
    say!(
        "retry schedule: {schedule_name}, {} attempts",
        schedule.max_attempts()
    );
    if !named.is_empty() {
        say!("faults: {} (seed {})", named.join(", "), emulator.seed());
    }
    if endpoint.is_some() {
        say!(
            "send an event: payhook trigger payment_intent.succeeded --api http://{} --key sk_test_…",
            emulator.addr()
        );
    }
    say!("press Ctrl-C to stop");

    wait_for_stop().await;
    emulator.shutdown().await;
    say!("stopped");
    Ok(())
}

async fn wait_for_stop() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut terminate) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked() {
        assert!(parse_key("sk_test_abc").is_ok());
        assert!(parse_key("sk_live_abc").unwrap_err().contains("test mode only"));
        assert!(parse_key("sk_test_").is_err());
        assert!(parse_probability("0.5").is_ok());
        assert!(parse_probability("1.5").is_err());
        assert!(parse_probability("NaN").is_err());
        assert!(parse_forward_url("https://127.0.0.1/").is_err());
        assert!(parse_forward_url("http://127.0.0.1:3000/webhooks").is_ok());
    }
}
