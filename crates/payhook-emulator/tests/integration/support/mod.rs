//! Shared by the emulator's tests: an API client for the emulator, and real
//! receivers on loopback ports — a raw recorder with scripted failures, and a
//! payhook receiver (axum + `WebhookLayer`) counting handler runs.

#![allow(dead_code)] // each test file uses its own part of this module

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use hmac::{Hmac, Mac};
use payhook_core::{Event, Receiver};
use payhook_emulator::{Emulator, EmulatorBuilder, Limits};
/// Waits until a condition holds (the tests' one polling loop).
pub use payhook_test_support::eventually;
use payhook_tower::axum::{Received, Webhook};
use payhook_tower::WebhookLayer;
use sha2::Sha256;

/// A reply from the emulator's API.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub text: String,
    pub json: serde_json::Value,
    pub headers: reqwest::header::HeaderMap,
}

impl Reply {
    /// `error.code` of an error reply.
    pub fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }

    pub fn param(&self) -> &str {
        self.json["error"]["param"].as_str().unwrap_or("")
    }

    pub fn message(&self) -> &str {
        self.json["error"]["message"].as_str().unwrap_or("")
    }

    pub fn error_type(&self) -> &str {
        self.json["error"]["type"].as_str().unwrap_or("")
    }

    pub fn id(&self) -> String {
        self.json["id"].as_str().expect("reply has an id").to_owned()
    }

    /// The ids of a list reply's `data`, in order.
    pub fn ids(&self) -> Vec<String> {
        self.json["data"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|item| item["id"].as_str().expect("item id").to_owned())
            .collect()
    }

    pub fn has_more(&self) -> bool {
        self.json["has_more"].as_bool().expect("has_more")
    }
}

/// A client for one emulator, authenticated with its test key.
/// Starts `builder`'s emulator and a client of its API: the set-up of
/// nearly every test.
pub async fn started(builder: EmulatorBuilder) -> (Emulator, Api) {
    let emulator = builder.start().await.expect("the emulator starts");
    let api = Api::new(&emulator);
    (emulator, api)
}

/// The default limits with `set` applied (`limits(|l| l.endpoints = 2)`).
pub fn limits(set: impl FnOnce(&mut Limits)) -> Limits {
    let mut limits = Limits::default();
    set(&mut limits);
    limits
}

#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub key: String,
    pub client: reqwest::Client,
}

impl Api {
    pub fn new(emulator: &Emulator) -> Self {
        Self {
            base: emulator.base_url(),
            key: emulator.api_key().to_owned(),
            client: reqwest::Client::new(),
        }
    }

    pub async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        let response = request.send().await.expect("the emulator answers");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("reply body");
        let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        Reply {
            status,
            text,
            json,
            headers,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A `method` request on `path` with the API key and no body.
    pub async fn request(&self, method: reqwest::Method, path: &str) -> Reply {
        self.send(self.client.request(method, self.url(path)).bearer_auth(&self.key))
            .await
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.request(reqwest::Method::GET, path).await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.request(reqwest::Method::DELETE, path).await
    }

    pub async fn post_json(&self, path: &str, body: &str) -> Reply {
        self.send(
            self.client
                .post(self.url(path))
                .bearer_auth(&self.key)
                .header("content-type", "application/json")
                .body(body.to_owned()),
        )
        .await
    }

    pub async fn post_form(&self, path: &str, body: &str) -> Reply {
        self.send(
            self.client
                .post(self.url(path))
                .bearer_auth(&self.key)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body.to_owned()),
        )
        .await
    }

    pub async fn post_empty(&self, path: &str) -> Reply {
        self.request(reqwest::Method::POST, path).await
    }

    pub async fn create_intent(&self, amount: &str, currency: &str) -> String {
        let reply = self
            .post_json(
                "/v1/payment_intents",
                &format!(r#"{{"amount":{amount},"currency":"{currency}"}}"#),
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        reply.id()
    }

    pub async fn succeed(&self, id: &str) -> Reply {
        self.post_empty(&format!("/v1/test_helpers/payment_intents/{id}/succeed"))
            .await
    }

    pub async fn register(&self, url: &str) -> (String, String) {
        let reply = self
            .post_form("/v1/webhook_endpoints", &format!("url={url}"))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let secret = reply.json["secret"]
            .as_str()
            .expect("secret on create")
            .to_owned();
        (reply.id(), secret)
    }
}

/// One request a receiver got.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub at: Instant,
    pub signature: String,
    pub content_type: String,
    pub body: Bytes,
}

impl Arrival {
    /// The `id` of the event in the body.
    pub fn event_id(&self) -> String {
        let value: serde_json::Value = serde_json::from_slice(&self.body).expect("JSON body");
        value["id"].as_str().expect("event id").to_owned()
    }
}

/// How a recording receiver answers.
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// Answer 500 to the first N requests.
    pub fail_first: usize,
    /// Send this `Retry-After` value (seconds or an HTTP-date) with the failures.
    pub retry_after: Option<&'static str>,
    /// Never answer the first N requests (hold them open).
    pub hang_first: usize,
}

