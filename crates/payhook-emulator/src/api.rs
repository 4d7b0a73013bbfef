//! The HTTP API of SPEC §8: routes, the idempotency wrapper of every `POST`, and
//! the operations themselves (shared with the library's in-process helpers).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Extension, Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use payhook_core::{Metadata, PaymentIntent, PaymentIntentStatus, PaymentMethod, Secret};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::auth::ApiKey;
use crate::error::{json_response, ApiError};
use crate::model::{
    Endpoint, EventBody, EventData, EventRecord, IntentObject, SigningKeys, API_VERSION, REQUIRES_PAYMENT,
};
use crate::params::{BodyFormat, Params};
use crate::state::{paginate, Idempotent, Page, Stored};
use crate::text::shown;
use crate::{delivery, ids, params, unix_seconds, Shared};

/// The event types the emulator emits: `payment_intent.succeeded` (from the
/// succeed test helper) and `payment_intent.failed` (from the fail helper).
/// `enabled_events` may name these, any other type string, or `*`.
pub const EMITTED_EVENT_TYPES: [&str; 2] = ["payment_intent.succeeded", "payment_intent.failed"];
/// The longest `roll_secret` overlap, `expires_in`: 7 days.
const MAX_EXPIRES_IN: u128 = 7 * 24 * 3600;
/// The longest endpoint URL, normalized.
const MAX_URL_BYTES: usize = 2048;
/// The longest `Idempotency-Key`.
const MAX_IDEMPOTENCY_KEY_CHARS: usize = 255;

/// The API router.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let body_limit = shared.config.limits.body_bytes;
    Router::new()
        .route(
            "/v1/payment_intents",
            get(list_intents)
                .post(|s, k, h, b| collection_post(s, k, h, b, "/v1/payment_intents", create_intent_op)),
        )
        .route("/v1/payment_intents/{id}", get(get_intent))
        .route(
            "/v1/test_helpers/payment_intents/{id}/succeed",
            post(|s, k, p, h, b| object_post(s, k, p, h, b, "succeed", succeed_op)),
        )
        .route(
            "/v1/test_helpers/payment_intents/{id}/fail",
            post(|s, k, p, h, b| object_post(s, k, p, h, b, "fail", fail_op)),
        )
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

/// What an operation answers: the reply body, and how an idempotency key
/// keeps it for a replay (`None`: as the bytes themselves).
pub(crate) struct OpReply {
    pub body: Vec<u8>,
    pub stored: Option<Stored>,
}

impl OpReply {
    fn bytes(body: Vec<u8>) -> Self {
        Self { body, stored: None }
    }

    /// A payment intent, kept by reference for replays.
    fn intent(intent: &PaymentIntent) -> Result<Self, ApiError> {
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

type Op = fn(&Arc<Shared>, &str, Params) -> Result<OpReply, ApiError>;

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
        Stored::Endpoint { id, secret } => {
            let endpoint = state
                .endpoints
                .get(id)
                .ok_or_else(|| gone("webhook_endpoint", id))?;
            to_json(&endpoint.to_object(Some(secret)))
        }
    }
}

fn path_id(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    path.map(|Path(id)| id)
        .map_err(|_| ApiError::bad_request("path_invalid", "the id in the path is not valid"))
}

/// A `POST` on a collection (`route`): no id in the path.
async fn collection_post(
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
async fn object_post(
    State(shared): State<Arc<Shared>>,
    Extension(key): Extension<ApiKey>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    action: &'static str,
    op: Op,
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
    op: Op,
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

fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(value).map_err(|_| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        kind: crate::error::ErrorType::Api,
        code: None,
        message: "could not encode the reply".to_owned(),
        param: None,
    })
}

fn required<T>(value: Option<T>, name: &str) -> Result<T, ApiError> {
    value.ok_or_else(|| {
        ApiError::invalid(
            name,
            "parameter_missing",
            format!("Missing required param: {name}"),
        )
    })
}

/// `POST /v1/payment_intents`.
fn create_intent_op(shared: &Arc<Shared>, _: &str, params: Params) -> Result<OpReply, ApiError> {
    OpReply::intent(&new_payment_intent(shared, params)?)
}

