//! The service's events list, `GET /v1/events`, as the reconciler reads it:
//! one page at a time, authenticated by the API key, every reply bounded in
//! size and time, and every failure sorted into what the reconciler does
//! next ([`ApiError`]).
//!
//! The list is trusted because it came over the API with the secret key,
//! from the configured base URL: `https://`, or plain `http://` on loopback
//! only (the emulator, a local proxy). Nothing else about a listed event is
//! checked beyond what a delivery's body is: it must parse as an event.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_rustls::{ConfigBuilderExt, HttpsConnector};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use payhook_core::untrusted::Untrusted;
use payhook_core::Event;
use serde::Deserialize;
use serde_json::value::RawValue;

/// The most events one page asks for (the service's maximum).
pub const PAGE_LIMIT: u32 = 100;

/// The most bytes of one reply that are read: a page of 100 events carrying
/// the largest metadata the service allows is about 12 MiB.
pub const MAX_REPLY_BYTES: usize = 32 << 20;

/// How long one request may take, its reply read whole: 30 seconds.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest `Retry-After` honoured: 10 minutes; a longer one waits
/// this long.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);

/// An API key: never shown by `Debug` or in any message.
#[derive(Clone)]
pub struct ApiKey(Arc<str>);

impl ApiKey {
    /// A key, refused when empty or not a header value.
    ///
    /// # Errors
    /// A static reason, never the key.
    pub fn new(key: &str) -> Result<Self, &'static str> {
        let key = key.trim();
        if key.is_empty() {
            return Err("the API key is empty");
        }
        if http::HeaderValue::from_str(&format!("Bearer {key}")).is_err() {
            return Err("the API key has characters a header cannot carry");
        }
        Ok(Self(key.into()))
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Why a request to the events list failed, sorted by what to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApiError {
    /// `401` or `403`: the key is wrong, revoked or lacks the right. Retrying
    /// cannot help: the reconciler stops and says so.
    Unauthorized {
        /// The status.
        status: u16,
        /// The reply's message, escaped and cut short.
        message: String,
    },
    /// `429` or a `5xx`: try again later, after `retry_after` when the reply
    /// said (capped at [`MAX_RETRY_AFTER`]).
    Throttled {
        /// The status.
        status: u16,
        /// The reply's `Retry-After`, in seconds.
        retry_after: Option<Duration>,
    },
    /// No reply: the connection failed or the request timed out.
    Unreachable(String),
    /// A reply that is not a page of events (another status, a body over
    /// [`MAX_REPLY_BYTES`], JSON that is not a list, an event that does not
    /// parse). The page is skipped whole, never half-stored.
    BadReply(String),
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unauthorized { status, message } => write!(
                f,
                "the service refused the API key ({status}: {message}); check the key and its rights"
            ),
            Self::Throttled {
                status,
                retry_after: Some(after),
            } => write!(
                f,
                "the service answered {status}; retrying after {} s",
                after.as_secs()
            ),
            Self::Throttled {
                status,
                retry_after: None,
            } => write!(f, "the service answered {status}"),
            Self::Unreachable(reason) => write!(f, "the service could not be reached: {reason}"),
            Self::BadReply(reason) => write!(f, "the service's reply is not a page of events: {reason}"),
        }
    }
}

impl std::error::Error for ApiError {}

/// One event of the list: its id, type and `created`, and its JSON text as
/// listed (what the inbox stores as its body).
#[derive(Debug, Clone)]
pub struct ListedEvent {
    /// The event, parsed by the same rules as a delivery's body.
    pub event: Event,
    /// The event's JSON, exactly as listed.
    pub body: String,
}

/// One page of the list, newest first.
#[derive(Debug, Clone)]
pub struct EventsPage {
    /// The events of the page, newest first.
    pub events: Vec<ListedEvent>,
    /// Whether more events match past the last one.
    pub has_more: bool,
}

