//! The one-command demo: an axum receiver guarded by payhook, fed real signed
//! deliveries over HTTP — first by the payment service itself (payhook's
//! emulator of its test mode), then by hand-made adversarial requests.
//!
//! ```text
//! cargo run --example demo
//! ```
//!
//! It starts the service emulator and the receiver on free loopback ports; the
//! receiver's endpoint is registered with the service, which generates its
//! signing secret. Through the service's API (`payhook::api::Client`) the demo
//! creates a payment intent (20 ETH, in wei) and succeeds it with the test
//! helper; the service signs and delivers `payment_intent.succeeded` and the
//! receiver's handler gets it. A
//! failed payment and a flaky service (every delivery duplicated, first replies
//! lost) follow. Then come genuine, duplicate, tampered, stale, oversized and
//! concurrent deliveries made by hand. Each row shows what was sent, the reply
//! and whether the handler ran; the demo exits 0 only if every reply is the one
//! the protocol prescribes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use payhook::api::{ApiKey, Client, NewPaymentIntent};
use payhook::emulator::{Emulator, Faults, RetrySchedule};
use payhook::sender::{unix_now, EventBuilder, SignedDelivery};
use payhook::tower::axum::{Received, Webhook};
use payhook::tower::WebhookLayer;
use payhook::{Event, EventKind, PaymentIntentStatus, Receiver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How many times the handler ran, per event id, and the payment intent
/// (id, amount) each payment event carried.
#[derive(Clone, Default)]
struct Runs(
    Arc<Mutex<HashMap<String, usize>>>,
    Arc<Mutex<HashMap<String, (String, u128)>>>,
);

impl Runs {
    fn record(&self, id: &str) -> usize {
        let mut runs = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = runs.entry(id.to_owned()).or_default();
        *n += 1;
        *n
    }

    fn saw(&self, event_id: &str, payment_intent: &str, amount: u128) {
        let mut seen = self.1.lock().unwrap_or_else(|e| e.into_inner());
        seen.insert(event_id.to_owned(), (payment_intent.to_owned(), amount));
    }

    fn payment(&self, event_id: &str) -> Option<(String, u128)> {
        self.1
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(event_id)
            .cloned()
    }

    fn count(&self, id: &str) -> usize {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .copied()
            .unwrap_or(0)
    }
}

/// The app's webhook handler: only new, verified events reach it.
async fn handle(State(runs): State<Runs>, Webhook(event): Webhook<Event>) -> Response {
    let attempt = runs.record(event.id());
    match event.kind() {
        EventKind::PaymentIntentSucceeded(pi) | EventKind::PaymentIntentFailed(pi) => {
            // A real app would update the order here.
            runs.saw(event.id(), &pi.id, pi.amount);
        }
        _ => {}
    }
    if event.id().starts_with("evt_demo_flaky") && attempt == 1 {
        // A transient failure: the claim is released and the sender's retry is handled.
        return (StatusCode::INTERNAL_SERVER_ERROR, "database unavailable").into_response();
    }
    if event.id().starts_with("evt_demo_burst") {
        // Slow enough that concurrent duplicates overlap with it.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Received.into_response()
}

/// Starts the receiver app on `listener`, accepting deliveries signed with any of `secrets`.
async fn start_receiver(
    listener: tokio::net::TcpListener,
    secrets: [&str; 2],
    runs: Runs,
) -> std::io::Result<SocketAddr> {
    let receiver = Receiver::builder()
        .secrets(secrets)
        .build()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let app = Router::new()
        .route("/webhooks", post(handle))
        .route_layer(WebhookLayer::new(receiver))
        .route("/health", get(|| async { "ok" }))
        .with_state(runs);
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        // With a header-read timeout, as any receiver on a network should be.
        if let Err(err) = payhook::tower::axum::serve(listener, app).await {
            eprintln!("receiver stopped: {err}");
        }
    });
    Ok(addr)
}

/// One line of the table.
pub struct Row {
    /// What was sent.
    pub sent: String,
    /// The replies, e.g. `200 {"received":true}`.
    pub reply: String,
    /// How many times the handler ran for it.
    pub handler_runs: usize,
    /// Whether the replies and handler runs are what the protocol prescribes.
    pub ok: bool,
}

struct Demo {
    url: String,
    /// The endpoint's signing secret, generated by the service.
    secret: String,
    addr: SocketAddr,
    client: reqwest::Client,
    runs: Runs,
    rows: Vec<Row>,
}

