//! The actix-web extractor against the shared behaviour table, plus what is
//! particular to actix: app data configuration, handler errors, responses
//! without an acknowledgement and unreadable bodies. Every test serves a real
//! actix-web app on loopback and talks to it over HTTP. (Custom payload types
//! and the `testing` helper are tested in the adapter crate itself.)

mod support;

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use actix_web::{http::StatusCode, web, App, FromRequest, Handler, HttpResponse, HttpServer, Responder};
use payhook::actix::{Webhook, WebhookConfig};
use payhook::testing::{EventBuilder, SignedDelivery};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
// Imported by name: the macro calls itself unqualified.
use support::{behaviour_table, Behaviour, Calls, Harness, SECRET};

/// Serves `app` on a fresh loopback port with one worker and actix-web's default
/// timeouts; the server stops when the test's runtime drops the spawned server
/// future.
fn serve<F, T>(app: F) -> SocketAddr
where
    F: Fn() -> App<T> + Send + Clone + 'static,
    T: actix_web::dev::ServiceFactory<
            actix_web::dev::ServiceRequest,
            Config = (),
            Response = actix_web::dev::ServiceResponse,
            Error = actix_web::Error,
            InitError = (),
        > + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    let server = HttpServer::new(app)
        .workers(1)
        .disable_signals()
        .shutdown_timeout(0)
        .listen(listener)
        .expect("listen on the loopback port")
        .run();
    tokio::spawn(server);
    addr
}

fn config() -> WebhookConfig {
    WebhookConfig::new(support::receiver_builder().build().expect("valid receiver"))
}

/// The behaviour table's handler: 200 through the acknowledgement, otherwise a
/// plain 500, which leaves the claim to be released.
async fn table_handler(webhook: Webhook, calls: web::Data<Calls>) -> HttpResponse {
    match support::run_handler(&calls, webhook.event_id()).await {
        200 => webhook.ack().await,
        status => HttpResponse::build(StatusCode::from_u16(status).expect("valid status")).finish(),
    }
}

/// Serves `handler` on the webhook path of an app configured as users do: the
/// `WebhookConfig` as plain app data, next to the table's call counter.
fn serve_handler<H, Args>(calls: Calls, handler: H) -> SocketAddr
where
    H: Handler<Args> + Send,
    Args: FromRequest + 'static,
    H::Output: Responder + 'static,
{
    let config = config();
    serve(move || {
        App::new()
            .app_data(config.clone())
            .app_data(web::Data::new(calls.clone()))
            .route(support::PATH, web::post().to(handler.clone()))
    })
}

async fn start(calls: Calls) -> SocketAddr {
    serve_handler(calls, table_handler)
}

behaviour_table!(start);

// ---- actix-specific ------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_config_is_a_500_naming_it() {
    let h = Harness::start(|calls| async move {
        serve(move || {
            App::new()
                .app_data(web::Data::new(calls.clone()))
                .route(support::PATH, web::post().to(table_handler))
        })
    })
    .await;
    let answer = h.deliver(&EventBuilder::payment_intent_succeeded()).await;
    assert_eq!(answer.status, 500, "{answer:?}");
    assert!(answer.body.contains("WebhookConfig"), "{answer:?}");
    assert!(answer.body.contains("app_data"), "{answer:?}");
    assert_eq!(h.calls.total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_wrapped_in_web_data_is_found() {
    let h = Harness::start(|calls| async move {
        let config = web::Data::new(config());
        serve(move || {
            App::new()
                .app_data(config.clone())
                .app_data(web::Data::new(calls.clone()))
                .route(support::PATH, web::post().to(table_handler))
        })
    })
    .await;
    let event = EventBuilder::payment_intent_succeeded().id(Behaviour::Succeed.new_id());
    let answer = h.deliver(&event).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (200, r#"{"received":true}"#)
    );
    assert_eq!(h.calls.count(event.event_id()), 1);
}

async fn failing_handler(webhook: Webhook, calls: web::Data<Calls>) -> actix_web::Result<HttpResponse> {
    if support::run_handler(&calls, webhook.event_id()).await != 200 {
        return Err(actix_web::error::ErrorServiceUnavailable("ledger unavailable"));
    }
    Ok(webhook.ack().await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_returning_an_error_releases_the_claim() {
    let h = Harness::start(|calls| async move { serve_handler(calls, failing_handler) }).await;
    let event = EventBuilder::payment_intent_succeeded().id(Behaviour::FailOnce.new_id());
    let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    let first = h.post(signed.body.clone(), Some(&signed.signature)).await;
    assert_eq!((first.status, first.body.as_str()), (503, "ledger unavailable"));
    let retry = h.post(signed.body.clone(), Some(&signed.signature)).await;
    assert_eq!((retry.status, retry.body.as_str()), (200, r#"{"received":true}"#));
    let duplicate = h.post(signed.body, Some(&signed.signature)).await;
    assert_eq!(duplicate.status, 200);
    assert_eq!(h.calls.count(event.event_id()), 2);
}

async fn forgetful_handler(webhook: Webhook, calls: web::Data<Calls>) -> HttpResponse {
    support::run_handler(&calls, webhook.event_id()).await;
    HttpResponse::Ok().body("done") // no ack
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn success_without_ack_is_not_marked_handled() {
    let h = Harness::start(|calls| async move { serve_handler(calls, forgetful_handler) }).await;
    let event = EventBuilder::payment_intent_succeeded().id(Behaviour::Succeed.new_id());
    for _ in 0..2 {
        let answer = h.deliver(&event).await;
        assert_eq!((answer.status, answer.body.as_str()), (200, "done"));
    }
    // Without an acknowledgement each delivery runs the handler: a redelivery,
    // never a lost event.
    assert_eq!(h.calls.count(event.event_id()), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_chunked_body_is_a_400_read_error() {
    let h = Harness::start(start).await;
    let signature = SignedDelivery::now("{}", SECRET).unwrap().signature;
    let request = format!(
        "POST {} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         x-service-signature: {signature}\r\ntransfer-encoding: chunked\r\n\r\n\
         4\r\n{{\"id\r\nzz-not-a-chunk-size\r\n",
        support::PATH,
        h.addr
    );
    let mut stream = tokio::net::TcpStream::connect(h.addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("send");
    let expected = b"Webhook Error: could not read the request body: ";
    let mut reply = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 1024];
        // Read until the expected text has arrived, or the server hangs up.
        while !reply.windows(expected.len()).any(|w| w == expected) {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => reply.extend_from_slice(&buf[..n]),
            }
        }
    });
    read.await.expect("the server answers within 10 s");
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 400 "), "{reply}");
    assert!(
        reply.contains("Webhook Error: could not read the request body: "),
        "{reply}"
    );
    assert!(reply.contains("content-type: text/plain"), "{reply}");
    assert_eq!(h.calls.total(), 0);
}