/// Creates a payment intent from request parameters.
pub(crate) fn new_payment_intent(
    shared: &Arc<Shared>,
    mut params: Params,
) -> Result<PaymentIntent, ApiError> {
    let amount = required(params.take_integer("amount", 1)?, "amount")?;
    let currency = required(params.take_string("currency", MAX_CURRENCY_CHARS)?, "currency")?;
    check_currency(&currency)?;
    let payment_method_types = match params.take_string_list("payment_method_types")? {
        Some(methods) => {
            check_payment_methods(&methods)?;
            methods
        }
        None => default_payment_methods(&currency),
    };
    let description = params.take_string("description", 1000)?.filter(|d| !d.is_empty());
    let metadata = params.take_string_map("metadata")?.unwrap_or_default();
    check_metadata(&metadata)?;
    params.finish()?;
    Ok(insert_payment_intent(
        shared,
        amount,
        currency,
        payment_method_types,
        description,
        metadata,
    ))
}

/// Creates a payment intent from an amount and a currency alone, checked as
/// the API checks them: the library's path, without writing parameters out
/// as JSON only to parse them back.
pub(crate) fn new_payment_intent_of(
    shared: &Arc<Shared>,
    amount: u128,
    currency: &str,
) -> Result<PaymentIntent, ApiError> {
    params::check_minimum("amount", amount, 1)?;
    params::check_length("currency", currency, MAX_CURRENCY_CHARS)?;
    check_currency(currency)?;
    Ok(insert_payment_intent(
        shared,
        amount,
        currency.to_owned(),
        default_payment_methods(currency),
        None,
        BTreeMap::new(),
    ))
}

const MAX_CURRENCY_CHARS: usize = 10;

fn check_currency(currency: &str) -> Result<(), ApiError> {
    if !(3..=MAX_CURRENCY_CHARS).contains(&currency.len())
        || !currency.bytes().all(|b| b.is_ascii_lowercase())
    {
        return Err(ApiError::invalid(
            "currency",
            "parameter_invalid_currency",
            format!(
                "currency must be 3 to 10 lowercase letters (btc, eth, usdc, …), got {}",
                shown(currency)
            ),
        ));
    }
    Ok(())
}

fn check_payment_methods(methods: &[String]) -> Result<(), ApiError> {
    if methods.is_empty() || methods.len() > 10 {
        return Err(ApiError::invalid(
            "payment_method_types",
            "parameter_invalid_array",
            "payment_method_types must list 1 to 10 payment methods",
        ));
    }
    for method in methods {
        if method.is_empty()
            || method.len() > 40
            || !method
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(ApiError::invalid(
                "payment_method_types",
                "parameter_invalid_array",
                format!(
                    "each payment method is 1 to 40 lowercase letters, digits or _, got {}",
                    shown(method)
                ),
            ));
        }
    }
    Ok(())
}

fn default_payment_methods(currency: &str) -> Vec<String> {
    if currency == "btc" {
        vec!["bitcoin".to_owned()]
    } else {
        vec!["ethereum".to_owned()]
    }
}

/// Stores a new payment intent from checked fields and returns it.
fn insert_payment_intent(
    shared: &Arc<Shared>,
    amount: u128,
    currency: String,
    payment_method_types: Vec<String>,
    description: Option<String>,
    metadata: BTreeMap<String, String>,
) -> PaymentIntent {
    // Kept for the intent's whole life: no spare capacity from parsing.
    let shrunk = |mut text: String| {
        text.shrink_to_fit();
        text
    };
    let mut intent = PaymentIntent::new(
        ids::new_id("pi_"),
        amount,
        shrunk(currency),
        PaymentIntentStatus::from_name(REQUIRES_PAYMENT),
    );
    intent.amount_received = Some(0);
    intent.payment_method_types = Some(
        payment_method_types
            .iter()
            .map(|method| PaymentMethod::from_name(method))
            .collect(),
    );
    intent.created = Some(i64::try_from(unix_seconds()).unwrap_or(i64::MAX));
    intent.description = description.map(shrunk);
    intent.metadata = Metadata::from(metadata);
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    state.intents.insert(intent.id.clone(), intent.clone());
    intent
}

