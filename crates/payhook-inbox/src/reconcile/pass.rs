//! One pass of the reconciler over one namespace: take the turn, list the
//! events created in the window, store the ones the inbox lacks, and move
//! the mark. The window, the turn and why each bound is what it is are in
//! the [module docs](super).

use std::time::Duration;

use crate::clock::{millis, now_ms};
use crate::database::notify::Notify;
use crate::error::payhook_escape;
use crate::inner::Inner;
use crate::intake::compare::{compare, LaterCopy};
use crate::intake::duplicates::DuplicatesRecord;
use crate::intake::insert::Intake;
use crate::intake::refused::RefusedRecord;
use crate::model::{NewRow, RefusedRow, Source};
use crate::reconcile::record::ReconcilerRecord;

use super::store;
use super::Reconcile;
use super::{ApiError, EventsPage, EventsQuery, PAGE_LIMIT};

/// The stores a pass uses.
pub(crate) trait PassStores:
    ReconcilerRecord + Intake + Notify + DuplicatesRecord + RefusedRecord
{
}

impl<DB: ReconcilerRecord + Intake + Notify + DuplicatesRecord + RefusedRecord> PassStores for DB {}

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
    /// Listed events refused (recorded; the rest of their pages stored).
    pub(crate) refused: usize,
    /// Another process holds the turn: this one did nothing.
    pub(crate) not_our_turn: bool,
    /// The pass ran out of pages or time before the window's end: the rest
    /// follows from the mark.
    pub(crate) incomplete: bool,
}

/// Why a pass stopped short. The mark stays where it was, so the next pass
/// covers the same window again: nothing is lost.
#[derive(Debug)]
pub(crate) enum PassError {
    /// The events list failed.
    Api(ApiError),
    /// The inbox's database failed.
    Database(sqlx::Error),
    /// More events in one second of the window than a pass may page.
    TooDense(String),
}

impl std::fmt::Display for PassError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Api(err) => err.fmt(f),
            Self::Database(err) => write!(f, "the inbox's database failed: {}", crate::error::describe(err)),
            Self::TooDense(reason) => f.write_str(reason),
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

/// One pass for `owner`. `slice` is the length (seconds) of the time slices
/// the window is walked in, oldest first, the mark moving at the end of
/// each; `None` walks the whole window at once. A pass that runs out of its
/// pages or time before a slice ends leaves the mark at the last slice that
/// did, and halves `slice` when none did, so a backlog of any size
/// completes over the following passes; a window walked whole sets it back
/// to `None`.
pub(crate) async fn pass<DB: PassStores>(
    inner: &Inner<DB>,
    settings: &Reconcile,
    owner: &str,
    slice: &mut Option<i64>,
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
    let mut budget = Budget {
        pages_left: settings.max_pages,
        until: tokio::time::Instant::now().checked_add(settings.max_pass_time),
    };
    let mut start = window.start;
    let mut completed_any = false;
    while start < window.end {
        let end = start.saturating_add(slice.unwrap_or(i64::MAX)).min(window.end);
        match walk(inner, settings, owner, start, end, &mut budget, &mut report).await? {
            Walked::Complete => {
                // The mark moves per slice: what is behind it stays done.
                db.write(DB::record_pass(db, namespace, owner, end, now_ms()))
                    .await?;
                completed_any = true;
                start = end;
            }
            Walked::NotOurTurn => {
                report.not_our_turn = true;
                return Ok(report);
            }
            Walked::OutOfBudget => {
                report.incomplete = true;
                if !completed_any {
                    let span = end - start;
                    if span <= 1 {
                        return Err(PassError::TooDense(format!(
                            "more events were listed as created in one second than a pass may page \
                             ({} pages); raise Reconcile::max_pages",
                            settings.max_pages
                        )));
                    }
                    *slice = Some(span / 2);
                }
                return Ok(report);
            }
        }
    }
    *slice = None;
    if !completed_any {
        db.write(DB::record_pass(
            db,
            namespace,
            owner,
            window.end.max(window.start),
            now_ms(),
        ))
        .await?;
    }
    Ok(report)
}

/// What one pass may still spend.
struct Budget {
    pages_left: u32,
    /// `None`: beyond the clock's range, no bound.
    until: Option<tokio::time::Instant>,
}

/// How the walk of one slice ended.
enum Walked {
    /// Every page of the slice was listed and stored.
    Complete,
    /// The pass ran out of pages or time first.
    OutOfBudget,
    /// Another process took the turn.
    NotOurTurn,
}

