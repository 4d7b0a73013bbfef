//! What requests carry, parsed and checked: query strings (the events page's
//! filters), form bodies (the actions), ages and "since" times; every error a
//! sentence quoting the request's value through the core's `Untrusted`.

use std::time::Duration;

use payhook_core::time::SinceError;
use payhook_inbox::admin::{BulkAction, Cursor, PageQuery, Selection, State, MAX_BULK_IDS, MAX_PAGE};

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

/// A path segment percent-decoded (`%20` is a space, `%2F` a slash; `+`
/// stays `+`, as in any path); a `%` without two hex digits after it stays
/// as it is. `None` when the bytes decoded are not UTF-8.
pub(crate) fn path_segment(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|b| char::from(*b).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(high), Some(low)) => {
                // Two hex digits: at most 255.
                out.push(u8::try_from(high * 16 + low).unwrap_or(u8::MAX));
                i += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
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
    if let Some(source) = param(params, "source") {
        query.filter.source = Some(source.parse().map_err(|_| {
            format!(
                "The source {:?} is not one of delivered, reconciled.",
                Quoted(source)
            )
        })?);
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

/// A bulk action's form: the action, its selection (ages made times back
/// from `now`, or times in Unix milliseconds as the confirmation page carries
/// them), and the count's time (`as_of`) once counted.
pub(crate) fn bulk_form(form: &Form, now: i64) -> Result<(BulkAction, Selection, Option<i64>), String> {
    let action: BulkAction = form
        .get("action")
        .unwrap_or("")
        .parse()
        .map_err(|_| "Which action? Retry, replay, purge or pause.".to_owned())?;
    let mut selection = Selection::default();
    if let Some(state) = form.get("state") {
        selection.state = Some(
            state
                .parse()
                .map_err(|_| format!("The state {:?} is not an event state.", Quoted(state)))?,
        );
    }
    let bounded = |name: &str, what: &str| -> Result<Option<String>, String> {
        match form.get(name) {
            Some(text) if text.len() > payhook_inbox::MAX_ID_BYTES => Err(format!("The {what} is too long.")),
            other => Ok(other.map(str::to_owned)),
        }
    };
    selection.event_type = bounded("type", "type")?;
    selection.id_prefix = bounded("id_prefix", "id prefix")?;
    let back = |age: Duration| now.saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX));
    let time = |name: &str| -> Result<Option<i64>, String> {
        form.get(name)
            .map(|text| {
                text.parse::<i64>()
                    .map_err(|_| format!("The {name} field is not a time in milliseconds."))
            })
            .transpose()
    };
    selection.received_before = match form.get("older") {
        Some(age) => Some(back(parse_age(age)?)),
        None => time("before_ms")?,
    };
    selection.received_after = match form.get("newer") {
        Some(age) => Some(back(parse_age(age)?)),
        None => time("after_ms")?,
    };
    if let Some(ids) = form.get("ids") {
        selection.ids = ids
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
            .collect();
        if selection.ids.len() > MAX_BULK_IDS {
            return Err(format!(
                "At most {MAX_BULK_IDS} ids; select more by prefix, type or age."
            ));
        }
        if selection
            .ids
            .iter()
            .any(|id| id.len() > payhook_inbox::MAX_ID_BYTES)
        {
            return Err("An id is too long.".to_owned());
        }
    }
    let as_of = time("as_of")?;
    if as_of.is_some_and(|as_of| as_of > now) {
        return Err("The count's time is in the future.".to_owned());
    }
    Ok((action, selection, as_of))
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
    fn path_segments_decode() {
        assert_eq!(path_segment("evt_1").as_deref(), Some("evt_1"));
        assert_eq!(
            path_segment("evt%201%2F..%2Fx%3Fy").as_deref(),
            Some("evt 1/../x?y")
        );
        assert_eq!(path_segment("a+b%2b").as_deref(), Some("a+b+"));
        assert_eq!(path_segment("%E2%80%AE").as_deref(), Some("\u{202e}"));
        // A `%` without two hex digits stays; bytes that are not UTF-8 are no id.
        assert_eq!(path_segment("50%-%4").as_deref(), Some("50%-%4"));
        assert_eq!(path_segment("%zz%").as_deref(), Some("%zz%"));
        assert_eq!(path_segment("%FF"), None);
    }

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
    fn bulk_forms_parse_and_refuse() {
        let now = 1_800_000_000_000;
        let form = Form::parse(b"action=retry&state=dead&type=a.b&older=1h&ids=evt_1,+evt_2%0Aevt_3&csrf=x")
            .unwrap();
        let (action, selection, as_of) = bulk_form(&form, now).unwrap();
        assert_eq!(action, BulkAction::Retry);
        assert_eq!(selection.state, Some(State::Dead));
        assert_eq!(selection.received_before, Some(now - 3_600_000));
        assert_eq!(selection.ids, ["evt_1", "evt_2", "evt_3"]);
        assert_eq!(as_of, None);
        let form = Form::parse(b"action=purge&before_ms=5&as_of=7").unwrap();
        let (_, selection, as_of) = bulk_form(&form, now).unwrap();
        assert_eq!((selection.received_before, as_of), (Some(5), Some(7)));
        for bad in [
            &b"action=explode"[..],
            b"action=retry&state=gone",
            b"action=retry&older=soon",
            b"action=retry&before_ms=yesterday",
            b"action=retry&as_of=99999999999999",
        ] {
            let form = Form::parse(bad).unwrap();
            assert!(bulk_form(&form, now).is_err(), "{}", String::from_utf8_lossy(bad));
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
