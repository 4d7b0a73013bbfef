//! The behaviour table every framework adapter must pass, over real HTTP.
//!
//! An adapter's test file starts a real server on loopback whose webhook route
//! (`POST /webhooks`) is configured with [`receiver_builder`] and whose handler
//! calls [`run_handler`]; then `behaviour_table!(start)` generates one test per
//! row of the table. The handler's behaviour is chosen by the event id (see
//! [`Behaviour`]), so every adapter behaves the same for the same delivery.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use payhook::sender::{unique_event_id, unix_now, EventBuilder, SignedDelivery};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The endpoint's current signing secret.
pub const SECRET: &str = "whsec_behaviour_current";
/// The previous secret, still accepted during a rotation.
pub const PREVIOUS_SECRET: &str = "whsec_behaviour_previous";
/// The body limit the test servers use, small so oversized bodies are cheap.
pub const BODY_LIMIT: usize = 64 * 1024;
/// The webhook route.
pub const PATH: &str = "/webhooks";
/// The body timeout the test servers use, short so stalled bodies are cheap.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(1);

/// The receiver configuration every test server uses.
pub fn receiver_builder() -> payhook::ReceiverBuilder {
    payhook::Receiver::builder()
        .secrets([SECRET, PREVIOUS_SECRET])
        .body_limit(BODY_LIMIT)
        .body_timeout(BODY_TIMEOUT)
}

/// What the test handler does with an event, decided by its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Succeeds at once.
    Succeed,
    /// Takes a while, so concurrent duplicates overlap with it.
    Slow,
    /// Fails with 500 the first time, succeeds afterwards.
    FailOnce,
    /// Panics the first time, succeeds afterwards.
    PanicOnce,
}

impl Behaviour {
    fn prefix(self) -> &'static str {
        match self {
            Self::Succeed => "evt_ok_",
            Self::Slow => "evt_slow_",
            Self::FailOnce => "evt_failonce_",
            Self::PanicOnce => "evt_paniconce_",
        }
    }

    /// The behaviour an event id asks for.
    pub fn of(id: &str) -> Self {
        [Self::Slow, Self::FailOnce, Self::PanicOnce]
            .into_iter()
            .find(|b| id.starts_with(b.prefix()))
            .unwrap_or(Self::Succeed)
    }

    /// A fresh event id that asks for this behaviour.
    pub fn new_id(self) -> String {
        format!("{}{}", self.prefix(), unique_event_id())
    }
}

/// How many times the handler ran, per event id.
#[derive(Debug, Clone, Default)]
pub struct Calls(Arc<Mutex<HashMap<String, usize>>>);

impl Calls {
    fn record(&self, id: &str) -> usize {
        let mut calls = self.0.lock().unwrap();
        let n = calls.entry(id.to_owned()).or_default();
        *n += 1;
        *n
    }

    /// Records a handler run for `id` and returns how many there have been.
    pub fn record_run(&self, id: &str) -> usize {
        self.record(id)
    }

    /// Handler runs for one id.
    pub fn count(&self, id: &str) -> usize {
        self.0.lock().unwrap().get(id).copied().unwrap_or(0)
    }

    /// Handler runs for every id together.
    pub fn total(&self) -> usize {
        self.0.lock().unwrap().values().sum()
    }
}

/// The test handler: records the run and answers with the status to send
/// (200 or 500), or panics, as the event id asks.
pub async fn run_handler(calls: &Calls, id: &str) -> u16 {
    let n = calls.record(id);
    match Behaviour::of(id) {
        Behaviour::Slow => {
            tokio::time::sleep(Duration::from_millis(300)).await;
            200
        }
        Behaviour::FailOnce if n == 1 => 500,
        Behaviour::PanicOnce if n == 1 => panic!("test handler panics on purpose for {id}"),
        _ => 200,
    }
}

/// A running test server and a client for it.
pub struct Harness {
    pub addr: SocketAddr,
    pub calls: Calls,
    pub client: reqwest::Client,
}

/// A reply, as the client saw it.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

