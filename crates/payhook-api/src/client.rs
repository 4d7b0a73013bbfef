//! [`Client`]: one authenticated HTTP exchange with the service, every trust
//! rule of the crate applied in one place.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_rustls::{ConfigBuilderExt, HttpsConnector};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

use payhook_core::defaults::DEFAULT_BODY_LIMIT;

use crate::error::ApiError;
use crate::key::ApiKey;

/// How long one request may take, its reply read whole, unless
/// [`Client::timeout`] says otherwise: 30 seconds.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection may take to open: 10 seconds.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes of one reply read unless [`Client::max_reply_bytes`] says
/// otherwise: 32 MiB (a page of 100 events carrying the largest metadata the
/// service allows is about 12 MiB).
pub const MAX_REPLY_BYTES: usize = 32 << 20;

/// The longest `Retry-After` honoured: 10 minutes; a longer one waits
/// this long.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);

type HttpClient = hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A client of the service's API at one base URL, with one secret key.
///
/// Cloning is cheap (the connection pool is shared). The [crate
/// docs](crate#trust-rules) list the rules every call keeps.
///
/// ```
/// use payhook::api::{ApiKey, Client};
///
/// let client = Client::new("https://api.service.example", ApiKey::new("sk_test_123").unwrap()).unwrap();
/// assert_eq!(client.base(), "https://api.service.example");
/// assert!(!format!("{client:?}").contains("sk_test_123"));
/// // Plain http:// only on loopback: the key would cross the network in clear.
/// assert!(Client::new("http://api.service.example", ApiKey::new("sk_test_123").unwrap()).is_err());
/// assert!(Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_123").unwrap()).is_ok());
/// ```
#[derive(Clone)]
pub struct Client {
    /// The base URL without a trailing `/`.
    base: String,
    key: ApiKey,
    http: HttpClient,
    timeout: Duration,
    max_reply_bytes: usize,
    max_event_bytes: usize,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("key", &self.key)
            .field("timeout", &self.timeout)
            .field("max_reply_bytes", &self.max_reply_bytes)
            .field("max_event_bytes", &self.max_event_bytes)
            .finish_non_exhaustive()
    }
}

/// A reply read whole within the bounds.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) retry_after: Option<Duration>,
    pub(crate) body: Vec<u8>,
}

