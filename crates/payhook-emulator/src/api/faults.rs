//! `GET` and `POST /v1/test_helpers/faults`: the faults in force, read and
//! changed while the emulator runs, so a test can play "now the endpoint
//! breaks" and "now it is back" in one run without losing what the emulator
//! holds. A change applies to every attempt from then on (the retries of
//! earlier events too); the seed stays the one it started with.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;

use super::{reply, to_json};
use crate::config::Faults;
use crate::error::ApiError;
use crate::params::{BodyFormat, Params};
use crate::Shared;

/// The faults as the API shows them.
#[derive(Serialize)]
struct FaultsObject {
    object: &'static str,
    duplicates: f64,
    reorder: bool,
    reorder_window_ms: u128,
    delay_ms: u128,
    skew: i64,
    drop_first: bool,
    undeliverable: f64,
    seed: u64,
}

fn object(shared: &Shared) -> Result<Vec<u8>, ApiError> {
    let faults = shared.config.faults();
    to_json(&FaultsObject {
        object: "test_mode_faults",
        duplicates: faults.duplicates,
        reorder: faults.reorder,
        reorder_window_ms: faults.reorder_window.as_millis(),
        delay_ms: faults.delay.as_millis(),
        skew: faults.skew_secs,
        drop_first: faults.drop_first,
        undeliverable: faults.undeliverable,
        seed: shared.seed,
    })
}

/// `GET /v1/test_helpers/faults`.
pub(crate) async fn get_faults(State(shared): State<Arc<Shared>>) -> Response {
    reply(object(&shared))
}

/// `POST /v1/test_helpers/faults`: the parameters given change, the others
/// stay. Not bound to an `Idempotency-Key`: setting the same faults twice
/// changes nothing.
pub(crate) async fn post_faults(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Ok(body) = body else {
        return ApiError::bad_request("body_invalid", "the request body could not be read").into_response();
    };
    let content_type = headers.get(header::CONTENT_TYPE).map(HeaderValue::as_bytes);
    let changed = BodyFormat::from_content_type(content_type, body.is_empty())
        .and_then(|format| Params::from_body(format, &body))
        .and_then(|params| changed(shared.config.faults(), params))
        .and_then(|faults| put_faults(&shared, faults));
    reply(changed.and_then(|()| object(&shared)))
}

/// Checks `faults` and puts them in force.
pub(crate) fn put_faults(shared: &Shared, faults: Faults) -> Result<(), ApiError> {
    if faults.seed.is_some_and(|seed| seed != shared.seed) {
        return Err(ApiError::invalid(
            "seed",
            "parameter_invalid",
            "the fault seed is fixed when the emulator starts",
        ));
    }
    faults
        .check()
        .map_err(|error| ApiError::bad_request("parameter_invalid", error.to_string()))?;
    shared.config.set_faults(faults);
    Ok(())
}

/// `faults` with the parameters given applied.
fn changed(mut faults: Faults, mut params: Params) -> Result<Faults, ApiError> {
    if let Some(p) = probability(&mut params, "duplicates")? {
        faults.duplicates = p;
    }
    if let Some(p) = probability(&mut params, "undeliverable")? {
        faults.undeliverable = p;
    }
    if let Some(on) = boolean(&mut params, "reorder")? {
        faults.reorder = on;
    }
    if let Some(on) = boolean(&mut params, "drop_first")? {
        faults.drop_first = on;
    }
    if let Some(ms) = millis(&mut params, "delay_ms")? {
        faults.delay = ms;
    }
    if let Some(ms) = millis(&mut params, "reorder_window_ms")? {
        faults.reorder_window = ms;
    }
    if let Some(text) = params.take_scalar("skew")? {
        faults.skew_secs = text.trim().parse().map_err(|_| {
            ApiError::invalid(
                "skew",
                "parameter_invalid_integer",
                "skew must be a whole number of seconds (negative: behind)",
            )
        })?;
    }
    params.finish()?;
    Ok(faults)
}

fn probability(params: &mut Params, name: &str) -> Result<Option<f64>, ApiError> {
    let Some(text) = params.take_scalar(name)? else {
        return Ok(None);
    };
    match text.trim().parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(Some(p)),
        _ => Err(ApiError::invalid(
            name,
            "parameter_invalid",
            format!("{name} must be a probability from 0 to 1"),
        )),
    }
}

fn boolean(params: &mut Params, name: &str) -> Result<Option<bool>, ApiError> {
    match params.take_scalar(name)?.as_deref().map(str::trim) {
        None => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(_) => Err(ApiError::invalid(
            name,
            "parameter_invalid_boolean",
            format!("{name} must be true or false"),
        )),
    }
}

fn millis(params: &mut Params, name: &str) -> Result<Option<Duration>, ApiError> {
    let Some(ms) = params.take_integer(name, 0)? else {
        return Ok(None);
    };
    Ok(Some(Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))))
}