/// Lists and stores every page of `[start, end)`, within the budget.
async fn walk<DB: PassStores>(
    inner: &Inner<DB>,
    settings: &Reconcile,
    owner: &str,
    start: i64,
    end: i64,
    budget: &mut Budget,
    report: &mut PassReport,
) -> Result<Walked, PassError> {
    let namespace = inner.config.namespace.as_str();
    // Every page of the slice, through the API client: only the events
    // inside it come back, and a list whose cursor repeats or whose events
    // stop moving back in time ends the pass. One page is held at a time.
    // An event longer than this inbox takes a delivery's body is refused
    // as its delivery would be.
    let api = settings.api.clone().max_event_bytes(inner.receiver.body_limit());
    let mut pages = api.events(EventsQuery {
        created_gte: Some(start),
        created_lt: Some(end),
        limit: PAGE_LIMIT,
        ..EventsQuery::default()
    });
    loop {
        if budget.pages_left == 0
            || budget
                .until
                .is_some_and(|until| tokio::time::Instant::now() >= until)
        {
            return Ok(Walked::OutOfBudget);
        }
        budget.pages_left -= 1;
        // The turn is renewed while the request is in flight: a list slower
        // than the lease must not let another replica reconcile meanwhile.
        let renew_every = settings.turn() / 3;
        let next = pages.next();
        tokio::pin!(next);
        let page = loop {
            tokio::select! {
                page = &mut next => break page,
                () = tokio::time::sleep(renew_every) => {
                    if !take_turn(inner, settings, owner).await? {
                        return Ok(Walked::NotOurTurn);
                    }
                }
            }
        };
        let Some(page) = page else {
            return Ok(Walked::Complete);
        };
        report.requests += 1;
        super::metrics::request(namespace);
        let page = page.map_err(PassError::Api)?;
        report.listed += page.events.len() + page.refused.len();
        report.outside += page.outside;
        store_page(inner, &page, report).await?;
        if !page.has_more || page.cursor.is_none() {
            return Ok(Walked::Complete);
        }
        // A long backlog: keep the turn while paging.
        if !take_turn(inner, settings, owner).await? {
            return Ok(Walked::NotOurTurn);
        }
    }
}

/// Takes or renews this process's turn, for three intervals.
async fn take_turn<DB: PassStores>(
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

/// Stores the listed events of `page` the inbox lacks, as reconciled;
/// records the ones it refused and the ones that cannot be stored, so one
/// bad event holds back none; compares the ones the inbox holds (and a
/// second copy of one id in the page) with the stored event by the
/// duplicates' rule, so a copy that differs is flagged as a differing
/// duplicate is.
async fn store_page<DB: PassStores>(
    inner: &Inner<DB>,
    page: &EventsPage,
    report: &mut PassReport,
) -> Result<(), PassError> {
    let db = &inner.db;
    let namespace = inner.config.namespace.as_str();
    let (rows, unstorable) = store::rows_of(&page.events);
    let mut refused: Vec<RefusedRow> = page
        .refused
        .iter()
        .map(|refused| RefusedRow::new(refused.id.as_deref(), &refused.reason, refused.bytes))
        .collect();
    refused.extend(unstorable);
    record_refused(inner, &refused).await?;
    report.refused += refused.len();
    let ids: Vec<&str> = rows.iter().map(|row| row.event_id.as_str()).collect();
    let stored = db.bounded(DB::stored_copies(db, namespace, &ids)).await?;
    let missing: Vec<&NewRow> = rows
        .iter()
        .filter(|row| !stored.contains_key(&row.event_id))
        .collect();
    let new = if missing.is_empty() {
        Vec::new()
    } else {
        db.write(DB::insert(db, namespace, &missing, Source::Reconciled))
            .await?
    };
    let mut stored_now = 0;
    let mut again = Vec::new();
    for (row, new) in missing.iter().zip(new) {
        if !new {
            // A second copy of an id in the page, or a delivery that
            // arrived between the read and the insert: compared below.
            again.push(*row);
            continue;
        }
        stored_now += 1;
        super::metrics::reconciled(namespace, &row.event_type);
        tracing::info!(
            target: "payhook",
            event_id = %payhook_escape(&row.event_id),
            event_type = %payhook_escape(&row.event_type),
            source = Source::Reconciled.as_str(),
            "event stored from the service's events list: no delivery of it arrived"
        );
    }
    report.stored += stored_now;
    if stored_now > 0 {
        inner.arrived.notify_one();
        let _ = tokio::time::timeout(db.timeout, DB::notify(db, namespace)).await;
    }
    let held: Vec<&NewRow> = rows
        .iter()
        .filter(|row| stored.contains_key(&row.event_id))
        .collect();
    let again_ids: Vec<&str> = again.iter().map(|row| row.event_id.as_str()).collect();
    let stored_again = if again_ids.is_empty() {
        Default::default()
    } else {
        db.bounded(DB::stored_copies(db, namespace, &again_ids)).await?
    };
    for (row, copies) in held
        .into_iter()
        .map(|row| (row, &stored))
        .chain(again.into_iter().map(|row| (row, &stored_again)))
    {
        let Some(stored) = copies.get(&row.event_id) else {
            continue;
        };
        let copy = LaterCopy {
            event_id: &row.event_id,
            body: &row.body,
            at: row.received_at,
            source: Source::Reconciled,
        };
        compare(db, namespace, &copy, stored).await?;
    }
    Ok(())
}

/// Records the refused listed events, each logged at `WARN` and counted.
async fn record_refused<DB: PassStores>(inner: &Inner<DB>, refused: &[RefusedRow]) -> Result<(), PassError> {
    if refused.is_empty() {
        return Ok(());
    }
    let db = &inner.db;
    let namespace = inner.config.namespace.as_str();
    let now = now_ms();
    let forget_before = now.saturating_sub(millis(inner.config.retention));
    db.write(DB::record_refused(
        db,
        namespace,
        refused,
        Source::Reconciled,
        now,
        forget_before,
    ))
    .await?;
    for row in refused {
        super::metrics::refused(namespace);
        tracing::warn!(
            target: "payhook",
            namespace = %namespace,
            event_id = %payhook_escape(row.event_id.as_deref().unwrap_or("-")),
            reason = %payhook_core::untrusted::Untrusted::message(&row.reason),
            source = Source::Reconciled.as_str(),
            "a listed event of the service's events list was refused and recorded; the rest of its page was stored"
        );
    }
    Ok(())
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
