//! What the operator's tools read: the inbox's depth, stored events by filter
//! or by id, whether a database holds an inbox at all, and (in
//! [`dashboard`]) the dashboard's counts, pages and attempts, with their query
//! plans ([`plans`]). Nothing here changes a row.

pub(crate) mod dashboard;
pub(crate) mod plans;

use std::future::Future;
use std::sync::LazyLock;

use sqlx::Row as _;

use crate::clock::{millis, now_ms};
use crate::database::dialect::{
    is_missing_table, paused_table, phase_in, states_in, table, waiting_phase, PARKED,
};
use crate::database::driver::{sql_bounds, Driver};
use crate::database::Database;
use crate::model::{Filter, PausedType, Source, State, StoredEvent};

/// The columns an operator's view of an event reads, for `concat!` into the
/// statements that add to them.
macro_rules! columns {
    () => {
        "event_id, event_type, intent_id, state, attempts, created, received_at, \
         due_at, lease_until, last_attempt_at, last_error, done_at, source, delivered_at"
    };
}

/// The columns an operator's view of an event reads.
pub(crate) const COLUMNS: &str = columns!();

/// The reads of the CLI and the workers on one backend. Not nameable outside
/// the crate.
pub trait Reads: Driver {
    /// The path of the main database file (SQLite), if it has one.
    fn main_file(db: &Database<Self>) -> impl Future<Output = Result<Option<String>, sqlx::Error>> + Send;
    /// Whether the inbox table exists (read-only).
    fn has_table(db: &Database<Self>) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;
    /// Events waiting (pending or running) and when the oldest arrived.
    fn depth<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
    ) -> impl Future<Output = Result<(i64, Option<i64>), sqlx::Error>> + Send + 'a;
    /// The paused event types, by name, with their pending events.
    fn paused<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
    ) -> impl Future<Output = Result<Vec<PausedType>, sqlx::Error>> + Send + 'a;
    /// The events that match, newest first.
    fn list<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        filter: &'a Filter,
    ) -> impl Future<Output = Result<Vec<StoredEvent>, sqlx::Error>> + Send + 'a;
    /// Whether the namespace holds an event (in any state) or a paused type.
    fn namespace_seen<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'a;
    /// The namespaces holding an event or a paused type, in order, at most
    /// `limit`.
    fn namespaces(
        db: &Database<Self>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<String>, sqlx::Error>> + Send + '_;
    /// One event with its body.
    fn show<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        event_id: &'a str,
    ) -> impl Future<Output = Result<Option<StoredEvent>, sqlx::Error>> + Send + 'a;
}

