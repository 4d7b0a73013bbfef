//! The reconciler against a fake events list on loopback, whose replies each
//! test chooses: a pass that finds nothing missing costs one request and
//! stores nothing; missed events are stored once, as reconciled, and handed
//! to the handler once; a backlog is paged; `401` stops the reconciler,
//! `429` waits its `Retry-After`; a page with an event that does not parse
//! stores the rest and records that one; a failed pass leaves the mark where
//! it was; a reply
//! over `MAX_REPLY_BYTES` fails the pass; the window never reaches past the
//! retention; passes start one interval apart however long each takes; two
//! inboxes on one database take turns; settings that cannot hold beside the
//! retention are refused when the inbox is built.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use bytes::Bytes;
use payhook::inbox::reconcile::MAX_REPLY_BYTES;
use payhook::inbox::sqlx::{self, Row};
use payhook::inbox::{Inbox, InboxBuilder, Job, Reconcile, Source};
use payhook::sender::SignedDelivery;
use payhook::Receiver;
use payhook_test_support::{eventually, eventually_async, sqlite_url};

use crate::axum_loopback;

const SECRET: &str = "whsec_reconcile_bounds";
const KEY: &str = "sk_test_reconcile_bounds_key";

fn now_s() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// One event of the service, `age` seconds old.
fn event(id: &str, age: i64) -> String {
    format!(
        r#"{{"id":"{id}","object":"event","api_version":"v1","created":{},"data":{{"object":{{"id":"pi_{id}","object":"payment_intent","amount":1500,"currency":"btc","status":"succeeded"}}}},"livemode":false,"type":"payment_intent.succeeded"}}"#,
        now_s() - age
    )
}