/// A reply as the client saw it.
struct Reply {
    status: u16,
    body: String,
}

impl Reply {
    fn is_received(&self) -> bool {
        self.status == 200 && self.body == r#"{"received":true}"#
    }

    fn is_error(&self, status: u16, message: &str) -> bool {
        self.status == status && self.body.starts_with("Webhook Error: ") && self.body.contains(message)
    }

    fn show(&self) -> String {
        let mut body = self.body.clone();
        if body.len() > 70 {
            body.truncate(67);
            body.push_str("...");
        }
        format!("{} {}", self.status, body)
    }
}

impl Demo {
    async fn post(&self, body: impl Into<reqwest::Body>, signature: Option<&str>) -> Reply {
        let mut request = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body);
        if let Some(signature) = signature {
            request = request.header("x-service-signature", signature);
        }
        match request.send().await {
            Ok(response) => Reply {
                status: response.status().as_u16(),
                body: response.text().await.unwrap_or_default(),
            },
            Err(err) => Reply {
                status: 0,
                body: format!("request failed: {err}"),
            },
        }
    }

    /// Announces a body of `length` bytes and waits for the answer before
    /// sending any of it: the receiver must refuse from `Content-Length` alone,
    /// without reading (or making the client send) the body.
    async fn announce_oversized_body(&self, length: usize) -> Reply {
        let failed = |err: std::io::Error| Reply {
            status: 0,
            body: format!("request failed: {err}"),
        };
        let signature = SignedDelivery::at("{}", &self.secret, unix_now())
            .expect("non-empty secret")
            .signature;
        let head = format!(
            "POST /webhooks HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             x-service-signature: {signature}\r\ncontent-length: {length}\r\n\r\n",
            self.addr
        );
        let exchange = async {
            let mut stream = tokio::net::TcpStream::connect(self.addr).await?;
            stream.write_all(head.as_bytes()).await?;
            let mut reply = Vec::new();
            let mut buf = [0u8; 4096];
            // Read until the whole reply body (its Content-Length) is in.
            loop {
                let n = stream.read(&mut buf).await?;
                reply.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&reply);
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let want = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length: ")
                                .map(str::to_owned)
                        })
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if body.len() >= want || n == 0 {
                        let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
                        return Ok(Reply {
                            status,
                            body: body.to_owned(),
                        });
                    }
                }
                if n == 0 {
                    return Ok(Reply {
                        status: 0,
                        body: text.into_owned(),
                    });
                }
            }
        };
        match tokio::time::timeout(Duration::from_secs(10), exchange).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(err)) => failed(err),
            Err(_) => failed(std::io::Error::other("no answer within 10 s")),
        }
    }

    /// Adds a row. `before` is the handler's run count for `id` before the
    /// delivery was sent; `runs` is how many more runs the protocol prescribes.
    fn row(&mut self, sent: &str, reply: String, (id, before): (&str, usize), runs: usize, reply_ok: bool) {
        let handler_runs = self.runs.count(id) - before;
        self.rows.push(Row {
            sent: sent.to_owned(),
            reply,
            handler_runs,
            ok: reply_ok && handler_runs == runs,
        });
    }

    /// Sends one delivery of event `id` and records whether the reply is `expected`.
    async fn send(
        &mut self,
        sent: &str,
        body: impl Into<reqwest::Body>,
        signature: Option<&str>,
        id: &str,
        expected: Expect,
    ) {
        let before = self.runs.count(id);
        let reply = self.post(body, signature).await;
        let (ok, runs) = match expected {
            Expect::Handled => (reply.is_received(), 1),
            Expect::Acknowledged => (reply.is_received(), 0),
            Expect::Rejected(status, message) => (reply.is_error(status, message), 0),
        };
        self.row(sent, reply.show(), (id, before), runs, ok);
    }

    async fn deliveries(&mut self) {
        let sign = |event: &EventBuilder, secret: &str, at: u64| {
            SignedDelivery::at(event.to_json(), secret, at).expect("non-empty secret")
        };
        let now = unix_now();
        let secret = self.secret.clone();
        let secret = secret.as_str();

        // A genuine payment, then the very same delivery again.
        let paid = EventBuilder::payment_intent_succeeded()
            .amount(250_000)
            .currency("btc");
        let signed = sign(&paid, secret, now);
        let (body, sig, id) = (signed.body, Some(signed.signature.as_str()), paid.event_id());
        self.send(
            "payment_intent.succeeded, genuine",
            body.clone(),
            sig,
            id,
            Expect::Handled,
        )
        .await;
        self.send(
            "the same delivery again (duplicate)",
            body,
            sig,
            id,
            Expect::Acknowledged,
        )
        .await;

        // The other spelling of success, a failure with a wei amount beyond 2^64,
        // and a type this app has never heard of.
        for (label, event) in [
            ("payment.succeeded, genuine", EventBuilder::payment_succeeded()),
            (
                "payment_intent.failed, 1.5 ETH in wei",
                EventBuilder::payment_intent_failed()
                    .currency("eth")
                    .amount(1_500_000_000_000_000_000),
            ),
            (
                "customer.updated (unknown type)",
                EventBuilder::other("customer.updated"),
            ),
        ] {
            let signed = sign(&event, secret, now);
            self.send(
                label,
                signed.body,
                Some(&signed.signature),
                event.event_id(),
                Expect::Handled,
            )
            .await;
        }

        // Forgeries and replays: rejected before the handler or the store sees them.
        let event = EventBuilder::payment_intent_succeeded().amount(100);
        let id = event.event_id();
        let genuine = sign(&event, secret, now);
        let tampered = event
            .to_json()
            .replace(r#""amount":100,"#, r#""amount":100000000,"#);
        let mismatch = Expect::Rejected(400, "no signature matches");
        self.send(
            "tampered body (amount raised)",
            tampered,
            Some(&genuine.signature),
            id,
            mismatch,
        )
        .await;
        let forged = sign(&event, "whsec_not_the_secret", now);
        self.send(
            "signed with the wrong secret",
            forged.body,
            Some(&forged.signature),
            id,
            mismatch,
        )
        .await;
        let stale = sign(&event, secret, now - 600);
        let too_old = Expect::Rejected(400, "s old, outside the 300 s tolerance");
        self.send(
            "stale: signed 10 minutes ago",
            stale.body,
            Some(&stale.signature),
            id,
            too_old,
        )
        .await;
        let ahead = sign(&event, secret, now + 600);
        let too_new = Expect::Rejected(400, "s in the future, outside the 300 s tolerance");
        self.send(
            "signed 10 minutes in the future",
            ahead.body,
            Some(&ahead.signature),
            id,
            too_new,
        )
        .await;
        let missing = Expect::Rejected(400, "missing x-service-signature header");
        self.send("no signature header", event.to_json(), None, id, missing)
            .await;
        let before = self.runs.count(id);
        let reply = self.announce_oversized_body(2 * 1024 * 1024).await;
        let ok = reply.is_error(413, "1048576-byte limit");
        self.row(
            "2 MiB body announced (limit 1 MiB)",
            reply.show(),
            (id, before),
            0,
            ok,
        );
        // The genuine delivery of that event is still handled: nothing above marked it.
        let label = "the genuine delivery after the forgeries";
        self.send(label, genuine.body, Some(&genuine.signature), id, Expect::Handled)
            .await;

        // The handler fails once: the claim is released and the sender's retry is handled.
        let flaky = EventBuilder::payment_intent_succeeded().id(format!("evt_demo_flaky_{now}"));
        let signed = sign(&flaky, secret, now);
        let before = self.runs.count(flaky.event_id());
        let first = self.post(signed.body.clone(), Some(&signed.signature)).await;
        let retry = self.post(signed.body, Some(&signed.signature)).await;
        let ok = first.status == 500 && retry.is_received();
        let reply = format!("{}, retry: {}", first.status, retry.show());
        self.row(
            "handler fails once, sender retries",
            reply,
            (flaky.event_id(), before),
            2,
            ok,
        );

        // 20 concurrent deliveries of one new event: the handler runs once.
        let burst = EventBuilder::payment_intent_succeeded().id(format!("evt_demo_burst_{now}"));
        let signed = sign(&burst, secret, now);
        let replies = futures_util::future::join_all(
            (0..20).map(|_| self.post(signed.body.clone(), Some(&signed.signature))),
        )
        .await;
        let received = replies.iter().filter(|r| r.is_received()).count();
        let in_flight = replies
            .iter()
            .filter(|r| r.is_error(409, "being handled by another delivery"))
            .count();
        let ok = received >= 1 && received + in_flight == replies.len();
        let reply = format!("{received} x 200, {in_flight} x 409 (in flight, retried later)");
        self.row(
            "20 concurrent copies of a new event",
            reply,
            (burst.event_id(), 0),
            1,
            ok,
        );
    }
}