sql_bounds! {
    impl<DB> Reads {
        async fn main_file(db: &Database<Self>) -> Result<Option<String>, sqlx::Error> {
            if !db.dialect.is_file() {
                return Ok(None);
            }
            let rows = sqlx::query("PRAGMA database_list").fetch_all(&db.pool).await?;
            for row in &rows {
                let name: String = row.try_get(1)?;
                if name == "main" {
                    let file: Option<String> = row.try_get(2)?;
                    return Ok(file.filter(|file| !file.is_empty()));
                }
            }
            Ok(None)
        }

        async fn has_table(db: &Database<Self>) -> Result<bool, sqlx::Error> {
            const HAS_TABLE: &str = concat!("SELECT COUNT(*) AS n FROM ", table!(), " WHERE 1 = 0");
            match sqlx::query(HAS_TABLE).fetch_optional(&db.pool).await {
                Ok(_) => Ok(true),
                Err(sqlx::Error::Database(err)) if is_missing_table(err.as_ref()) => Ok(false),
                Err(err) => Err(err),
            }
        }

        async fn depth<'a>(db: &'a Database<Self>, namespace: &'a str) -> Result<(i64, Option<i64>), sqlx::Error> {
            static DEPTH: LazyLock<(String, Vec<&'static str>)> = LazyLock::new(|| {
                let (waiting, names) = states_in(2, State::is_waiting);
                let sql = format!(
                    concat!(
                        "SELECT COUNT(*) AS waiting, MIN(received_at) AS oldest FROM ",
                        table!(),
                        " WHERE namespace = $1 AND {} AND state IN ({})"
                    ),
                    phase_in("phase", State::is_waiting),
                    waiting
                );
                (sql, names)
            });
            let (sql, waiting) = &*DEPTH;
            let mut query = sqlx::query(sql).bind(namespace);
            for &state in waiting {
                query = query.bind(state);
            }
            let row = query.fetch_one(&db.pool).await?;
            Ok((row.try_get("waiting")?, row.try_get("oldest")?))
        }

        async fn paused<'a>(db: &'a Database<Self>, namespace: &'a str) -> Result<Vec<PausedType>, sqlx::Error> {
            // Each paused type's waiting events, counted from the waiting
            // events alone (the phase names their index), never from the
            // type's whole history.
            const PAUSED: &str = concat!(
                "SELECT p.event_type, p.paused_at, (SELECT COUNT(*) FROM ",
                table!(),
                " e WHERE e.namespace = p.namespace AND e.phase = ",
                waiting_phase!(),
                " AND e.state = $2 AND e.event_type = p.event_type) AS waiting \
                 FROM ",
                paused_table!(),
                " p WHERE p.namespace = $1 ORDER BY p.event_type"
            );
            sqlx::query(PAUSED)
                .bind(namespace)
                .bind(State::Pending.as_str())
                .fetch_all(&db.pool)
                .await?
                .iter()
                .map(|row| {
                    Ok(PausedType {
                        event_type: row.try_get("event_type")?,
                        paused_at: row.try_get("paused_at")?,
                        waiting: row.try_get("waiting")?,
                    })
                })
                .collect()
        }

        async fn list<'a>(db: &'a Database<Self>, namespace: &'a str, filter: &'a Filter) -> Result<Vec<StoredEvent>, sqlx::Error> {
            let now = now_ms();
            let mut sql = format!(concat!("SELECT {} FROM ", table!(), " WHERE namespace = $1"), COLUMNS);
            let mut next = 2;
            let mut add = |sql: &mut String, clause: &str| {
                sql.push_str(&clause.replace('?', &format!("${next}")));
                next += 1;
            };
            if filter.state.is_some() {
                add(&mut sql, " AND phase = ?");
                add(&mut sql, " AND state = ?");
            }
            if filter.event_type.is_some() {
                add(&mut sql, " AND event_type = ?");
            }
            if filter.older_than.is_some() {
                add(&mut sql, " AND received_at <= ?");
            }
            if filter.newer_than.is_some() {
                add(&mut sql, " AND received_at >= ?");
            }
            // Literal conditions: a source is one of `Source`'s constants, and
            // the reconciled rows' partial index names the same predicate.
            match filter.source {
                Some(Source::Reconciled) => sql.push_str(" AND source IS NOT NULL"),
                Some(Source::Delivered) => sql.push_str(" AND source IS NULL"),
                None => {}
            }
            add(&mut sql, " ORDER BY received_at DESC, arrival DESC LIMIT ?");
            let mut query = sqlx::query(&sql).bind(namespace);
            if let Some(state) = filter.state {
                query = query.bind(state.phase().as_str()).bind(state.as_str());
            }
            if let Some(event_type) = &filter.event_type {
                query = query.bind(event_type.as_str());
            }
            if let Some(age) = filter.older_than {
                query = query.bind(now.saturating_sub(millis(age)));
            }
            if let Some(age) = filter.newer_than {
                query = query.bind(now.saturating_sub(millis(age)));
            }
            query = query.bind(i64::from(filter.limit.unwrap_or(1000)));
            let rows = query.fetch_all(&db.pool).await?;
            rows.iter().map(|row| stored_event(row, None)).collect()
        }

        async fn namespace_seen<'a>(db: &'a Database<Self>, namespace: &'a str) -> Result<bool, sqlx::Error> {
            // One index probe in each table.
            const EVENT: &str = concat!("SELECT 1 AS one FROM ", table!(), " WHERE namespace = $1 LIMIT 1");
            const PAUSED: &str = concat!("SELECT 1 AS one FROM ", paused_table!(), " WHERE namespace = $1 LIMIT 1");
            if sqlx::query(EVENT).bind(namespace).fetch_optional(&db.pool).await?.is_some() {
                return Ok(true);
            }
            // A database the app has not migrated since pauses came has none.
            match sqlx::query(PAUSED).bind(namespace).fetch_optional(&db.pool).await {
                Ok(row) => Ok(row.is_some()),
                Err(sqlx::Error::Database(err)) if is_missing_table(err.as_ref()) => Ok(false),
                Err(err) => Err(err),
            }
        }

        async fn namespaces(db: &Database<Self>, limit: i64) -> Result<Vec<String>, sqlx::Error> {
            // The events' namespaces one index probe each (the next one
            // after the last found), not a scan of every event; the paused
            // types are few.
            const EVENTS: &str = concat!(
                "WITH RECURSIVE found (namespace, n) AS ( \
                   SELECT MIN(namespace), 1 FROM ",
                table!(),
                " UNION ALL \
                   SELECT (SELECT MIN(e.namespace) FROM ",
                table!(),
                " e WHERE e.namespace > found.namespace), found.n + 1 \
                   FROM found WHERE found.namespace IS NOT NULL AND found.n < $1) \
                 SELECT namespace FROM found WHERE namespace IS NOT NULL"
            );
            const PAUSED: &str = concat!(
                "SELECT DISTINCT namespace FROM ",
                paused_table!(),
                " ORDER BY namespace LIMIT $1"
            );
            let mut names = Vec::new();
            for (sql, optional) in [(EVENTS, false), (PAUSED, true)] {
                let rows = match sqlx::query(sql).bind(limit).fetch_all(&db.pool).await {
                    Ok(rows) => rows,
                    Err(sqlx::Error::Database(err)) if optional && is_missing_table(err.as_ref()) => Vec::new(),
                    Err(err) => return Err(err),
                };
                for row in &rows {
                    names.push(row.try_get::<String, _>("namespace")?);
                }
            }
            names.sort_unstable();
            names.dedup();
            names.truncate(usize::try_from(limit).unwrap_or(0));
            Ok(names)
        }

        async fn show<'a>(db: &'a Database<Self>, namespace: &'a str, event_id: &'a str) -> Result<Option<StoredEvent>, sqlx::Error> {
            const SHOW: &str = concat!(
                "SELECT ",
                columns!(),
                ", {body} AS body FROM ",
                table!(),
                " e WHERE namespace = $1 AND event_id = $2"
            );
            let show = |body: &str| SHOW.replace("{body}", body);
            let row = match sqlx::query(&show(&db.dialect.body_of("e")))
                .bind(namespace)
                .bind(event_id)
                .fetch_optional(&db.pool)
                .await
            {
                // A database not yet upgraded to version 20 (the admin
                // tools never migrate): every body is in its row.
                Err(sqlx::Error::Database(err)) if is_missing_table(err.as_ref()) => {
                    sqlx::query(&show("e.body"))
                        .bind(namespace)
                        .bind(event_id)
                        .fetch_optional(&db.pool)
                        .await?
                }
                other => other?,
            };
            row.map(|row| {
                let body = row.try_get("body")?;
                stored_event(&row, Some(body))
            })
            .transpose()
        }
    }
}

