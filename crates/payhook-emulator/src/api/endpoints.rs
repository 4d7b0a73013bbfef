//! Webhook endpoints: register (the reply alone shows the keys: the secret,
//! and with Standard Webhooks the public key), retrieve, list, delete, and
//! roll the keys with an overlap.

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::events::MAX_EVENT_TYPE_CHARS;
use super::idempotency::OpReply;
use super::pagination::{cursor_missing, list_of, page_of};
use super::{internal, path_id, reply, required, to_json};
use crate::error::ApiError;
use crate::keys::{new_keys, ShownKeys};
use crate::model::{Endpoint, SigningKeys};
use crate::params::Params;
use crate::state::{paginate, Stored};
use crate::text::shown;
use crate::{ids, unix_seconds, Shared};

/// The longest `roll_secret` overlap, `expires_in`: 7 days.
const MAX_EXPIRES_IN: u128 = 7 * 24 * 3600;
/// The longest endpoint URL, normalized.
const MAX_URL_BYTES: usize = 2048;

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
    let (id, shown) = insert_endpoint(shared, url, uri, enabled_events, description, None)?;
    let state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    let endpoint = state
        .endpoints
        .get(&id)
        .ok_or_else(|| ApiError::missing("id", "webhook_endpoint", &id))?;
    Ok(OpReply {
        body: to_json(&endpoint.to_object(Some(&shown)))?,
        stored: Some(Stored::Endpoint { id, shown }),
    })
}

/// Registers a webhook endpoint from checked fields, with fresh keys for the
/// emulator's scheme (`secret`, checked, as its secret when given); returns
/// its id and the keys to show.
pub(crate) fn insert_endpoint(
    shared: &Arc<Shared>,
    url: url::Url,
    uri: http::Uri,
    enabled_events: Vec<String>,
    description: Option<String>,
    secret: Option<&str>,
) -> Result<(String, ShownKeys), ApiError> {
    let (current, shown) = new_keys(shared.config.scheme, secret).ok_or_else(internal)?;
    let keys = SigningKeys {
        current,
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
    Ok((id, shown))
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
    let (current, shown) = new_keys(shared.config.scheme, None).ok_or_else(internal)?;
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    // ≤ 7 days: fits in u64 and cannot overflow beside the current time.
    let until = unix_seconds().saturating_add(u64::try_from(expires_in).unwrap_or(0));
    let body = state
        .endpoints
        .modify(id, |endpoint| {
            let previous = (expires_in > 0).then(|| (endpoint.keys.current.clone(), until));
            endpoint.keys = Arc::new(SigningKeys { current, previous });
            let mut object = endpoint.to_object(Some(&shown));
            // The reply says when the old secret stops signing, also when
            // that is now (`expires_in=0`).
            object.previous_secret_expires_at = Some(until);
            to_json(&object)
        })
        .ok_or_else(|| ApiError::missing("id", "webhook_endpoint", id))??;
    Ok(OpReply {
        body,
        stored: Some(Stored::Endpoint {
            id: id.to_owned(),
            shown,
        }),
    })
}

pub(crate) async fn delete_endpoint(
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

pub(crate) async fn list_endpoints(State(shared): State<Arc<Shared>>, RawQuery(query): RawQuery) -> Response {
    reply(page_of(query).and_then(|page| {
        let state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let objects: Vec<_> = state.endpoints.iter().map(|e| e.to_object(None)).collect();
        let items = objects.iter().map(|o| (o.id, o)).collect();
        let listed = paginate(items, &page, cursor_missing("webhook_endpoint"))?;
        list_of(&listed.data, listed.has_more, "/v1/webhook_endpoints")
    }))
}

pub(crate) async fn get_endpoint(
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