impl Script {
    /// Answers 500 to the first `n` requests, then 200.
    pub fn failing_first(n: usize) -> Self {
        Self {
            fail_first: n,
            ..Self::default()
        }
    }

    /// Holds the first `n` requests open without an answer, then answers 200.
    pub fn hanging_first(n: usize) -> Self {
        Self {
            hang_first: n,
            ..Self::default()
        }
    }
}

struct Recorder {
    script: Script,
    arrivals: Mutex<Vec<Arrival>>,
    count: AtomicUsize,
}

/// A receiver recording every request on `127.0.0.1:<free port>/webhooks`.
pub struct RecordingReceiver {
    pub url: String,
    state: Arc<Recorder>,
}

impl RecordingReceiver {
    pub async fn start(script: Script) -> Self {
        let state = Arc::new(Recorder {
            script,
            arrivals: Mutex::new(Vec::new()),
            count: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/webhooks", post(record))
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let url = format!("http://{}/webhooks", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, state }
    }

    pub fn arrivals(&self) -> Vec<Arrival> {
        self.state.arrivals.lock().expect("not poisoned").clone()
    }
}

async fn record(State(state): State<Arc<Recorder>>, headers: HeaderMap, body: Bytes) -> Response {
    let n = state.count.fetch_add(1, Ordering::SeqCst);
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    state.arrivals.lock().expect("not poisoned").push(Arrival {
        at: Instant::now(),
        signature: header("x-service-signature"),
        content_type: header("content-type"),
        body,
    });
    if n < state.script.hang_first {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    if n < state.script.fail_first {
        let mut response = (StatusCode::INTERNAL_SERVER_ERROR, "database unavailable").into_response();
        if let Some(value) = state.script.retry_after {
            response
                .headers_mut()
                .insert("retry-after", value.parse().expect("header value"));
        }
        return response;
    }
    (StatusCode::OK, r#"{"received":true}"#).into_response()
}

/// A payhook receiver (axum + `WebhookLayer`) on a loopback port, counting how
/// many times its handler ran per event id.
pub struct PayhookReceiver {
    pub url: String,
    runs: Arc<Mutex<HashMap<String, usize>>>,
    order: Arc<Mutex<Vec<String>>>,
    requests: Arc<AtomicUsize>,
}

impl PayhookReceiver {
    /// Binds a port; call [`serve`](Self::serve) with the secret once registered.
    pub async fn bind() -> (tokio::net::TcpListener, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let url = format!("http://{}/webhooks", listener.local_addr().expect("addr"));
        (listener, url)
    }

    pub fn serve(
        listener: tokio::net::TcpListener,
        url: String,
        secret: &str,
        handler_delay: Duration,
    ) -> Self {
        let receiver = Receiver::builder()
            .secret(secret)
            .build()
            .expect("valid receiver");
        Self::serve_receiver(listener, url, receiver, handler_delay)
    }

    /// The same with a receiver configured by the caller (another scheme).
    pub fn serve_receiver(
        listener: tokio::net::TcpListener,
        url: String,
        receiver: Receiver,
        handler_delay: Duration,
    ) -> Self {
        let runs: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let order: Arc<Mutex<Vec<String>>> = Arc::default();
        let requests = Arc::new(AtomicUsize::new(0));
        let (runs2, order2, requests2) = (Arc::clone(&runs), Arc::clone(&order), Arc::clone(&requests));
        let app = Router::new()
            .route(
                "/webhooks",
                post(move |Webhook(event): Webhook<Event>| {
                    let (runs, order) = (Arc::clone(&runs2), Arc::clone(&order2));
                    async move {
                        *runs
                            .lock()
                            .expect("not poisoned")
                            .entry(event.id().to_owned())
                            .or_default() += 1;
                        order.lock().expect("not poisoned").push(event.id().to_owned());
                        tokio::time::sleep(handler_delay).await;
                        Received
                    }
                }),
            )
            .route_layer(WebhookLayer::new(receiver))
            .layer(axum::middleware::from_fn(
                move |request, next: axum::middleware::Next| {
                    requests2.fetch_add(1, Ordering::SeqCst);
                    async move { next.run(request).await }
                },
            ));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            url,
            runs,
            order,
            requests,
        }
    }

    /// Handler runs per event id.
    pub fn runs(&self) -> HashMap<String, usize> {
        self.runs.lock().expect("not poisoned").clone()
    }

    /// Event ids in the order the handler ran for them.
    pub fn order(&self) -> Vec<String> {
        self.order.lock().expect("not poisoned").clone()
    }

    /// Requests that reached the server (handled, duplicates, rejections).
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// The `v1` items of a signature header.
pub fn v1_items(header: &str) -> Vec<&str> {
    header
        .split(',')
        .filter_map(|item| item.strip_prefix("v1="))
        .collect()
}

/// The `t` of a signature header.
pub fn timestamp(header: &str) -> u64 {
    header
        .split(',')
        .find_map(|item| item.strip_prefix("t="))
        .expect("t item")
        .parse()
        .expect("t is a number")
}

/// HMAC-SHA256 of `{t}.{body}` with `secret`, lowercase hex: computed here,
/// independently of payhook's signer.
pub fn independent_hmac(secret: &str, t: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}
