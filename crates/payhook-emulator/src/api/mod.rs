//! The HTTP API (the table in the crate documentation): the
//! router, and what every resource's handlers share. Each resource is a file:
//! [`payment_intents`], [`endpoints`], [`events`]; [`idempotency`] wraps every
//! `POST`, [`pagination`] reads and writes lists.

mod endpoints;
mod events;
mod faults;
mod idempotency;
mod pagination;
mod payment_intents;

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use payhook_core::event::EventType;
use serde::Serialize;

use crate::error::{json_response, ApiError};
use crate::text::shown;
use crate::Shared;

pub(crate) use endpoints::{create_endpoint_op, insert_endpoint, parse_endpoint_url};
pub(crate) use events::resend_op;
pub(crate) use faults::put_faults;
pub(crate) use payment_intents::{new_payment_intent, new_payment_intent_of, settle};

use endpoints::{delete_endpoint, get_endpoint, list_endpoints, roll_secret_op};
use events::{get_event, list_attempts, list_events};
use idempotency::{collection_post, object_post};
use payment_intents::{create_intent_op, get_intent, list_intents, test_helper_op};

/// The API router.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let body_limit = shared.config.limits.body_bytes;
    let mut router = Router::new();
    // One test helper per kind of the event catalogue that the emulator emits.
    for entry in EventType::emulated() {
        let Some(helper) = entry.test_helper else {
            continue;
        };
        router = router.route(
            &format!("/v1/test_helpers/payment_intents/{{id}}/{}", helper.path),
            post(move |s, k, p, h, b| object_post(s, k, p, h, b, helper.path, test_helper_op(entry))),
        );
    }
    router
        .route(
            "/v1/payment_intents",
            get(list_intents)
                .post(|s, k, h, b| collection_post(s, k, h, b, "/v1/payment_intents", create_intent_op)),
        )
        .route("/v1/payment_intents/{id}", get(get_intent))
        .route("/v1/events", get(list_events))
        .route("/v1/events/{id}", get(get_event))
        .route("/v1/events/{id}/delivery_attempts", get(list_attempts))
        .route(
            "/v1/events/{id}/resend",
            post(|s, k, p, h, b| object_post(s, k, p, h, b, "resend", resend_op)),
        )
        .route(
            "/v1/webhook_endpoints",
            get(list_endpoints)
                .post(|s, k, h, b| collection_post(s, k, h, b, "/v1/webhook_endpoints", create_endpoint_op)),
        )
        .route(
            "/v1/webhook_endpoints/{id}",
            get(get_endpoint).delete(delete_endpoint),
        )
        .route(
            "/v1/webhook_endpoints/{id}/roll_secret",
            post(|s, k, p, h, b| object_post(s, k, p, h, b, "roll_secret", roll_secret_op)),
        )
        .route(
            "/v1/test_helpers/faults",
            get(faults::get_faults).post(faults::post_faults),
        )
        .fallback(unknown_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&shared),
            crate::auth::require_key,
        ))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(shared)
}

async fn unknown_route(method: Method, uri: Uri) -> Response {
    ApiError::with_status(
        StatusCode::NOT_FOUND,
        "route_unknown",
        format!("Unrecognized request URL ({method} {})", shown(uri.path())),
    )
    .into_response()
}

async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    ApiError::with_status(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", shown(uri.path())),
    )
    .into_response()
}

pub(crate) fn path_id(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    path.map(|Path(id)| id)
        .map_err(|_| ApiError::bad_request("path_invalid", "the id in the path is not valid"))
}

pub(crate) fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(value).map_err(|_| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        kind: crate::error::ErrorType::Api,
        code: None,
        message: "could not encode the reply".to_owned(),
        param: None,
    })
}

pub(crate) fn required<T>(value: Option<T>, name: &str) -> Result<T, ApiError> {
    value.ok_or_else(|| {
        ApiError::invalid(
            name,
            "parameter_missing",
            format!("Missing required param: {name}"),
        )
    })
}

pub(crate) fn internal() -> ApiError {
    ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        kind: crate::error::ErrorType::Api,
        code: None,
        message: "internal error".to_owned(),
        param: None,
    }
}

pub(crate) fn reply(result: Result<Vec<u8>, ApiError>) -> Response {
    match result {
        Ok(body) => json_response(StatusCode::OK, body),
        Err(error) => error.into_response(),
    }
}
