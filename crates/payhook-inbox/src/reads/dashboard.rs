//! The dashboard's reads (and `payhook inbox stats`): counts by state, the
//! activity chart, pages of events with a keyset cursor, an event's
//! attempts and the other events of its payment intent. Each statement reads
//! one index range ([`plans`](super::plans) shows which).

use std::future::Future;

use sqlx::Row as _;

use crate::clock::millis;
use crate::database::dialect::{
    activity_table, attempts_table, duplicates_table, is_missing_column, is_missing_table, table,
    tally_table, waiting_phase, Dialect, ACTIVITY_BUCKET_MS,
};
use crate::database::driver::{sql_bounds, Driver};
use crate::database::Database;
use crate::model::{
    ActivitySlot, Attempt, AttemptOutcome, Cursor, IntentEvent, Page, PageQuery, Source, State, Stats,
    MAX_PAGE,
};
use crate::reads::{stored_event, COLUMNS};

/// Counts by phase from the tally the database keeps (migrations 15 and
/// 16: a few rows per namespace, whatever the history), each row with the
/// count of the running events (`$2`), which share their phase with the
/// pending ones, read from the waiting events' index. One statement, so one
/// snapshot: the pending count is the waiting phase's less the running.
pub(crate) const TALLY_BY_PHASE: &str = concat!(
    "SELECT phase AS state, CAST(SUM(n) AS BIGINT) AS n, (SELECT COUNT(*) FROM ",
    table!(),
    " r WHERE r.namespace = $1 AND r.phase = ",
    waiting_phase!(),
    " AND r.state = $2) AS running FROM ",
    tally_table!(),
    " WHERE namespace = $1 GROUP BY phase"
);

/// What [`TALLY_BY_PHASE`] reads, counted from the events themselves: for
/// a database whose schema predates the tally (an [`Admin`](crate::Admin)
/// never migrates). Counts by phase ([`State::phase`]), grouped by
/// [`Dialect::counted_by`]'s column (`{counted_by}`) and read from an index
/// alone, each row with the count of the running events (`$2`), which share
/// their phase with the pending ones: a subquery run once, over the waiting
/// events' index, each row read for its state. One statement, so one
/// snapshot: the pending count is the waiting phase's less the running.
pub(crate) const COUNT_BY_STATE: &str = concat!(
    "SELECT {counted_by} AS state, COUNT(*) AS n, (SELECT COUNT(*) FROM ",
    table!(),
    " r WHERE r.namespace = $1 AND r.phase = ",
    waiting_phase!(),
    " AND r.state = $2) AS running FROM ",
    table!(),
    " WHERE namespace = $1 GROUP BY {counted_by}"
);

/// [`COUNT_BY_STATE`] on `dialect`.
pub(crate) fn count_by_state(dialect: Dialect) -> String {
    COUNT_BY_STATE.replace("{counted_by}", dialect.counted_by())
}

/// The oldest pending event (`$2` pending, `$3` its phase): from the start of
/// the phase's range in the `(namespace, phase, received_at, arrival)`
/// index, the first row that is not running.
pub(crate) const OLDEST_PENDING: &str = concat!(
    "SELECT MIN(received_at) AS oldest FROM ",
    table!(),
    " WHERE namespace = $1 AND phase = $3 AND state = $2"
);

/// The events the reconciler recovered: stored from the events list, no
/// delivery since. Read from the reconciled events' partial index
/// (migration 10), a few rows whatever the history.
pub(crate) const RECOVERED: &str = concat!(
    "SELECT COUNT(*) AS n FROM ",
    table!(),
    " WHERE namespace = $1 AND source IS NOT NULL AND delivered_at IS NULL"
);

/// [`RECOVERED`] on a schema before migration 17 (an [`Admin`](crate::Admin)
/// never migrates): no delivery of a reconciled event was recorded then, so
/// every reconciled event counts.
pub(crate) const RECOVERED_BEFORE_17: &str = concat!(
    "SELECT COUNT(*) AS n FROM ",
    table!(),
    " WHERE namespace = $1 AND source IS NOT NULL"
);

/// The activity chart's buckets from bucket `$2` on, each one's counts
/// summed over its shards.
pub(crate) const ACTIVITY_PER_BUCKET: &str = concat!(
    "SELECT bucket, CAST(SUM(received) AS BIGINT) AS received, CAST(SUM(duplicates) AS BIGINT) AS duplicates, \
     CAST(SUM(handled) AS BIGINT) AS handled, CAST(SUM(failed) AS BIGINT) AS failed FROM ",
    activity_table!(),
    " WHERE namespace = $1 AND bucket >= $2 GROUP BY bucket"
);

