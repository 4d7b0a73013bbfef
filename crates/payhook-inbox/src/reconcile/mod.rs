//! The reconciler (feature `reconcile`): every event the service created is
//! handled exactly once, the ones no delivery brought included.
//!
//! Deliveries can fail to arrive for good: the endpoint was down longer than
//! the service retries, a rotated secret made every attempt `400`, a deploy
//! broke the route, an allowlist was too tight. Every interval the reconciler
//! lists the events the service created since its mark, with the API key,
//! and stores the ones the inbox lacks — marked [`Source::Reconciled`](crate::Source::Reconciled) —
//! where they are handled like any other event: same handlers, per-intent
//! order, retries, dead letters, traces. An event already delivered is in the
//! inbox under its id and is left alone: the event id dedupes, so nothing
//! runs twice.
//!
//! ```no_run
//! use std::time::Duration;
//! use payhook::inbox::{Inbox, Reconcile};
//! use payhook::Receiver;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let receiver = Receiver::builder().secret(std::env::var("PAYHOOK_SECRET")?).build()?;
//! let inbox = Inbox::builder(receiver)
//!     .reconcile(
//!         Reconcile::new("https://api.service.example", &std::env::var("PAYHOOK_API_KEY")?)?
//!             .interval(Duration::from_secs(60)),
//!     )
//!     .connect("sqlite://inbox.db")
//!     .await?;
//! // The reconciler runs beside the workers: from `start` to `shutdown`.
//! let workers = inbox.start(|job: payhook::inbox::Job| async move {
//!     println!("handled {} ({:?})", job.event().id(), job.source());
//!     Ok(())
//! });
//! # workers.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # What is trusted
//! A reconciled event carries no signature: it is trusted because it came
//! from the configured API base over `https://` (plain `http://` only on
//! loopback: the emulator, a local proxy) in reply to a request carrying the
//! secret API key. The key is never logged or shown (`Debug` redacts it).
//! Every reply is bounded in size ([`MAX_REPLY_BYTES`]) and time
//! ([`REQUEST_TIMEOUT`]); each listed event must parse as a delivery's body
//! must and be no longer than the receiver's
//! [`body_limit`](payhook_core::Receiver::body_limit), as its delivery would.
//!
//! # One bad event holds back none
//! A listed event that does not parse, is longer than a delivery may be, or
//! cannot be stored (an id over [`MAX_ID_BYTES`](crate::MAX_ID_BYTES), a
//! NUL) is recorded like a refused delivery is reported — a `WARN` line
//! naming its id and reason, `payhook_inbox_reconcile_refused_total`, and a
//! row of the refused events record ([`Admin::refused`](crate::Admin::refused):
//! the dashboard's overview, `payhook inbox refused`) — and the rest of its
//! page is stored; the pass goes on and its mark moves. The record holds
//! one row per event (listed again, it counts the times), forgets rows older
//! than the retention and keeps at most
//! [`MAX_REFUSED_KEPT`](crate::admin::MAX_REFUSED_KEPT) per namespace. A
//! page that says more follow while none of its events has a readable id
//! (no cursor for the next page) fails the pass as a bad reply.
//!
//! # The copies it lists of stored events
//! The list also carries the events the inbox holds. Each is compared with
//! the stored event by the rule a duplicate delivery is compared by: a copy
//! whose `type` or `data` differs — or a second copy of one id in a page
//! that differs from the first — is flagged as a differing duplicate is
//! (the event's differing-copies record,
//! `payhook_inbox_differing_duplicates_total`, a `WARN` line saying it
//! "differs"), once however many passes list it again; the stored body stays
//! the event's. And when a delivery of an event the reconciler stored
//! arrives afterwards, it is acknowledged as a duplicate and recorded on the
//! event ([`StoredEvent::delivered_at`](crate::admin::StoredEvent::delivered_at)):
//! the operator's tools then show "reconciled at T, delivered at T2", and
//! the overview counts the event as delivered, no longer recovered.
//!
//! # The window
//! A pass lists the events created in `[mark − overlap, now − interval)`:
//!
//! - **The mark** is up to when every event the service created is known to
//!   be in the inbox, kept in the database (`payhook_inbox_reconciler`), so a
//!   restart resumes where it stopped. It moves only when a pass reaches its
//!   end: a crash mid-page loses nothing, the next pass lists the page again.
//! - **The overlap** (default [`DEFAULT_OVERLAP`]) lists again the last
//!   stretch of the previous window, for an event listed a little after its
//!   `created` time or a clock that runs behind the service's.
//! - **One interval of settling**: an event younger than the interval is
//!   left to its delivery (the first attempt, or a quick retry), so a
//!   delivery in flight is not counted as missed.
//! - **Never older than the retention.** The inbox keeps a done event
//!   [`retention`](crate::InboxBuilder::retention) long for dedupe; an event
//!   created before that may have been handled and purged already, and
//!   storing it again would run it twice. So no window (the first pass's
//!   included) reaches further back than `now − retention + overlap`.
//!
//! # Every pass ends
//! A pass asks for at most [`Reconcile::max_pages`] pages and pages for at
//! most [`Reconcile::max_pass_time`]. A backlog larger than that is walked
//! in time slices, oldest first: the mark moves at the end of each slice,
//! and a pass that runs out before its first slice ends halves the slice
//! for the next, so the backlog completes over the following passes (a
//! `WARN` line says when a pass stopped at its bound). A quiet window is
//! one slice: one request. A page whose cursor repeats one already
//! followed, or whose events are newer than events listed before them, ends
//! the pass as a failure (`ERROR`, `reason="broken_list"`, backed off).
//! Events listed outside the window asked for are dropped (a `WARN` line
//! counts them). One page is held at a time, whatever the list sends.
//!
//! # Several replicas
//! One process reconciles a namespace at a time: it holds the namespace's
//! turn, a lease in the database renewed between pages, for three intervals.
//! When it stops, it gives the turn up; when it dies, another process takes
//! it over once the lease runs out. The others' passes do nothing.
//!
//! # When the service answers badly
//! `401` or `403` stop the reconciler: the key is wrong or revoked, and
//! retrying cannot help. It says so in an `ERROR` log line, in
//! `payhook_inbox_reconcile_stopped` and in the `PayhookReconcilerFailing`
//! alert; deliveries go on. `429` and `5xx` back off — after `Retry-After`
//! when the reply gives one — doubling the wait from one interval up to ten
//! minutes; a failed pass is counted in
//! `payhook_inbox_reconcile_failures_total` by `reason`.
//!
//! # Seeing it
//! Each stored event is counted in `payhook_inbox_reconciled_total{namespace,
//! type}` and logged at `INFO`; each pass that stored any logs a `WARN`
//! naming how many, since each one is a delivery that was missed. Handlers
//! see [`Job::source`](crate::Job::source); the dashboard, `payhook inbox
//! list` and `show` show the source ("reconciled", or "reconciled, delivered
//! later" once its delivery came), and the overview counts delivered and
//! recovered events apart ([`Stats::recovered`](crate::admin::Stats::recovered)). The time of the last pass that reached
//! its end is `payhook_inbox_reconcile_last_success_timestamp_seconds`.

