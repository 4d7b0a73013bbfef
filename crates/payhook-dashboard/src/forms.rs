//! What requests carry, parsed and checked: query strings (the events page's
//! filters), form bodies (the actions), ages and "since" times; every error a
//! sentence quoting the request's value through the core's `Untrusted`.

use std::time::Duration;

use payhook_core::time::SinceError;
use payhook_inbox::admin::{Cursor, PageQuery, State, MAX_PAGE};

/// The query string as (name, value) pairs; a repeated name is refused.
pub(crate) fn params(query: &str) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        if out.iter().any(|(seen, _)| *seen == name) {
            return Err(format!("The parameter {:?} is given twice.", Quoted(&name)));
        }
        out.push((name.into_owned(), value.into_owned()));
    }
    Ok(out)
}

pub(crate) fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.trim())
        .filter(|value| !value.is_empty())
}

/// An age, in the inbox's one form ([`payhook_inbox::admin::parse_age`]).
pub(crate) fn parse_age(text: &str) -> Result<Duration, String> {
    payhook_inbox::admin::parse_age(text)
        .ok_or_else(|| format!("{:?} is not an age like 90s, 15m, 2h or 7d.", Quoted(text)))
}

/// Request text quoted in an error sentence: escaped by the core's `Untrusted`
/// here, and HTML-escaped later with the page. (Named apart from the core's
/// type, which it wraps.)
pub(crate) struct Quoted<'a>(pub(crate) &'a str);

impl std::fmt::Debug for Quoted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\"{}\"", payhook_core::untrusted::Untrusted::value(self.0))
    }
}

/// The events page's query, from its query string.
pub(crate) fn page_query(params: &[(String, String)]) -> Result<PageQuery, String> {
    let mut query = PageQuery::default();
    if let Some(state) = param(params, "state") {
        let state: State = state.parse().map_err(|_| {
            let known: Vec<&str> = State::ALL.iter().map(|state| state.as_str()).collect();
            format!(
                "The state {:?} is not one of {}.",
                Quoted(state),
                known.join(", ")
            )
        })?;
        query.filter.state = Some(state);
    }
    if let Some(event_type) = param(params, "type") {
        if event_type.len() > payhook_inbox::MAX_ID_BYTES {
            return Err("The type filter is too long.".to_owned());
        }
        query.filter.event_type = Some(event_type.to_owned());
    }
    if let Some(id) = param(params, "id") {
        if id.len() > payhook_inbox::MAX_ID_BYTES {
            return Err("The id filter is too long.".to_owned());
        }
        query.event_id = Some(id.to_owned());
    }
    if let Some(age) = param(params, "older") {
        query.filter.older_than = Some(parse_age(age)?);
    }
    if let Some(age) = param(params, "newer") {
        query.filter.newer_than = Some(parse_age(age)?);
    }
    if let Some(after) = param(params, "after") {
        query.after = Some(after.parse::<Cursor>().map_err(|reason| format!("{reason}."))?);
    }
    if let Some(limit) = param(params, "limit") {
        let limit = limit
            .parse::<u32>()
            .ok()
            .filter(|limit| (1..=MAX_PAGE).contains(limit))
            .ok_or_else(|| format!("The page size must be a whole number from 1 to {MAX_PAGE}."))?;
        query.limit = limit;
    }
    Ok(query)
}

/// A parsed form body.
pub(crate) struct Form(Vec<(String, String)>);

impl Form {
    pub(crate) fn parse(body: &[u8]) -> Result<Self, String> {
        if body.len() > crate::MAX_FORM_BYTES {
            return Err("The form is too large.".to_owned());
        }
        let mut fields: Vec<(String, String)> = Vec::new();
        for (name, value) in form_urlencoded::parse(body) {
            if fields.iter().any(|(seen, _)| *seen == name) {
                return Err("A form field is given twice.".to_owned());
            }
            fields.push((name.into_owned(), value.into_owned()));
        }
        Ok(Self(fields))
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        param(&self.0, name)
    }
}

/// A time to replay from, in the one form every tool takes
/// ([`payhook_core::time::parse_since`]): an age back from now (`2h`), Unix
/// seconds, or a UTC date or date and time (`2026-01-31`, `2026-01-31 14:00`);
/// never in the future.
pub(crate) fn parse_since(text: &str, now: i64) -> Result<i64, String> {
    let at = payhook_core::time::parse_since(text, now).map_err(|err| match err {
        SinceError::NoSuchDay { year, month, days } => format!(
            "{:?} is not a date: {year}-{month:02} has {days} days.",
            Quoted(text)
        ),
        SinceError::NotATime => format!(
            "{:?} is not a UTC time like 2026-01-31 14:00 or an age like 2h.",
            Quoted(text)
        ),
    })?;
    if at > now {
        return Err("That time is in the future: nothing was received since.".to_owned());
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_times_parse_and_refuse() {
        assert_eq!(parse_age("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_age("2h"), Ok(Duration::from_secs(7200)));
        for bad in ["", "h", "2", "-2h", "2w", "9999999999d", "2hh", "²h"] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
        let now = 1_800_000_000_000;
        assert_eq!(parse_since("2024-02-29", now), Ok(1_709_164_800_000));
        assert_eq!(parse_since("2024-02-29 12:34", now), Ok(1_709_210_040_000));
        assert_eq!(parse_since("2024-02-29T12:34:56Z", now), Ok(1_709_210_096_000));
        assert_eq!(parse_since("1h", now), Ok(now - 3_600_000));
        for bad in [
            "2023-02-29",
            "2024-13-01",
            "2024-01-01 24:00",
            "yesterday",
            "2099-01-01",
            "2024-1-1",
        ] {
            assert!(parse_since(bad, now).is_err(), "{bad}");
        }
    }

    #[test]
    fn filters_parse_and_refuse() {
        let query = page_query(&params("state=dead&type=a.b&older=1h&limit=20&after=5.7&x=ignored").unwrap())
            .unwrap();
        assert_eq!(query.filter.state, Some(State::Dead));
        assert_eq!(query.filter.event_type.as_deref(), Some("a.b"));
        assert_eq!(query.limit, 20);
        assert_eq!(
            query.after,
            Some(Cursor {
                received_at: 5,
                arrival: 7
            })
        );
        for bad in [
            "state=gone",
            "limit=0",
            "limit=501",
            "limit=1e9",
            "after=5",
            "after=a.b",
            "older=soon",
            "state=dead&state=done",
        ] {
            assert!(params(bad).and_then(|p| page_query(&p)).is_err(), "{bad}");
        }
        // Empty fields of the filter form are no filter.
        let query = page_query(&params("state=&type=&id=&older=&newer=&limit=").unwrap()).unwrap();
        assert_eq!(query.filter.state, None);
        assert_eq!(query.limit, 50);
    }
}
