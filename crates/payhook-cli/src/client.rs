//! The HTTP client that POSTs signed deliveries: `payhook send`'s, and
//! `payhook reconcile --forward-to`'s.
//!
//! hyper's pooled client with rustls (on the `ring` provider, no C toolchain)
//! for `https://`, trusting the platform's root certificates (`SSL_CERT_FILE`
//! names another bundle). A webhook sender neither follows redirects nor
//! goes through a proxy from the environment: hyper's client does neither.
//!
//! The peer is not trusted: of each reply at most [`MAX_REPLY_BYTES`] of the
//! body are read (enough to show and judge it) and the connection is dropped
//! with the rest unread, so memory stays flat whatever it sends. Reply
//! headers are never read back.

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_rustls::{ConfigBuilderExt, HttpsConnector};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use payhook_core::untrusted::Untrusted;
use url::Url;

use crate::failure::Failure;

/// The most of a reply body that is read: far more than any reply of the
/// protocol (`{"received":true}`, a `Webhook Error: …` line), little enough
/// that `--concurrency` copies of it are nothing.
pub const MAX_REPLY_BYTES: usize = 64 * 1024;

/// The client every delivery of a run goes through (connections are reused).
pub(crate) type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Where deliveries go.
pub(crate) struct Endpoint {
    pub url: Url,
    /// `url` as the request target.
    pub uri: http::Uri,
    /// The option that named it (`--to`), for the hint when nothing listens.
    pub flag: &'static str,
}

/// What came back for one delivery.
pub(crate) enum Seen {
    Reply {
        status: u16,
        /// At most [`MAX_REPLY_BYTES`] of it.
        body: String,
        /// The body went on past [`MAX_REPLY_BYTES`]; the rest was not read.
        cut: bool,
    },
    /// The connection was made but no complete reply came (timeout, reset).
    NoReply(String),
}

/// POSTs `body` as JSON to `endpoint` with `signature` in `header`, and
/// reads at most [`MAX_REPLY_BYTES`] of the reply, all within `timeout`.
/// `Err` means the endpoint cannot be reached at all.
pub(crate) async fn post_signed(
    client: &HttpClient,
    endpoint: &Endpoint,
    header: &http::HeaderName,
    signature: String,
    body: Bytes,
    timeout: Duration,
) -> Result<Seen, String> {
    let request = http::Request::post(endpoint.uri.clone())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(
            http::header::USER_AGENT,
            concat!("payhook-cli/", env!("CARGO_PKG_VERSION")),
        )
        .header(header.clone(), signature)
        .body(Full::new(body));
    let request = match request {
        Ok(request) => request,
        // Every part was validated when the arguments were parsed.
        Err(err) => return Ok(Seen::NoReply(format!("the request could not be built: {err}"))),
    };
    // A webhook sender neither follows redirects nor goes through a proxy from
    // the environment: hyper's client does neither.
    let exchange = async {
        let response = match client.request(request).await {
            Ok(response) => response,
            Err(err) if err.is_connect() => return Err(unreachable(endpoint, &err)),
            Err(err) => return Ok(Seen::NoReply(causes(&err))),
        };
        let status = response.status().as_u16();
        Ok(match read_prefix(response.into_body(), MAX_REPLY_BYTES).await {
            Ok((body, cut)) => Seen::Reply {
                status,
                body: String::from_utf8_lossy(&body).into_owned(),
                cut,
            },
            Err(err) => Seen::NoReply(format!(
                "status {status}, but the body could not be read: {}",
                causes(&err)
            )),
        })
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(seen) => seen,
        Err(_) => Ok(Seen::NoReply(format!("no reply within {} s", timeout.as_secs()))),
    }
}

