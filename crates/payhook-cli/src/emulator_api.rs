//! The emulator's HTTP API for `payhook trigger` and `payhook events`,
//! through the workspace's one client of the service's API
//! ([`payhook_api::Client`]): authenticated requests, errors in words, and
//! the wait for an event's deliveries to end (acknowledged or given up).
//!
//! Everything the API answers is treated as untrusted text (the emulator may
//! run in another process, and delivery attempts quote the receiver's
//! reply): the client escapes, bounds and cuts the key out of every message,
//! and every value printed here goes through [`Untrusted`]. The API key is
//! never printed.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use clap::Args;
use payhook_api::{ApiError, ApiKey, Client};
use payhook_core::untrusted::Untrusted;
use serde_json::Value;
use url::Url;

use crate::failure::Failure;
use crate::output::{paint_stdout, say, Colour};

/// The exit codes and the API key of the commands that drive a running
/// emulator (`trigger`, `events`), shown at the end of their `--help`: they
/// take an API key, never a signing secret (the emulator signs the deliveries
/// with each endpoint's own).
pub const EMULATOR_CLIENT_HELP: &str = "\
Exit codes:
  0  every endpoint the event went to acknowledged it
  1  an endpoint did not (the emulator gave up, or --wait ran out), or no
     endpoint is enabled for the event's type
  2  usage error, or the emulator refused the request (a bad API key, an
     unknown event or endpoint)
  3  the emulator could not be reached

The API key comes from --key or the PAYHOOK_API_KEY environment variable: the
emulator's own --key, or any sk_test_… key if it was started without one;
--key VALUE works too, but shows in `ps`. No signing secret is needed: the
emulator signs each delivery with the endpoint's own.
Output is coloured on a terminal unless NO_COLOR is set.";

/// How long one API request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest reply read from the API. The emulator's replies are a few
/// KiB (its lists are paged); a longer one is refused before it is read in
/// full, so a wrong or hostile server cannot fill the tool's memory.
pub const MAX_REPLY_BYTES: usize = 4 * 1024 * 1024;
/// How often the delivery attempts are read while waiting.
const POLL_EVERY: Duration = Duration::from_millis(100);

/// Where the emulator's API is and how to authenticate with it.
#[derive(Debug, Args)]
pub struct ApiArgs {
    /// The emulator's base URL (what `payhook emulate` prints after `listening on`).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:12111", value_parser = parse_api_url)]
    pub api: Url,

    /// The API key: the emulator's --key, or any sk_test_… key if it was started without one.
    #[arg(long, value_name = "sk_test_…", env = "PAYHOOK_API_KEY", hide_env_values = true, value_parser = parse_key)]
    pub key: String,

    /// How long to wait for the deliveries to be acknowledged or given up, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=3600), allow_negative_numbers = true)]
    pub wait: u64,
}

fn parse_api_url(value: &str) -> Result<Url, String> {
    let url = Url::parse(value).map_err(|err| format!("not a valid URL ({err})"))?;
    match url.scheme() {
        "http" if url.host().is_some() => Ok(url),
        "http" => Err("the URL has no host".to_owned()),
        other => Err(format!(
            "unsupported URL scheme {other:?}: the emulator serves plain http://"
        )),
    }
}

fn parse_key(value: &str) -> Result<String, String> {
    payhook_emulator::check_api_key(value)
        .map(|()| value.to_owned())
        .map_err(str::to_owned)
}

/// An authenticated client of one emulator.
pub struct Api {
    client: Client,
}

impl Api {
    /// A client of the emulator `args` name, with a 10 s timeout per request
    /// and replies of at most [`MAX_REPLY_BYTES`].
    pub fn new(args: &ApiArgs) -> Result<Self, Failure> {
        let key = ApiKey::new(&args.key).map_err(|why| Failure::usage(format_args!("--key: {why}")))?;
        let client = Client::new(args.api.as_str(), key)
            .map_err(|why| Failure::usage(format_args!("--api: {why}")))?
            .timeout(REQUEST_TIMEOUT)
            .max_reply_bytes(MAX_REPLY_BYTES);
        Ok(Self { client })
    }

    /// The typed calls.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// `GET path`: the reply's JSON, or the emulator's refusal as a usage error.
    pub async fn get(&self, path: &str) -> Result<Value, Failure> {
        let reply = self.client.get_json(path).await;
        reply.map_err(|err| self.failure(&format!("GET {path}"), err))
    }

    /// What the command reports for a failed request (`what`: the request,
    /// in words).
    pub fn failure(&self, what: &str, err: ApiError) -> Failure {
        let base = Untrusted::value(self.client.base());
        let what = Untrusted::message(what);
        match err {
            ApiError::Unreachable(reason) => {
                Failure::Unreachable(format!("cannot reach the emulator at {base}: {reason}"))
            }
            ApiError::TooLarge { .. } => Failure::usage(format_args!(
                "the reply to {what} is larger than {} MiB, more than the emulator sends: is {base} the emulator?",
                MAX_REPLY_BYTES / (1024 * 1024),
            )),
            ApiError::Refused {
                status,
                code,
                message,
                ..
            }
            | ApiError::Unauthorized {
                status,
                code,
                message,
            } => Failure::usage(format_args!(
                "the emulator refused {what}: {status} {}: {message}",
                code.as_deref().unwrap_or("-")
            )),
            other => Failure::usage(format_args!(
                "{what}: {other}: is {base} the emulator?"
            )),
        }
    }
}