fn check_metadata(metadata: &BTreeMap<String, String>) -> Result<(), ApiError> {
    if metadata.len() > 50 {
        return Err(ApiError::invalid(
            "metadata",
            "parameter_invalid_metadata",
            format!("metadata may have at most 50 keys, got {}", metadata.len()),
        ));
    }
    for (key, value) in metadata {
        if key.is_empty() || key.chars().count() > 40 {
            return Err(ApiError::invalid(
                format!("metadata[{key}]"),
                "parameter_invalid_metadata",
                format!("metadata keys are 1 to 40 characters, got {}", shown(key)),
            ));
        }
        if value.chars().count() > 500 {
            return Err(ApiError::invalid(
                format!("metadata[{key}]"),
                "parameter_invalid_metadata",
                format!(
                    "metadata values are at most 500 characters; metadata[{}] is longer",
                    shown(key)
                ),
            ));
        }
    }
    Ok(())
}

/// `POST /v1/test_helpers/payment_intents/:id/succeed`.
fn succeed_op(shared: &Arc<Shared>, id: &str, mut params: Params) -> Result<OpReply, ApiError> {
    let amount_received = params.take_integer("amount_received", 1)?;
    params.finish()?;
    OpReply::intent(&settle(
        shared,
        id,
        "succeeded",
        amount_received,
        "payment_intent.succeeded",
    )?)
}

/// `POST /v1/test_helpers/payment_intents/:id/fail`.
fn fail_op(shared: &Arc<Shared>, id: &str, params: Params) -> Result<OpReply, ApiError> {
    params.finish()?;
    OpReply::intent(&settle(shared, id, "failed", None, "payment_intent.failed")?)
}

/// Moves a payment intent out of `requires_payment` (to `status`) and emits
/// its event; returns the payment intent as it now is.
pub(crate) fn settle(
    shared: &Arc<Shared>,
    id: &str,
    status: &str,
    amount_received: Option<u128>,
    event_type: &str,
) -> Result<PaymentIntent, ApiError> {
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    let intent = state
        .intents
        .modify(id, |intent| {
            if intent.status.as_str() != REQUIRES_PAYMENT {
                return Err(ApiError::invalid(
                    "id",
                    "payment_intent_unexpected_state",
                    format!(
                        "This payment intent's status is {}; the test helper needs status {REQUIRES_PAYMENT}",
                        intent.status.as_str()
                    ),
                ));
            }
            intent.status = PaymentIntentStatus::from_name(status);
            if status == "succeeded" {
                intent.amount_received = Some(amount_received.unwrap_or(intent.amount));
            }
            Ok(intent.clone())
        })
        .ok_or_else(|| ApiError::missing("id", "payment_intent", id))??;
    let event_id = ids::new_id("evt_");
    let created = unix_seconds();
    let body = to_json(&EventBody {
        id: &event_id,
        object: "event",
        api_version: API_VERSION,
        created,
        data: EventData {
            object: IntentObject::of(&intent),
        },
        livemode: false,
        event_type,
    })?
    // Exactly its length: the serializer's spare capacity would be kept for
    // the event's whole life.
    .into_boxed_slice();
    let seq = state.next_event_seq;
    state.next_event_seq = seq.saturating_add(1);
    let event = Arc::new(EventRecord {
        id: event_id.clone(),
        event_type: event_type.to_owned(),
        created,
        body: Bytes::from(body),
        seq,
    });
    let endpoints: Vec<(String, u64)> = state
        .endpoints
        .iter()
        .filter(|endpoint| endpoint.wants(event_type))
        .map(|endpoint| (endpoint.id.clone(), endpoint.seq))
        .collect();
    state.events.insert(event_id, Arc::clone(&event));
    drop(state);
    delivery::enqueue(shared, event, endpoints, 0);
    Ok(intent)
}