/// What the protocol prescribes for a delivery.
#[derive(Clone, Copy)]
enum Expect {
    /// `200 {"received":true}` and one handler run.
    Handled,
    /// `200 {"received":true}` without running the handler (a duplicate).
    Acknowledged,
    /// This status with a `Webhook Error: …` body containing the text; no handler run.
    Rejected(u16, &'static str),
}

/// Starts the service emulator and the receiver, tells the story, sends every
/// hand-made delivery, and returns the table.
pub async fn run() -> std::io::Result<Vec<Row>> {
    let failed = |err: &dyn std::fmt::Display| std::io::Error::other(err.to_string());
    let service = Emulator::builder().start().await.map_err(|e| failed(&e))?;
    // A flaky service: every delivery duplicated, the reply to each first attempt lost.
    let flaky = Emulator::builder()
        .retry_schedule(RetrySchedule::new(
            Duration::from_millis(100),
            Duration::from_secs(1),
            5,
        ))
        .faults(Faults::default().duplicates(1.0).drop_first().seed(7))
        .start()
        .await
        .map_err(|e| failed(&e))?;

    // The receiver's address first, then its endpoint (and secret) from each service.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/webhooks", listener.local_addr()?);
    let endpoint = service.register_endpoint(&url).map_err(|e| failed(&e))?;
    let flaky_endpoint = flaky.register_endpoint(&url).map_err(|e| failed(&e))?;
    let runs = Runs::default();
    let addr = start_receiver(listener, [&endpoint.secret, &flaky_endpoint.secret], runs.clone()).await?;
    let mut demo = Demo {
        url,
        secret: endpoint.secret.clone(),
        addr,
        client: reqwest::Client::new(),
        runs,
        rows: Vec::new(),
    };
    demo.service_story(&service, &flaky).await;
    demo.deliveries().await;
    service.shutdown().await;
    flaky.shutdown().await;
    Ok(demo.rows)
}

/// 20 ETH in wei: beyond 2^64, and exact all the way.
const TWENTY_ETH_IN_WEI: u128 = 20_000_000_000_000_000_000;

impl Demo {
    /// The crate's client of the service's API (`payhook::api`), on
    /// `service`: what an app's own code calls it with.
    fn api(service: &Emulator) -> Client {
        Client::new(
            &service.base_url(),
            ApiKey::new(service.api_key()).expect("the emulator's key"),
        )
        .expect("the emulator's URL")
    }

