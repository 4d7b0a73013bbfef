//! `Idempotency-Key` on every `POST`: a key is scoped to the API key and bound
//! to the route, the object id, the content type and the exact body; the same
//! request again replays the first reply (rebuilt from what it references),
//! other parameters are a 400 and a request while the first runs a 409.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Extension, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use payhook_core::PaymentIntent;
use sha2::{Digest, Sha256};

use super::{path_id, to_json};
use crate::auth::ApiKey;
use crate::error::{json_response, ApiError};
use crate::model::IntentObject;
use crate::params::{BodyFormat, Params};
use crate::state::{Idempotent, Stored};
use crate::text::shown;
use crate::Shared;

/// The longest `Idempotency-Key`.
const MAX_IDEMPOTENCY_KEY_CHARS: usize = 255;

/// What an operation answers: the reply body, and how an idempotency key
/// keeps it for a replay (`None`: as the bytes themselves).
pub(crate) struct OpReply {
    pub body: Vec<u8>,
    pub stored: Option<Stored>,
}

impl OpReply {
    pub(crate) fn bytes(body: Vec<u8>) -> Self {
        Self { body, stored: None }
    }

    /// A payment intent, kept by reference for replays.
    pub(crate) fn intent(intent: &PaymentIntent) -> Result<Self, ApiError> {
        Ok(Self {
            body: to_json(&IntentObject::of(intent))?,
            stored: Some(Stored::Intent {
                id: intent.id.clone(),
                status: intent.status.clone(),
                amount_received: intent.amount_received,
            }),
        })
    }
}

pub(crate) type Op = fn(&Arc<Shared>, &str, Params) -> Result<OpReply, ApiError>;

/// The reply an idempotency key replays, rebuilt from what it references.
fn replay(shared: &Shared, stored: &Stored) -> Result<Vec<u8>, ApiError> {
    let gone = |what: &str, id: &str| {
        let mut error = ApiError::missing("id", what, id);
        error.message = format!(
            "The {} {} this Idempotency-Key's first request returned is no longer kept \
             (evicted or deleted since), so its reply cannot be replayed",
            what.replace('_', " "),
            shown(id)
        );
        error
    };
    let state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    match stored {
        Stored::Bytes(bytes) => Ok(bytes.to_vec()),
        Stored::Intent {
            id,
            status,
            amount_received,
        } => {
            let intent = state.intents.get(id).ok_or_else(|| gone("payment_intent", id))?;
            let mut then = intent.clone();
            then.status = status.clone();
            then.amount_received = *amount_received;
            to_json(&IntentObject::of(&then))
        }
        Stored::Endpoint { id, shown } => {
            let endpoint = state
                .endpoints
                .get(id)
                .ok_or_else(|| gone("webhook_endpoint", id))?;
            to_json(&endpoint.to_object(Some(shown)))
        }
    }
}

/// A `POST` on a collection (`route`): no id in the path.
pub(crate) async fn collection_post(
    State(shared): State<Arc<Shared>>,
    Extension(key): Extension<ApiKey>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    route: &'static str,
    op: Op,
) -> Response {
    idempotent_post(&shared, &key, &headers, body, route, String::new(), op).await
}

/// A `POST` on one object (`/…/{id}/action`): the id is part of what an
/// idempotency key is bound to.
pub(crate) async fn object_post(
    State(shared): State<Arc<Shared>>,
    Extension(key): Extension<ApiKey>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    action: &'static str,
    op: impl FnOnce(&Arc<Shared>, &str, Params) -> Result<OpReply, ApiError>,
) -> Response {
    match path_id(path) {
        Ok(id) => idempotent_post(&shared, &key, &headers, body, action, id, op).await,
        Err(e) => e.into_response(),
    }
}

/// Removes an in-flight idempotency key if its request ends without a reply
/// (the client went away), so the key does not answer 409 for ever.
struct InFlightKey<'a> {
    shared: &'a Shared,
    key: Option<(String, String)>,
}

impl Drop for InFlightKey<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            state.idempotency.remove(&key);
        }
    }
}