impl Harness {
    /// Starts a server with `start` (which must return once the server listens).
    pub async fn start<F, Fut>(start: F) -> Self
    where
        F: FnOnce(Calls) -> Fut,
        Fut: std::future::Future<Output = SocketAddr>,
    {
        let calls = Calls::default();
        let addr = start(calls.clone()).await;
        Self {
            addr,
            calls,
            client: reqwest::Client::new(),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}{PATH}", self.addr)
    }

    /// POSTs `body` with the given signature header value (or none).
    pub async fn post(&self, body: impl Into<reqwest::Body>, signature: Option<&str>) -> Answer {
        self.try_post(body, signature)
            .await
            .expect("request reaches the test server")
    }

    /// Like [`post`](Self::post), but a dropped connection is an `Err`.
    pub async fn try_post(
        &self,
        body: impl Into<reqwest::Body>,
        signature: Option<&str>,
    ) -> Result<Answer, reqwest::Error> {
        let mut request = self
            .client
            .post(self.url())
            .header("content-type", "application/json")
            .body(body);
        if let Some(signature) = signature {
            request = request.header("x-service-signature", signature);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = response.text().await?;
        Ok(Answer {
            status,
            content_type,
            body,
        })
    }

    /// Sends a genuine delivery of `event`, signed now with [`SECRET`].
    pub async fn deliver(&self, event: &EventBuilder) -> Answer {
        let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
        self.post(signed.body, Some(&signed.signature)).await
    }

    /// Writes a raw HTTP/1.1 request head, then feeds body chunks while reading
    /// the reply concurrently, so a server that answers early is heard before
    /// the client finishes (or fails) sending. Returns the status code and
    /// whether the whole body had been sent when the reply arrived.
    pub async fn raw_post(&self, head: &str, chunks: Vec<Vec<u8>>) -> (u16, bool) {
        let stream = TcpStream::connect(self.addr)
            .await
            .expect("connect to the test server");
        let (mut read, mut write) = stream.into_split();
        write.write_all(head.as_bytes()).await.expect("send request head");
        let (sent_tx, sent_rx) = tokio::sync::oneshot::channel();
        let writer = tokio::spawn(async move {
            for chunk in chunks {
                if write.write_all(&chunk).await.is_err() {
                    return; // the server stopped reading: expected for oversized bodies
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let _ = sent_tx.send(());
            // Keep the write half open until the reader is done.
            tokio::time::sleep(Duration::from_secs(10)).await;
        });
        let mut reply = Vec::new();
        let mut buf = [0u8; 4096];
        let mut sent_rx = sent_rx;
        let status = loop {
            let n = tokio::time::timeout(Duration::from_secs(10), read.read(&mut buf))
                .await
                .expect("the server answers within 10 s")
                .unwrap_or(0);
            if n == 0 {
                break None;
            }
            reply.extend_from_slice(&buf[..n]);
            if let Some(status) = parse_status(&reply) {
                break Some(status);
            }
        };
        // Whether the client had sent everything when the status line arrived.
        let all_sent = matches!(sent_rx.try_recv(), Ok(()));
        writer.abort();
        let status = status.unwrap_or_else(|| {
            panic!(
                "no HTTP status line in the reply: {:?}",
                String::from_utf8_lossy(&reply)
            )
        });
        (status, all_sent)
    }

    /// Opens a connection, writes `request` (a head and perhaps part of a body)
    /// and then nothing more, keeping the connection open. Returns the reply
    /// bytes up to the moment the server closed the connection, how long after
    /// the request the first reply byte came, and how long the close. Panics if
    /// the server neither answers nor closes within 15 s.
    pub async fn raw_stall(&self, request: &[u8]) -> (String, Duration, Duration) {
        let mut stream = TcpStream::connect(self.addr)
            .await
            .expect("connect to the test server");
        // The clock starts before the write: once the bytes are sent the server
        // may start its body timer before this task runs again.
        let sent = tokio::time::Instant::now();
        stream.write_all(request).await.expect("send the request");
        let mut reply = Vec::new();
        let mut buf = [0u8; 4096];
        let mut answered_after = None;
        loop {
            let read = tokio::time::timeout(Duration::from_secs(15), stream.read(&mut buf))
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "the server neither closed the connection nor answered within 15 s; got {:?}",
                        String::from_utf8_lossy(&reply)
                    )
                });
            match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    answered_after.get_or_insert_with(|| sent.elapsed());
                    reply.extend_from_slice(&buf[..n]);
                }
            }
        }
        let closed_after = sent.elapsed();
        (
            String::from_utf8_lossy(&reply).into_owned(),
            answered_after.unwrap_or(closed_after),
            closed_after,
        )
    }
}