    /// The row of the service's delivery of the event about `payment_intent`.
    async fn delivery_row(
        &mut self,
        service: &Emulator,
        sent: &str,
        event_type: &str,
        payment_intent: &str,
        amount: u128,
    ) {
        let idle = service.wait_idle(Duration::from_secs(10)).await;
        let event = service.events().into_iter().find(|e| {
            e.event_type == event_type && String::from_utf8_lossy(&e.body).contains(payment_intent)
        });
        let Some(event) = event else {
            self.row(
                sent,
                format!("no {event_type} event"),
                (payment_intent, 0),
                0,
                false,
            );
            return;
        };
        let attempts: Vec<_> = service
            .attempts()
            .into_iter()
            .filter(|a| a.event == event.id)
            .collect();
        let reply = match attempts.last() {
            Some(last) => format!(
                "{} {}, attempt {}",
                last.status.map_or("-".to_owned(), |s| s.to_string()),
                last.response_body.as_deref().unwrap_or(""),
                last.attempt
            ),
            None => "not delivered".to_owned(),
        };
        let handled_as_sent = self.runs.payment(&event.id) == Some((payment_intent.to_owned(), amount));
        let ok = idle && attempts.len() == 1 && attempts[0].succeeded && handled_as_sent;
        self.row(sent, reply, (&event.id, 0), 1, ok);
    }