/// Deliveries received per interval since `$2` (`$3` milliseconds each),
/// on a database before version 18.
pub(crate) const RECEIVED_PER_INTERVAL: &str = concat!(
    "SELECT (received_at - $2) / $3 AS slot, COUNT(*) AS n FROM ",
    table!(),
    " WHERE namespace = $1 AND received_at >= $2 GROUP BY slot"
);

/// Duplicate deliveries acknowledged per interval since `$2`.
pub(crate) const DUPLICATES_PER_INTERVAL: &str = concat!(
    "SELECT (received_at - $2) / $3 AS slot, COUNT(*) AS n FROM ",
    duplicates_table!(),
    " WHERE namespace = $1 AND received_at >= $2 GROUP BY slot"
);

/// Attempts ended per interval and outcome since `$2`.
pub(crate) const ATTEMPTS_PER_INTERVAL: &str = concat!(
    "SELECT (finished_at - $2) / $3 AS slot, outcome, COUNT(*) AS n FROM ",
    attempts_table!(),
    " WHERE namespace = $1 AND finished_at >= $2 GROUP BY slot, outcome"
);

pub(crate) const ATTEMPTS_OF_EVENT: &str = concat!(
    "SELECT a.attempt, a.started_at, a.duration_ms, a.outcome, a.error FROM ",
    attempts_table!(),
    " a JOIN ",
    table!(),
    " e ON e.arrival = a.arrival WHERE e.namespace = $1 AND e.event_id = $2 ORDER BY a.attempt DESC"
);

pub(crate) const EVENTS_OF_INTENT: &str = concat!(
    "SELECT event_id, event_type, state, created FROM ",
    table!(),
    " WHERE namespace = $1 AND intent_id = $2 ORDER BY created, arrival LIMIT $3"
);

/// The events page's statement for the filters that are set: `$1` the
/// namespace, then one parameter per clause, the keyset cursor last before
/// the limit. No `OFFSET` and no count: each page is one index range read.
pub(crate) fn page_statement(query: &PageQuery) -> String {
    let mut sql = format!(
        concat!("SELECT arrival, {} FROM ", table!(), " WHERE namespace = $1"),
        COLUMNS
    );
    let mut next = 2;
    let mut add = |sql: &mut String, clause: &str| {
        let mut text = clause.to_owned();
        while let Some(at) = text.find('?') {
            text.replace_range(at..=at, &format!("${next}"));
            next += 1;
        }
        sql.push_str(&text);
    };
    let filter = &query.filter;
    if filter.state.is_some() {
        // The phase finds the range in the `(namespace, phase, received_at,
        // arrival)` index; the state picks from it.
        add(&mut sql, " AND phase = ? AND state = ?");
    }
    if filter.event_type.is_some() {
        add(&mut sql, " AND event_type = ?");
    }
    // Literal conditions (a source is one of `Source`'s constants): the
    // reconciled rows' partial index names the same predicate.
    match filter.source {
        Some(Source::Reconciled) => sql.push_str(" AND source IS NOT NULL"),
        Some(Source::Delivered) => sql.push_str(" AND source IS NULL"),
        None => {}
    }
    if query.event_id.is_some() {
        add(&mut sql, " AND event_id = ?");
    }
    if filter.older_than.is_some() {
        add(&mut sql, " AND received_at <= ?");
    }
    if filter.newer_than.is_some() {
        add(&mut sql, " AND received_at >= ?");
    }
    if query.after.is_some() {
        // The first term is the index range; the second only skips the rows
        // of the cursor's own millisecond already shown.
        add(
            &mut sql,
            " AND received_at <= ? AND (received_at < ? OR arrival < ?)",
        );
    }
    add(&mut sql, " ORDER BY received_at DESC, arrival DESC LIMIT ?");
    sql
}

/// The dashboard's reads on one backend. Not nameable outside the crate.
pub trait Overview: Driver {
    /// Counts by state and the oldest pending event's arrival.
    fn stats<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
    ) -> impl Future<Output = Result<Stats, sqlx::Error>> + Send + 'a;
    /// First and duplicate deliveries and ended attempts per interval.
    fn activity<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        since: i64,
        interval: i64,
        slots: usize,
    ) -> impl Future<Output = Result<Vec<ActivitySlot>, sqlx::Error>> + Send + 'a;
    /// One page of events, newest first, after the cursor.
    fn page<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        query: &'a PageQuery,
        now: i64,
    ) -> impl Future<Output = Result<Page, sqlx::Error>> + Send + 'a;
    /// The recorded attempts of one event, latest first.
    fn attempts<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        event_id: &'a str,
    ) -> impl Future<Output = Result<Vec<Attempt>, sqlx::Error>> + Send + 'a;
    /// The events of one payment intent, in `created` order.
    fn intent_events<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        intent_id: &'a str,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<IntentEvent>, sqlx::Error>> + Send + 'a;
}

