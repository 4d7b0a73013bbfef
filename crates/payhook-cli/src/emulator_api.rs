//! A small client of the emulator's HTTP API, shared by `payhook trigger`
//! and `payhook events`: authenticated requests, errors in words, and the
//! wait for an event's deliveries to end (acknowledged or given up).
//!
//! Everything the API answers is treated as untrusted text (the emulator may
//! run on another machine, and delivery attempts quote the receiver's reply):
//! it is escaped and shortened before it reaches the terminal. The API key is
//! never printed.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use clap::Args;
use payhook_core::untrusted::Untrusted;
use reqwest::Url;
use serde_json::Value;

use crate::failure::Failure;
use crate::output::{paint_stdout, say, Colour};

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

/// Why a reply could not be read.
enum ReadError {
    /// Over [`MAX_REPLY_BYTES`] (said by its `Content-Length` or found while
    /// reading).
    TooLarge,
    /// The connection failed mid-reply.
    Broken(reqwest::Error),
}

/// The reply's body, at most [`MAX_REPLY_BYTES`]: a longer one is refused as
/// soon as its length says so, or as soon as that much has arrived.
async fn read_bounded(mut response: reqwest::Response) -> Result<Vec<u8>, ReadError> {
    let announced = response.content_length().unwrap_or(0);
    if announced > MAX_REPLY_BYTES as u64 {
        return Err(ReadError::TooLarge);
    }
    let mut body = Vec::with_capacity(usize::try_from(announced).unwrap_or(0));
    while let Some(chunk) = response.chunk().await.map_err(ReadError::Broken)? {
        if body.len() + chunk.len() > MAX_REPLY_BYTES {
            return Err(ReadError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An authenticated client of one emulator.
pub struct Api {
    base: String,
    key: String,
    client: reqwest::Client,
}

impl Api {
    /// A client of the emulator `args` name, with a 10 s timeout per request.
    pub fn new(args: &ApiArgs) -> Result<Self, Failure> {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            // The emulator is addressed directly; a proxy from the environment
            // would see the API key.
            .no_proxy()
            .build()
            .map_err(|err| Failure::usage(format_args!("cannot build the HTTP client: {err}")))?;
        Ok(Self {
            base: args.api.as_str().trim_end_matches('/').to_owned(),
            key: args.key.clone(),
            client,
        })
    }

    /// `GET path`: the reply's JSON, or the emulator's refusal as a usage error.
    pub async fn get(&self, path: &str) -> Result<Value, Failure> {
        self.send("GET", path, self.client.get(format!("{}{path}", self.base)))
            .await
    }

    /// A `POST` with a form body of `fields`.
    pub async fn post(&self, path: &str, fields: &[(String, String)]) -> Result<Value, Failure> {
        let mut form = Url::parse("http://form.invalid/").map_err(Failure::usage)?;
        form.query_pairs_mut().extend_pairs(fields);
        let body = form.query().unwrap_or_default().to_owned();
        let request = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        self.send("POST", path, request).await
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<Value, Failure> {
        let response = request.bearer_auth(&self.key).send().await.map_err(|err| {
            Failure::Unreachable(format!(
                "cannot reach the emulator at {}: {}",
                self.base,
                Untrusted::message(&describe(&err))
            ))
        })?;
        let status = response.status();
        let text = read_bounded(response).await.map_err(|err| match err {
            ReadError::TooLarge => Failure::usage(format_args!(
                "the reply to {method} {} is larger than {} MiB, more than the emulator sends: is {} the emulator?",
                Untrusted::value(path),
                MAX_REPLY_BYTES / (1024 * 1024),
                self.base
            )),
            ReadError::Broken(err) => Failure::Unreachable(format!(
                "the emulator's reply to {method} {path} broke off: {}",
                Untrusted::message(&describe(&err))
            )),
        })?;
        let json: Value = serde_json::from_slice(&text).map_err(|_| {
            Failure::usage(format_args!(
                "{method} {path} got {status} and a reply that is not JSON: is {} the emulator?",
                self.base
            ))
        })?;
        if !status.is_success() {
            let error = &json["error"];
            let field = |name: &str| error[name].as_str().unwrap_or("");
            return Err(Failure::usage(format_args!(
                "the emulator refused {method} {}: {} {}: {}",
                Untrusted::value(path),
                status.as_u16(),
                Untrusted::value(field("code")),
                Untrusted::message(field("message"))
            )));
        }
        Ok(json)
    }
}

/// An error and its causes in one line.
fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
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
    let path = format!(
        "/v1/events/{}/delivery_attempts?limit=100",
        path_id(event, "an event id")?
    );
    loop {
        let listed = api.get(&path).await?;
        let mut attempts: Vec<&Value> = listed["data"]
            .as_array()
            .map(|data| data.iter().collect())
            .unwrap_or_default();
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