/// A reply the fake gives once: status, headers, body.
type Scripted = (u16, Vec<(&'static str, String)>, String);

/// The fake events list: a list of events (newest first) it pages through
/// as the service does, only those created in the query's window, scripted
/// replies that come first, and every request it got (when, the query, the
/// authorization header).
#[derive(Default)]
struct FakeApi {
    events: Mutex<Vec<String>>,
    scripted: Mutex<VecDeque<Scripted>>,
    requests: Mutex<Vec<(Instant, String, String)>>,
    /// How long each reply takes.
    delay: Mutex<Duration>,
}

impl FakeApi {
    fn requests(&self) -> Vec<(Instant, String, String)> {
        self.requests.lock().unwrap().clone()
    }

    /// The page after `starting_after`, at most `limit` events, of those
    /// created in `[created[gte], created[lt])`.
    fn page(&self, query: &str) -> String {
        let param = |name: &str| {
            form_urlencoded::parse(query.as_bytes())
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.into_owned())
        };
        let limit: usize = param("limit").and_then(|limit| limit.parse().ok()).unwrap_or(10);
        let bound = |name: &str| param(name).and_then(|value| value.parse::<i64>().ok());
        let (gte, lt) = (bound("created[gte]"), bound("created[lt]"));
        let in_window = |event: &&String| {
            let created = serde_json::from_str::<serde_json::Value>(event).unwrap()["created"].as_i64();
            created.is_none_or(|created| {
                gte.is_none_or(|gte| created >= gte) && lt.is_none_or(|lt| created < lt)
            })
        };
        let events: Vec<String> = self
            .events
            .lock()
            .unwrap()
            .iter()
            .filter(in_window)
            .cloned()
            .collect();
        let start = match param("starting_after") {
            Some(after) => events
                .iter()
                .position(|event| event.contains(&format!(r#""id":"{after}""#)))
                .map_or(events.len(), |at| at + 1),
            None => 0,
        };
        let page: Vec<&str> = events
            .iter()
            .skip(start)
            .take(limit)
            .map(String::as_str)
            .collect();
        let has_more = start + page.len() < events.len();
        format!(
            r#"{{"object":"list","url":"/v1/events","has_more":{has_more},"data":[{}]}}"#,
            page.join(",")
        )
    }
}

async fn list(
    State(api): State<Arc<FakeApi>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> impl IntoResponse {
    let query = query.unwrap_or_default();
    let auth = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
        .to_owned();
    api.requests
        .lock()
        .unwrap()
        .push((Instant::now(), query.clone(), auth));
    let delay = *api.delay.lock().unwrap();
    tokio::time::sleep(delay).await;
    let scripted = api.scripted.lock().unwrap().pop_front();
    let (status, extra, body) = scripted.unwrap_or_else(|| (200, Vec::new(), api.page(&query)));
    let mut reply_headers = HeaderMap::new();
    reply_headers.insert("content-type", "application/json".parse().unwrap());
    for (name, value) in extra {
        reply_headers.insert(name, value.parse().unwrap());
    }
    (StatusCode::from_u16(status).unwrap(), reply_headers, body)
}

async fn fake_api() -> (Arc<FakeApi>, String) {
    let api = Arc::new(FakeApi::default());
    let app = axum::Router::new()
        .route("/v1/events", get(list))
        .with_state(Arc::clone(&api));
    let addr = axum_loopback::serve(app).await;
    (api, format!("http://{addr}"))
}

/// The events each handler call saw: (id, source).
type Handled = Arc<Mutex<Vec<(String, Source)>>>;

async fn inbox(
    url: &str,
    base: &str,
    interval_ms: u64,
    configure: impl FnOnce(InboxBuilder) -> InboxBuilder,
) -> Inbox {
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let reconcile = Reconcile::new(base, KEY)
        .unwrap()
        .interval(Duration::from_millis(interval_ms));
    configure(
        Inbox::builder(receiver)
            .namespace("reconcile-bounds")
            .poll_interval(Duration::from_millis(20))
            .reconcile(reconcile),
    )
    .connect(url)
    .await
    .unwrap()
}

fn start(inbox: &Inbox, handled: &Handled) -> payhook::inbox::Workers {
    let handled = Arc::clone(handled);
    inbox.start(move |job: Job| {
        let handled = Arc::clone(&handled);
        async move {
            handled
                .lock()
                .unwrap()
                .push((job.event().id().to_owned(), job.source()));
            Ok(())
        }
    })
}

async fn deliver(inbox: &Inbox, body: &str) {
    let delivery = SignedDelivery::now(Bytes::from(body.to_owned()), SECRET).unwrap();
    let reply = inbox.ingest(&delivery.headers(), delivery.body).await;
    assert_eq!(reply.status().as_u16(), 200, "{}", reply.body());
}

/// The reconciler's row: failures and the last error.
async fn reconciler_row(inbox: &Inbox) -> (i64, Option<String>, Option<String>) {
    let row =
        sqlx::query("SELECT failures, last_error, owner FROM payhook_inbox_reconciler WHERE namespace = $1")
            .bind("reconcile-bounds")
            .fetch_one(inbox.pool())
            .await
            .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// The reconciler's mark: up to when (the service's `created`, seconds)
/// every event is known to be in the inbox; `None` until a pass reached its
/// end.
async fn mark(inbox: &Inbox) -> Option<i64> {
    sqlx::query("SELECT reconciled_until FROM payhook_inbox_reconciler WHERE namespace = $1")
        .bind("reconcile-bounds")
        .fetch_one(inbox.pool())
        .await
        .unwrap()
        .get(0)
}

async fn sources(inbox: &Inbox) -> Vec<(String, Option<String>)> {
    let mut rows: Vec<(String, Option<String>)> = sqlx::query("SELECT event_id, source FROM payhook_inbox")
        .fetch_all(inbox.pool())
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    rows.sort();
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_when_nothing_was_missed_costs_one_request_and_stores_nothing() {
    let (api, base) = fake_api().await;
    let events: Vec<String> = (0..3).map(|i| event(&format!("evt_seen_{i}"), 30 + i)).collect();
    *api.events.lock().unwrap() = events.clone();
    let inbox = inbox(&sqlite_url("payhook-reconcile-quiet"), &base, 200, |b| b).await;
    for body in &events {
        deliver(&inbox, body).await;
    }
    let handled = Handled::default();
    let workers = start(&inbox, &handled);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    workers.shutdown().await;
    let requests = api.requests();
    assert!(requests.len() >= 4, "passes ran: {}", requests.len());
    for (_, query, auth) in &requests {
        // One request a pass: no pass asked for a second page.
        assert!(!query.contains("starting_after"), "{query}");
        assert_eq!(auth, &format!("Bearer {KEY}"));
    }
    assert!(sources(&inbox).await.iter().all(|(_, source)| source.is_none()));
    let mut ids: Vec<String> = handled.lock().unwrap().iter().map(|(id, _)| id.clone()).collect();
    ids.sort();
    assert_eq!(
        ids,
        ["evt_seen_0", "evt_seen_1", "evt_seen_2"],
        "only the deliveries ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_missed_events_is_paged_stored_once_and_handled_once() {
    let (api, base) = fake_api().await;
    // 150 events, newest first: two pages of the list.
    let events: Vec<String> = (0..150)
        .map(|i| event(&format!("evt_backlog_{i:03}"), 10 + i))
        .collect();
    *api.events.lock().unwrap() = events.clone();
    let inbox = inbox(&sqlite_url("payhook-reconcile-backlog"), &base, 300, |b| b).await;
    deliver(&inbox, &events[7]).await;
    let handled = Handled::default();
    let workers = start(&inbox, &handled);
    eventually(Duration::from_secs(20), "every listed event handled", || {
        handled.lock().unwrap().len() >= 150
    })
    .await;
    tokio::time::sleep(Duration::from_millis(900)).await; // more passes: nothing more runs
    workers.shutdown().await;
    let handled = handled.lock().unwrap().clone();
    assert_eq!(handled.len(), 150, "each event handled once");
    for (id, source) in &handled {
        let expected = if id == "evt_backlog_007" {
            Source::Delivered
        } else {
            Source::Reconciled
        };
        assert_eq!(*source, expected, "{id}");
    }
    let stored = sources(&inbox).await;
    assert_eq!(stored.len(), 150);
    assert_eq!(
        stored
            .iter()
            .filter(|(_, source)| source.as_deref() == Some("reconciled"))
            .count(),
        149
    );
    assert!(api
        .requests()
        .iter()
        .any(|(_, query, _)| query.contains("starting_after=evt_backlog_099")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_stops_the_reconciler_with_a_clear_error() {
    let (api, base) = fake_api().await;
    for _ in 0..5 {
        api.scripted.lock().unwrap().push_back((
            401,
            Vec::new(),
            r#"{"error":{"type":"authentication_error","message":"Invalid API key provided"}}"#.to_owned(),
        ));
    }
    let inbox = inbox(&sqlite_url("payhook-reconcile-401"), &base, 150, |b| b).await;
    let workers = start(&inbox, &Handled::default());
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(api.requests().len(), 1, "stopped after the refusal, no retry");
    let (failures, error, _) = reconciler_row(&inbox).await;
    assert_eq!(failures, 1);
    let error = error.unwrap();
    assert!(
        error.contains("refused the API key") && error.contains("401"),
        "{error}"
    );
    assert!(!error.contains(KEY), "the key is never shown: {error}");
    workers.shutdown().await;
}

/// Passes start one interval apart, however long each takes: with a 1 s
/// interval and an events list that answers in 0.6 s, the requests come
/// about 1 s apart, not 1.6 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_start_one_interval_apart_however_long_each_takes() {
    let (api, base) = fake_api().await;
    *api.delay.lock().unwrap() = Duration::from_millis(600);
    let inbox = inbox(&sqlite_url("payhook-reconcile-cadence"), &base, 1000, |b| b).await;
    let workers = start(&inbox, &Handled::default());
    eventually(Duration::from_secs(15), "six passes", || {
        api.requests().len() >= 6
    })
    .await;
    workers.shutdown().await;
    let requests = api.requests();
    let mut gaps: Vec<Duration> = requests.windows(2).map(|pair| pair[1].0 - pair[0].0).collect();
    gaps.sort();
    let median = gaps[gaps.len() / 2];
    assert!(
        median >= Duration::from_millis(900) && median < Duration::from_millis(1300),
        "passes started {median:?} apart (median of {gaps:?}), not one interval"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_waits_its_retry_after_then_goes_on() {
    let (api, base) = fake_api().await;
    // Each reply takes a while: the wait counts from the 429's arrival,
    // not from the request.
    let delay = Duration::from_millis(300);
    *api.delay.lock().unwrap() = delay;
    *api.events.lock().unwrap() = vec![event("evt_throttled", 20)];
    api.scripted.lock().unwrap().push_back((
        429,
        vec![("retry-after", "2".to_owned())],
        r#"{"error":{"message":"slow down"}}"#.to_owned(),
    ));
    let inbox = inbox(&sqlite_url("payhook-reconcile-429"), &base, 100, |b| b).await;
    let handled = Handled::default();
    let workers = start(&inbox, &handled);
    eventually(
        Duration::from_secs(10),
        "the event handled after the wait",
        || !handled.lock().unwrap().is_empty(),
    )
    .await;
    workers.shutdown().await;
    let requests = api.requests();
    let waited = requests[1].0 - (requests[0].0 + delay);
    assert!(
        waited >= Duration::from_secs(2),
        "the second request came {waited:?} after the 429"
    );
    let (failures, _, _) = reconciler_row(&inbox).await;
    assert_eq!(failures, 0, "a pass that reached its end clears the failures");
}

/// One bad event holds back none: of a page with a good event, one that
/// does not parse and one that parses but cannot be stored (its id holds a
/// NUL, written `\u0000`), the good one is stored and handled, the other two
/// recorded as refused, and the pass reaches its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_with_events_that_do_not_parse_or_cannot_be_stored_stores_the_rest_and_goes_on() {
    let (api, base) = fake_api().await;
    let good = event("evt_page_good", 20);
    let bad = unparsable(20);
    let unstorable = event(r"evt_page_nul\u0000", 20);
    *api.events.lock().unwrap() = vec![good, bad, unstorable];
    let inbox = inbox(&sqlite_url("payhook-reconcile-bad-page"), &base, 200, |b| b).await;
    let handled = Handled::default();
    let workers = start(&inbox, &handled);
    eventually(Duration::from_secs(10), "the good event handled", || {
        !handled.lock().unwrap().is_empty()
    })
    .await;
    let admin = payhook::inbox::Admin::of_inbox(&inbox);
    eventually_async(Duration::from_secs(10), "a pass reached its end", || async {
        mark(&inbox).await.is_some()
    })
    .await;
    workers.shutdown().await;
    assert_eq!(
        sources(&inbox).await,
        [("evt_page_good".to_owned(), Some("reconciled".to_owned()))]
    );
    let refused = admin.refused(10).await.unwrap();
    assert_eq!(refused.len(), 2, "{refused:?}");
    let unparsed = refused.iter().find(|row| row.event_id.is_none());
    assert!(
        unparsed.is_some_and(|row| row.reason.contains("does not parse")),
        "{refused:?}"
    );
    let unstored = refused.iter().find(|row| row.event_id.is_some());
    assert!(
        unstored.is_some_and(|row| row.reason.contains("cannot be stored") && row.reason.contains("NUL")),
        "{refused:?}"
    );
    let (failures, _, _) = reconciler_row(&inbox).await;
    assert_eq!(failures, 0);
}

/// A listed event with no id, `age` seconds old: it does not parse.
fn unparsable(age: i64) -> String {
    format!(
        r#"{{"object":"event","type":"payment_intent.succeeded","created":{},"data":{{"object":{{}}}}}}"#,
        now_s() - age
    )
}

/// A pass that fails on a page leaves the mark where it was, so the next
/// pass lists the whole window again: an event created long before the
/// overlap is stored once the list is fixed. A mark moved to the window's
/// end on a failed page would start the next window an overlap (60 s)
/// before that end, past the event, for good. The page fails as one that
/// says more events follow while none of its events has a readable id (no
/// cursor to ask for the next page after).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pass_leaves_the_mark_so_an_event_older_than_the_overlap_is_stored() {
    let (api, base) = fake_api().await;
    let good = event("evt_old_good", 600);
    *api.events.lock().unwrap() = vec![good];
    let unreadable = format!(
        r#"{{"object":"list","has_more":true,"data":[{}]}}"#,
        unparsable(610)
    );
    *api.scripted.lock().unwrap() = (0..10_000)
        .map(|_| (200, Vec::new(), unreadable.clone()))
        .collect();
    let inbox = inbox(&sqlite_url("payhook-reconcile-failed-mark"), &base, 200, |b| b).await;
    let handled = Handled::default();
    let workers = start(&inbox, &handled);
    eventually(Duration::from_secs(10), "two failed passes", || {
        api.requests().len() >= 2
    })
    .await;
    assert_eq!(
        mark(&inbox).await,
        None,
        "no pass reached its end: the mark stays"
    );
    let (failures, error, _) = reconciler_row(&inbox).await;
    assert!(failures >= 1, "the passes failed");
    assert!(error.unwrap().contains("readable id"));
    assert!(sources(&inbox).await.is_empty(), "nothing was stored");
    // The service fixes its list: a later pass lists the whole window again.
    api.scripted.lock().unwrap().clear();
    eventually(Duration::from_secs(15), "the old event handled", || {
        !handled.lock().unwrap().is_empty()
    })
    .await;
    workers.shutdown().await;
    assert_eq!(
        sources(&inbox).await,
        [("evt_old_good".to_owned(), Some("reconciled".to_owned()))]
    );
    let mark = mark(&inbox).await.expect("a pass reached its end");
    assert!(
        mark > now_s() - 60,
        "the mark moved to the last window's end: {mark}"
    );
}

/// A page whose reply is over `MAX_REPLY_BYTES` fails the pass with an error
/// naming the bound, and nothing of it is stored; the same page padded to
/// exactly the bound is read whole and its event stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_over_the_size_bound_fails_the_pass_and_one_at_the_bound_is_read() {
    let (api, base) = fake_api().await;
    let listed = event("evt_padded", 20);
    // A page of one event, padded with spaces (still JSON) to `size` bytes.
    let padded = |size: usize| {
        let head = format!(r#"{{"object":"list","url":"/v1/events","has_more":false,"data":[{listed}]"#);
        let body = format!("{head}{}}}", " ".repeat(size - head.len() - 1));
        assert_eq!(body.len(), size);
        body
    };
    api.scripted
        .lock()
        .unwrap()
        .push_back((200, Vec::new(), padded(MAX_REPLY_BYTES + 1)));
    let inbox = inbox(&sqlite_url("payhook-reconcile-large"), &base, 200, |b| b).await;
    let handled = Handled::default();
    let workers = start(&inbox, &handled);
    eventually_async(Duration::from_secs(20), "a failed pass recorded", || async {
        assert!(
            sources(&inbox).await.is_empty(),
            "the reply over the bound was read and its event stored"
        );
        sqlx::query("SELECT failures FROM payhook_inbox_reconciler WHERE namespace = $1")
            .bind("reconcile-bounds")
            .fetch_optional(inbox.pool())
            .await
            .unwrap()
            .is_some_and(|row| row.get::<i64, _>(0) >= 1)
    })
    .await;
    let (_, error, _) = reconciler_row(&inbox).await;
    let error = error.unwrap();
    assert!(
        error.contains(&format!("the reply is larger than {MAX_REPLY_BYTES} bytes")),
        "{error}"
    );
    assert!(
        sources(&inbox).await.is_empty(),
        "nothing of the reply was stored"
    );
    assert_eq!(mark(&inbox).await, None);
    api.scripted
        .lock()
        .unwrap()
        .push_back((200, Vec::new(), padded(MAX_REPLY_BYTES)));
    eventually(Duration::from_secs(20), "the padded page's event handled", || {
        !handled.lock().unwrap().is_empty()
    })
    .await;
    workers.shutdown().await;
    assert_eq!(
        sources(&inbox).await,
        [("evt_padded".to_owned(), Some("reconciled".to_owned()))]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_never_reaches_past_the_retention_and_overlaps_the_last() {
    let (api, base) = fake_api().await;
    let inbox = inbox(&sqlite_url("payhook-reconcile-window"), &base, 1000, |b| {
        b.retention(Duration::from_secs(3600))
    })
    .await;
    let started = now_s();
    let workers = start(&inbox, &Handled::default());
    eventually(Duration::from_secs(10), "two passes", || {
        api.requests().len() >= 2
    })
    .await;
    workers.shutdown().await;
    let bound = |query: &str, name: &str| -> i64 {
        form_urlencoded::parse(query.as_bytes())
            .find(|(key, _)| key == name)
            .unwrap_or_else(|| panic!("no {name} in {query}"))
            .1
            .parse()
            .unwrap()
    };
    let requests = api.requests();
    let (first, second) = (&requests[0].1, &requests[1].1);
    // The first pass: back to the retention, less the 60 s overlap, no further.
    let floor = bound(first, "created[gte]");
    assert!(
        floor >= started - 3600 + 60 - 2 && floor <= now_s() - 3600 + 60,
        "{first}"
    );
    // Then from the last window's end, less the overlap.
    assert_eq!(
        bound(second, "created[gte]"),
        bound(first, "created[lt]") - 60,
        "{second}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_inboxes_on_one_database_take_turns_and_one_takes_over() {
    let (api, base) = fake_api().await;
    *api.events.lock().unwrap() = vec![event("evt_turns", 20)];
    let url = sqlite_url("payhook-reconcile-turns");
    let (first, second) = (
        inbox(&url, &base, 200, |b| b).await,
        inbox(&url, &base, 200, |b| b).await,
    );
    let handled = Handled::default();
    let (a, b) = (start(&first, &handled), start(&second, &handled));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let requests = api.requests().len();
    // One reconciles: about one request per interval, not two.
    assert!(
        (4..=9).contains(&requests),
        "{requests} requests in 1.5 s at 200 ms"
    );
    let (_, _, owner) = reconciler_row(&first).await;
    assert!(owner.is_some());
    assert_eq!(handled.lock().unwrap().len(), 1, "stored and handled once");
    // The holder stops and gives its turn up; the other takes over at once.
    let (_, _, holder) = reconciler_row(&first).await;
    a.shutdown().await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (_, _, after_a) = reconciler_row(&first).await;
    assert!(after_a.is_some(), "a turn is held while an inbox runs");
    if after_a == holder {
        // The second inbox held it: stop that one, start the first again.
        b.shutdown().await;
        let again = start(&first, &handled);
        tokio::time::sleep(Duration::from_millis(800)).await;
        let (_, _, taken) = reconciler_row(&first).await;
        assert!(taken.is_some() && taken != holder, "the turn was taken over");
        again.shutdown().await;
    } else {
        b.shutdown().await;
    }
    assert_eq!(
        handled.lock().unwrap().len(),
        1,
        "handled once whoever reconciled"
    );
}

/// A list that sends the same page with `has_more: true` forever (its
/// cursor repeats): each pass ends as a failure after two requests,
/// recorded with the reason and counted, and the next waits its backoff —
/// not hundreds of requests with nothing said. Nothing is stored twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_whose_cursor_repeats_ends_each_pass_as_a_failure() {
    let (api, base) = fake_api().await;
    let page = format!(
        r#"{{"object":"list","has_more":true,"data":[{},{}]}}"#,
        event("evt_loop_b", 20),
        event("evt_loop_a", 20)
    );
    for _ in 0..1000 {
        api.scripted
            .lock()
            .unwrap()
            .push_back((200, Vec::new(), page.clone()));
    }
    let inbox = inbox(&sqlite_url("payhook-reconcile-loop"), &base, 200, |b| b).await;
    let handled = Handled::default();
    let workers = start(&inbox, &handled);
    eventually(Duration::from_secs(10), "a pass listed twice", || {
        api.requests().len() >= 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (failures, error, _) = reconciler_row(&inbox).await;
    let error = error.unwrap();
    assert!(error.contains("came back"), "{error}");
    // Two requests a pass, passes backed off (0.2, 0.4, 0.8 s…).
    let requests = api.requests().len();
    assert!(
        requests <= 2 * usize::try_from(failures).unwrap() + 2,
        "{requests} requests for {failures} failed passes"
    );
    assert!(requests < 20, "{requests} requests in under 3 s");
    assert_eq!(mark(&inbox).await, None, "no pass reached its end");
    workers.shutdown().await;
    assert_eq!(
        sources(&inbox).await,
        [
            ("evt_loop_a".to_owned(), Some("reconciled".to_owned())),
            ("evt_loop_b".to_owned(), Some("reconciled".to_owned()))
        ]
    );
}

/// Events the list sends outside the window the pass asked for — created
/// at 0, in the year 3000, or later than the window's end — are dropped,
/// whatever the server says: only the event inside the window is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_outside_the_window_asked_for_are_not_stored() {
    let (api, base) = fake_api().await;
    let at = |id: &str, created: i64| {
        format!(
            r#"{{"id":"{id}","object":"event","created":{created},"data":{{"object":{{"id":"pi_{id}","object":"payment_intent","amount":1500,"currency":"btc","status":"succeeded"}}}},"type":"payment_intent.succeeded"}}"#
        )
    };
    let page = format!(
        r#"{{"object":"list","has_more":false,"data":[{},{},{},{}]}}"#,
        at("evt_year_3000", 32_503_680_000),
        at("evt_just_now", now_s()),
        event("evt_inside", 20),
        at("evt_epoch", 0),
    );
    api.scripted.lock().unwrap().push_back((200, Vec::new(), page));
    let inbox = inbox(&sqlite_url("payhook-reconcile-outside"), &base, 200, |b| b).await;
    let handled = Handled::default();
    let workers = start(&inbox, &handled);
    eventually(Duration::from_secs(10), "the inside event handled", || {
        !handled.lock().unwrap().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    workers.shutdown().await;
    assert_eq!(
        sources(&inbox).await,
        [("evt_inside".to_owned(), Some("reconciled".to_owned()))]
    );
}

/// A backlog larger than one pass may page (250 missed events, one page a
/// pass) still completes: passes walk the window in time slices, oldest
/// first, the mark moving per slice, every pass within its bound; each
/// event is stored and handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_larger_than_a_pass_completes_in_time_slices() {
    let (api, base) = fake_api().await;
    // Newest first, one a second, 10 to 259 seconds old.
    *api.events.lock().unwrap() = (0..250)
        .map(|n| event(&format!("evt_slice_{n:03}"), 10 + n))
        .collect();
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace("reconcile-bounds")
        .poll_interval(Duration::from_millis(20))
        .reconcile(
            Reconcile::new(&base, KEY)
                .unwrap()
                .interval(Duration::from_millis(100))
                .max_pages(1),
        )
        .connect(&sqlite_url("payhook-reconcile-slices-1"))
        .await
        .unwrap();
    let handled = Handled::default();
    let workers = start(&inbox, &handled);
    let mut marks = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while handled.lock().unwrap().len() < 250 {
        assert!(
            Instant::now() < deadline,
            "the backlog was not handled within 60 s"
        );
        let row = sqlx::query("SELECT reconciled_until FROM payhook_inbox_reconciler WHERE namespace = $1")
            .bind("reconcile-bounds")
            .fetch_optional(inbox.pool())
            .await
            .unwrap();
        marks.push(row.and_then(|row| row.get::<Option<i64>, _>(0)));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    workers.shutdown().await;
    // One page a pass: no pass ever asked for a second page.
    let requests = api.requests();
    assert!(
        requests
            .iter()
            .all(|(_, query, _)| !query.contains("starting_after")),
        "a pass paged past its bound"
    );
    let stored = sources(&inbox).await;
    assert_eq!(stored.len(), 250);
    assert!(stored
        .iter()
        .all(|(_, source)| source.as_deref() == Some("reconciled")));
    let mut ids: Vec<String> = handled.lock().unwrap().iter().map(|(id, _)| id.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 250, "each handled once");
    // The mark moved forward slice by slice, never back.
    let moved: Vec<i64> = marks.into_iter().flatten().collect();
    assert!(moved.windows(2).all(|pair| pair[0] <= pair[1]), "{moved:?}");
    assert!(
        moved.iter().collect::<std::collections::HashSet<_>>().len() >= 2,
        "{moved:?}"
    );
}

/// A list slower than the turn's lease (11 s a reply, a 10 s lease at a
/// 200 ms interval): the holder renews its turn while it waits, so the
/// other inbox never reconciles at the same time — one request in flight,
/// not two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_list_does_not_let_two_inboxes_reconcile_at_once() {
    let (api, base) = fake_api().await;
    *api.delay.lock().unwrap() = Duration::from_secs(11);
    let url = sqlite_url("payhook-reconcile-slow-turn");
    let (first, second) = (
        inbox(&url, &base, 200, |b| b).await,
        inbox(&url, &base, 200, |b| b).await,
    );
    let handled = Handled::default();
    let (a, b) = (start(&first, &handled), start(&second, &handled));
    tokio::time::sleep(Duration::from_millis(10_800)).await;
    assert_eq!(
        api.requests().len(),
        1,
        "a second inbox listed while the first waited on its request"
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// Settings whose times cannot hold beside the retention are refused when
/// the inbox is built, never clamped: an interval and overlap reaching past
/// the retention (the window could store an event purged already, and an
/// interval of `Duration::MAX` would set a turn lease centuries ahead), or a
/// pass time beyond the durations every deadline is capped at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_settings_that_cannot_hold_are_refused_when_the_inbox_is_built() {
    let settings = || Reconcile::new("http://127.0.0.1:9", KEY).unwrap();
    let day = Duration::from_secs(86_400);
    let refused: [(&str, Reconcile); 4] = [
        ("interval and overlap", settings().interval(Duration::MAX)),
        ("interval and overlap", settings().overlap(Duration::MAX)),
        // The default retention is 7 days: 6 days + 1 day reaches it.
        ("interval and overlap", settings().interval(6 * day).overlap(day)),
        ("max pass time", settings().max_pass_time(Duration::MAX)),
    ];
    for (setting, reconcile) in refused {
        let receiver = Receiver::builder().secret(SECRET).build().unwrap();
        let err = Inbox::builder(receiver)
            .reconcile(reconcile)
            .connect(&sqlite_url("reconcile-refused"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains(setting), "{setting}: {err}");
    }
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    Inbox::builder(receiver)
        .reconcile(settings().interval(6 * day).overlap(day - Duration::from_secs(1)))
        .connect(&sqlite_url("reconcile-accepted"))
        .await
        .expect("an interval and overlap just short of the retention");
}
