//! The library used from a `#[tokio::test]` exactly as the crate documentation
//! (and the guide's `docs/guide/emulator.md`) shows it: the same code, with a payhook axum receiver on
//! another loopback port.

use std::time::Duration;

use axum::routing::post;
use payhook_core::{Event, Receiver};
use payhook_emulator::Emulator;
use payhook_tower::axum::{Received, Webhook};
use payhook_tower::WebhookLayer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_library_use_works_in_a_tokio_test() {
    let emulator = Emulator::builder().start().await.unwrap();

    // The receiver under test: its address first, then its secret from the emulator.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhooks", listener.local_addr().unwrap());
    let endpoint = emulator.register_endpoint(&url).unwrap();
    let (handled, mut handled_rx) = tokio::sync::mpsc::unbounded_channel();
    let receiver = Receiver::builder().secret(&endpoint.secret).build().unwrap();
    let app = axum::Router::new()
        .route(
            "/webhooks",
            post(move |Webhook(event): Webhook<Event>| async move {
                let _ = handled.send(event.event_type().to_owned());
                Received
            }),
        )
        .route_layer(WebhookLayer::new(receiver));
    tokio::spawn(async move { axum::serve(listener, app).await });

    // The service's API, over HTTP, as the app's own code would call it.
    let api = reqwest::Client::new();
    let reply = api
        .post(format!("{}/v1/payment_intents", emulator.base_url()))
        .bearer_auth(emulator.api_key())
        .header("content-type", "application/x-www-form-urlencoded")
        .body("amount=1500000000000000000&currency=eth")
        .send()
        .await
        .unwrap();
    let intent: serde_json::Value = serde_json::from_str(&reply.text().await.unwrap()).unwrap();
    let id = intent["id"].as_str().unwrap();
    let succeeded = api
        .post(format!(
            "{}/v1/test_helpers/payment_intents/{id}/succeed",
            emulator.base_url()
        ))
        .bearer_auth(emulator.api_key())
        .send()
        .await
        .unwrap();
    assert_eq!(succeeded.status(), 200);

    // The signed payment_intent.succeeded reaches the handler.
    let event_type = tokio::time::timeout(Duration::from_secs(10), handled_rx.recv())
        .await
        .unwrap();
    assert_eq!(event_type.as_deref(), Some("payment_intent.succeeded"));
    assert!(emulator.wait_idle(Duration::from_secs(10)).await);
    assert!(emulator.attempts().iter().all(|attempt| attempt.succeeded));
    emulator.shutdown().await;
}
