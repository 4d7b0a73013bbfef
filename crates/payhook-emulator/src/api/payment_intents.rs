//! Payment intents: create, retrieve, list, and the succeed and fail test
//! helpers, which emit the intent's event.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use payhook_core::event::EventType;
use payhook_core::{Metadata, PaymentIntent, PaymentIntentStatus, PaymentMethod};

use super::events;
use super::idempotency::OpReply;
use super::pagination::{cursor_missing, list_of, page_of};
use super::{path_id, reply, required, to_json};
use crate::error::ApiError;
use crate::model::{IntentObject, REQUIRES_PAYMENT};
use crate::params::Params;
use crate::state::paginate;
use crate::text::shown;
use crate::{delivery, ids, params, unix_seconds, Shared};

/// `POST /v1/payment_intents`.
pub(crate) fn create_intent_op(shared: &Arc<Shared>, _: &str, params: Params) -> Result<OpReply, ApiError> {
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

/// `POST /v1/test_helpers/payment_intents/:id/HELPER` for `entry`'s test
/// helper (`succeed`, `fail`, …): moves the intent to the helper's status and
/// emits `entry`'s canonical type. A helper to `succeeded` takes an optional
/// `amount_received`.
pub(crate) fn test_helper_op(
    entry: &'static EventType,
) -> impl Fn(&Arc<Shared>, &str, Params) -> Result<OpReply, ApiError> + Clone + Send + 'static {
    move |shared, id, mut params| {
        let status = entry.test_helper.map_or("", |helper| helper.status);
        let amount_received = if status == SUCCEEDED {
            params.take_integer("amount_received", 1)?
        } else {
            None
        };
        params.finish()?;
        OpReply::intent(&settle(shared, id, status, amount_received, entry.name())?)
    }
}

/// The status whose helper sets `amount_received`.
const SUCCEEDED: &str = "succeeded";

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
            if status == SUCCEEDED {
                intent.amount_received = Some(amount_received.unwrap_or(intent.amount));
            }
            Ok(intent.clone())
        })
        .ok_or_else(|| ApiError::missing("id", "payment_intent", id))??;
    let (event, endpoints) = events::create(&mut state, &intent, event_type)?;
    drop(state);
    delivery::enqueue(shared, event, endpoints, 0);
    Ok(intent)
}

pub(crate) async fn list_intents(State(shared): State<Arc<Shared>>, RawQuery(query): RawQuery) -> Response {
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

pub(crate) async fn get_intent(
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
