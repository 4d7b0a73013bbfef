//! What payhook costs a real server: requests per second over loopback HTTP/1.1
//! with keep-alive, for a webhook route behind payhook beside the same route
//! without any verification, for axum (the tower layer and the `Webhook`
//! extractor) and for actix-web (the `Webhook` extractor).
//!
//! Run with `cargo bench --bench layer_overhead` (add `-- --quick` for short
//! rounds). Every request carries a 1 KiB signed event with an id never sent
//! before (signed before the round starts), so payhook runs its whole pipeline:
//! verify, parse, claim, complete. The server has one worker thread and the
//! client, a lean hyper client with several connections, runs on the other
//! core, so the server is what limits the rate. Rounds of the two routes
//! alternate and the median of each is reported, which keeps the ratio steady
//! on a busy machine.

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use payhook::sender::{unix_now, EventBuilder};
use payhook::{sign, Receiver, Secret};

const SECRET: &str = "whsec_5f0c1d8e2b7a4c9d3e6f8a1b2c4d6e8f";
const ACK: &str = r#"{"received":true}"#;
/// Requests in flight at once (one per keep-alive connection).
const CONNECTIONS: usize = 8;

/// A `payment_intent.succeeded` event of about 1 KiB, with the metadata an
/// integrator typically attaches.
fn realistic_event(id: &str) -> String {
    EventBuilder::payment_intent_succeeded()
        .id(id)
        .payment_intent_id("pi_3PqX7bLkdIwHu7ix0B9cQmZr")
        .amount(1_500_000_000_000_000_000)
        .currency("eth")
        .description(Some("Order #100234 — 2 × Annual subscription (Pro plan)"))
        .metadata("order_id", "ord_8f3a2c91d4e7")
        .metadata("customer_id", "cus_Q2x9LmN4pR7s")
        .metadata("customer_email", "alice.nakamoto@example.com")
        .metadata("invoice", "INV-2024-000871")
        .metadata("plan", "pro-annual")
        .metadata("wallet_address", "0x52908400098527886E0F7030069857D2E4169EE7")
        .metadata("network", "ethereum-mainnet")
        .metadata("confirmations", "12")
        .metadata(
            "tx_hash",
            "0x9fc76417374aa880d4449a1f7f31ec597f00b1f6f3dd2d66f4c9c6c445836d8b",
        )
        .metadata("ip_country", "DE")
        .metadata("utm_source", "newsletter-2024-11")
        .metadata("shipping", "Hauptstraße 5, 10115 Berlin, DE")
        .metadata("gift_note", "Happy birthday from all of us")
        .to_json()
}

/// `n` deliveries, each a new event id, signed now.
fn deliveries(round: usize, n: usize) -> Vec<(String, Bytes)> {
    let secret = Secret::new(SECRET).expect("non-empty secret");
    let now = unix_now();
    (0..n)
        .map(|i| {
            let body = realistic_event(&format!("evt_1PqX7bLkdIwH{round:04}{i:010}"));
            (sign(body.as_bytes(), &secret, now), Bytes::from(body))
        })
        .collect()
}

fn receiver() -> Receiver {
    Receiver::builder()
        .secret(SECRET)
        .build()
        .expect("valid receiver")
}

/// A running server: its address and how to stop it.
struct Server {
    addr: SocketAddr,
    stop: Box<dyn FnOnce()>,
}

/// What a route does in front of its handler.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Route {
    /// Reads the body and acknowledges it: no verification at all.
    Bare,
    /// Verification written by hand, as an app without payhook would: HMAC of
    /// `{t}.{body}` keyed per request, compared with the header's `v1`, then
    /// `serde_json::Value`; no timestamp check and no dedupe.
    ByHand,
    /// payhook's adapter: verify, typed parse, claim, complete.
    Payhook,
}

/// The hand-written check of [`Route::ByHand`]: true when the signature matches.
fn verify_by_hand(signature: &[u8], body: &[u8]) -> bool {
    use std::fmt::Write as _;

    use hmac::{Hmac, Mac};
    let header = std::str::from_utf8(signature).unwrap_or_default();
    let mut t = None;
    let mut v1 = None;
    for item in header.split(',') {
        match item.split_once('=') {
            Some(("t", value)) => t = Some(value),
            Some(("v1", value)) => v1 = Some(value),
            _ => {}
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else {
        return false;
    };
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).expect("any key length");
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    let mut expected = String::with_capacity(64);
    for byte in mac.finalize().into_bytes() {
        let _ = write!(expected, "{byte:02x}");
    }
    expected.as_bytes() == v1.as_bytes() && serde_json::from_slice::<serde_json::Value>(body).is_ok()
}

fn axum_server(route: Route) -> Server {
    use axum::routing::post;
    use payhook::tower::axum::{Received, Webhook};
    use payhook::tower::WebhookLayer;

    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    listener.set_nonblocking(true).expect("non-blocking listener");
    let addr = listener.local_addr().expect("bound address");
    let app = match route {
        Route::Payhook => axum::Router::new()
            .route(
                "/webhooks",
                post(|Webhook(event): Webhook| async move {
                    black_box(event);
                    Received
                }),
            )
            .route_layer(WebhookLayer::new(receiver())),
        Route::ByHand => axum::Router::new().route(
            "/webhooks",
            post(|headers: http::HeaderMap, body: Bytes| async move {
                let signature = headers.get("x-service-signature").map(|v| v.as_bytes());
                if !signature.is_some_and(|s| verify_by_hand(s, &body)) {
                    return (
                        http::StatusCode::BAD_REQUEST,
                        [(http::header::CONTENT_TYPE, "text/plain")],
                        "bad",
                    );
                }
                (
                    http::StatusCode::OK,
                    [(http::header::CONTENT_TYPE, "application/json")],
                    ACK,
                )
            }),
        ),
        Route::Bare => axum::Router::new().route(
            "/webhooks",
            post(|body: Bytes| async move {
                black_box(body);
                ([(http::header::CONTENT_TYPE, "application/json")], ACK)
            }),
        ),
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("server runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop_rx.await;
                })
                .await
                .expect("axum server");
        });
    });
    Server {
        addr,
        stop: Box::new(move || {
            let _ = stop_tx.send(());
            thread.join().expect("axum server thread");
        }),
    }
}