sql_bounds! {
    impl<DB> Overview {
        async fn stats<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
        ) -> Result<Stats, sqlx::Error> {
            let mut stats = Stats::default();
            let tallied = sqlx::query(TALLY_BY_PHASE)
                .bind(namespace)
                .bind(State::Running.as_str())
                .fetch_all(&db.pool)
                .await;
            let rows = match tallied {
                Err(sqlx::Error::Database(err)) if is_missing_table(err.as_ref()) => {
                    sqlx::query(&count_by_state(db.dialect))
                        .bind(namespace)
                        .bind(State::Running.as_str())
                        .fetch_all(&db.pool)
                        .await?
                }
                rows => rows?,
            };
            // Each value read as its phase (SQLite's are states); a value
            // this version does not know is left out.
            let mut by_phase = [0_i64; State::ALL.len()];
            let mut running = 0;
            for row in &rows {
                running = row.try_get("running")?;
                let value: String = row.try_get("state")?;
                if let Ok(state) = value.parse::<State>() {
                    by_phase[state.phase().index()] += row.try_get::<i64, _>("n")?;
                }
            }
            for &state in State::ALL {
                if state.phase() == state {
                    stats.set(state, by_phase[state.index()]);
                }
            }
            stats.set(State::Running, running);
            let waiting = State::Running.phase();
            stats.set(waiting, by_phase[waiting.index()].saturating_sub(running).max(0));
            let row = sqlx::query(OLDEST_PENDING)
                .bind(namespace)
                .bind(State::Pending.as_str())
                .bind(State::Pending.phase().as_str())
                .fetch_one(&db.pool)
                .await?;
            stats.oldest_pending_at = row.try_get("oldest")?;
            let mut recovered = 0;
            for sql in [RECOVERED, RECOVERED_BEFORE_17] {
                match sqlx::query_scalar(sql).bind(namespace).fetch_one(&db.pool).await {
                    Ok(n) => {
                        recovered = n;
                        break;
                    }
                    // A schema before migration 17 (or 10, no source at all:
                    // nothing reconciled).
                    Err(sqlx::Error::Database(err)) if is_missing_column(err.as_ref()) => {}
                    Err(err) => return Err(err),
                }
            }
            stats.set_recovered(recovered);
            Ok(stats)
        }

        async fn activity<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            since: i64,
            interval: i64,
            slots: usize,
        ) -> Result<Vec<ActivitySlot>, sqlx::Error> {
            let interval = interval.max(1);
            let mut out: Vec<ActivitySlot> = (0..slots)
                .map(|slot| ActivitySlot {
                    start: since
                        .saturating_add(interval.saturating_mul(i64::try_from(slot).unwrap_or(i64::MAX))),
                    ..Default::default()
                })
                .collect();
            let buckets = sqlx::query(ACTIVITY_PER_BUCKET)
                .bind(namespace)
                .bind(since.div_euclid(ACTIVITY_BUCKET_MS))
                .fetch_all(&db.pool)
                .await;
            match buckets {
                // A database not yet upgraded to version 18 (an admin never
                // migrates): counted from the rows of the span.
                Err(sqlx::Error::Database(err)) if is_missing_table(err.as_ref()) => {
                    let index = |slot: i64| usize::try_from(slot).ok().filter(|&slot| slot < slots);
                    // Each statement's rows for the span: `slot`, `n` (and the attempts' `outcome`).
                    let per_interval = |statement: &'static str| {
                        sqlx::query(statement)
                            .bind(namespace)
                            .bind(since)
                            .bind(interval)
                            .fetch_all(&db.pool)
                    };
                    let received: fn(&mut ActivitySlot) -> &mut i64 = |slot| &mut slot.received;
                    let duplicates: fn(&mut ActivitySlot) -> &mut i64 = |slot| &mut slot.duplicates;
                    for (statement, field) in [(RECEIVED_PER_INTERVAL, received), (DUPLICATES_PER_INTERVAL, duplicates)] {
                        for row in per_interval(statement).await? {
                            if let Some(slot) = index(row.try_get("slot")?) {
                                *field(&mut out[slot]) = row.try_get("n")?;
                            }
                        }
                    }
                    for row in per_interval(ATTEMPTS_PER_INTERVAL).await? {
                        if let Some(slot) = index(row.try_get("slot")?) {
                            let outcome: String = row.try_get("outcome")?;
                            let count: i64 = row.try_get("n")?;
                            if outcome == AttemptOutcome::Done.as_str() {
                                out[slot].handled += count;
                            } else {
                                out[slot].failed += count;
                            }
                        }
                    }
                }
                buckets => {
                    for row in buckets? {
                        let bucket: i64 = row.try_get("bucket")?;
                        // A bucket is drawn in the slot where it starts; the
                        // one that starts before `since`, in the first.
                        let start = bucket.saturating_mul(ACTIVITY_BUCKET_MS).max(since);
                        let Some(slot) = usize::try_from(start.saturating_sub(since) / interval)
                            .ok()
                            .filter(|&slot| slot < slots)
                        else {
                            continue;
                        };
                        out[slot].received += row.try_get::<i64, _>("received")?;
                        out[slot].duplicates += row.try_get::<i64, _>("duplicates")?;
                        out[slot].handled += row.try_get::<i64, _>("handled")?;
                        out[slot].failed += row.try_get::<i64, _>("failed")?;
                    }
                }
            }
            Ok(out)
        }

        async fn page<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            query: &'a PageQuery,
            now: i64,
        ) -> Result<Page, sqlx::Error> {
            let sql = page_statement(query);
            let limit = i64::from(query.limit.clamp(1, MAX_PAGE));
            let filter = &query.filter;
            let mut statement = sqlx::query(&sql).bind(namespace);
            if let Some(state) = filter.state {
                statement = statement.bind(state.phase().as_str()).bind(state.as_str());
            }
            if let Some(event_type) = &filter.event_type {
                statement = statement.bind(event_type.as_str());
            }
            if let Some(event_id) = &query.event_id {
                statement = statement.bind(event_id.as_str());
            }
            if let Some(age) = filter.older_than {
                statement = statement.bind(now.saturating_sub(millis(age)));
            }
            if let Some(age) = filter.newer_than {
                statement = statement.bind(now.saturating_sub(millis(age)));
            }
            if let Some(after) = query.after {
                statement = statement
                    .bind(after.received_at)
                    .bind(after.received_at)
                    .bind(after.arrival);
            }
            // One row more than the page: whether there is a next page.
            statement = statement.bind(limit + 1);
            let rows = statement.fetch_all(&db.pool).await?;
            let mut events = Vec::with_capacity(rows.len());
            let mut next = None;
            for row in &rows {
                if i64::try_from(events.len()).unwrap_or(i64::MAX) == limit {
                    break;
                }
                let event = stored_event(row, None)?;
                next = Some(Cursor {
                    received_at: event.received_at,
                    arrival: row.try_get("arrival")?,
                });
                events.push(event);
            }
            if i64::try_from(rows.len()).unwrap_or(i64::MAX) <= limit {
                next = None;
            }
            Ok(Page { events, next })
        }

        async fn attempts<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            event_id: &'a str,
        ) -> Result<Vec<Attempt>, sqlx::Error> {
            sqlx::query(ATTEMPTS_OF_EVENT)
                .bind(namespace)
                .bind(event_id)
                .fetch_all(&db.pool)
                .await?
                .iter()
                .map(|row| {
                    Ok(Attempt {
                        attempt: row.try_get("attempt")?,
                        started_at: row.try_get("started_at")?,
                        duration_ms: row.try_get("duration_ms")?,
                        outcome: row.try_get("outcome")?,
                        error: row.try_get("error")?,
                    })
                })
                .collect()
        }

        async fn intent_events<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            intent_id: &'a str,
            limit: i64,
        ) -> Result<Vec<IntentEvent>, sqlx::Error> {
            sqlx::query(EVENTS_OF_INTENT)
                .bind(namespace)
                .bind(intent_id)
                .bind(limit)
                .fetch_all(&db.pool)
                .await?
                .iter()
                .map(|row| {
                    Ok(IntentEvent {
                        event_id: row.try_get("event_id")?,
                        event_type: row.try_get("event_type")?,
                        state: super::state_of(row.try_get("state")?)?,
                        created: row.try_get("created")?,
                    })
                })
                .collect()
        }
    }
}