    /// The seed's story, told by the service itself: a payment intent created
    /// through its API, paid through the test helper, and the signed event
    /// delivered to the receiver; then a failed payment and a flaky service.
    async fn service_story(&mut self, service: &Emulator, flaky: &Emulator) {
        let api = Self::api(service);
        let order = NewPaymentIntent::new(TWENTY_ETH_IN_WEI, "eth").metadata("order_id", "42");
        let (id, reply, ok) = match api.create_payment_intent(&order).await {
            Ok(intent) => (
                intent.id.clone(),
                format!("{}, amount {}", intent.status.as_str(), intent.amount),
                intent.id.starts_with("pi_")
                    && intent.status.as_str() == "requires_payment"
                    && intent.amount == TWENTY_ETH_IN_WEI
                    && intent.metadata.get("order_id") == Some("42"),
            ),
            Err(err) => (String::new(), err.to_string(), false),
        };
        self.row(
            "service API: create intent, 20 ETH in wei",
            reply,
            (&id, 0),
            0,
            ok,
        );

        let (reply, ok) = match api.succeed_payment_intent(&id, None).await {
            Ok(paid) => (
                format!(
                    "{}, amount_received {}",
                    paid.status.as_str(),
                    paid.amount_received.unwrap_or(0)
                ),
                paid.status == PaymentIntentStatus::Succeeded
                    && paid.amount_received == Some(TWENTY_ETH_IN_WEI),
            ),
            Err(err) => (err.to_string(), false),
        };
        self.row("service API: customer pays (test helper)", reply, (&id, 0), 0, ok);
        self.delivery_row(
            service,
            "service delivers payment_intent.succeeded",
            "payment_intent.succeeded",
            &id,
            TWENTY_ETH_IN_WEI,
        )
        .await;

        let id = match api
            .create_payment_intent(&NewPaymentIntent::new(250_000, "btc"))
            .await
        {
            Ok(intent) => intent.id,
            Err(_) => String::new(),
        };
        let (reply, ok) = match api.fail_payment_intent(&id).await {
            Ok(failed) => (
                failed.status.as_str().to_owned(),
                failed.status.as_str() == "failed",
            ),
            Err(err) => (err.to_string(), false),
        };
        self.row("service API: a btc payment fails", reply, (&id, 0), 0, ok);
        self.delivery_row(
            service,
            "service delivers payment_intent.failed",
            "payment_intent.failed",
            &id,
            250_000,
        )
        .await;

        // The flaky service: two deliveries of one event, each first reply lost.
        let flaky_api = Self::api(flaky);
        let paid = match flaky_api
            .create_payment_intent(&NewPaymentIntent::new(5000, "btc"))
            .await
        {
            Ok(intent) => flaky_api.succeed_payment_intent(&intent.id, None).await.is_ok(),
            Err(_) => false,
        };
        let idle = flaky.wait_idle(Duration::from_secs(10)).await;
        let event_id = flaky.events().first().map(|e| e.id.clone()).unwrap_or_default();
        let attempts: Vec<_> = flaky
            .attempts()
            .into_iter()
            .filter(|a| a.event == event_id)
            .collect();
        let acknowledged = attempts.iter().filter(|a| a.succeeded).count();
        let lost = attempts
            .iter()
            .filter(|a| a.error.as_deref().is_some_and(|e| e.contains("drop-first")))
            .count();
        let ok = paid && idle && acknowledged == 2 && lost == 2;
        let reply = format!(
            "{} attempts: {acknowledged} acknowledged, {lost} replies lost",
            attempts.len()
        );
        self.row(
            "flaky service: duplicates, lost replies",
            reply,
            (&event_id, 0),
            1,
            ok,
        );
    }
}

fn print_table(addr_note: &str, rows: &[Row]) {
    println!("{addr_note}\n");
    println!("{:<3} {:<42} {:<74} {:>7}  ok", "#", "sent", "reply", "handler");
    println!("{}", "-".repeat(136));
    for (i, row) in rows.iter().enumerate() {
        let runs = match row.handler_runs {
            0 => "-".to_owned(),
            1 => "ran".to_owned(),
            n => format!("ran {n}x"),
        };
        let ok = if row.ok { "yes" } else { "NO" };
        println!(
            "{:<3} {:<42} {:<74} {:>7}  {ok}",
            i + 1,
            row.sent,
            row.reply,
            runs
        );
    }
}

#[allow(dead_code)] // the tests include this file as a module and call `run`
#[tokio::main]
async fn main() -> std::process::ExitCode {
    let rows = match run().await {
        Ok(rows) => rows,
        Err(err) => {
            eprintln!("could not start the demo receiver: {err}");
            return std::process::ExitCode::from(2);
        }
    };
    print_table(
        "payhook demo: an axum receiver on loopback, fed signed deliveries over HTTP by the \
         payment service's emulator, then by hand",
        &rows,
    );
    let failed = rows.iter().filter(|r| !r.ok).count();
    if failed == 0 {
        println!(
            "\nall {} deliveries got the reply the protocol prescribes",
            rows.len()
        );
        std::process::ExitCode::SUCCESS
    } else {
        println!(
            "\n{failed} of {} deliveries did NOT get the prescribed reply",
            rows.len()
        );
        std::process::ExitCode::FAILURE
    }
}