/// An object id to put in a request path: letters, digits, `_` and `-` only,
/// so neither an argument nor a reply can change which route is asked.
pub fn path_id<'a>(id: &'a str, what: &str) -> Result<&'a str, Failure> {
    if !id.is_empty()
        && id.len() <= 255
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Ok(id)
    } else {
        Err(Failure::usage(format_args!(
            "{} is not {what}: 1 to 255 letters, digits, _ or -",
            Untrusted::value(id)
        )))
    }
}

/// A string field of an API object, or `""`.
pub fn text<'a>(value: &'a Value, field: &str) -> &'a str {
    value[field].as_str().unwrap_or("")
}

/// How the deliveries to one endpoint ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Delivered,
    GaveUp,
}

/// Waits until the deliveries of `event` (those of resend `resend`, 0 for
/// the event's own) to each of `endpoints` are acknowledged or given up,
/// printing every attempt once as it is recorded; then a summary. `Ok(true)`
/// if every endpoint acknowledged.
pub async fn follow_deliveries(
    api: &Api,
    event: &str,
    resend: u64,
    endpoints: &[String],
    wait: Duration,
) -> Result<bool, Failure> {
    let deadline = Instant::now() + wait;
    let mut printed: HashSet<String> = HashSet::new();
    let mut ended: BTreeMap<String, Ended> = BTreeMap::new();
    let event = path_id(event, "an event id")?;
    loop {
        let listed = api
            .client()
            .delivery_attempts(event)
            .await
            .map_err(|err| api.failure(&format!("reading the delivery attempts of {event}"), err))?;
        let mut attempts: Vec<&Value> = listed.iter().collect();
        // Newest first in the list; printed oldest first.
        attempts.reverse();
        for attempt in attempts {
            if attempt["resend"].as_u64() != Some(resend) {
                continue;
            }
            let endpoint = text(attempt, "webhook_endpoint");
            if !endpoints.iter().any(|e| e == endpoint) {
                continue;
            }
            let succeeded = attempt["succeeded"].as_bool() == Some(true);
            let last = attempt["next_attempt_at_ms"].is_null();
            if succeeded {
                ended.insert(endpoint.to_owned(), Ended::Delivered);
            } else if last && attempt["copy"].as_u64() == Some(0) {
                ended.entry(endpoint.to_owned()).or_insert(Ended::GaveUp);
            }
            if printed.insert(text(attempt, "id").to_owned()) {
                say!("{}", AttemptLine(attempt));
            }
        }
        if endpoints.iter().all(|e| ended.contains_key(e)) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    let delivered = endpoints
        .iter()
        .filter(|e| ended.get(*e) == Some(&Ended::Delivered))
        .count();
    for endpoint in endpoints {
        match ended.get(endpoint) {
            Some(Ended::Delivered) => {}
            Some(Ended::GaveUp) => say!(
                "{} {}: the emulator gave up",
                paint_stdout("not delivered to", Colour::Red),
                Untrusted::value(endpoint)
            ),
            None => say!(
                "{} {} within {} s (still retrying, or the endpoint was deleted)",
                paint_stdout("not delivered to", Colour::Red),
                Untrusted::value(endpoint),
                wait.as_secs()
            ),
        }
    }
    let all = delivered == endpoints.len();
    let noun = if endpoints.len() == 1 {
        "endpoint"
    } else {
        "endpoints"
    };
    let word = if all {
        paint_stdout("delivered", Colour::Green)
    } else {
        paint_stdout("delivered", Colour::Red)
    };
    say!("{word} to {delivered} of {} {noun}", endpoints.len());
    Ok(all)
}

/// `attempt 1 to we_… (http://…): 200 in 3 ms, acknowledged`.
struct AttemptLine<'a>(&'a Value);

impl std::fmt::Display for AttemptLine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let a = self.0;
        write!(
            f,
            "attempt {} to {} ({})",
            a["attempt"].as_u64().unwrap_or(0),
            Untrusted::value(text(a, "webhook_endpoint")),
            Untrusted::value(text(a, "url")),
        )?;
        if a["copy"].as_u64().unwrap_or(0) > 0 {
            write!(f, " (duplicate copy {})", a["copy"].as_u64().unwrap_or(0))?;
        }
        f.write_str(": ")?;
        match (a["status"].as_u64(), a["error"].as_str()) {
            (Some(status), None) => write!(f, "{status}")?,
            (Some(status), Some(error)) => write!(f, "{status}, {}", Untrusted::message(error))?,
            (None, Some(error)) => write!(f, "{}", Untrusted::message(error))?,
            (None, None) => f.write_str("no reply")?,
        }
        write!(f, " in {} ms", a["duration_ms"].as_u64().unwrap_or(0))?;
        if a["succeeded"].as_bool() == Some(true) {
            f.write_str(", acknowledged")
        } else if a["next_attempt_at_ms"].is_null() {
            f.write_str(", no more attempts")
        } else {
            f.write_str(", to be retried")
        }
    }
}
