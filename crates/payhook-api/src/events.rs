//! The events list, `GET /v1/events`: one page ([`Client::page`]) or every
//! page of a query in turn ([`Client::events`]), with the window the query
//! asked for enforced on the client's side and a list that would never end
//! refused.

use std::collections::VecDeque;

use payhook_core::Event;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::client::{Client, Reply};
use crate::error::ApiError;

/// The most events one page asks for (the service's maximum).
pub const PAGE_LIMIT: u32 = 100;

/// How many of the latest cursors a walk remembers to see one repeat: a
/// list that goes round a longer cycle is caught by its `created` times or
/// by the caller's bound on pages.
const CURSORS_KEPT: usize = 64;

/// One event of the list: the event, parsed by the same rules as a
/// delivery's body, and its JSON exactly as listed.
#[derive(Debug, Clone)]
pub struct ListedEvent {
    /// The event.
    pub event: Event,
    /// The event's JSON, exactly as listed (what an inbox stores as its body).
    pub body: String,
}

/// A listed event the page could not take: its JSON does not parse as a
/// delivery's body must, or it is longer than a delivery may be
/// ([`Client::max_event_bytes`]). The rest of its page is kept: one bad
/// event holds back none.
///
/// Every text in it came from the service: the key is cut out of both
/// fields; the reason is escaped and bounded like every message
/// ([`ApiKey::scrub`](crate::ApiKey::scrub)), the id only bounded (show it
/// through [`Untrusted`](payhook_core::untrusted::Untrusted) or escape it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedEvent {
    /// The event's `id` when one could be read (a JSON string under `id`),
    /// at most [`MAX_REFUSED_ID_BYTES`] bytes (a longer one is cut, ending
    /// in `…`).
    pub id: Option<String>,
    /// Why it was refused: `does not parse: …` or `is N bytes long, over
    /// the M bytes a delivery's body may be`.
    pub reason: String,
    /// Its place in the page as listed, from 1.
    pub position: usize,
    /// Its length in bytes, as listed.
    pub bytes: usize,
}

/// The longest id a [`RefusedEvent`] keeps, in bytes (the inbox's own bound
/// on ids).
pub const MAX_REFUSED_ID_BYTES: usize = 255;

/// One page of the list, newest first: only the events inside the query's
/// `created` range (the others are counted in `outside`), and the ones that
/// could not be taken apart (`refused`).
#[derive(Debug, Clone)]
pub struct EventsPage {
    /// The events of the page inside the window, newest first.
    pub events: Vec<ListedEvent>,
    /// The listed events that do not parse as a delivery's body must, or
    /// are longer than a delivery may be, in list order: the page keeps the
    /// others. Whether they are inside the window is not known (their
    /// `created` may not be readable): they are listed whatever it says.
    pub refused: Vec<RefusedEvent>,
    /// Whether more events match past the last one.
    pub has_more: bool,
    /// Events the service listed outside the query's `created` range (or
    /// without `created` when the query has one): dropped, never returned.
    pub outside: usize,
    /// The id of the page's last event as listed, inside the window or not:
    /// the cursor of the next page.
    pub cursor: Option<String>,
}

/// What the events list is asked for. Every field narrows; `Default` asks
/// for the newest [`PAGE_LIMIT`] events of any kind.
///
/// ```
/// use payhook::api::EventsQuery;
///
/// let query = EventsQuery {
///     created_gte: Some(1_700_000_000),
///     created_lt: Some(1_700_003_600),
///     types: vec!["payment_intent.succeeded".to_owned()],
///     delivery_success: Some(false),
///     ..EventsQuery::default()
/// };
/// assert!(query.contains(Some(1_700_000_000)));
/// assert!(!query.contains(Some(1_700_003_600)));
/// assert!(!query.contains(None));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventsQuery {
    /// Events created at or after this (Unix seconds).
    pub created_gte: Option<i64>,
    /// Events created after this (Unix seconds).
    pub created_gt: Option<i64>,
    /// Events created before this (Unix seconds).
    pub created_lt: Option<i64>,
    /// Events created at or before this (Unix seconds).
    pub created_lte: Option<i64>,
    /// Events of these exact types only (`types[]`); none: every type.
    pub types: Vec<String>,
    /// Only events no endpoint has acknowledged (`Some(false)`), or that one
    /// has (`Some(true)`).
    pub delivery_success: Option<bool>,
    /// The page after this event id (the previous page's last).
    pub starting_after: Option<String>,
    /// At most this many, 1 to [`PAGE_LIMIT`] (`0` means [`PAGE_LIMIT`]).
    pub limit: u32,
}