/// The state a `state` column holds. One this version does not know is a
/// decode error naming the value (escaped and capped: it is read from the
/// database), never a panic nor another state (see [`State`]).
pub(crate) fn state_of(stored: String) -> Result<State, sqlx::Error> {
    stored
        .parse()
        .map_err(|expected: String| sqlx::Error::ColumnDecode {
            index: "state".to_owned(),
            source: format!(
                "the stored state \"{}\" is not one this version of payhook knows ({expected}): \
             was the row written by a newer version?",
                crate::error::payhook_escape(&stored)
            )
            .into(),
        })
}

/// A stored due time without the parked offset.
fn unparked(due_at: i64) -> i64 {
    if due_at >= PARKED {
        due_at - PARKED
    } else {
        due_at
    }
}

/// An event read with [`COLUMNS`], and its body when it was read too.
pub(crate) fn stored_event<R>(row: &R, body: Option<String>) -> Result<StoredEvent, sqlx::Error>
where
    R: sqlx::Row,
    for<'n> &'n str: sqlx::ColumnIndex<R>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(StoredEvent {
        event_id: row.try_get("event_id")?,
        event_type: row.try_get("event_type")?,
        intent_id: row.try_get("intent_id")?,
        state: state_of(row.try_get("state")?)?,
        attempts: row.try_get("attempts")?,
        created: row.try_get("created")?,
        received_at: row.try_get("received_at")?,
        // A paused type's event is parked past its due time (see
        // `dialect::parked!`); it is shown with the due time it keeps.
        due_at: unparked(row.try_get("due_at")?),
        lease_until: row.try_get("lease_until")?,
        last_attempt_at: row.try_get("last_attempt_at")?,
        last_error: row.try_get("last_error")?,
        done_at: row.try_get("done_at")?,
        body,
        source: Source::of_column(row.try_get::<Option<String>, _>("source")?.as_deref()),
        delivered_at: row.try_get("delivered_at")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_stored_state_is_a_decode_error_naming_it() {
        assert_eq!(state_of("dead".to_owned()).ok(), Some(State::Dead));
        let err = state_of("finished\n".to_owned()).err();
        let Some(sqlx::Error::ColumnDecode { index, source }) = err else {
            panic!("{err:?}");
        };
        assert_eq!(index, "state");
        let expected = "finished".parse::<State>().unwrap_err();
        assert_eq!(
            source.to_string(),
            format!(
                "the stored state \"finished\\n\" is not one this version of payhook knows \
                 ({expected}): was the row written by a newer version?"
            )
        );
    }
}