/// What one request asks the list for. Every field narrows.
#[derive(Debug, Clone, Default)]
pub struct EventsQuery {
    /// Events created at or after this (Unix seconds).
    pub created_gte: Option<i64>,
    /// Events created before this (Unix seconds).
    pub created_lt: Option<i64>,
    /// Only events no endpoint has acknowledged (`Some(false)`), or that one
    /// has (`Some(true)`).
    pub delivery_success: Option<bool>,
    /// The page after this event id (the previous page's last).
    pub starting_after: Option<String>,
    /// At most this many, 1 to [`PAGE_LIMIT`] (`0` means [`PAGE_LIMIT`]).
    pub limit: u32,
}

impl EventsQuery {
    /// The query string, values percent-encoded.
    fn to_query_string(&self) -> String {
        let mut out = form_pairs();
        let limit = if self.limit == 0 {
            PAGE_LIMIT
        } else {
            self.limit.min(PAGE_LIMIT)
        };
        out.append_pair("limit", &limit.to_string());
        if let Some(t) = self.created_gte {
            out.append_pair("created[gte]", &t.to_string());
        }
        if let Some(t) = self.created_lt {
            out.append_pair("created[lt]", &t.to_string());
        }
        if let Some(success) = self.delivery_success {
            out.append_pair("delivery_success", if success { "true" } else { "false" });
        }
        if let Some(id) = &self.starting_after {
            out.append_pair("starting_after", id);
        }
        out.finish()
    }
}

fn form_pairs() -> form_urlencoded::Serializer<'static, String> {
    form_urlencoded::Serializer::new(String::new())
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// A client of the service's events list.
#[derive(Clone)]
pub struct EventsApi {
    /// The base URL without a trailing `/` (`https://api.example`).
    base: String,
    key: ApiKey,
    client: HttpClient,
}

impl fmt::Debug for EventsApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventsApi")
            .field("base", &self.base)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl EventsApi {
    /// A client of the API at `base` (for example `https://api.service.example`
    /// or, for the emulator, `http://127.0.0.1:12111`) with `key`.
    ///
    /// # Errors
    /// A static reason: a base that is not an absolute `http(s)://` URL, plain
    /// `http://` to a host other than loopback, a base with a user, query or
    /// fragment, or TLS that cannot be set up (no root certificates).
    pub fn new(base: &str, key: ApiKey) -> Result<Self, &'static str> {
        let base = checked_base(base)?;
        let https = base.starts_with("https://");
        Ok(Self {
            base,
            key,
            client: http_client(https)?,
        })
    }

    /// The base URL requests go to (it holds no credentials).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// One page of `GET /v1/events`.
    ///
    /// # Errors
    /// [`ApiError`], sorted by what to do next.
    pub async fn page(&self, query: &EventsQuery) -> Result<EventsPage, ApiError> {
        let uri = format!("{}/v1/events?{}", self.base, query.to_query_string());
        let request = http::Request::get(uri)
            .header(http::header::AUTHORIZATION, format!("Bearer {}", self.key.0))
            .header(http::header::ACCEPT, "application/json")
            .body(Empty::new())
            .map_err(|_| ApiError::BadReply("the request could not be built".to_owned()))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|err| ApiError::Unreachable(Untrusted::message(&causes(&err)).to_string()))?;
            let status = response.status().as_u16();
            let retry_after = retry_after(response.headers());
            let body = read_bounded(response.into_body(), MAX_REPLY_BYTES).await?;
            Ok::<_, ApiError>((status, retry_after, body))
        };
        let (status, retry_after, body) =
            tokio::time::timeout(REQUEST_TIMEOUT, exchange)
                .await
                .map_err(|_| {
                    ApiError::Unreachable(format!("no reply within {} s", REQUEST_TIMEOUT.as_secs()))
                })??;
        match status {
            200 => parse_page(&body),
            401 | 403 => Err(ApiError::Unauthorized {
                status,
                message: self.without_key(error_message(&body)),
            }),
            429 | 500..=599 => Err(ApiError::Throttled { status, retry_after }),
            other => Err(ApiError::BadReply(format!(
                "status {other}: {}",
                self.without_key(error_message(&body))
            ))),
        }
    }
}

