//! A receiver built inside actix-web's per-worker app factory gets one in-memory
//! store per worker: the dedupe splits, and payhook says so in the log. Built
//! once outside and cloned in, one store serves every worker. Real two-worker
//! servers on loopback; the log is captured process-wide (hence this test
//! binary, `captured_log`, of its own).

use crate::support;

use std::net::{SocketAddr, TcpListener};

use actix_web::{web, App, HttpResponse, HttpServer};
use payhook::actix::{Webhook, WebhookConfig};
use payhook::sender::{EventBuilder, SignedDelivery};
use support::{Calls, SECRET};

async fn handler(webhook: Webhook, calls: web::Data<Calls>) -> HttpResponse {
    calls.record_run(webhook.event_id());
    webhook.ack().await
}

/// Two workers; `config` makes each worker's `WebhookConfig`.
fn serve(
    calls: Calls,
    route: &'static str,
    config: impl Fn() -> WebhookConfig + Send + Clone + 'static,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    let server = HttpServer::new(move || {
        App::new()
            .app_data(config())
            .app_data(web::Data::new(calls.clone()))
            .route(route, web::post().to(handler))
    })
    .workers(2)
    .disable_signals()
    .shutdown_timeout(0)
    .listen(listener)
    .expect("listen")
    .run();
    tokio::spawn(server);
    addr
}

/// Delivers the same event `times` times, each on a new connection (actix-web
/// hands new connections to its workers in turn).
async fn deliver_repeatedly(addr: SocketAddr, route: &str, event: &EventBuilder, times: usize) {
    for _ in 0..times {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
        let response = client
            .post(format!("http://{addr}{route}"))
            .header("x-service-signature", &signed.signature)
            .body(signed.body)
            .send()
            .await
            .expect("reaches the server");
        assert_eq!(response.status(), 200);
    }
}

const WARNING: &str = "this route is served by several receivers, each with its own in-memory store";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_per_worker_is_warned_about_and_one_built_outside_dedupes_across_workers() {
    // Every WARN line of the process, as text.
    let log = &crate::captured().warnings;

    // Built once outside and cloned into every worker: one store, one run.
    let calls = Calls::default();
    let shared = WebhookConfig::new(support::receiver_builder().build().unwrap());
    let addr = serve(calls.clone(), "/shared", move || shared.clone());
    let event = EventBuilder::payment_intent_succeeded();
    deliver_repeatedly(addr, "/shared", &event, 6).await;
    assert_eq!(calls.count(event.event_id()), 1);
    assert!(!log.text().contains(WARNING), "{}", log.text());

    // Built inside the factory: one store per worker. The dedupe splits (the
    // handler runs once per worker), and the log says why.
    let calls = Calls::default();
    let addr = serve(calls.clone(), "/per-worker", || {
        WebhookConfig::new(support::receiver_builder().build().unwrap())
    });
    let event = EventBuilder::payment_intent_succeeded();
    deliver_repeatedly(addr, "/per-worker", &event, 6).await;
    assert_eq!(calls.count(event.event_id()), 2, "one run per worker's store");
    let text = log.text();
    assert!(text.contains(WARNING), "{text}");
    assert!(text.contains("route=/per-worker"), "{text}");
    assert!(text.contains("build the Receiver once"), "{text}");
}
