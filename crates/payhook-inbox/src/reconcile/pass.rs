//! One pass of the reconciler over one namespace: take the turn, list the
//! events created in the window, store the ones the inbox lacks, and move
//! the mark. The window, the turn and why each bound is what it is are in
//! the [module docs](super).

use std::time::Duration;

use crate::backend::Backend;
use crate::clock::{millis, now_ms};
use crate::error::payhook_escape;
use crate::inner::Inner;
use crate::model::Source;

use super::store::{self, StoreError};
use super::Reconcile;
use super::{ApiError, EventsQuery, ListedEvent, PAGE_LIMIT};

/// What a pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PassReport {
    /// Requests to the events list.
    pub(crate) requests: usize,
    /// Events listed in the window.
    pub(crate) listed: usize,
    /// Events the service listed outside the window asked for: dropped.
    pub(crate) outside: usize,
    /// Events stored: the deliveries that were missed.
    pub(crate) stored: usize,
    /// Another process holds the turn: this one did nothing.
    pub(crate) not_our_turn: bool,
}

/// Why a pass stopped short. The mark stays where it was, so the next pass
/// covers the same window again: nothing is lost.
#[derive(Debug)]
pub(crate) enum PassError {
    /// The events list failed.
    Api(ApiError),
    /// The inbox's database failed.
    Database(sqlx::Error),
    /// An event of the list cannot be stored (too long an id, a NUL…): the
    /// page is skipped whole.
    Unstorable(String),
}

impl std::fmt::Display for PassError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Api(err) => err.fmt(f),
            Self::Database(err) => write!(f, "the inbox's database failed: {}", crate::error::describe(err)),
            Self::Unstorable(reason) => write!(f, "a listed event cannot be stored: {reason}"),
        }
    }
}

impl From<sqlx::Error> for PassError {
    fn from(err: sqlx::Error) -> Self {
        Self::Database(err)
    }
}

/// The window of one pass, in the service's `created` seconds: `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) start: i64,
    pub(crate) end: i64,
}

impl Window {
    /// From the mark (`None` before the first pass), at `now` (Unix ms).
    pub(crate) fn of(mark: Option<i64>, now: i64, settings: &Reconcile, retention: Duration) -> Self {
        let now = now / 1000;
        let secs = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
        // Never an event the inbox may have purged already: a done event is
        // kept `retention` after it is done, so any event created since
        // `now - retention` is still there if it was ever stored. The
        // overlap keeps a skewed clock on the right side of that line.
        let floor = now
            .saturating_sub(secs(retention))
            .saturating_add(secs(settings.overlap));
        let start = mark.map_or(floor, |mark| {
            mark.saturating_sub(secs(settings.overlap)).max(floor)
        });
        Self {
            start,
            end: now.saturating_sub(secs(settings.settle)),
        }
    }
}

/// One pass for `owner`.
pub(crate) async fn pass<DB: Backend>(
    inner: &Inner<DB>,
    settings: &Reconcile,
    owner: &str,
) -> Result<PassReport, PassError> {
    let db = &inner.db;
    let namespace = inner.config.namespace.as_str();
    let mut report = PassReport::default();
    if !take_turn(inner, settings, owner).await? {
        report.not_our_turn = true;
        return Ok(report);
    }
    let mark = db.bounded(DB::reconciled_until(db, namespace)).await?;
    let window = Window::of(mark, now_ms(), settings, inner.config.retention);
    if window.end > window.start {
        // Every page of the window, through the API client: only the
        // events inside the window come back, and a list whose cursor
        // repeats or whose events stop moving back in time ends the pass.
        let mut pages = settings.api.events(EventsQuery {
            created_gte: Some(window.start),
            created_lt: Some(window.end),
            limit: PAGE_LIMIT,
            ..EventsQuery::default()
        });
        while let Some(page) = pages.next().await {
            report.requests += 1;
            super::metrics::request(namespace);
            let page = page.map_err(PassError::Api)?;
            report.listed += page.events.len();
            report.outside += page.outside;
            report.stored += store_missing(inner, &page.events).await?;
            if !page.has_more {
                break;
            }
            // A long backlog: keep the turn while paging.
            if !take_turn(inner, settings, owner).await? {
                report.not_our_turn = true;
                return Ok(report);
            }
        }
    }
    db.write(DB::record_pass(
        db,
        namespace,
        owner,
        window.end.max(window.start),
        now_ms(),
    ))
    .await?;
    Ok(report)
}

/// Takes or renews this process's turn, for three intervals.
async fn take_turn<DB: Backend>(
    inner: &Inner<DB>,
    settings: &Reconcile,
    owner: &str,
) -> Result<bool, sqlx::Error> {
    let now = now_ms();
    let until = now.saturating_add(millis(settings.turn()));
    inner
        .db
        .write(DB::take_turn(
            &inner.db,
            &inner.config.namespace,
            owner,
            now,
            until,
        ))
        .await
}

/// Stores the listed events the inbox lacks, as reconciled; how many were
/// new. The page's rows are checked first, all of them, so a page with an
/// event that cannot be stored is skipped whole.
async fn store_missing<DB: Backend>(inner: &Inner<DB>, events: &[ListedEvent]) -> Result<usize, PassError> {
    let db = &inner.db;
    let namespace = inner.config.namespace.as_str();
    let missing = store::missing(db, namespace, events).await?;
    let rows = store::store(db, namespace, &missing)
        .await
        .map_err(|err| match err {
            StoreError::Unstorable(reason) => PassError::Unstorable(reason),
            StoreError::Database(err) => PassError::Database(err),
        })?;
    let mut stored = 0;
    // A row that was not new: its delivery arrived between the check and the
    // insert, and the delivery's row stands.
    for (row, _) in rows.iter().filter(|(_, new)| *new) {
        stored += 1;
        super::metrics::reconciled(namespace, &row.event_type);
        tracing::info!(
            target: "payhook",
            event_id = %payhook_escape(&row.event_id),
            event_type = %payhook_escape(&row.event_type),
            source = Source::Reconciled.as_str(),
            "event stored from the service's events list: no delivery of it arrived"
        );
    }
    if stored > 0 {
        inner.arrived.notify_one();
        let _ = tokio::time::timeout(db.timeout, DB::notify(db, namespace)).await;
    }
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(interval: u64, overlap: u64) -> Reconcile {
        Reconcile::new("http://127.0.0.1:1", "sk_test_x")
            .unwrap()
            .interval(Duration::from_secs(interval))
            .overlap(Duration::from_secs(overlap))
    }

    #[test]
    fn the_window_starts_an_overlap_before_the_mark_and_never_before_the_retention() {
        let day = Duration::from_secs(86_400);
        let now_ms = 1_000_000_000_000;
        let now = now_ms / 1000;
        let s = settings(60, 120);
        // After a pass: from the mark minus the overlap, to one interval ago.
        let window = Window::of(Some(now - 600), now_ms, &s, day);
        assert_eq!(
            window,
            Window {
                start: now - 720,
                end: now - 60
            }
        );
        // The first pass, and a mark older than the retention: as far back as
        // the retention allows, less the overlap.
        let first = Window::of(None, now_ms, &s, day);
        assert_eq!(first.start, now - 86_400 + 120);
        assert_eq!(Window::of(Some(now - 10 * 86_400), now_ms, &s, day), first);
    }
}