/// `POST /v1/events/:id/resend`: delivers the event again, byte for byte the
/// same body signed afresh, to one endpoint (`webhook_endpoint`) or to every
/// endpoint whose `enabled_events` match it now. Each resend is numbered (1,
/// 2, … across the emulator) and its attempts carry that number.
pub(crate) fn resend_op(shared: &Arc<Shared>, id: &str, mut params: Params) -> Result<OpReply, ApiError> {
    let chosen = params.take_string("webhook_endpoint", 255)?;
    params.finish()?;
    let (event, endpoints, resend) = {
        let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let event = Arc::clone(
            state
                .events
                .get(id)
                .ok_or_else(|| ApiError::missing("id", "event", id))?,
        );
        let endpoints: Vec<(String, u64)> = match &chosen {
            Some(endpoint_id) => {
                let endpoint = state
                    .endpoints
                    .get(endpoint_id)
                    .ok_or_else(|| ApiError::missing("webhook_endpoint", "webhook_endpoint", endpoint_id))?;
                vec![(endpoint.id.clone(), endpoint.seq)]
            }
            None => state
                .endpoints
                .iter()
                .filter(|endpoint| endpoint.wants(&event.event_type))
                .map(|endpoint| (endpoint.id.clone(), endpoint.seq))
                .collect(),
        };
        state.resends = state.resends.saturating_add(1);
        (event, endpoints, state.resends)
    };
    #[derive(Serialize)]
    struct Resent<'a> {
        object: &'static str,
        event: &'a str,
        resend: u64,
        webhook_endpoints: Vec<&'a str>,
    }
    let reply = to_json(&Resent {
        object: "event_resend",
        event: &event.id,
        resend,
        webhook_endpoints: endpoints.iter().map(|(id, _)| id.as_str()).collect(),
    })?;
    delivery::enqueue(shared, event, endpoints, resend);
    Ok(OpReply::bytes(reply))
}

/// `POST /v1/webhook_endpoints`.
pub(crate) fn create_endpoint_op(
    shared: &Arc<Shared>,
    _: &str,
    mut params: Params,
) -> Result<OpReply, ApiError> {
    let url = required(params.take_string("url", 2048)?, "url")?;
    let (url, uri) = parse_endpoint_url(&url)?;
    let enabled_events = match params.take_string_list("enabled_events")? {
        None => vec!["*".to_owned()],
        Some(events) if events.is_empty() => {
            return Err(ApiError::invalid(
                "enabled_events",
                "parameter_invalid_array",
                "enabled_events must name at least one event type, or \"*\" for all",
            ))
        }
        Some(events) => {
            check_enabled_events(&events)?;
            events
        }
    };
    let description = params.take_string("description", 5000)?.filter(|d| !d.is_empty());
    params.finish()?;
    let secret = ids::new_secret();
    let id = insert_endpoint(shared, url, uri, enabled_events, description, &secret)?;
    let state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    let endpoint = state
        .endpoints
        .get(&id)
        .ok_or_else(|| ApiError::missing("id", "webhook_endpoint", &id))?;
    Ok(OpReply {
        body: to_json(&endpoint.to_object(Some(&secret)))?,
        stored: Some(Stored::Endpoint { id, secret }),
    })
}

/// Registers a webhook endpoint from checked fields, signing with `secret`;
/// returns its id.
pub(crate) fn insert_endpoint(
    shared: &Arc<Shared>,
    url: url::Url,
    uri: http::Uri,
    enabled_events: Vec<String>,
    description: Option<String>,
    secret: &str,
) -> Result<String, ApiError> {
    let keys = SigningKeys {
        current: Secret::new(secret).map_err(|_| internal())?,
        previous: None,
    };
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    if state.endpoints.is_full() {
        return Err(ApiError::bad_request(
            "webhook_endpoints_limit",
            format!(
                "At most {} webhook endpoints can be registered; delete one first",
                shared.config.limits.endpoints
            ),
        ));
    }
    let seq = state.next_endpoint_seq;
    state.next_endpoint_seq = seq.saturating_add(1);
    let id = ids::new_id("we_");
    let endpoint = Endpoint {
        id: id.clone(),
        uri,
        url,
        enabled_events,
        description,
        created: unix_seconds(),
        seq,
        keys: Arc::new(keys),
    };
    state.endpoints.insert(id.clone(), endpoint);
    Ok(id)
}

fn internal() -> ApiError {
    ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        kind: crate::error::ErrorType::Api,
        code: None,
        message: "internal error".to_owned(),
        param: None,
    }
}