impl Client {
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
            http: http_client(https)?,
            timeout: REQUEST_TIMEOUT,
            max_reply_bytes: MAX_REPLY_BYTES,
            max_event_bytes: DEFAULT_BODY_LIMIT,
        })
    }

    /// How long one request may take, connection and whole reply included
    /// (default [`REQUEST_TIMEOUT`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use payhook::api::{ApiKey, Client};
    ///
    /// let client = Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_1").unwrap())
    ///     .unwrap()
    ///     .timeout(Duration::from_secs(5));
    /// assert_eq!(client.request_timeout(), Duration::from_secs(5));
    /// ```
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long one request may take.
    ///
    /// ```
    /// use payhook::api::{ApiKey, Client, REQUEST_TIMEOUT};
    ///
    /// let client = Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_1").unwrap()).unwrap();
    /// assert_eq!(client.request_timeout(), REQUEST_TIMEOUT);
    /// ```
    pub fn request_timeout(&self) -> Duration {
        self.timeout
    }

    /// The most bytes of one reply read (default [`MAX_REPLY_BYTES`]): a
    /// longer reply is [`ApiError::TooLarge`], refused as soon as its length
    /// says so or that much has arrived.
    ///
    /// ```
    /// use payhook::api::{ApiKey, Client};
    ///
    /// let client = Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_1").unwrap())
    ///     .unwrap()
    ///     .max_reply_bytes(4 << 20);
    /// # drop(client);
    /// ```
    #[must_use]
    pub fn max_reply_bytes(mut self, limit: usize) -> Self {
        self.max_reply_bytes = limit;
        self
    }

    /// The longest event the events list may carry (default
    /// `payhook_core::defaults::DEFAULT_BODY_LIMIT`, 1 MiB: what a receiver
    /// reads of a delivery's body): a longer one is refused like one that
    /// does not parse ([`EventsPage::refused`](crate::EventsPage::refused)),
    /// as its delivery would be. Give it the receiver's
    /// [`body_limit`](payhook_core::Receiver::body_limit) when that differs.
    ///
    /// ```
    /// use payhook::api::{ApiKey, Client};
    ///
    /// let client = Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_1").unwrap())
    ///     .unwrap()
    ///     .max_event_bytes(64 * 1024);
    /// assert_eq!(client.event_bytes_limit(), 64 * 1024);
    /// ```
    #[must_use]
    pub fn max_event_bytes(mut self, limit: usize) -> Self {
        self.max_event_bytes = limit;
        self
    }

    /// The longest event the events list may carry
    /// ([`max_event_bytes`](Self::max_event_bytes)).
    ///
    /// ```
    /// use payhook::api::{ApiKey, Client};
    ///
    /// let client = Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_1").unwrap()).unwrap();
    /// assert_eq!(client.event_bytes_limit(), 1024 * 1024);
    /// ```
    pub fn event_bytes_limit(&self) -> usize {
        self.max_event_bytes
    }

    /// The base URL requests go to (it holds no credentials).
    ///
    /// ```
    /// use payhook::api::{ApiKey, Client};
    ///
    /// let client = Client::new("http://localhost:12111/", ApiKey::new("sk_test_1").unwrap()).unwrap();
    /// assert_eq!(client.base(), "http://localhost:12111");
    /// ```
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The key's [`scrub`](ApiKey::scrub): what any text from the service
    /// goes through before it is kept.
    pub(crate) fn scrub(&self, text: &str) -> String {
        self.key.scrub(text)
    }

    /// `text` with the key cut out, nothing else changed.
    pub(crate) fn redact(&self, text: &str) -> String {
        self.key.redact(text)
    }

    /// Any `GET` of the API (`path` starts with `/v1/`, with its query), its
    /// reply's JSON: for the calls this crate has no typed method for, under
    /// the same rules.
    ///
    /// ```no_run
    /// use payhook::api::{ApiKey, Client};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_1")?)?;
    /// let endpoints = client.get_json("/v1/webhook_endpoints?limit=100").await?;
    /// println!("{}", endpoints["data"].as_array().map_or(0, Vec::len));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ApiError`]; [`ApiError::Invalid`] for a path that does not start
    /// with `/v1/`.
    pub async fn get_json(&self, path: &str) -> Result<serde_json::Value, ApiError> {
        let reply = self.call(http::Method::GET, path, None).await?;
        self.json(&reply)
    }

    /// Any form `POST` of the API, its reply's JSON (see [`get_json`](Self::get_json)).
    ///
    /// ```no_run
    /// use payhook::api::{ApiKey, Client};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_1")?)?;
    /// let endpoint = client
    ///     .post_form("/v1/webhook_endpoints", &[("url", "http://127.0.0.1:3000/webhooks")])
    ///     .await?;
    /// println!("{}", endpoint["id"]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`get_json`](Self::get_json).
    pub async fn post_form(
        &self,
        path: &str,
        fields: &[(&str, &str)],
    ) -> Result<serde_json::Value, ApiError> {
        let reply = self.call(http::Method::POST, path, Some(form(fields))).await?;
        self.json(&reply)
    }

    /// A 2xx reply's JSON.
    pub(crate) fn json(&self, reply: &Reply) -> Result<serde_json::Value, ApiError> {
        serde_json::from_slice(&reply.body)
            .map_err(|err| ApiError::BadReply(self.scrub(&format!("not JSON: {err}"))))
    }

    /// `method path` with an optional form body: the reply when it is 2xx,
    /// sorted into an [`ApiError`] otherwise.
    pub(crate) async fn call(
        &self,
        method: http::Method,
        path: &str,
        form_body: Option<String>,
    ) -> Result<Reply, ApiError> {
        if !path.starts_with("/v1/") {
            return Err(ApiError::Invalid("an API path starts with /v1/"));
        }
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(http::header::AUTHORIZATION, self.key.bearer())
            .header(http::header::ACCEPT, "application/json");
        let body = match form_body {
            Some(body) => {
                request = request.header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded");
                Bytes::from(body)
            }
            None => Bytes::new(),
        };
        let request = request
            .body(Full::new(body))
            .map_err(|_| ApiError::Invalid("the request could not be built"))?;
        let limit = self.max_reply_bytes;
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|err| ApiError::Unreachable(self.scrub(&causes(&err))))?;
            let status = response.status().as_u16();
            let retry_after = retry_after(response.headers());
            let announced = response
                .headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            if announced.is_some_and(|n| n > limit as u64) {
                return Err(ApiError::TooLarge { limit });
            }
            let body = self.read_bounded(response.into_body(), limit).await?;
            Ok(Reply {
                status,
                retry_after,
                body,
            })
        };
        let reply = tokio::time::timeout(self.timeout, exchange).await.map_err(|_| {
            ApiError::Unreachable(format!("no reply within {} ms", self.timeout.as_millis()))
        })??;
        match reply.status {
            200..=299 => Ok(reply),
            401 | 403 => {
                let error = error_of(&reply.body);
                Err(ApiError::Unauthorized {
                    status: reply.status,
                    code: error.code.map(|code| self.scrub(&code)),
                    message: self.scrub(&error.message),
                })
            }
            429 | 500..=599 => Err(ApiError::Throttled {
                status: reply.status,
                retry_after: reply.retry_after,
            }),
            // A redirect is never followed: the key would go wherever the
            // reply points.
            300..=399 => Err(ApiError::BadReply(format!(
                "a redirect ({}), which is not followed",
                reply.status
            ))),
            400..=499 => {
                let error = error_of(&reply.body);
                Err(ApiError::Refused {
                    status: reply.status,
                    code: error.code.map(|code| self.scrub(&code)),
                    message: self.scrub(&error.message),
                    param: error.param.map(|param| self.scrub(&param)),
                })
            }
            other => Err(ApiError::BadReply(format!("status {other}"))),
        }
    }

    /// The body, whole, when it is at most `limit` bytes.
    async fn read_bounded(&self, mut body: hyper::body::Incoming, limit: usize) -> Result<Vec<u8>, ApiError> {
        let mut read = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|err| ApiError::Unreachable(self.scrub(&causes(&err))))?;
            let Ok(data) = frame.into_data() else { continue };
            if read.len() + data.len() > limit {
                return Err(ApiError::TooLarge { limit });
            }
            read.extend_from_slice(&data);
        }
        Ok(read)
    }
}