/// The client for a run: plain HTTP, and TLS with the platform's roots when the
/// endpoint is `https://` (loaded only then, so a machine without a certificate
/// bundle can still test a local receiver).
pub(crate) fn http_client(https: bool, connect_timeout: Duration) -> Result<HttpClient, Failure> {
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|err| Failure::usage(format_args!("cannot set up TLS: {err}")))?;
    let tls = if https {
        tls.with_native_roots().map_err(|err| {
            Failure::usage(format_args!(
                "cannot load the platform's root certificates for https ({err}); \
                 name a PEM bundle in SSL_CERT_FILE"
            ))
        })?
    } else {
        tls.with_root_certificates(rustls::RootCertStore::empty())
    }
    .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false); // the TLS connector above takes https:// URLs
    http.set_connect_timeout(Some(connect_timeout));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// The message for an endpoint that cannot be reached at all.
fn unreachable(endpoint: &Endpoint, err: &hyper_util::client::legacy::Error) -> String {
    let url = &endpoint.url;
    let shown = shown_url(url);
    let address = match (url.host_str(), url.port_or_known_default()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_owned(),
        _ => shown.clone(),
    };
    let io_kind = |kind| {
        std::iter::successors(err.source(), |&e| e.source())
            .filter_map(|e| e.downcast_ref::<std::io::Error>())
            .any(|e| e.kind() == kind)
    };
    if io_kind(std::io::ErrorKind::ConnectionRefused) {
        format!(
            "cannot reach {shown}: connection refused, nothing is listening on {address}; \
             start the receiver or fix {}",
            endpoint.flag
        )
    } else if io_kind(std::io::ErrorKind::TimedOut) {
        format!("cannot reach {shown}: no connection to {address} could be made in time")
    } else {
        format!("cannot reach {shown}: {}", causes(err))
    }
}

/// The chain of causes under an HTTP client error, which itself only says
/// "client error (Connect)" or the like.
fn causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in std::iter::successors(err.source(), |&e| e.source()) {
        let text = cause.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
    }
    if parts.is_empty() {
        err.to_string()
    } else {
        parts.join(": ")
    }
}

/// The URL without any user name or password it may carry.
pub(crate) fn shown_url(url: &Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.to_string()
}

/// A reply body on one line, cut to a readable length.
pub(crate) fn shown_body(body: &str) -> String {
    Untrusted::message(body.trim_end()).to_string()
}

/// Reads at most `limit` bytes of a body; `true` when there was more. The
/// rest is left unread: dropping the body then closes the connection rather
/// than draining it.
async fn read_prefix<B>(mut body: B, limit: usize) -> Result<(Vec<u8>, bool), B::Error>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
{
    let mut read = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue; // trailers
        };
        let room = limit - read.len();
        if data.len() > room {
            read.extend_from_slice(&data[..room]);
            return Ok((read, true));
        }
        read.extend_from_slice(&data);
    }
    Ok((read, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_credentials() {
        let url = Url::parse("http://user:hunter2@127.0.0.1:3000/hooks").unwrap();
        assert_eq!(shown_url(&url), "http://127.0.0.1:3000/hooks");
    }

    #[test]
    fn long_or_multiline_bodies_fit_on_one_line() {
        assert_eq!(shown_body("a\nb\n"), "a\\nb");
        assert_eq!(
            shown_body("\u{1b}[2J\u{9b}\u{202e}"),
            "\\u{1b}[2J\\u{9b}\\u{202e}"
        );
        let long = "x".repeat(1000);
        let shown = shown_body(&long);
        assert_eq!(
            shown.chars().count(),
            payhook_core::untrusted::MAX_SHOWN_CHARS + 1
        );
        assert!(shown.ends_with('…'));
    }

    #[test]
    fn only_a_prefix_of_a_reply_is_read() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let read = |len: usize| runtime.block_on(read_prefix(Full::new(Bytes::from(vec![b'x'; len])), 10));
        let (prefix, cut) = read(100).unwrap();
        assert_eq!((prefix.len(), cut), (10, true));
        let (prefix, cut) = read(10).unwrap();
        assert_eq!((prefix.len(), cut), (10, false));
    }
}
