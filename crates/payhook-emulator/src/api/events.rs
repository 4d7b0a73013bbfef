//! Events: retrieve, list (filtered by type and creation time), their
//! delivery attempts, and resend. The event types the emulator emits are the
//! event catalogue's kinds with a test helper (`EventType::emulated`).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use bytes::Bytes;
use payhook_core::PaymentIntent;
use serde::Serialize;

use super::idempotency::OpReply;
use super::pagination::{cursor_missing, list_json, list_of, page_of, take_page};
use super::{path_id, reply, to_json};
use crate::error::ApiError;
use crate::model::{EventBody, EventData, EventRecord, IntentObject, API_VERSION};
use crate::params::Params;
use crate::state::{page_of_split, paginate, Split};
use crate::text::shown;
use crate::{delivery, ids, unix_seconds, Shared};

/// The endpoints an event goes to: each one's id and registration order
/// (which the injected faults are drawn from).
pub(crate) type Recipients = Vec<(String, u64)>;

/// The longest event type (in `enabled_events` and the `type` filter).
pub(crate) const MAX_EVENT_TYPE_CHARS: usize = 255;

/// Creates the event of `intent` (its body fixed now, for every delivery) and
/// stores it; returns it with the endpoints enabled for its type, to deliver
/// to once the state is unlocked.
pub(crate) fn create(
    state: &mut crate::state::State,
    intent: &PaymentIntent,
    event_type: &str,
) -> Result<(Arc<EventRecord>, Recipients), ApiError> {
    let event_id = ids::new_id("evt_");
    let created = unix_seconds();
    let body = to_json(&EventBody {
        id: &event_id,
        object: "event",
        api_version: API_VERSION,
        created,
        data: EventData {
            object: IntentObject::of(intent),
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
        acknowledged: AtomicBool::new(false),
    });
    let endpoints: Recipients = state
        .endpoints
        .iter()
        .filter(|endpoint| endpoint.wants(event_type))
        .map(|endpoint| (endpoint.id.clone(), endpoint.seq))
        .collect();
    state.events.insert(event_id, Arc::clone(&event));
    Ok((event, endpoints))
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
        let endpoints: Recipients = match &chosen {
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

/// The most entries of the `types[]` filter (as of `enabled_events`).
const MAX_TYPES: usize = 100;

/// The filters of `GET /v1/events`: `type` or `types[]` (exact types),
/// `created[gt|gte|lt|lte]` in unix seconds, and `delivery_success`.
#[derive(Debug, Default)]
struct EventFilter {
    /// Any of these types (`type` is a list of one); `None`: any type.
    types: Option<Vec<String>>,
    /// Inclusive bounds.
    created_from: u64,
    created_to: u64,
    /// Whether an endpoint has acknowledged the event.
    delivery_success: Option<bool>,
}

impl EventFilter {
    fn take(params: &mut Params) -> Result<Self, ApiError> {
        let event_type = params.take_string("type", MAX_EVENT_TYPE_CHARS)?;
        let types = params.take_string_list("types")?;
        let types = match (event_type, types) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid(
                    "types",
                    "parameter_conflict",
                    "give type or types[], not both",
                ))
            }
            (Some(one), None) => Some(vec![one]),
            (None, Some(list)) => Some(check_types(list)?),
            (None, None) => None,
        };
        let mut filter = Self {
            types,
            created_from: 0,
            created_to: u64::MAX,
            delivery_success: take_bool(params, "delivery_success")?,
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
            && self
                .types
                .as_ref()
                .is_none_or(|types| types.contains(&event.event_type))
            && self
                .delivery_success
                .is_none_or(|wanted| event.delivery_success() == wanted)
    }
}

/// `types[]`: 1 to [`MAX_TYPES`] types of 1 to [`MAX_EVENT_TYPE_CHARS`] characters.
fn check_types(types: Vec<String>) -> Result<Vec<String>, ApiError> {
    if types.is_empty() || types.len() > MAX_TYPES {
        return Err(ApiError::invalid(
            "types",
            "parameter_invalid_array",
            format!(
                "types[] must list 1 to {MAX_TYPES} event types, got {}",
                types.len()
            ),
        ));
    }
    for event_type in &types {
        if event_type.is_empty() || event_type.chars().count() > MAX_EVENT_TYPE_CHARS {
            return Err(ApiError::invalid(
                "types",
                "parameter_invalid_string",
                format!(
                    "each types[] entry must be an event type of 1 to {MAX_EVENT_TYPE_CHARS} characters, got {}",
                    shown(event_type)
                ),
            ));
        }
    }
    Ok(types)
}

/// A `true` or `false` parameter.
fn take_bool(params: &mut Params, name: &str) -> Result<Option<bool>, ApiError> {
    let invalid = |why: String| ApiError::invalid(name, "parameter_invalid_boolean", why);
    match params.take_string(name, usize::MAX) {
        Ok(None) => Ok(None),
        Ok(Some(text)) => match text.as_str() {
            "true" => Ok(Some(true)),
            "false" => Ok(Some(false)),
            other => Err(invalid(format!(
                "{name} must be true or false, got {}",
                shown(other)
            ))),
        },
        Err(_) => Err(invalid(format!(
            "{name} must be true or false, not a list or map"
        ))),
    }
}

/// `GET /v1/events`, newest first. A cursor is any event still kept, whether
/// or not it matches the filter: an event may leave `delivery_success=false`
/// between two pages (acknowledged meanwhile), and the next page must still
/// start right after it. Events are ordered by creation (`seq`), never by
/// `created` alone, so events of the same second keep one order.
pub(crate) async fn list_events(State(shared): State<Arc<Shared>>, RawQuery(query): RawQuery) -> Response {
    let parsed = Params::from_form(query.unwrap_or_default().as_bytes()).and_then(|mut params| {
        let page = take_page(&mut params)?;
        let filter = EventFilter::take(&mut params)?;
        params.finish()?;
        Ok((page, filter))
    });
    reply(parsed.and_then(|(page, filter)| {
        let state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let cursor_seq = |param: &str, id: &str| {
            state
                .events
                .get(id)
                .map(|event| event.seq)
                .ok_or_else(|| ApiError::missing(param, "event", id))
        };
        let cursor = match (&page.starting_after, &page.ending_before) {
            (Some(id), _) => Cursor::Before(cursor_seq("starting_after", id)?),
            (None, Some(id)) => Cursor::After(cursor_seq("ending_before", id)?),
            (None, None) => Cursor::None,
        };
        // Oldest first, in creation order: `seq` only grows.
        let matching: Vec<&Arc<EventRecord>> = state.events.iter().filter(|e| filter.matches(e)).collect();
        let split = match cursor {
            Cursor::None => Split::Whole,
            Cursor::Before(seq) => Split::Older(matching.partition_point(|e| e.seq < seq)),
            Cursor::After(seq) => Split::Newer(matching.partition_point(|e| e.seq <= seq)),
        };
        let listed = page_of_split(&matching, split, page.limit);
        let bodies: Vec<&[u8]> = listed.data.iter().map(|e| e.body.as_ref()).collect();
        Ok(list_json(&bodies, listed.has_more, "/v1/events"))
    }))
}

/// Where a page of events starts: older than the `starting_after` event,
/// newer than the `ending_before` one, or from the newest.
enum Cursor {
    None,
    Before(u64),
    After(u64),
}

pub(crate) async fn get_event(
    State(shared): State<Arc<Shared>>,
    path: Result<Path<String>, PathRejection>,
) -> Response {
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
pub(crate) async fn list_attempts(
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