/// The endpoint's URL, and the same as the request target of its deliveries.
pub(crate) fn parse_endpoint_url(url: &str) -> Result<(url::Url, http::Uri), ApiError> {
    let invalid = |why: String| ApiError::invalid("url", "url_invalid", why);
    let parsed = url::Url::parse(url).map_err(|err| invalid(format!("url is not a valid URL ({err})")))?;
    match parsed.scheme() {
        // Deliveries are authenticated by their signature and the client does
        // not send URL credentials; refused rather than kept, as the URL is
        // logged with every attempt and listed by the API.
        "http" if !parsed.username().is_empty() || parsed.password().is_some() => Err(invalid(
            "url must not carry a user name or password: deliveries are authenticated by their signature"
                .to_owned(),
        )),
        // Normalizing percent-encodes: 2 048 characters may grow, and the URL
        // is kept with the endpoint and in every attempt record.
        "http" if parsed.as_str().len() > MAX_URL_BYTES => Err(invalid(format!(
            "url is {} bytes once normalized (percent-encoded); at most {MAX_URL_BYTES}",
            parsed.as_str().len()
        ))),
        "http" if parsed.host().is_some() => {
            // The URL parser's output is normalized and percent-encoded, so this
            // holds for every URL it accepts; the check keeps a surprise a 400.
            let uri = parsed
                .as_str()
                .parse::<http::Uri>()
                .map_err(|err| invalid(format!("url cannot be used as a request target ({err})")))?;
            Ok((parsed, uri))
        }
        "http" => Err(invalid("url has no host".to_owned())),
        "https" => Err(invalid(
            "https endpoints are not supported: the emulator delivers plain HTTP to a receiver \
             under test; use its http:// address"
                .to_owned(),
        )),
        other => Err(invalid(format!(
            "url must be an http:// URL, not {}",
            shown(other)
        ))),
    }
}

/// The most entries of `enabled_events`.
const MAX_ENABLED_EVENTS: usize = 100;
/// The longest event type in `enabled_events`.
const MAX_EVENT_TYPE_CHARS: usize = 255;

/// Any type string (or `*`) is accepted, so an endpoint can be registered for
/// the sibling format's names too; only what cannot be an event type is refused.
fn check_enabled_events(events: &[String]) -> Result<(), ApiError> {
    if events.len() > MAX_ENABLED_EVENTS {
        return Err(ApiError::invalid(
            "enabled_events",
            "parameter_invalid_array",
            format!(
                "enabled_events may name at most {MAX_ENABLED_EVENTS} event types, got {}",
                events.len()
            ),
        ));
    }
    for event in events {
        let chars = event.chars().count();
        if chars == 0 || chars > MAX_EVENT_TYPE_CHARS || event.chars().any(char::is_control) {
            return Err(ApiError::invalid(
                "enabled_events",
                "parameter_invalid_event_type",
                format!(
                    "each entry of enabled_events is an event type of 1 to {MAX_EVENT_TYPE_CHARS} characters \
                     without control characters (or \"*\" for all), got {}",
                    shown(event)
                ),
            ));
        }
    }
    Ok(())
}

/// `POST /v1/webhook_endpoints/:id/roll_secret`.
pub(crate) fn roll_secret_op(
    shared: &Arc<Shared>,
    id: &str,
    mut params: Params,
) -> Result<OpReply, ApiError> {
    let expires_in = params.take_integer("expires_in", 0)?.unwrap_or(0);
    if expires_in > MAX_EXPIRES_IN {
        return Err(ApiError::invalid(
            "expires_in",
            "parameter_invalid_integer",
            format!("expires_in is at most {MAX_EXPIRES_IN} seconds (7 days), got {expires_in}"),
        ));
    }
    params.finish()?;
    let secret = ids::new_secret();
    let current = Secret::new(&secret).map_err(|_| internal())?;
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    // ≤ 7 days: fits in u64 and cannot overflow beside the current time.
    let until = unix_seconds().saturating_add(u64::try_from(expires_in).unwrap_or(0));
    let body = state
        .endpoints
        .modify(id, |endpoint| {
            let previous = (expires_in > 0).then(|| (endpoint.keys.current.clone(), until));
            endpoint.keys = Arc::new(SigningKeys { current, previous });
            to_json(&endpoint.to_object(Some(&secret)))
        })
        .ok_or_else(|| ApiError::missing("id", "webhook_endpoint", id))??;
    Ok(OpReply {
        body,
        stored: Some(Stored::Endpoint {
            id: id.to_owned(),
            secret,
        }),
    })
}