impl EventsQuery {
    /// Whether an event created at `created` is inside the query's `created`
    /// range: what the service was asked for. An event without `created` is
    /// inside only when the query names no range.
    pub fn contains(&self, created: Option<i64>) -> bool {
        let ranged = self.created_gte.is_some()
            || self.created_gt.is_some()
            || self.created_lt.is_some()
            || self.created_lte.is_some();
        let Some(at) = created else { return !ranged };
        self.created_gte.is_none_or(|t| at >= t)
            && self.created_gt.is_none_or(|t| at > t)
            && self.created_lt.is_none_or(|t| at < t)
            && self.created_lte.is_none_or(|t| at <= t)
    }

    /// The query string, values percent-encoded.
    pub(crate) fn to_query_string(&self) -> String {
        let mut out = form_urlencoded::Serializer::new(String::new());
        let limit = if self.limit == 0 {
            PAGE_LIMIT
        } else {
            self.limit.min(PAGE_LIMIT)
        };
        out.append_pair("limit", &limit.to_string());
        for (name, value) in [
            ("created[gte]", self.created_gte),
            ("created[gt]", self.created_gt),
            ("created[lt]", self.created_lt),
            ("created[lte]", self.created_lte),
        ] {
            if let Some(t) = value {
                out.append_pair(name, &t.to_string());
            }
        }
        for event_type in &self.types {
            out.append_pair("types[]", event_type);
        }
        if let Some(success) = self.delivery_success {
            out.append_pair("delivery_success", if success { "true" } else { "false" });
        }
        if let Some(id) = &self.starting_after {
            out.append_pair("starting_after", id);
        }
        out.finish()
    }
}

impl Client {
    /// One page of `GET /v1/events`: every event parsed by the rules of a
    /// delivery's body, the ones that do not parse or are longer than
    /// [`max_event_bytes`](Self::max_event_bytes) listed apart
    /// ([`EventsPage::refused`]) while the rest of the page is kept; the
    /// events outside the query's `created` range dropped and counted
    /// ([`EventsPage::outside`]). A reply that is not a list at all, or a
    /// page that says more follow while no event of it has a readable id
    /// (no cursor to ask for the next), is [`ApiError::BadReply`].
    ///
    /// ```no_run
    /// use payhook::api::{ApiKey, Client, EventsQuery};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_1")?)?;
    /// let page = client.page(&EventsQuery::default()).await?;
    /// for listed in &page.events {
    ///     println!("{} {}", listed.event.id(), listed.event.event_type());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ApiError`], sorted by what to do next.
    pub async fn page(&self, query: &EventsQuery) -> Result<EventsPage, ApiError> {
        let path = format!("/v1/events?{}", query.to_query_string());
        let reply = self.call(http::Method::GET, &path, None).await?;
        self.parse_page(&reply, query)
    }