/// The request head of a signed POST to the webhook path with these extra header lines.
fn head(addr: SocketAddr, extra: &str) -> String {
    let signature = SignedDelivery::now("{}", SECRET).unwrap().signature;
    format!(
        "POST {PATH} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         x-service-signature: {signature}\r\n{extra}\r\n"
    )
}

fn parse_status(reply: &[u8]) -> Option<u16> {
    let line_end = reply.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&reply[..line_end]).ok()?;
    line.split(' ').nth(1)?.parse().ok()
}

fn assert_webhook_error(answer: &Answer, status: u16, message: &str) {
    assert_eq!(answer.status, status, "{answer:?}");
    assert!(
        answer.body.starts_with("Webhook Error: ") && answer.body.contains(message),
        "expected `Webhook Error: …{message}…`, got {answer:?}"
    );
    assert!(answer.content_type.starts_with("text/plain"), "{answer:?}");
}

fn assert_received(answer: &Answer) {
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.body, r#"{"received":true}"#);
    assert_eq!(answer.content_type, "application/json");
}

// ---- the table ---------------------------------------------------------------

pub async fn valid_delivery_is_handled_once(h: Harness) {
    let event = EventBuilder::payment_intent_succeeded().id(Behaviour::Succeed.new_id());
    assert_received(&h.deliver(&event).await);
    assert_eq!(h.calls.count(event.event_id()), 1);
}

pub async fn every_known_type_is_handled(h: Harness) {
    for event in [
        EventBuilder::payment_succeeded(),
        EventBuilder::payment_intent_failed(),
        EventBuilder::payment_intent_succeeded()
            .currency("eth")
            .amount(10u128.pow(24)),
    ] {
        let event = event.id(Behaviour::Succeed.new_id());
        assert_received(&h.deliver(&event).await);
        assert_eq!(h.calls.count(event.event_id()), 1);
    }
}