mod metrics;
mod pass;
pub(crate) mod record;
pub(crate) mod settings;
pub(crate) mod store;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// The client of the service's API the reconciler lists events with
/// (`payhook::api::Client`).
pub use payhook_api::Client as EventsApi;
pub use payhook_api::{
    ApiError, ApiKey, EventsPage, EventsQuery, ListedEvent, RefusedEvent, MAX_REPLY_BYTES, MAX_RETRY_AFTER,
    PAGE_LIMIT, REQUEST_TIMEOUT,
};
pub use settings::{
    Reconcile, DEFAULT_INTERVAL, DEFAULT_MAX_PAGES, DEFAULT_MAX_PASS_TIME, DEFAULT_OVERLAP, MAX_BACKOFF,
    MIN_INTERVAL,
};

use crate::clock::now_ms;
use crate::inner::Inner;

/// Of `events` (say the ones [`Admin::missing`](crate::admin::Admin::missing)
/// found), the ones the inbox can store, and apart, as refused events, the
/// ones it cannot: an id, type or payment intent id longer than
/// [`MAX_ID_BYTES`](crate::model::MAX_ID_BYTES) or holding a NUL (the JSON
/// escape `\u0000`). A refused one's `reason` starts `cannot be stored:`,
/// its `position` is its place in `events` (from 1) and its id is cut to
/// [`MAX_REFUSED_ID_BYTES`](payhook_api::MAX_REFUSED_ID_BYTES).
///
/// [`Admin::store_reconciled`](crate::admin::Admin::store_reconciled) stores
/// nothing of a batch holding one such event; split first, so that one holds
/// back none: store the storable ones, record the others with
/// [`Admin::record_refused`](crate::admin::Admin::record_refused), as the
/// reconciler and `payhook reconcile` do.
///
/// ```
/// use payhook::inbox::reconcile::{split_storable, ListedEvent};
/// use payhook::Event;
///
/// let listed = |id: &str| {
///     let body = format!(r#"{{"id":"{id}","type":"customer.created","created":1,"data":{{"object":{{}}}}}}"#);
///     ListedEvent { event: Event::from_slice(body.as_bytes()).unwrap(), body }
/// };
/// let events = [listed("evt_ok"), listed(&format!("evt_{}", "x".repeat(300)))];
/// let events: Vec<&ListedEvent> = events.iter().collect();
/// let (storable, refused) = split_storable(&events);
/// assert_eq!(storable.len(), 1);
/// assert_eq!(refused[0].position, 2);
/// assert!(refused[0].reason.contains("id is longer than 255 bytes"), "{}", refused[0].reason);
/// ```
pub fn split_storable<'e>(events: &[&'e ListedEvent]) -> (Vec<&'e ListedEvent>, Vec<RefusedEvent>) {
    store::split_storable(events)
}
use pass::{pass, PassError, PassStores};