impl EventsApi {
    /// A message from the service with the key cut out, should the service
    /// echo it: what is logged and stored never carries it.
    fn without_key(&self, message: String) -> String {
        message.replace(&*self.key.0, "<redacted>")
    }
}

/// The base URL, checked: `https://`, or `http://` on loopback.
fn checked_base(base: &str) -> Result<String, &'static str> {
    let base = base.trim().trim_end_matches('/');
    let uri: http::Uri = base.parse().map_err(|_| "the API base is not a URL")?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err("the API base must start with https:// (or http:// on loopback)"),
    };
    let authority = uri.authority().ok_or("the API base has no host")?;
    if authority.as_str().contains('@') {
        return Err("the API base must not carry a user or password: the key is sent in a header");
    }
    if uri.query().is_some() || base.contains('#') {
        return Err("the API base must not carry a query or fragment");
    }
    if !https && !is_loopback(authority.host()) {
        return Err(
            "the API base must be https://, except on loopback: the key would cross the network in clear",
        );
    }
    Ok(base.to_owned())
}

/// `localhost`, `127.0.0.0/8` or `[::1]`.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The client: TLS with the platform's roots for an `https://` base (loaded
/// only then, so a machine without a bundle can reconcile with a local
/// emulator).
fn http_client(https: bool) -> Result<HttpClient, &'static str> {
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|_| "TLS could not be set up")?;
    let tls = if https {
        tls.with_native_roots().map_err(|_| {
            "the platform's root certificates could not be loaded (name a PEM bundle in SSL_CERT_FILE)"
        })?
    } else {
        tls.with_root_certificates(rustls::RootCertStore::empty())
    }
    .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(Duration::from_secs(10)));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// The body, whole, when it is at most `limit` bytes.
async fn read_bounded(mut body: hyper::body::Incoming, limit: usize) -> Result<Vec<u8>, ApiError> {
    let mut read = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|err| ApiError::Unreachable(Untrusted::message(&causes(&err)).to_string()))?;
        let Ok(data) = frame.into_data() else { continue };
        if read.len() + data.len() > limit {
            return Err(ApiError::BadReply(format!(
                "the reply is larger than {limit} bytes"
            )));
        }
        read.extend_from_slice(&data);
    }
    Ok(read)
}

/// `Retry-After` in whole seconds (an HTTP date is not honoured: the
/// backoff applies), capped at [`MAX_RETRY_AFTER`].
fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

/// A page of the list: every event parsed, or the page refused whole.
fn parse_page(body: &[u8]) -> Result<EventsPage, ApiError> {
    #[derive(Deserialize)]
    struct List<'a> {
        #[serde(borrow)]
        data: Vec<&'a RawValue>,
        has_more: bool,
    }
    let text =
        std::str::from_utf8(body).map_err(|_| ApiError::BadReply("the reply is not UTF-8".to_owned()))?;
    let list: List<'_> = serde_json::from_str(text)
        .map_err(|err| ApiError::BadReply(format!("not a list of events: {err}")))?;
    let events = list
        .data
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let body = item.get();
            Event::from_slice(body.as_bytes())
                .map(|event| ListedEvent {
                    event,
                    body: body.to_owned(),
                })
                .map_err(|err| {
                    ApiError::BadReply(format!(
                        "event #{} of the page does not parse: {}",
                        index + 1,
                        Untrusted::message(&err.to_string())
                    ))
                })
        })
        .collect::<Result<_, _>>()?;
    Ok(EventsPage {
        events,
        has_more: list.has_more,
    })
}

/// The `message` of an error reply (`{"error":{"message":…}}`), escaped and
/// cut short; the start of the body otherwise.
fn error_message(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Reply {
        error: Inner,
    }
    #[derive(Deserialize)]
    struct Inner {
        message: String,
    }
    let text = String::from_utf8_lossy(body);
    let message =
        serde_json::from_str::<Reply>(&text).map_or_else(|_| text.to_string(), |reply| reply.error.message);
    Untrusted::message(message.trim()).to_string()
}

