//! Lists: `limit`, `starting_after` and `ending_before` read from a request,
//! and `{"object":"list","data":[…],"has_more":…,"url":…}` written.

use std::fmt::Write as _;

use serde::Serialize;

use super::to_json;
use crate::error::ApiError;
use crate::params::Params;
use crate::state::Page;

/// Reads `limit`, `starting_after` and `ending_before` from a query string.
pub(crate) fn page_of(query: Option<String>) -> Result<Page, ApiError> {
    let mut params = Params::from_form(query.unwrap_or_default().as_bytes())?;
    let page = take_page(&mut params)?;
    params.finish()?;
    Ok(page)
}

/// Takes `limit`, `starting_after` and `ending_before` from `params`.
pub(crate) fn take_page(params: &mut Params) -> Result<Page, ApiError> {
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

pub(crate) fn cursor_missing(what: &'static str) -> impl Fn(&str, &str) -> ApiError {
    move |param, id| ApiError::missing(param, what, id)
}

/// `{"object":"list","data":[…],"has_more":…,"url":…}` from already encoded items.
pub(crate) fn list_json(items: &[&[u8]], has_more: bool, url: &str) -> Vec<u8> {
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

pub(crate) fn list_of<T: Serialize>(data: &[&T], has_more: bool, url: &str) -> Result<Vec<u8>, ApiError> {
    let encoded = data.iter().map(to_json).collect::<Result<Vec<_>, _>>()?;
    let slices: Vec<&[u8]> = encoded.iter().map(Vec::as_slice).collect();
    Ok(list_json(&slices, has_more, url))
}