pub async fn tampered_body_is_rejected(h: Harness) {
    let event = EventBuilder::payment_intent_succeeded().amount(100);
    let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    let tampered = event.to_json().replace(r#""amount":100"#, r#""amount":100000"#);
    assert_ne!(tampered.as_bytes(), &signed.body[..]);
    let answer = h.post(tampered, Some(&signed.signature)).await;
    assert_webhook_error(&answer, 400, "no signature matches");
    assert_eq!(h.calls.total(), 0);
}

pub async fn wrong_secret_is_rejected(h: Harness) {
    let event = EventBuilder::payment_intent_succeeded();
    let signed = SignedDelivery::now(event.to_json(), "whsec_somebody_else").unwrap();
    let answer = h.post(signed.body, Some(&signed.signature)).await;
    assert_webhook_error(&answer, 400, "no signature matches");
    assert_eq!(h.calls.total(), 0);
}

pub async fn stale_timestamp_is_rejected(h: Harness) {
    let event = EventBuilder::payment_intent_succeeded();
    let signed = SignedDelivery::at(event.to_json(), SECRET, unix_now() - 3600).unwrap();
    let answer = h.post(signed.body, Some(&signed.signature)).await;
    assert_webhook_error(&answer, 400, "s old, outside the 300 s tolerance");
    assert_eq!(h.calls.total(), 0);
}

pub async fn future_timestamp_is_rejected(h: Harness) {
    let event = EventBuilder::payment_intent_succeeded();
    let signed = SignedDelivery::at(event.to_json(), SECRET, unix_now() + 3600).unwrap();
    let answer = h.post(signed.body, Some(&signed.signature)).await;
    assert_webhook_error(&answer, 400, "s in the future, outside the 300 s tolerance");
    assert_eq!(h.calls.total(), 0);
}

pub async fn missing_header_is_rejected(h: Harness) {
    let answer = h
        .post(EventBuilder::payment_intent_succeeded().to_json(), None)
        .await;
    assert_webhook_error(&answer, 400, "missing x-service-signature header");
    assert_eq!(h.calls.total(), 0);
}

pub async fn malformed_header_is_rejected(h: Harness) {
    let body = EventBuilder::payment_intent_succeeded().to_json();
    for (header, message) in [
        ("garbage", "malformed signature header: header has no t timestamp"),
        ("t=soon,v1=abc", "malformed signature header: t is not"),
        (&format!("t={},v1=nothex", unix_now()), "no v1 signature"),
    ] {
        let answer = h.post(body.clone(), Some(header)).await;
        assert_webhook_error(&answer, 400, message);
    }
    assert_eq!(h.calls.total(), 0);
}

pub async fn signed_invalid_payload_is_rejected(h: Harness) {
    for body in ["not json at all", r#"{"type":"payment_intent.succeeded"}"#] {
        let signed = SignedDelivery::now(body, SECRET).unwrap();
        let answer = h.post(signed.body, Some(&signed.signature)).await;
        assert_webhook_error(&answer, 400, "invalid payload");
    }
    assert_eq!(h.calls.total(), 0);
}

pub async fn oversized_body_with_content_length_is_413(h: Harness) {
    // The head alone, declaring 4 MiB, and not one byte of body: only a server
    // that refuses from the header answers 413 (one that reads first would wait
    // for the body and time out with 408), and it closes the connection rather
    // than waiting for a body it will not read.
    let size = BODY_LIMIT * 64;
    let request = head(h.addr, &format!("content-length: {size}\r\n"));
    let (reply, answered_after, closed_after) = h.raw_stall(request.as_bytes()).await;
    assert!(reply.starts_with("HTTP/1.1 413 "), "{reply:?}");
    assert!(
        reply.ends_with("Webhook Error: body is larger than the 65536-byte limit"),
        "{reply:?}"
    );
    assert!(
        answered_after < BODY_TIMEOUT,
        "answered after {answered_after:?}, not before the body timeout: {reply:?}"
    );
    // Closed rather than kept alive for a body that will not be read (actix-web
    // first lingers for its client_disconnect_timeout, 1 s by default).
    assert!(closed_after < Duration::from_secs(5), "{closed_after:?}");
    assert_eq!(h.calls.total(), 0);
}

pub async fn stalled_body_is_408_and_the_connection_closed(h: Harness) {
    // Headers, Content-Length 100, ten bytes, then nothing: the server must not
    // hold the connection (and the body's memory) for as long as the client likes.
    let mut request = head(h.addr, "content-length: 100\r\n").into_bytes();
    request.extend_from_slice(b"{\"id\":\"ev");
    let (reply, answered_after, closed_after) = h.raw_stall(&request).await;
    assert!(reply.starts_with("HTTP/1.1 408 "), "{reply:?}");
    assert!(
        reply.ends_with("Webhook Error: the request body did not arrive within 1s"),
        "{reply:?}"
    );
    assert!(
        reply.to_ascii_lowercase().contains("content-type: text/plain"),
        "{reply:?}"
    );
    assert!(answered_after >= BODY_TIMEOUT, "{answered_after:?}");
    assert!(
        closed_after < BODY_TIMEOUT * 4,
        "the connection stayed open {closed_after:?}"
    );
    assert_eq!(h.calls.total(), 0);
}

pub async fn oversized_chunked_body_is_413(h: Harness) {
    let signature = SignedDelivery::now("{}", SECRET).unwrap().signature;
    let head = format!(
        "POST {PATH} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         x-service-signature: {signature}\r\ntransfer-encoding: chunked\r\n\r\n",
        h.addr
    );
    // 4 MiB in 16 KiB chunks, far past the limit; the server must stop reading
    // at the limit and answer while the client is still sending.
    let chunk = {
        let mut c = format!("{:x}\r\n", 16 * 1024).into_bytes();
        c.extend(std::iter::repeat_n(b' ', 16 * 1024));
        c.extend_from_slice(b"\r\n");
        c
    };
    let mut chunks = vec![chunk; 256];
    chunks.push(b"0\r\n\r\n".to_vec());
    let (status, all_sent) = h.raw_post(&head, chunks).await;
    assert_eq!(status, 413);
    assert!(!all_sent, "the server must answer before reading a 4 MiB body");
    assert_eq!(h.calls.total(), 0);
}

pub async fn body_at_the_limit_is_accepted(h: Harness) {
    let event = EventBuilder::other("bulk.report").id(Behaviour::Succeed.new_id());
    let json = event.to_json();
    let padding = BODY_LIMIT - json.len() - r#","padding":"""#.len();
    let body = format!(
        r#"{},"padding":"{}"}}"#,
        &json[..json.len() - 1],
        "x".repeat(padding)
    );
    assert_eq!(body.len(), BODY_LIMIT);
    let signed = SignedDelivery::now(body, SECRET).unwrap();
    assert_received(&h.post(signed.body, Some(&signed.signature)).await);
    assert_eq!(h.calls.count(event.event_id()), 1);
}

pub async fn duplicate_after_success_is_acknowledged_not_handled(h: Harness) {
    let event = EventBuilder::payment_intent_succeeded().id(Behaviour::Succeed.new_id());
    let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    assert_received(&h.post(signed.body.clone(), Some(&signed.signature)).await);
    // The same delivery again, and a fresh signature of the same event.
    assert_received(&h.post(signed.body, Some(&signed.signature)).await);
    assert_received(&h.deliver(&event).await);
    assert_eq!(h.calls.count(event.event_id()), 1);
}

pub async fn concurrent_duplicates_run_the_handler_once(h: Harness) {
    let event = EventBuilder::payment_intent_succeeded().id(Behaviour::Slow.new_id());
    let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    let h = Arc::new(h);
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (h, signed) = (Arc::clone(&h), signed.clone());
            tokio::spawn(async move { h.post(signed.body, Some(&signed.signature)).await })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        let answer = task.await.unwrap();
        match answer.status {
            200 => assert_received(&answer),
            409 => assert_webhook_error(&answer, 409, "is being handled by another delivery"),
            _ => panic!("unexpected reply {answer:?}"),
        }
        statuses.push(answer.status);
    }
    assert_eq!(h.calls.count(event.event_id()), 1, "statuses: {statuses:?}");
    assert!(statuses.contains(&200));
    // While the first delivery's handler runs, the others are refused with 409
    // (the sender retries later), not queued behind it.
    assert!(statuses.contains(&409), "statuses: {statuses:?}");
    // Afterwards every delivery is a plain duplicate.
    assert_received(&h.post(signed.body, Some(&signed.signature)).await);
    assert_eq!(h.calls.count(event.event_id()), 1);
}