/// The chain of causes under a client error, which itself only says
/// "client error (Connect)" or the like.
fn causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = vec![err.to_string()];
    for cause in std::iter::successors(err.source(), |&e| e.source()) {
        let text = cause.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_is_https_or_loopback_and_carries_no_credentials() {
        for good in [
            "https://api.service.example",
            "https://api.service.example/",
            "http://127.0.0.1:12111",
            "http://localhost:8080",
            "http://[::1]:9000",
        ] {
            assert!(checked_base(good).is_ok(), "{good}");
        }
        assert_eq!(
            checked_base("https://api.service.example/").unwrap(),
            "https://api.service.example"
        );
        for (bad, reason) in [
            ("http://api.service.example", "except on loopback"),
            ("http://10.0.0.1", "except on loopback"),
            ("ftp://127.0.0.1", "must start with https://"),
            ("api.service.example", "must start with https://"),
            ("https://user:pw@api.service.example", "user or password"),
            ("https://api.service.example/?x=1", "query or fragment"),
            ("not a url", "not a URL"),
        ] {
            let refused = checked_base(bad).unwrap_err();
            assert!(refused.contains(reason), "{bad}: {refused}");
        }
    }

    #[test]
    fn the_key_is_never_shown() {
        let key = ApiKey::new("sk_test_secret_value").unwrap();
        assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
        let api = EventsApi::new("http://127.0.0.1:1", key).unwrap();
        assert!(!format!("{api:?}").contains("sk_test_secret_value"));
        assert!(ApiKey::new("  ").is_err());
        assert!(ApiKey::new("sk_test_\nx").is_err());
    }

    #[test]
    fn a_message_echoing_the_key_is_stored_without_it() {
        let api = EventsApi::new("http://127.0.0.1:1", ApiKey::new("sk_test_echoed").unwrap()).unwrap();
        let message = api.without_key(error_message(
            br#"{"error":{"message":"Invalid API key: sk_test_echoed"}}"#,
        ));
        assert_eq!(message, "Invalid API key: <redacted>");
    }

    #[test]
    fn a_page_is_every_event_or_none() {
        let good = br#"{"object":"list","has_more":true,"data":[
            {"id":"evt_2","object":"event","type":"customer.created","created":2,"data":{"object":{}}},
            {"id":"evt_1","object":"event","type":"customer.created","created":1,"data":{"object":{}}}]}"#;
        let page = parse_page(good).unwrap();
        assert!(page.has_more);
        let ids: Vec<&str> = page.events.iter().map(|listed| listed.event.id()).collect();
        assert_eq!(ids, ["evt_2", "evt_1"]);
        assert!(page.events[1].body.starts_with(r#"{"id":"evt_1""#));
        let one_bad = br#"{"has_more":false,"data":[
            {"id":"evt_2","type":"customer.created","data":{}},
            {"type":"payment_intent.succeeded","data":{"object":{}}}]}"#;
        let refused = parse_page(one_bad).unwrap_err();
        assert!(
            matches!(&refused, ApiError::BadReply(reason) if reason.contains("event #2")),
            "{refused}"
        );
        assert!(matches!(parse_page(b"<html>"), Err(ApiError::BadReply(_))));
    }

    #[test]
    fn retry_after_is_whole_seconds_capped() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(http::header::RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert(http::header::RETRY_AFTER, "999999".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(MAX_RETRY_AFTER));
        headers.insert(
            http::header::RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn the_query_encodes_its_values() {
        let query = EventsQuery {
            created_gte: Some(10),
            created_lt: Some(20),
            delivery_success: Some(false),
            starting_after: Some("evt_a&b".to_owned()),
            limit: 0,
        };
        assert_eq!(
            query.to_query_string(),
            "limit=100&created%5Bgte%5D=10&created%5Blt%5D=20&delivery_success=false&starting_after=evt_a%26b"
        );
    }
}
