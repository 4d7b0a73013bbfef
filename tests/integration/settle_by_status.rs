//! One rule in both adapters: the handler's response settles the event. A 2xx
//! marks it done (a redelivery does not run the handler), an error status or an
//! `Err` releases it (a redelivery runs it again), and so does a panic. The
//! shared behaviour table runs, over real HTTP on loopback, against:
//!
//! * an actix-web handler that never calls `ack()`, under `.wrap(WebhookConfig)`;
//! * actix-web `EventHandlers` whose handlers take actix extractors;
//! * axum `EventHandlers` whose handlers take axum extractors.

use crate::actix_loopback;
use crate::support;

use actix_loopback::serve as serve_actix;
use std::net::SocketAddr;

use actix_web::{web, App, HttpResponse};
use support::{behaviour_table, receiver_builder, run_handler, Calls, PATH};

/// The table's status as an actix response: no `ack()`, the status alone.
fn actix_status(status: u16) -> HttpResponse {
    match status {
        200 => HttpResponse::Ok().finish(),
        status => {
            HttpResponse::build(actix_web::http::StatusCode::from_u16(status).expect("valid status")).finish()
        }
    }
}

mod actix_middleware {
    use super::*;
    use payhook::actix::{Webhook, WebhookConfig};

    async fn by_status(webhook: Webhook, calls: web::Data<Calls>) -> HttpResponse {
        actix_status(run_handler(&calls, webhook.event_id()).await)
    }

    pub(super) async fn start(calls: Calls) -> SocketAddr {
        let config = WebhookConfig::new(receiver_builder().build().expect("valid receiver"));
        serve_actix(move || {
            App::new()
                .wrap(config.clone())
                .app_data(web::Data::new(calls.clone()))
                .route(PATH, web::post().to(by_status))
        })
    }

    behaviour_table!(start);
}

mod actix_event_handlers {
    use super::*;
    use payhook::actix::{EventHandlers, Webhook, WebhookConfig};

    /// An ordinary actix-web handler: the event and the app's data.
    async fn by_status(webhook: Webhook, calls: web::Data<Calls>) -> HttpResponse {
        actix_status(run_handler(&calls, webhook.event_id()).await)
    }

    pub(super) async fn start(calls: Calls) -> SocketAddr {
        // Plain app data, not the middleware: EventHandlers settles by the
        // response on its own.
        let config = WebhookConfig::new(receiver_builder().build().expect("valid receiver"));
        let handlers = EventHandlers::new()
            .payment_succeeded(by_status)
            .payment_failed(by_status)
            .other(by_status);
        serve_actix(move || {
            App::new()
                .app_data(config.clone())
                .app_data(web::Data::new(calls.clone()))
                .route(PATH, web::post().to(handlers.clone()))
        })
    }

    behaviour_table!(start);
}

mod axum_event_handlers {
    use super::*;
    use axum::extract::State;
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use payhook::tower::axum::{EventHandlers, Received, Webhook};
    use payhook::tower::WebhookLayer;

    async fn by_status(State(calls): State<Calls>, Webhook(event): Webhook) -> Response {
        match run_handler(&calls, event.id()).await {
            200 => Received.into_response(),
            status => StatusCode::from_u16(status)
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
                .into_response(),
        }
    }

    pub(super) async fn start(calls: Calls) -> SocketAddr {
        let receiver = receiver_builder().build().expect("valid receiver");
        let handlers = EventHandlers::new()
            .payment_succeeded(by_status)
            .payment_failed(by_status)
            .other(by_status);
        let app = axum::Router::new()
            .route(PATH, axum::routing::post(handlers))
            .route_layer(WebhookLayer::new(receiver))
            .with_state(calls);
        crate::axum_loopback::serve(app).await
    }

    behaviour_table!(start);
}
