//! The shared behaviour table against an axum app with `WebhookLayer` on
//! `POST /webhooks`, over real HTTP on loopback.

use crate::axum_loopback;
use crate::support;

use std::net::SocketAddr;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use axum_loopback::serve;
use payhook::tower::axum::{Received, Webhook};
use payhook::tower::WebhookLayer;
use support::{behaviour_table, receiver_builder, run_handler, Calls, PATH};

async fn webhook(State(calls): State<Calls>, Webhook(event): Webhook) -> Response {
    match run_handler(&calls, event.id()).await {
        200 => Received.into_response(),
        status => StatusCode::from_u16(status)
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            .into_response(),
    }
}

async fn start(calls: Calls) -> SocketAddr {
    let receiver = receiver_builder().build().expect("valid receiver configuration");
    let app = Router::new()
        .route(PATH, post(webhook))
        .route_layer(WebhookLayer::new(receiver))
        .with_state(calls);
    serve(app).await
}

behaviour_table!(start);