/// Runs a `POST` operation: body checks, then `Idempotency-Key` (replay for
/// the same parameters, 400 for others, 409 while the first is running).
async fn idempotent_post(
    shared: &Arc<Shared>,
    api_key: &ApiKey,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    route: &str,
    id: String,
    op: impl FnOnce(&Arc<Shared>, &str, Params) -> Result<OpReply, ApiError>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return body_error(&rejection, shared.config.limits.body_bytes).into_response(),
    };
    let content_type = headers.get(header::CONTENT_TYPE).map(HeaderValue::as_bytes);
    let format = match BodyFormat::from_content_type(content_type, body.is_empty()) {
        Ok(format) => format,
        Err(error) => return error.into_response(),
    };
    let mut in_flight = InFlightKey { shared, key: None };
    if let Some(value) = headers.get("idempotency-key") {
        let key = match value.to_str() {
            Ok(key) if !key.is_empty() && key.chars().count() <= MAX_IDEMPOTENCY_KEY_CHARS => key.to_owned(),
            _ => {
                return ApiError::idempotency(
                    StatusCode::BAD_REQUEST,
                    "idempotency_key_invalid",
                    format!("The Idempotency-Key header must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} visible ASCII characters"),
                )
                .into_response()
            }
        };
        let mut hasher = Sha256::new();
        for part in [
            route.as_bytes(),
            id.as_bytes(),
            content_type.unwrap_or_default(),
            &body,
        ] {
            hasher.update(u64::try_from(part.len()).unwrap_or(u64::MAX).to_le_bytes());
            hasher.update(part);
        }
        let fingerprint: [u8; 32] = hasher.finalize().into();
        let scoped = (api_key.0.clone(), key);
        let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match state.idempotency.get(&scoped, now) {
            Some(
                Idempotent::InFlight {
                    fingerprint: first, ..
                }
                | Idempotent::Done {
                    fingerprint: first, ..
                },
            ) if *first != fingerprint => {
                return ApiError::idempotency(
                    StatusCode::BAD_REQUEST,
                    "idempotency_key_reused",
                    "Keys for idempotent requests can only be used with the same parameters they were \
                     first used with: this Idempotency-Key was first sent with other parameters",
                )
                .into_response();
            }
            Some(Idempotent::InFlight { .. }) => {
                return ApiError::idempotency(
                    StatusCode::CONFLICT,
                    "idempotency_key_in_use",
                    "A request with this Idempotency-Key is still being processed; retry once it has finished",
                )
                .into_response();
            }
            Some(Idempotent::Done { status, reply, .. }) => {
                let (status, reply) = (*status, reply.clone());
                drop(state);
                return match replay(shared, &reply) {
                    Ok(body) => {
                        let mut response = json_response(status, body);
                        response
                            .headers_mut()
                            .insert("idempotent-replayed", HeaderValue::from_static("true"));
                        response
                    }
                    Err(error) => error.into_response(),
                };
            }
            None => {
                state.idempotency.set(
                    scoped.clone(),
                    Idempotent::InFlight {
                        fingerprint,
                        since: now,
                    },
                );
                in_flight.key = Some(scoped);
            }
        }
    }
    if !shared.config.api_latency.is_zero() {
        tokio::time::sleep(shared.config.api_latency).await;
    }
    let (status, reply, stored) =
        match Params::from_body(format, &body).and_then(|params| op(shared, &id, params)) {
            Ok(OpReply { body, stored }) => (StatusCode::OK, body, stored),
            Err(error) => (error.status, error.to_json(), None),
        };
    if let Some(scoped) = in_flight.key.take() {
        let stored = stored.unwrap_or_else(|| Stored::Bytes(Bytes::from(reply.clone())));
        let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(Idempotent::InFlight { fingerprint, since }) =
            state.idempotency.get(&scoped, Instant::now()).cloned()
        {
            state.idempotency.set(
                scoped,
                Idempotent::Done {
                    fingerprint,
                    since,
                    status,
                    reply: stored,
                },
            );
        }
    }
    json_response(status, reply)
}

fn body_error(rejection: &BytesRejection, limit: usize) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::with_status(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            format!("The request body is larger than the {limit}-byte limit"),
        )
    } else {
        ApiError::bad_request("body_unreadable", "The request body could not be read")
    }
}
