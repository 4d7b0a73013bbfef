//! The actix-web extractor against the shared behaviour table, plus what is
//! particular to actix: app data configuration, handler errors, responses
//! without an acknowledgement and unreadable bodies. Every test serves a real
//! actix-web app on loopback and talks to it over HTTP. (Custom payload types
//! and the `testing` helper are tested in the adapter crate itself.)

use crate::actix_loopback;
use crate::support;

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use actix_loopback::serve;
use actix_web::{http::StatusCode, web, App, FromRequest, Handler, HttpResponse, Responder};
use payhook::actix::{Webhook, WebhookConfig};
use payhook::sender::{EventBuilder, SignedDelivery};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
// Imported by name: the macro calls itself unqualified.
use support::{behaviour_table, Behaviour, Calls, Harness, SECRET};

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
    assert_eq!(
        answer.body,
        "Webhook Error: server misconfigured: this webhook route has no payhook receiver; \
         register a payhook_actix::WebhookConfig with App::app_data(WebhookConfig::new(receiver))"
    );
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

/// Runs forever the first time an event is delivered (until its request is
/// dropped), and acknowledges at once afterwards.
async fn hanging_once_handler(webhook: Webhook, calls: web::Data<Calls>) -> HttpResponse {
    if calls.record_run(webhook.event_id()) == 1 {
        std::future::pending::<()>().await;
    }
    webhook.ack().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_mid_handler_releases_the_claim() {
    let h = Harness::start(|calls| async move { serve_handler(calls, hanging_once_handler) }).await;
    let event = EventBuilder::payment_intent_succeeded().id(Behaviour::Succeed.new_id());
    let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    let request = format!(
        "POST {} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         x-service-signature: {}\r\ncontent-length: {}\r\n\r\n",
        support::PATH,
        h.addr,
        signed.signature,
        signed.body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(h.addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("send head");
    stream.write_all(&signed.body).await.expect("send body");
    let started = async {
        while h.calls.count(event.event_id()) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), started)
        .await
        .expect("the handler starts");
    // While it runs, the event is in flight.
    let answer = h.post(signed.body.clone(), Some(&signed.signature)).await;
    assert_eq!(answer.status, 409, "{answer:?}");
    // The client goes away mid-handler.
    drop(stream);
    let retry = async {
        loop {
            let answer = h.post(signed.body.clone(), Some(&signed.signature)).await;
            if answer.status != 409 {
                return answer;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let answer = tokio::time::timeout(Duration::from_secs(5), retry)
        .await
        .expect("the claim is released once the client is gone");
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (200, r#"{"received":true}"#)
    );
    assert_eq!(h.calls.count(event.event_id()), 2, "the retry ran the handler");
}

/// Serves the table's app through actix-http with payhook's `ExpectContinue`.
fn serve_with_expect_continue(calls: Calls) -> SocketAddr {
    use actix_http::HttpService;
    use payhook::actix::ExpectContinue;

    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    let config = config();
    let server = actix_server::Server::build()
        .workers(1)
        .disable_signals()
        .shutdown_timeout(0)
        .listen("webhooks", listener, move || {
            HttpService::build()
                .expect(ExpectContinue::new(config.receiver()))
                .h1(actix_service::map_config(
                    App::new()
                        .app_data(config.clone())
                        .app_data(web::Data::new(calls.clone()))
                        .route(support::PATH, web::post().to(table_handler)),
                    |_| actix_web::dev::AppConfig::default(),
                ))
                .tcp()
        })
        .expect("listen on the loopback port")
        .run();
    tokio::spawn(server);
    addr
}

/// Writes `head`, reads until the end of the first reply head, and returns it.
async fn first_reply_head(stream: &mut tokio::net::TcpStream, head: &str) -> String {
    stream.write_all(head.as_bytes()).await.expect("send head");
    let mut reply = Vec::new();
    let mut buf = [0u8; 1];
    tokio::time::timeout(Duration::from_secs(10), async {
        while !reply.ends_with(b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => reply.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the server answers within 10 s");
    String::from_utf8_lossy(&reply).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_continue_over_the_limit_is_413_before_any_100_continue() {
    let h = Harness::start(|calls| async move { serve_with_expect_continue(calls) }).await;
    let signature = SignedDelivery::now("{}", SECRET).unwrap().signature;
    let head = format!(
        "POST {} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         x-service-signature: {signature}\r\nexpect: 100-continue\r\ncontent-length: {}\r\n\r\n",
        support::PATH,
        h.addr,
        support::BODY_LIMIT + 1
    );
    let mut stream = tokio::net::TcpStream::connect(h.addr).await.expect("connect");
    let reply = first_reply_head(&mut stream, &head).await;
    assert!(reply.starts_with("HTTP/1.1 413 "), "{reply:?}");
    assert_eq!(h.calls.total(), 0);

    // Within the limit, the client is invited to send, and the delivery is handled.
    let event = EventBuilder::payment_intent_succeeded().id(Behaviour::Succeed.new_id());
    let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    let head = format!(
        "POST {} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         x-service-signature: {}\r\nexpect: 100-continue\r\ncontent-length: {}\r\n\r\n",
        support::PATH,
        h.addr,
        signed.signature,
        signed.body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(h.addr).await.expect("connect");
    let reply = first_reply_head(&mut stream, &head).await;
    assert!(reply.starts_with("HTTP/1.1 100 Continue"), "{reply:?}");
    stream.write_all(&signed.body).await.expect("send body");
    let reply = first_reply_head(&mut stream, "").await;
    assert!(reply.starts_with("HTTP/1.1 200 "), "{reply:?}");
    let mut body = [0u8; 17];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut body))
        .await
        .expect("the reply body arrives")
        .expect("read the reply body");
    assert_eq!(&body, br#"{"received":true}"#);
    assert_eq!(h.calls.count(event.event_id()), 1);
}

/// The table's handler through `acking`: `Ok` acknowledges, no `ack()` call.
async fn acking_table_handler(event: payhook::Event, calls: web::Data<Calls>) -> actix_web::Result<()> {
    match support::run_handler(&calls, event.id()).await {
        200 => Ok(()),
        _ => Err(actix_web::error::ErrorServiceUnavailable("ledger unavailable")),
    }
}

/// The table's handler through `acking`, panicking as the table asks.
async fn acking_panicky_handler(event: payhook::Event, calls: web::Data<Calls>) -> actix_web::Result<()> {
    support::run_handler(&calls, event.id()).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acking_handler_panic_is_the_cores_500_and_releases_the_claim() {
    let h = Harness::start(|calls| async move {
        serve_handler(calls, payhook::actix::acking(acking_panicky_handler))
    })
    .await;
    let event = EventBuilder::payment_intent_succeeded().id(Behaviour::PanicOnce.new_id());
    let answer = h.deliver(&event).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (
            500,
            "Webhook Error: the handler panicked; the event was not acknowledged and will be delivered again"
        )
    );
    let answer = h.deliver(&event).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (200, r#"{"received":true}"#)
    );
    assert_eq!(h.calls.count(event.event_id()), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acking_handlers_acknowledge_on_ok_and_release_on_err() {
    let h =
        Harness::start(
            |calls| async move { serve_handler(calls, payhook::actix::acking(acking_table_handler)) },
        )
        .await;
    let event = EventBuilder::payment_intent_succeeded().id(Behaviour::Succeed.new_id());
    let answer = h.deliver(&event).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (200, r#"{"received":true}"#)
    );
    // Marked done by the Ok alone: the duplicate does not run the handler.
    assert_eq!(h.deliver(&event).await.status, 200);
    assert_eq!(h.calls.count(event.event_id()), 1);

    let failing = EventBuilder::payment_intent_succeeded().id(Behaviour::FailOnce.new_id());
    let answer = h.deliver(&failing).await;
    assert_eq!((answer.status, answer.body.as_str()), (503, "ledger unavailable"));
    let answer = h.deliver(&failing).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (200, r#"{"received":true}"#)
    );
    assert_eq!(h.deliver(&failing).await.status, 200);
    assert_eq!(
        h.calls.count(failing.event_id()),
        2,
        "the retry after the Err ran it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_handlers_route_by_type_and_acknowledge_on_ok() {
    let h = Harness::start(|calls| async move {
        let (on_payout, on_paid, on_other) = (calls.clone(), calls.clone(), calls.clone());
        let handlers = payhook::actix::EventHandlers::new()
            .on("payout.paid", move |event: Webhook| {
                let calls = on_payout.clone();
                async move {
                    calls.record_run(&format!("payout {}", event.id()));
                    Ok::<_, actix_web::Error>(())
                }
            })
            .payment_succeeded(move |event: Webhook| {
                let calls = on_paid.clone();
                async move {
                    // Fails the first time: the claim is released for the retry.
                    if calls.record_run(&format!("paid {}", event.id())) == 1 {
                        return Err(actix_web::error::ErrorInternalServerError("not yet"));
                    }
                    Ok(())
                }
            })
            .on("refund.created", move |event: Webhook| {
                let calls = on_other.clone();
                async move {
                    calls.record_run(&format!("refund {}", event.id()));
                    Ok::<_, actix_web::Error>(())
                }
            });
        serve_handler(calls, handlers)
    })
    .await;
    let received = (200, r#"{"received":true}"#.to_owned());
    let said = |a: support::Answer| (a.status, a.body);

    let payout = EventBuilder::other("payout.paid");
    assert_eq!(said(h.deliver(&payout).await), received);
    assert_eq!(said(h.deliver(&payout).await), received, "duplicate");
    assert_eq!(h.calls.count(&format!("payout {}", payout.event_id())), 1);

    for paid in [
        EventBuilder::payment_intent_succeeded(),
        EventBuilder::payment_succeeded(),
    ] {
        assert_eq!(said(h.deliver(&paid).await), (500, "not yet".to_owned()));
        assert_eq!(said(h.deliver(&paid).await), received, "retry");
        assert_eq!(said(h.deliver(&paid).await), received, "duplicate");
        assert_eq!(h.calls.count(&format!("paid {}", paid.event_id())), 2);
    }

    // A type nothing takes is acknowledged (and done) without running anything.
    let unknown = EventBuilder::payment_intent_failed();
    assert_eq!(said(h.deliver(&unknown).await), received);
    let refund = EventBuilder::other("refund.created");
    assert_eq!(said(h.deliver(&refund).await), received);
    assert_eq!(h.calls.count(&format!("refund {}", refund.event_id())), 1);
    assert_eq!(h.calls.total(), 6);
}
