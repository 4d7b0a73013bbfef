//! One HTTP attempt: the request signed at the time of the attempt (with the
//! clock-skew fault), sent through the pooled client, and what came back —
//! status, `Retry-After`, the first bytes of the reply — or what went wrong,
//! in words.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use payhook_core::sign;
use payhook_core::signature::{WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};
use payhook_core::untrusted::Untrusted;

use crate::keys::Signers;
use crate::model::SigningKeys;
use crate::{unix_millis, Shared};

/// The most reply-body characters kept in an attempt record.
const RESPONSE_EXCERPT_CHARS: usize = 200;
/// The most reply-body bytes read before the connection is let go.
const RESPONSE_READ_BYTES: usize = 4096;
/// The `user-agent` of every attempt.
const USER_AGENT: &str = concat!("payhook-emulator/", env!("CARGO_PKG_VERSION"));

/// The pooled HTTP/1 client every attempt goes through: connections to a
/// receiver are kept and reused, as the service's would be.
pub(crate) type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// The client for deliveries: plain HTTP (endpoints are `http://` only),
/// connections made within `connect_timeout`, no redirects followed, no proxy
/// from the environment (hyper's client does neither).
pub(crate) fn http_client(connect_timeout: Duration) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(connect_timeout));
    // Small requests and replies: do not let Nagle hold them back.
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .build(connector)
}

/// What one HTTP attempt gave.
pub(super) struct AttemptOutcome {
    pub(super) started_at_ms: u64,
    pub(super) signed_at: u64,
    pub(super) signatures: u32,
    pub(super) duration_ms: u64,
    pub(super) status: Option<u16>,
    pub(super) error: Option<String>,
    pub(super) retry_after: Option<Duration>,
    /// The reply body's first bytes, as they arrive.
    pub(super) response_bytes: Option<Vec<u8>>,
    pub(super) response_body: Option<String>,
}

impl AttemptOutcome {
    /// An attempt that a fault failed before any request was sent.
    pub(super) fn not_sent(error: &str) -> Self {
        let started_at_ms = unix_millis();
        Self {
            started_at_ms,
            signed_at: started_at_ms / 1000,
            signatures: 0,
            duration_ms: 0,
            status: None,
            error: Some(error.to_owned()),
            retry_after: None,
            response_bytes: None,
            response_body: None,
        }
    }
}

/// The signature headers for `body` of event `event_id` at `t`: one item
/// per key in use now (the previous keys' during a roll's overlap), and how
/// many items that is.
pub(crate) fn signature_headers(
    shared: &Shared,
    event_id: &str,
    body: &[u8],
    keys: &SigningKeys,
    t: u64,
    now: u64,
) -> (Vec<(http::HeaderName, String)>, u32) {
    let previous = keys
        .previous
        .as_ref()
        .filter(|(_, until)| now < *until)
        .map(|(signers, _)| signers);
    let mut header = String::new();
    let mut count = 0;
    for signers in std::iter::once(&keys.current).chain(previous) {
        match signers {
            Signers::Service(secret) => {
                let signed = sign(body, secret, t);
                if header.is_empty() {
                    header = signed;
                    count += 1;
                } else if let Some((_, hex)) = signed.split_once(",v1=") {
                    header.push_str(",v1=");
                    header.push_str(hex);
                    count += 1;
                }
            }
            Signers::Standard(signers) => {
                for signer in signers.iter() {
                    if !header.is_empty() {
                        header.push(' ');
                    }
                    header.push_str(&signer.sign(event_id, t, body));
                    count += 1;
                }
            }
        }
    }
    let headers = match keys.current {
        Signers::Service(_) => vec![(shared.config.signature_header.clone(), header)],
        Signers::Standard(_) => vec![
            (http::HeaderName::from_static(WEBHOOK_ID), event_id.to_owned()),
            (http::HeaderName::from_static(WEBHOOK_TIMESTAMP), t.to_string()),
            (http::HeaderName::from_static(WEBHOOK_SIGNATURE), header),
        ],
    };
    (headers, count)
}

pub(super) async fn attempt_once(
    shared: &Shared,
    uri: http::Uri,
    keys: &SigningKeys,
    event_id: &str,
    body: &Bytes,
) -> AttemptOutcome {
    let started_at_ms = unix_millis();
    let now = started_at_ms / 1000;
    let skew = shared.config.faults().skew_secs;
    let signed_at = if skew >= 0 {
        now.saturating_add(skew.unsigned_abs())
    } else {
        now.saturating_sub(skew.unsigned_abs())
    };
    let (headers, signatures) = signature_headers(shared, event_id, body, keys, signed_at, now);
    let started = Instant::now();
    let mut outcome = AttemptOutcome {
        started_at_ms,
        signed_at,
        signatures,
        duration_ms: 0,
        status: None,
        error: None,
        retry_after: None,
        response_bytes: None,
        response_body: None,
    };
    let mut request = http::Request::post(uri)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::USER_AGENT, USER_AGENT);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let request = request.body(Full::new(body.clone()));
    match request {
        Ok(request) => {
            let timeout = shared.config.attempt_timeout;
            // One deadline for the whole exchange, the reply's body included: a
            // receiver that sends its headers and then stalls is as silent as one
            // that sends nothing.
            let exchanged = tokio::time::timeout(
                timeout,
                exchange(&shared.deliveries.client, request, &mut outcome),
            )
            .await;
            if exchanged.is_err() {
                let doing = if outcome.status.is_some() {
                    "reading the reply"
                } else {
                    "sending"
                };
                outcome.error = Some(format!(
                    "no reply within {:.1} s (timed out {doing})",
                    timeout.as_secs_f64()
                ));
            }
        }
        // Every part is checked before: the URL at registration, the header
        // name at start, the event id is ours, the signature is ASCII.
        Err(err) => outcome.error = Some(format!("the request could not be built: {err}")),
    }
    outcome.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    outcome.response_body = outcome.response_bytes.take().map(|bytes| excerpt_of(&bytes));
    outcome
}

