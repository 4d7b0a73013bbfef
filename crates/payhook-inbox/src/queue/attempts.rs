//! The attempts record: each ended attempt of an event (when, how long, how
//! it ended, its error), written by the workers with what ends it: a
//! successful attempt by the statement that marks its event done
//! ([`progress`](crate::queue::progress)), or after its handler's transaction
//! committed the done mark; a failure in the transaction that changes its
//! event's state ([`Queue::record_failure`](crate::queue::transitions::Queue)), so a
//! worker whose claim was taken over records nothing; read by the
//! dashboard and `payhook inbox show` ([`reads::dashboard`](crate::reads::dashboard)).
//!
//! An attempt that never ended — its process was killed, or lost the
//! event's lease — has no worker left to record it. For a suspect (whose
//! attempt is counted before it runs; see the queue's docs) the claim that
//! finds its lease run out and takes the event back records it instead, as
//! `interrupted` ([`record_attempts_in`](AttemptsRecord::record_attempts_in),
//! in the claim's own transaction), so the record and the failed-attempts
//! count show every counted attempt, not only the ones that finished. Any
//! other event a dead process held is given back uncounted and unrecorded
//! (it may only have waited), with a `last_error` that says so.

use std::future::Future;

use crate::database::dialect::attempts_table;
use crate::database::driver::{sql_bounds, Driver};
use crate::database::Database;
use crate::model::{AttemptOutcome, AttemptRecord};

/// How many attempts the record keeps per event (the latest ones); an event
/// retried by hand again and again does not grow it without bound.
pub const MAX_ATTEMPT_RECORDS: i64 = 50;

/// The attempts record on one backend. Not nameable outside the crate.
pub trait AttemptsRecord: Driver {
    /// Records ended attempts (one statement) and drops each event's oldest
    /// beyond the bound.
    fn record_attempts<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        records: &'a [AttemptRecord],
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
    /// Records ended attempts inside the transaction `conn`: those a claim
    /// found cut short ([`interrupted_attempt`]) in the claim's, a failure in
    /// the one that changes its event's state. An attempt already recorded
    /// keeps its own record.
    fn record_attempts_in<'a>(
        conn: &'a mut Self::Connection,
        namespace: &'a str,
        records: &'a [AttemptRecord],
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
}

sql_bounds! {
    impl<DB> AttemptsRecord {
        async fn record_attempts<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            records: &'a [AttemptRecord],
        ) -> Result<(), sqlx::Error> {
            if records.is_empty() {
                return Ok(());
            }
            let sql = record_attempts_statement(records.len());
            // Batches of up to 16 stay prepared; larger ones are rarer.
            let mut query = sqlx::query(&sql)
                .persistent(records.len() <= 16)
                .bind(namespace);
            for record in records {
                query = query
                    .bind(record.arrival)
                    .bind(record.attempt)
                    .bind(record.started_at)
                    .bind(record.started_at.saturating_add(record.duration_ms))
                    .bind(record.duration_ms)
                    .bind(record.outcome.as_str())
                    .bind(record.error.as_deref());
            }
            query.execute(&db.pool).await?;
            for record in records
                .iter()
                .filter(|record| record.attempt > MAX_ATTEMPT_RECORDS)
            {
                sqlx::query(TRIM_ATTEMPTS)
                    .bind(record.arrival)
                    .bind(record.attempt - MAX_ATTEMPT_RECORDS)
                    .execute(&db.pool)
                    .await?;
            }
            Ok(())
        }

        async fn record_attempts_in<'a>(
            conn: &'a mut Self::Connection,
            namespace: &'a str,
            records: &'a [AttemptRecord],
        ) -> Result<(), sqlx::Error> {
            // Rare (a crash, a lost lease, a failure): prepared per use, in
            // chunks that stay far below every backend's parameter limit.
            for chunk in records.chunks(64) {
                let sql = record_attempts_statement(chunk.len());
                let mut query = sqlx::query(&sql).persistent(false).bind(namespace);
                for record in chunk {
                    query = query
                        .bind(record.arrival)
                        .bind(record.attempt)
                        .bind(record.started_at)
                        .bind(record.started_at.saturating_add(record.duration_ms))
                        .bind(record.duration_ms)
                        .bind(record.outcome.as_str())
                        .bind(record.error.as_deref());
                }
                query.execute(&mut *conn).await?;
            }
            Ok(())
        }
    }
}

/// The error text of an interrupted attempt: the reason only, as the outcome
/// shown beside it already names it.
pub(crate) const INTERRUPTED: &str =
    "the process handling it stopped or lost the lease before the attempt ended";

/// The record of a suspect's attempt a claim found cut short (only a
/// suspect's attempt is counted before it ends: see the queue's docs), from
/// a row the claim took back: its `arrival`, its `attempts` (the attempt's number) and its
/// `last_attempt_at` (when the attempt started). It is taken to end `now`,
/// when its lease was found run out: the handler stopped at some time
/// before, which nothing recorded. `None` for an event never started (no
/// attempt yet: claimed, then lost before its start mark); an event claimed
/// again without being started names its previous attempt, whose own record
/// is kept.
pub(crate) fn interrupted_attempt<R>(row: &R, now: i64) -> Result<Option<AttemptRecord>, sqlx::Error>
where
    R: sqlx::Row,
    for<'n> &'n str: sqlx::ColumnIndex<R>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let attempt: i64 = row.try_get("attempts")?;
    if attempt < 1 {
        return Ok(None);
    }
    let started_at = row.try_get::<Option<i64>, _>("last_attempt_at")?.unwrap_or(now);
    Ok(Some(AttemptRecord {
        arrival: row.try_get("arrival")?,
        attempt,
        started_at,
        duration_ms: now.saturating_sub(started_at).max(0),
        outcome: AttemptOutcome::Interrupted,
        error: Some(INTERRUPTED.to_owned()),
    }))
}

/// One `INSERT` of `rows` attempts: `$1` the namespace, then seven
/// parameters per attempt. A repeat (an attempt already recorded) is skipped.
pub(crate) fn record_attempts_statement(rows: usize) -> String {
    let mut sql = String::with_capacity(rows * 48 + 200);
    sql.push_str(concat!(
        "INSERT INTO ",
        attempts_table!(),
        " (arrival, namespace, attempt, started_at, finished_at, duration_ms, outcome, error) VALUES "
    ));
    for row in 0..rows {
        let p = 2 + row * 7;
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!(
            "(${}, $1, ${}, ${}, ${}, ${}, ${}, ${})",
            p,
            p + 1,
            p + 2,
            p + 3,
            p + 4,
            p + 5,
            p + 6
        ));
    }
    sql.push_str(" ON CONFLICT (arrival, attempt) DO NOTHING");
    sql
}

/// Drops an event's attempts up to `$2` (the oldest beyond the bound).
pub(crate) const TRIM_ATTEMPTS: &str = concat!(
    "DELETE FROM ",
    attempts_table!(),
    " WHERE arrival = $1 AND attempt <= $2"
);