/// Runs passes every interval until `stopped`, or until the service refuses
/// the key.
pub(crate) async fn run<DB: PassStores>(
    inner: Arc<Inner<DB>>,
    settings: Reconcile,
    mut stopped: watch::Receiver<bool>,
) {
    let namespace = inner.config.namespace.clone();
    let owner = payhook_core::store::ClaimToken::random().to_string();
    metrics::register(&namespace);
    let mut failures = 0u32;
    let mut wait = Duration::ZERO;
    let mut started = tokio::time::Instant::now();
    // The length of the time slices a backlog is walked in (seconds); `None`:
    // the whole window at once, as a quiet pass does.
    let mut slice: Option<i64> = None;
    loop {
        // Passes start one wait apart, not one wait after the last ended: a
        // slow pass does not push every later one back.
        tokio::select! {
            _ = stopped.wait_for(|stopped| *stopped) => break,
            () = next_pass(started, wait) => {}
        }
        started = tokio::time::Instant::now();
        match pass(&inner, &settings, &owner, &mut slice).await {
            Ok(report) => {
                failures = 0;
                wait = settings.interval;
                if !report.not_our_turn {
                    metrics::succeeded(&namespace, now_ms());
                }
                if report.incomplete {
                    tracing::warn!(
                        target: "payhook",
                        namespace = %namespace,
                        requests = report.requests,
                        "a reconciliation pass reached its bound of pages or time before the window's end; \
                         the rest follows from the mark, oldest first, over the next passes"
                    );
                }
                if report.outside > 0 {
                    tracing::warn!(
                        target: "payhook",
                        namespace = %namespace,
                        outside = report.outside,
                        "the service's events list sent events created outside the window the pass asked for; \
                         they were left out"
                    );
                }
                if report.stored > 0 {
                    tracing::warn!(
                        target: "payhook",
                        namespace = %namespace,
                        stored = report.stored,
                        "events no delivery brought were stored from the service's events list: deliveries are being missed; \
                         check that the endpoint is reachable, its secret, the source allowlist and the route"
                    );
                }
            }
            Err(err) => {
                // A backoff (and a `Retry-After`) counts from the reply.
                started = tokio::time::Instant::now();
                failures = failures.saturating_add(1);
                let reason = reason(&err);
                metrics::failed(&namespace, reason);
                let text = err.to_string();
                let _ = inner
                    .db
                    .write(DB::record_pass_failure(&inner.db, &namespace, now_ms(), &text))
                    .await;
                if let PassError::Api(ApiError::Unauthorized { .. }) = err {
                    metrics::stopped(&namespace);
                    tracing::error!(target: "payhook", namespace = %namespace, reason = %text, "the reconciler stopped: the service refused the API key");
                    break;
                }
                wait = settings.backoff(failures);
                if let PassError::Api(ApiError::Throttled {
                    retry_after: Some(after),
                    ..
                }) = err
                {
                    wait = wait.max(after);
                }
                if let PassError::Api(ApiError::BrokenList(_)) | PassError::TooDense(_) = err {
                    tracing::error!(target: "payhook", namespace = %namespace, reason = %text, failures, retry_in_ms = wait.as_millis() as u64, "a reconciliation pass failed: the service's events list would not end");
                } else {
                    tracing::warn!(target: "payhook", namespace = %namespace, reason = %text, failures, retry_in_ms = wait.as_millis() as u64, "a reconciliation pass failed");
                }
            }
        }
    }
    let _ = inner
        .db
        .write(DB::give_up_turn(&inner.db, &namespace, &owner))
        .await;
}

/// Sleeps until `wait` after `started` (at once if that has passed).
async fn next_pass(started: tokio::time::Instant, wait: Duration) {
    match started.checked_add(wait) {
        Some(at) => tokio::time::sleep_until(at).await,
        // Beyond the clock's range: tokio's sleep caps it.
        None => tokio::time::sleep(wait).await,
    }
}

/// The `reason` label of a failed pass.
fn reason(err: &PassError) -> &'static str {
    match err {
        PassError::Api(ApiError::Unauthorized { .. }) => metrics::UNAUTHORIZED,
        PassError::Api(ApiError::Throttled { .. }) => metrics::THROTTLED,
        PassError::Api(ApiError::Unreachable(_)) => metrics::UNREACHABLE,
        PassError::Api(ApiError::BrokenList(_)) => metrics::BROKEN_LIST,
        PassError::Api(_) => metrics::BAD_REPLY,
        PassError::TooDense(_) => metrics::BROKEN_LIST,
        PassError::Database(_) => metrics::DATABASE,
    }
}