async fn delete_endpoint(
    State(shared): State<Arc<Shared>>,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    let id = match path_id(path) {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    let removed = shared
        .state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .endpoints
        .remove(&id);
    match removed {
        Some(endpoint) => {
            #[derive(Serialize)]
            struct Deleted<'a> {
                id: &'a str,
                object: &'static str,
                deleted: bool,
            }
            reply(to_json(&Deleted {
                id: &endpoint.id,
                object: "webhook_endpoint",
                deleted: true,
            }))
        }
        None => ApiError::missing("id", "webhook_endpoint", &id).into_response(),
    }
}

fn reply(result: Result<Vec<u8>, ApiError>) -> Response {
    match result {
        Ok(body) => json_response(StatusCode::OK, body),
        Err(error) => error.into_response(),
    }
}

/// Reads `limit`, `starting_after` and `ending_before` from a query string.
fn page_of(query: Option<String>) -> Result<Page, ApiError> {
    let mut params = Params::from_form(query.unwrap_or_default().as_bytes())?;
    let page = take_page(&mut params)?;
    params.finish()?;
    Ok(page)
}

/// Takes `limit`, `starting_after` and `ending_before` from `params`.
fn take_page(params: &mut Params) -> Result<Page, ApiError> {
    let limit = params.take_integer("limit", 1)?.unwrap_or(10);
    if limit > 100 {
        return Err(ApiError::invalid(
            "limit",
            "parameter_invalid_integer",
            format!("limit must be between 1 and 100, got {limit}"),
        ));
    }
    let starting_after = params.take_string("starting_after", 255)?;
    let ending_before = params.take_string("ending_before", 255)?;
    if starting_after.is_some() && ending_before.is_some() {
        return Err(ApiError::invalid(
            "ending_before",
            "parameter_conflict",
            "give starting_after or ending_before, not both",
        ));
    }
    Ok(Page {
        // ≤ 100.
        limit: usize::try_from(limit).unwrap_or(100),
        starting_after,
        ending_before,
    })
}

fn cursor_missing(what: &'static str) -> impl Fn(&str, &str) -> ApiError {
    move |param, id| ApiError::missing(param, what, id)
}