fn actix_server(route: Route) -> Server {
    use actix_web::{web, App, HttpResponse, HttpServer};
    use payhook::actix::{Webhook, WebhookConfig};

    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let config = WebhookConfig::new(receiver());
            let server = HttpServer::new(move || {
                let app = App::new();
                if route == Route::Payhook {
                    app.app_data(config.clone()).route(
                        "/webhooks",
                        web::post().to(|webhook: Webhook| async move { webhook.ack().await }),
                    )
                } else {
                    app.route(
                        "/webhooks",
                        web::post().to(|body: Bytes| async move {
                            black_box(body);
                            HttpResponse::Ok().content_type("application/json").body(ACK)
                        }),
                    )
                }
            })
            .workers(1)
            .disable_signals()
            .bind(("127.0.0.1", 0))
            .expect("bind loopback");
            let addr = server.addrs()[0];
            let server = server.run();
            tx.send((addr, server.handle())).expect("bench is waiting");
            server.await.expect("actix server");
        });
    });
    let (addr, handle) = rx.recv().expect("actix server started");
    Server {
        addr,
        stop: Box::new(move || {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime to stop the server")
                .block_on(handle.stop(true));
            thread.join().expect("actix server thread");
        }),
    }
}

/// Sends every delivery over `CONNECTIONS` keep-alive connections and returns
/// the requests per second.
fn drive(addr: SocketAddr, deliveries: Vec<(String, Bytes)>) -> f64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    runtime.block_on(async move {
        let total = deliveries.len();
        let mut lanes: Vec<Vec<(String, Bytes)>> = (0..CONNECTIONS).map(|_| Vec::new()).collect();
        for (i, delivery) in deliveries.into_iter().enumerate() {
            lanes[i % CONNECTIONS].push(delivery);
        }
        let mut senders = Vec::new();
        for _ in 0..CONNECTIONS {
            let stream = tokio::net::TcpStream::connect(addr)
                .await
                .expect("connect to server");
            stream.set_nodelay(true).expect("TCP_NODELAY");
            let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .expect("HTTP/1.1 handshake");
            tokio::spawn(connection);
            senders.push(sender);
        }
        let started = Instant::now();
        let tasks: Vec<_> = senders
            .into_iter()
            .zip(lanes)
            .map(|(mut sender, lane)| {
                tokio::spawn(async move {
                    for (signature, body) in lane {
                        let request = http::Request::post("/webhooks")
                            .header(http::header::HOST, "127.0.0.1")
                            .header(http::header::CONTENT_TYPE, "application/json")
                            .header("x-service-signature", signature)
                            .body(Full::new(body))
                            .expect("valid request");
                        sender.ready().await.expect("connection ready");
                        let response = sender.send_request(request).await.expect("response");
                        let status = response.status();
                        let body = response.into_body().collect().await.expect("body").to_bytes();
                        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
                        assert_eq!(body, ACK);
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("client task");
        }
        total as f64 / started.elapsed().as_secs_f64()
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn compare(name: &str, start: fn(Route) -> Server, routes: &[Route], rounds: usize, per_round: usize) {
    let mut rates: Vec<Vec<f64>> = routes.iter().map(|_| Vec::new()).collect();
    // A short warm-up of each, not counted.
    for &route in routes {
        let server = start(route);
        drive(server.addr, deliveries(0, per_round / 4));
        (server.stop)();
    }
    for round in 1..=rounds {
        for (i, &route) in routes.iter().enumerate() {
            let batch = deliveries(round, per_round);
            let server = start(route);
            rates[i].push(drive(server.addr, batch));
            (server.stop)();
        }
    }
    let medians: Vec<f64> = rates.into_iter().map(median).collect();
    let payhook = medians[routes.len() - 1];
    for (route, rate) in routes.iter().zip(&medians) {
        println!(
            "{name:<18} {:<8} {rate:>9.0} req/s   payhook/this {:.3}",
            format!("{route:?}"),
            payhook / rate
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let wanted = |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    let (rounds, per_round) = if quick { (3, 4_000) } else { (5, 20_000) };
    println!(
        "layer_overhead: {rounds} alternating rounds of {per_round} requests, {CONNECTIONS} keep-alive connections, 1 server worker; median req/s"
    );
    if wanted("axum") {
        compare(
            "axum/tower_layer",
            axum_server,
            &[Route::Bare, Route::ByHand, Route::Payhook],
            rounds,
            per_round,
        );
    }
    if wanted("actix") {
        compare(
            "actix/extractor",
            actix_server,
            &[Route::Bare, Route::Payhook],
            rounds,
            per_round,
        );
    }
}