    /// Every page of `query` in turn, newest first, following each page's
    /// last event as the next cursor ([`Pages::next`]). The walk ends with
    /// [`ApiError::BrokenList`] when a cursor repeats or an event is newer
    /// than one listed before it; it holds one page at a time.
    ///
    /// ```no_run
    /// use payhook::api::{ApiKey, Client, EventsQuery};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_1")?)?;
    /// let mut pages = client.events(EventsQuery { delivery_success: Some(false), ..EventsQuery::default() });
    /// while let Some(page) = pages.next().await {
    ///     for listed in page?.events {
    ///         println!("never delivered: {}", listed.event.id());
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn events(&self, query: EventsQuery) -> Pages<'_> {
        Pages {
            client: self,
            query,
            done: false,
            cursors: VecDeque::new(),
            oldest: None,
            requests: 0,
            outside: 0,
        }
    }

    fn parse_page(&self, reply: &Reply, query: &EventsQuery) -> Result<EventsPage, ApiError> {
        #[derive(Deserialize)]
        struct List<'a> {
            #[serde(borrow)]
            data: Vec<&'a RawValue>,
            has_more: bool,
        }
        let text = std::str::from_utf8(&reply.body)
            .map_err(|_| ApiError::BadReply("the reply is not UTF-8".to_owned()))?;
        let list: List<'_> = serde_json::from_str(text)
            .map_err(|err| ApiError::BadReply(self.scrub(&format!("not a list of events: {err}"))))?;
        let mut page = EventsPage {
            events: Vec::with_capacity(list.data.len()),
            refused: Vec::new(),
            has_more: list.has_more,
            outside: 0,
            cursor: None,
        };
        for (index, item) in list.data.iter().enumerate() {
            let body = item.get();
            let parsed = if body.len() > self.event_bytes_limit() {
                Err(format!(
                    "is {} bytes long, over the {} bytes a delivery's body may be",
                    body.len(),
                    self.event_bytes_limit()
                ))
            } else {
                Event::from_slice(body.as_bytes()).map_err(|err| format!("does not parse: {err}"))
            };
            let event = match parsed {
                Ok(event) => event,
                Err(reason) => {
                    let id = readable_id(body);
                    // The list goes on after the id as listed, when it can
                    // be read.
                    if let Some(id) = &id {
                        page.cursor = Some(id.clone());
                    }
                    page.refused.push(RefusedEvent {
                        id: id.map(|id| bounded_id(&self.redact(&id))),
                        reason: self.scrub(&reason),
                        position: index + 1,
                        bytes: body.len(),
                    });
                    continue;
                }
            };
            page.cursor = Some(event.id().to_owned());
            if query.contains(event.created()) {
                page.events.push(ListedEvent {
                    event,
                    body: body.to_owned(),
                });
            } else {
                page.outside += 1;
            }
        }
        if page.has_more && page.cursor.is_none() && !list.data.is_empty() {
            return Err(ApiError::BadReply(
                "the page says more events follow, but none of its events has a readable id \
                 to ask for the next page after"
                    .to_owned(),
            ));
        }
        Ok(page)
    }
}

/// The `id` of a listed event that did not parse, when it is a JSON string
/// under `id` of an object.
fn readable_id(body: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct IdOf {
        id: Option<serde_json::Value>,
    }
    let id = serde_json::from_str::<IdOf>(body).ok()?.id?;
    match id {
        serde_json::Value::String(id) => Some(id),
        _ => None,
    }
}

/// `id` cut to [`MAX_REFUSED_ID_BYTES`], on a character boundary.
fn bounded_id(id: &str) -> String {
    payhook_core::untrusted::cut(id, MAX_REFUSED_ID_BYTES)
}

/// Every page of one query of the events list, in turn (see
/// [`Client::events`]).
#[derive(Debug)]
pub struct Pages<'a> {
    client: &'a Client,
    query: EventsQuery,
    done: bool,
    /// The latest cursors followed.
    cursors: VecDeque<String>,
    /// The `created` of the oldest event listed so far.
    oldest: Option<i64>,
    requests: u64,
    outside: u64,
}