/// A form body of `fields`, percent-encoded.
pub(crate) fn form<K: AsRef<str>, V: AsRef<str>>(fields: &[(K, V)]) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (key, value) in fields {
        out.append_pair(key.as_ref(), value.as_ref());
    }
    out.finish()
}

/// An object id to put in a request path: letters, digits, `_` and `-` only,
/// so neither an argument nor a reply can change which route is asked.
pub(crate) fn path_id(id: &str) -> Result<&str, ApiError> {
    if !id.is_empty()
        && id.len() <= 255
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Ok(id)
    } else {
        Err(ApiError::Invalid("an id is 1 to 255 letters, digits, _ or -"))
    }
}

/// The base URL, checked: `https://`, or `http://` on loopback.
pub(crate) fn checked_base(base: &str) -> Result<String, &'static str> {
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
/// only then, so a machine without a bundle can talk to a local emulator),
/// no proxy (the key goes to the base and nowhere else), no redirect
/// following (hyper's client has none).
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
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector))
}

/// `Retry-After` in whole seconds, capped at [`MAX_RETRY_AFTER`]: the one
/// place it is read. An HTTP date is not honoured (the caller's backoff
/// applies).
pub(crate) fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

/// The fields of an error reply (`{"error":{"code","message","param"}}`), raw;
/// the body's text as the message otherwise.
struct ErrorFields {
    code: Option<String>,
    message: String,
    param: Option<String>,
}

fn error_of(body: &[u8]) -> ErrorFields {
    #[derive(Deserialize)]
    struct Reply {
        error: Inner,
    }
    #[derive(Deserialize)]
    struct Inner {
        #[serde(default)]
        code: Option<String>,
        #[serde(default)]
        message: String,
        #[serde(default)]
        param: Option<String>,
    }
    let text = String::from_utf8_lossy(body);
    match serde_json::from_str::<Reply>(&text) {
        Ok(reply) => ErrorFields {
            code: reply.error.code,
            message: reply.error.message.trim().to_owned(),
            param: reply.error.param,
        },
        Err(_) => ErrorFields {
            code: None,
            message: text.trim().to_owned(),
            param: None,
        },
    }
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
            ("http://127.0.0.1.example", "except on loopback"),
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
    fn a_path_id_cannot_change_the_route() {
        assert!(path_id("pi_123-abc").is_ok());
        for bad in ["", "../x", "pi_1?x=1", "pi 1", &"a".repeat(256)] {
            assert!(path_id(bad).is_err(), "{bad}");
        }
    }
}