/// `{"object":"list","data":[…],"has_more":…,"url":…}` from already encoded items.
fn list_json(items: &[&[u8]], has_more: bool, url: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(items.iter().map(|i| i.len() + 1).sum::<usize>() + 64);
    out.extend_from_slice(br#"{"object":"list","data":["#);
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    let mut tail = String::new();
    let _ = write!(tail, r#"],"has_more":{has_more},"url":"{url}"}}"#);
    out.extend_from_slice(tail.as_bytes());
    out
}

fn list_of<T: Serialize>(data: &[&T], has_more: bool, url: &str) -> Result<Vec<u8>, ApiError> {
    let encoded = data.iter().map(to_json).collect::<Result<Vec<_>, _>>()?;
    let slices: Vec<&[u8]> = encoded.iter().map(Vec::as_slice).collect();
    Ok(list_json(&slices, has_more, url))
}

async fn list_intents(State(shared): State<Arc<Shared>>, RawQuery(query): RawQuery) -> Response {
    reply(page_of(query).and_then(|page| {
        let state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let items = state.intents.iter().map(|pi| (pi.id.as_str(), pi)).collect();
        let listed = paginate(items, &page, cursor_missing("payment_intent"))?;
        let objects: Vec<IntentObject<'_>> = listed.data.iter().map(|pi| IntentObject::of(pi)).collect();
        list_of(
            &objects.iter().collect::<Vec<_>>(),
            listed.has_more,
            "/v1/payment_intents",
        )
    }))
}

async fn get_intent(
    State(shared): State<Arc<Shared>>,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    reply(path_id(path).and_then(|id| {
        let state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let intent = state
            .intents
            .get(&id)
            .ok_or_else(|| ApiError::missing("id", "payment_intent", &id))?;
        to_json(&IntentObject::of(intent))
    }))
}

/// The filters of `GET /v1/events`: `type`, and `created[gt|gte|lt|lte]` in unix seconds.
#[derive(Debug, Default)]
struct EventFilter {
    event_type: Option<String>,
    /// Inclusive bounds.
    created_from: u64,
    created_to: u64,
}

impl EventFilter {
    fn take(params: &mut Params) -> Result<Self, ApiError> {
        let event_type = params.take_string("type", MAX_EVENT_TYPE_CHARS)?;
        let mut filter = Self {
            event_type,
            created_from: 0,
            created_to: u64::MAX,
        };
        for (op, value) in params.take_string_map("created")?.unwrap_or_default() {
            let param = format!("created[{op}]");
            let seconds = value.parse::<u64>().map_err(|_| {
                ApiError::invalid(
                    param.as_str(),
                    "parameter_invalid_integer",
                    format!(
                        "{} must be unix seconds (a whole number), got {}",
                        shown(&param),
                        shown(&value)
                    ),
                )
            })?;
            match op.as_str() {
                "gt" => filter.created_from = filter.created_from.max(seconds.saturating_add(1)),
                "gte" => filter.created_from = filter.created_from.max(seconds),
                "lt" => match seconds.checked_sub(1) {
                    Some(to) => filter.created_to = filter.created_to.min(to),
                    None => {
                        filter.created_from = 1;
                        filter.created_to = 0;
                    }
                },
                "lte" => filter.created_to = filter.created_to.min(seconds),
                _ => {
                    return Err(ApiError::invalid(
                        param.as_str(),
                        "parameter_unknown",
                        format!(
                            "{} is not a filter: use created[gt], created[gte], created[lt] or created[lte]",
                            shown(&param)
                        ),
                    ))
                }
            }
        }
        Ok(filter)
    }

    fn matches(&self, event: &EventRecord) -> bool {
        (self.created_from..=self.created_to).contains(&event.created)
            && self.event_type.as_ref().is_none_or(|t| *t == event.event_type)
    }
}

async fn list_events(State(shared): State<Arc<Shared>>, RawQuery(query): RawQuery) -> Response {
    let parsed = Params::from_form(query.unwrap_or_default().as_bytes()).and_then(|mut params| {
        let page = take_page(&mut params)?;
        let filter = EventFilter::take(&mut params)?;
        params.finish()?;
        Ok((page, filter))
    });
    reply(parsed.and_then(|(page, filter)| {
        let state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let items = state
            .events
            .iter()
            .filter(|e| filter.matches(e))
            .map(|e| (e.id.as_str(), e))
            .collect();
        let listed = paginate(items, &page, cursor_missing("event"))?;
        let bodies: Vec<&[u8]> = listed.data.iter().map(|e| e.body.as_ref()).collect();
        Ok(list_json(&bodies, listed.has_more, "/v1/events"))
    }))
}

async fn get_event(State(shared): State<Arc<Shared>>, path: Result<Path<String>, PathRejection>) -> Response {
    reply(path_id(path).and_then(|id| {
        let state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let event = state
            .events
            .get(&id)
            .ok_or_else(|| ApiError::missing("id", "event", &id))?;
        Ok(event.body.to_vec())
    }))
}

/// `GET /v1/events/:id/delivery_attempts`: every attempt to deliver the event,
/// to every endpoint, newest first.
async fn list_attempts(
    State(shared): State<Arc<Shared>>,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Response {
    reply(path_id(path).and_then(|id| {
        let page = page_of(query)?;
        let state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.events.get(&id).is_none() {
            return Err(ApiError::missing("id", "event", &id));
        }
        let items = state
            .attempts
            .iter()
            .filter(|a| a.event == id)
            .map(|a| (a.id.as_str(), a))
            .collect();
        let listed = paginate(items, &page, cursor_missing("delivery_attempt"))?;
        list_of(
            &listed.data,
            listed.has_more,
            &format!("/v1/events/{id}/delivery_attempts"),
        )
    }))
}

async fn list_endpoints(State(shared): State<Arc<Shared>>, RawQuery(query): RawQuery) -> Response {
    reply(page_of(query).and_then(|page| {
        let state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let objects: Vec<_> = state.endpoints.iter().map(|e| e.to_object(None)).collect();
        let items = objects.iter().map(|o| (o.id, o)).collect();
        let listed = paginate(items, &page, cursor_missing("webhook_endpoint"))?;
        list_of(&listed.data, listed.has_more, "/v1/webhook_endpoints")
    }))
}

async fn get_endpoint(
    State(shared): State<Arc<Shared>>,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    reply(path_id(path).and_then(|id| {
        let state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let endpoint = state
            .endpoints
            .get(&id)
            .ok_or_else(|| ApiError::missing("id", "webhook_endpoint", &id))?;
        to_json(&endpoint.to_object(None))
    }))
}