pub async fn handler_error_releases_the_claim(h: Harness) {
    let event = EventBuilder::payment_intent_succeeded().id(Behaviour::FailOnce.new_id());
    let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    let first = h.post(signed.body.clone(), Some(&signed.signature)).await;
    assert_eq!(first.status, 500, "{first:?}");
    // The sender's retry is handled, not refused as a duplicate or in flight.
    assert_received(&h.post(signed.body.clone(), Some(&signed.signature)).await);
    assert_eq!(h.calls.count(event.event_id()), 2);
    assert_received(&h.post(signed.body, Some(&signed.signature)).await);
    assert_eq!(h.calls.count(event.event_id()), 2);
}

pub async fn handler_panic_releases_the_claim(h: Harness) {
    let event = EventBuilder::payment_intent_succeeded().id(Behaviour::PanicOnce.new_id());
    let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    match h.try_post(signed.body.clone(), Some(&signed.signature)).await {
        Ok(answer) => assert_eq!(
            (answer.status, answer.body.as_str()),
            (
                500,
                "Webhook Error: the handler panicked; the event was not acknowledged and will be delivered again"
            )
        ),
        Err(err) => assert!(!err.is_timeout(), "{err}"), // a dropped connection also says "not handled"
    }
    assert_eq!(h.calls.count(event.event_id()), 1);
    // The claim was released: the retry runs the handler.
    let retry = async {
        loop {
            let answer = h.post(signed.body.clone(), Some(&signed.signature)).await;
            if answer.status != 409 {
                return answer;
            }
            // A release on unwind may land a moment after the connection drops.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let answer = tokio::time::timeout(Duration::from_secs(5), retry)
        .await
        .expect("claim released");
    assert_received(&answer);
    assert_eq!(h.calls.count(event.event_id()), 2);
}

pub async fn unknown_event_type_is_acknowledged(h: Harness) {
    let event = EventBuilder::other("payout.reconciled")
        .id(Behaviour::Succeed.new_id())
        .data(r#"{"object":{"id":"po_1","amount":1e400}}"#);
    // A type payhook has never heard of still reaches the handler (as "other")
    // and is acknowledged; its duplicate is acknowledged without a second run.
    assert_received(&h.deliver(&event).await);
    assert_eq!(h.calls.count(event.event_id()), 1);
    assert_received(&h.deliver(&event).await);
    assert_eq!(h.calls.count(event.event_id()), 1);
}

pub async fn rotated_secrets_are_both_accepted(h: Harness) {
    let event = EventBuilder::payment_intent_succeeded().id(Behaviour::Succeed.new_id());
    let old = SignedDelivery::now(event.to_json(), PREVIOUS_SECRET).unwrap();
    assert_received(&h.post(old.body, Some(&old.signature)).await);
    assert_eq!(h.calls.count(event.event_id()), 1);

    // During a rotation the sender signs with both; either may come first.
    let event = EventBuilder::payment_intent_failed().id(Behaviour::Succeed.new_id());
    let t = unix_now();
    let new = SignedDelivery::at(event.to_json(), SECRET, t).unwrap();
    let stranger = SignedDelivery::at(event.to_json(), "whsec_unrelated", t).unwrap();
    let v1 = |s: &SignedDelivery| s.signature.split_once(",v1=").unwrap().1.to_owned();
    let header = format!("t={t},v1={},v1={}", v1(&stranger), v1(&new));
    assert_received(&h.post(new.body, Some(&header)).await);
    assert_eq!(h.calls.count(event.event_id()), 1);
}

pub async fn repeated_signature_header_is_rejected(h: Harness) {
    let signed = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), SECRET).unwrap();
    let answer = h
        .client
        .post(h.url())
        .header("x-service-signature", &signed.signature)
        .header("x-service-signature", &signed.signature)
        .body(signed.body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 400);
    assert!(answer.text().await.unwrap().contains("appears more than once"));
    assert_eq!(h.calls.total(), 0);
}

/// One `#[tokio::test]` per row of the table, against the server `$start` starts.
/// `$start` is an `async fn(Calls) -> SocketAddr` that returns once it listens.
#[allow(unused_macros)] // not every test binary runs the table
macro_rules! behaviour_table {
    ($start:ident) => {
        $crate::support::behaviour_table!(@rows $start;
            valid_delivery_is_handled_once,
            every_known_type_is_handled,
            tampered_body_is_rejected,
            wrong_secret_is_rejected,
            stale_timestamp_is_rejected,
            future_timestamp_is_rejected,
            missing_header_is_rejected,
            malformed_header_is_rejected,
            signed_invalid_payload_is_rejected,
            oversized_body_with_content_length_is_413,
            stalled_body_is_408_and_the_connection_closed,
            oversized_chunked_body_is_413,
            body_at_the_limit_is_accepted,
            duplicate_after_success_is_acknowledged_not_handled,
            concurrent_duplicates_run_the_handler_once,
            handler_error_releases_the_claim,
            handler_panic_releases_the_claim,
            unknown_event_type_is_acknowledged,
            rotated_secrets_are_both_accepted,
            repeated_signature_header_is_rejected,
        );
    };
    (@rows $start:ident; $($case:ident),* $(,)?) => {
        mod behaviour_table {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let harness = $crate::support::Harness::start(super::$start).await;
                    $crate::support::$case(harness).await;
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use behaviour_table;