impl Pages<'_> {
    /// The next page, or `None` after the last and after an error — except
    /// [`ApiError::Throttled`], after which `next` asks for the same page
    /// again (wait its `retry_after` first).
    ///
    /// ```no_run
    /// use payhook::api::{ApiKey, Client, EventsQuery};
    ///
    /// # async fn run() -> Result<(), payhook::api::ApiError> {
    /// let client = Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_1").unwrap()).unwrap();
    /// let mut pages = client.events(EventsQuery::default());
    /// let mut count = 0;
    /// while let Some(page) = pages.next().await {
    ///     count += page?.events.len();
    /// }
    /// println!("{count} events in {} requests", pages.requests());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ApiError`]; [`ApiError::BrokenList`] when the page's cursor repeats
    /// one already followed or one of its events is newer than an event
    /// listed before it.
    pub async fn next(&mut self) -> Option<Result<EventsPage, ApiError>> {
        if self.done {
            return None;
        }
        self.requests += 1;
        let page = match self.client.page(&self.query).await {
            Ok(page) => page,
            Err(err) => {
                // A throttled page may be asked for again; any other error
                // ends the walk.
                self.done = !matches!(err, ApiError::Throttled { .. });
                return Some(Err(err));
            }
        };
        self.outside += page.outside as u64;
        if let Err(err) = self.check(&page) {
            self.done = true;
            return Some(Err(err));
        }
        match (&page.cursor, page.has_more) {
            (Some(cursor), true) => {
                if self.cursors.len() == CURSORS_KEPT {
                    self.cursors.pop_front();
                }
                self.cursors.push_back(cursor.clone());
                self.query.starting_after = Some(cursor.clone());
            }
            _ => self.done = true,
        }
        Some(Ok(page))
    }

    /// The page moves the walk on: a new cursor, and events no newer than
    /// the ones before them.
    fn check(&mut self, page: &EventsPage) -> Result<(), ApiError> {
        if page.has_more {
            if let Some(cursor) = &page.cursor {
                if self.cursors.contains(cursor) {
                    return Err(ApiError::BrokenList(format!(
                        "the cursor {} came back after {} page(s): the list would never end",
                        self.client.scrub(cursor),
                        self.requests
                    )));
                }
            }
        }
        for listed in &page.events {
            let Some(created) = listed.event.created() else {
                continue;
            };
            if self.oldest.is_some_and(|oldest| created > oldest) {
                return Err(ApiError::BrokenList(format!(
                    "event {} (created {created}) is newer than one listed before it, \
                     in a list that is newest first: the list does not move back in time",
                    self.client.scrub(listed.event.id())
                )));
            }
            self.oldest = Some(created);
        }
        Ok(())
    }

    /// How many requests the walk made so far.
    ///
    /// ```
    /// use payhook::api::{ApiKey, Client, EventsQuery};
    ///
    /// let client = Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_1").unwrap()).unwrap();
    /// assert_eq!(client.events(EventsQuery::default()).requests(), 0);
    /// ```
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// How many listed events were outside the query's `created` range, over
    /// every page so far.
    ///
    /// ```
    /// use payhook::api::{ApiKey, Client, EventsQuery};
    ///
    /// let client = Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_1").unwrap()).unwrap();
    /// assert_eq!(client.events(EventsQuery::default()).outside(), 0);
    /// ```
    pub fn outside(&self) -> u64 {
        self.outside
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ApiKey;

    fn client() -> Client {
        Client::new("http://127.0.0.1:1", ApiKey::new("sk_test_x").unwrap()).unwrap()
    }

    fn reply(body: &[u8]) -> Reply {
        Reply {
            status: 200,
            retry_after: None,
            body: body.to_vec(),
        }
    }

    /// One parse per event: the page is read once, each event is parsed
    /// from its own bytes, and those bytes are what an inbox stores, never
    /// a serialisation of the parsed value (key order, spacing and escapes
    /// kept).
    #[test]
    fn each_event_is_parsed_once_from_the_bytes_it_is_stored_with() {
        let listed = r#"{ "type" : "customer.created","created":3, "id":"evt_\u0033", "data":{"object":{"b":1,"a":2}} }"#;
        let page = format!(r#"{{"has_more":false,"data":[{listed}]}}"#);
        let page = client()
            .parse_page(&reply(page.as_bytes()), &EventsQuery::default())
            .unwrap();
        assert_eq!(page.events.len(), 1);
        assert_eq!(page.events[0].body, listed);
        assert_eq!(page.events[0].event.id(), "evt_3");
        assert_eq!(page.events[0].event.event_type(), "customer.created");
    }

    #[test]
    fn a_page_keeps_every_event_that_parses() {
        let good = br#"{"object":"list","has_more":true,"data":[
            {"id":"evt_2","object":"event","type":"customer.created","created":2,"data":{"object":{}}},
            {"id":"evt_1","object":"event","type":"customer.created","created":1,"data":{"object":{}}}]}"#;
        let page = client()
            .parse_page(&reply(good), &EventsQuery::default())
            .unwrap();
        assert!(page.has_more);
        assert!(page.refused.is_empty());
        let ids: Vec<&str> = page.events.iter().map(|listed| listed.event.id()).collect();
        assert_eq!(ids, ["evt_2", "evt_1"]);
        assert_eq!(page.cursor.as_deref(), Some("evt_1"));
        assert!(page.events[1].body.starts_with(r#"{"id":"evt_1""#));
        assert!(matches!(
            client().parse_page(&reply(b"<html>"), &EventsQuery::default()),
            Err(ApiError::BadReply(_))
        ));
    }

    /// One bad event holds back none: an event that does not parse and one
    /// longer than a delivery may be are listed apart, with their ids when
    /// readable, and the rest of the page is kept.
    #[test]
    fn one_bad_event_holds_back_none() {
        let client = client().max_event_bytes(200);
        let big = format!(
            r#"{{"id":"evt_big","type":"customer.created","created":3,"data":{{"object":{{"note":"{}"}}}}}}"#,
            "x".repeat(300)
        );
        let body = format!(
            r#"{{"has_more":true,"data":[
            {{"id":"evt_4","type":"customer.created","created":4,"data":{{"object":{{}}}}}},
            {big},
            {{"id":"evt_bad\u001b[31m","created":2,"data":{{"object":{{}}}}}},
            {{"type":"payment_intent.succeeded","data":{{"object":{{}}}}}},
            {{"id":"evt_1","type":"customer.created","created":1,"data":{{"object":{{}}}}}}]}}"#
        );
        let page = client
            .parse_page(&reply(body.as_bytes()), &EventsQuery::default())
            .unwrap();
        let ids: Vec<&str> = page.events.iter().map(|listed| listed.event.id()).collect();
        assert_eq!(ids, ["evt_4", "evt_1"]);
        assert_eq!(page.cursor.as_deref(), Some("evt_1"));
        let refused: Vec<(Option<&str>, usize)> = page
            .refused
            .iter()
            .map(|refused| (refused.id.as_deref(), refused.position))
            .collect();
        assert_eq!(
            refused,
            [(Some("evt_big"), 2), (Some("evt_bad\u{1b}[31m"), 3), (None, 4)]
        );
        assert!(
            page.refused[0].reason.contains("over the 200 bytes"),
            "{:?}",
            page.refused[0]
        );
        assert_eq!(page.refused[0].bytes, big.len());
        assert!(
            page.refused[1].reason.contains("does not parse"),
            "{:?}",
            page.refused[1]
        );
        assert!(
            page.refused[2].reason.starts_with("does not parse: "),
            "{:?}",
            page.refused[2]
        );
        // The default bound is a delivery's.
        assert_eq!(
            self::client().event_bytes_limit(),
            payhook_core::defaults::DEFAULT_BODY_LIMIT
        );
        // A page that says more follow with no readable id: no next page
        // can be asked for.
        let none = br#"{"has_more":true,"data":[{"data":{}}]}"#;
        assert!(matches!(
            client.parse_page(&reply(none), &EventsQuery::default()),
            Err(ApiError::BadReply(_))
        ));
        // The last event refused: the list goes on after its id.
        let last = br#"{"has_more":true,"data":[{"id":"evt_9","data":{}}]}"#;
        let page = client.parse_page(&reply(last), &EventsQuery::default()).unwrap();
        assert_eq!(page.cursor.as_deref(), Some("evt_9"));
    }

    /// The key never reaches a refused event's id or reason, and both are
    /// bounded.
    #[test]
    fn a_refused_event_carries_no_key_and_is_bounded() {
        let key = "sk_test_in_a_refused_event";
        let client = Client::new("http://127.0.0.1:1", ApiKey::new(key).unwrap()).unwrap();
        let body = format!(
            r#"{{"has_more":false,"data":[{{"id":"evt_{key}","created":"{key}"}},{{"id":"{}","data":1}}]}}"#,
            "é".repeat(1000)
        );
        let page = client
            .parse_page(&reply(body.as_bytes()), &EventsQuery::default())
            .unwrap();
        assert_eq!(page.refused.len(), 2);
        for refused in &page.refused {
            assert!(!format!("{refused:?}").contains(key), "{refused:?}");
            assert!(refused.reason.len() <= crate::MAX_MESSAGE_BYTES);
            assert!(refused.id.as_ref().unwrap().len() <= MAX_REFUSED_ID_BYTES);
        }
        assert_eq!(page.refused[0].id.as_deref(), Some("evt_<redacted>"));
    }

    #[test]
    fn events_outside_the_window_asked_for_are_dropped_and_counted() {
        let body = br#"{"has_more":false,"data":[
            {"id":"evt_future","type":"t","created":32503680000,"data":{}},
            {"id":"evt_in","type":"t","created":150,"data":{}},
            {"id":"evt_zero","type":"t","created":0,"data":{}},
            {"id":"evt_none","type":"t","data":{}},
            {"id":"evt_min","type":"t","created":-9223372036854775808,"data":{}}]}"#;
        let query = EventsQuery {
            created_gte: Some(100),
            created_lt: Some(200),
            ..EventsQuery::default()
        };
        let page = client().parse_page(&reply(body), &query).unwrap();
        let ids: Vec<&str> = page.events.iter().map(|listed| listed.event.id()).collect();
        assert_eq!(ids, ["evt_in"]);
        assert_eq!(page.outside, 4);
        assert_eq!(page.cursor.as_deref(), Some("evt_min"));
        // The bounds, one by one.
        let q = |gte, gt, lt, lte| EventsQuery {
            created_gte: gte,
            created_gt: gt,
            created_lt: lt,
            created_lte: lte,
            ..EventsQuery::default()
        };
        assert!(q(Some(5), None, None, None).contains(Some(5)));
        assert!(!q(Some(5), None, None, None).contains(Some(4)));
        assert!(!q(None, Some(5), None, None).contains(Some(5)));
        assert!(!q(None, None, Some(5), None).contains(Some(5)));
        assert!(q(None, None, None, Some(5)).contains(Some(5)));
        assert!(!q(None, None, None, Some(5)).contains(Some(6)));
        assert!(EventsQuery::default().contains(None));
    }

    #[test]
    fn a_typed_field_echoing_the_key_is_stored_without_it() {
        let key = "sk_test_echoed_in_has_more";
        let client = Client::new("http://127.0.0.1:1", ApiKey::new(key).unwrap()).unwrap();
        let body = format!(r#"{{"has_more":"{key}","data":[]}}"#);
        let err = client
            .parse_page(&reply(body.as_bytes()), &EventsQuery::default())
            .unwrap_err();
        assert!(!format!("{err} {err:?}").contains(key), "{err:?}");
        // A megabyte-long value: bounded.
        let body = format!(r#"{{"has_more":"{}","data":[]}}"#, "x".repeat(1_000_000));
        let err = client
            .parse_page(&reply(body.as_bytes()), &EventsQuery::default())
            .unwrap_err();
        assert!(err.to_string().len() <= 1200, "{}", err.to_string().len());
    }

    #[test]
    fn the_query_encodes_its_values() {
        let query = EventsQuery {
            created_gte: Some(10),
            created_lt: Some(20),
            types: vec!["a.b".to_owned(), "c&d".to_owned()],
            delivery_success: Some(false),
            starting_after: Some("evt_a&b".to_owned()),
            ..EventsQuery::default()
        };
        assert_eq!(
            query.to_query_string(),
            "limit=100&created%5Bgte%5D=10&created%5Blt%5D=20&types%5B%5D=a.b&types%5B%5D=c%26d\
             &delivery_success=false&starting_after=evt_a%26b"
        );
    }
}