/// Sends `request` and reads the reply into `outcome` as it comes, so a
/// timeout part-way leaves what had arrived.
async fn exchange(client: &HttpClient, request: http::Request<Full<Bytes>>, outcome: &mut AttemptOutcome) {
    let response = match client.request(request).await {
        Ok(response) => response,
        Err(err) => {
            outcome.error = Some(describe(&err, "sending"));
            return;
        }
    };
    outcome.status = Some(response.status().as_u16());
    outcome.retry_after = response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| retry_after(v, outcome.started_at_ms));
    let mut body = response.into_body();
    let excerpt = outcome.response_bytes.insert(Vec::new());
    while excerpt.len() < RESPONSE_READ_BYTES {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(chunk) = frame.into_data() {
                    let room = RESPONSE_READ_BYTES.saturating_sub(excerpt.len());
                    excerpt.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
            }
            None => break,
            Some(Err(err)) => {
                outcome.error = Some(describe(&err, "reading the reply"));
                break;
            }
        }
    }
}

/// A `Retry-After` value as a wait: delay-seconds, or an HTTP-date (the
/// IMF-fixdate form every sender must use) less the time now. Anything else is
/// ignored and the schedule's own backoff applies.
fn retry_after(value: &str, now_ms: u64) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = http_date_unix_seconds(value)?;
    Some(Duration::from_millis(
        at.saturating_mul(1000).saturating_sub(now_ms),
    ))
}

/// Unix seconds of an IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`.
fn http_date_unix_seconds(date: &str) -> Option<u64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let field = |range: std::ops::Range<usize>| date.get(range);
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = field(range)?;
        digits
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| digits.parse().ok())?
    };
    let layout_ok = date.len() == 29
        && field(3..5) == Some(", ")
        && [7, 11, 16].iter().all(|&i| field(i..i + 1) == Some(" "))
        && field(19..20) == Some(":")
        && field(22..23) == Some(":")
        && field(25..29) == Some(" GMT");
    if !layout_ok {
        return None;
    }
    let month = MONTHS.iter().position(|m| Some(*m) == field(8..11))?;
    let (day, year) = (number(5..7)?, number(12..16)?);
    let (hour, minute, second) = (number(17..19)?, number(20..22)?, number(23..25)?);
    if !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let month = i64::try_from(month).ok()? + 1;
    let days = payhook_core::time::days_from_civil(year, month, day);
    u64::try_from(days * 86_400 + hour * 3600 + minute * 60 + second).ok()
}

fn excerpt_of(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == RESPONSE_EXCERPT_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// An HTTP failure in words: "could not connect" or what went wrong, with
/// every cause, escaped (the causes may quote the receiver's bytes).
fn describe(err: &(dyn std::error::Error + 'static), doing: &str) -> String {
    let connect = err
        .downcast_ref::<hyper_util::client::legacy::Error>()
        .is_some_and(hyper_util::client::legacy::Error::is_connect);
    if connect {
        return "could not connect".to_owned();
    }
    let mut text = format!("failed {doing}: {err}");
    let mut source = err.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    // A message, not one value: each quoted run is capped, the wording stays whole.
    Untrusted::message(&text).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_described_whole_with_its_causes_escaped() {
        let cause = std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "error reading a body from connection: unexpected end of file\nFORGED",
        );
        let described = describe(&cause, "reading the reply");
        assert_eq!(
            described,
            r"failed reading the reply: error reading a body from connection: unexpected end of file\nFORGED"
        );
        let long = std::io::Error::other(format!("junk {}", "x".repeat(10_000)));
        let described = describe(&long, "sending");
        assert!(described.starts_with("failed sending: junk xxx"), "{described}");
        assert!(described.chars().count() < 300, "{described}");
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        let now_ms = 784_111_777_000; // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(retry_after(" 120 ", now_ms), Some(Duration::from_secs(120)));
        assert_eq!(
            http_date_unix_seconds("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(
            http_date_unix_seconds("Thu, 29 Feb 2024 00:00:00 GMT"),
            Some(1_709_164_800)
        );
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:51:37 GMT", now_ms),
            Some(Duration::from_secs(120))
        );
        // A date already past: retry now.
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now_ms),
            Some(Duration::ZERO)
        );
        assert!(retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now_ms).is_some());
        for ignored in [
            "-5",
            "1.5",
            "",
            "soon",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, +6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMTé",
            "Sün, 06 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(retry_after(ignored, now_ms), None, "{ignored:?}");
        }
    }
}
