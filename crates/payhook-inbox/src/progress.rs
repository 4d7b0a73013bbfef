//! The workers' writes after a claim, each batched over many events: the
//! start of attempts and the done marks in one statement (with the attempts
//! record of each event marked done), the lease renewal of a claim's events
//! still waiting in the local queue, and the hand-back of events claimed but
//! never started.
//!
//! A claim takes events ahead of the handlers (see the `worker` module): it marks
//! them `running` under its lease token but does not count an attempt. An
//! attempt counts when it starts ([`progress`](Progress::progress)'s start
//! marks: `attempts + 1`, `last_attempt_at`), before its handler runs, so an
//! attempt that kills the process is counted and an event that only waited
//! in a dead process's local queue is not. Every statement names each row's
//! lease token and `state = running`, so a claim that was taken over changes
//! nothing here either.

use std::collections::HashMap;
use std::future::Future;

use sqlx::Row as _;

use crate::attempts::{record_attempts_statement, MAX_ATTEMPT_RECORDS, TRIM_ATTEMPTS};
use crate::database::Database;
use crate::dialect::{attempts_table, table};
use crate::driver::{sql_bounds, Driver};
use crate::model::{AttemptOutcome, State};

/// A row under one claim: its arrival and the claim's lease token.
pub(crate) type Lease = (i64, i64);

/// What one [`progress`](Progress::progress) statement did: the arrivals
/// marked done and the arrivals started, each with its attempt number.
#[derive(Debug, Default)]
pub struct Progressed {
    pub(crate) done: HashMap<i64, i64>,
    pub(crate) started: HashMap<i64, i64>,
}

/// The batched writes of the workers on one backend. Not nameable outside
/// the crate.
pub trait Progress: Driver {
    /// In one statement: starts an attempt of each `started` row
    /// (`attempts + 1`, `last_attempt_at`) and marks each `done` row done, recording its
    /// attempt (`done` outcome, from its start mark to now) in the attempts
    /// record. Each row at most once over both lists, each under its token.
    fn progress<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        done: &'a [Lease],
        started: &'a [Lease],
        now: i64,
    ) -> impl Future<Output = Result<Progressed, sqlx::Error>> + Send + 'a;
    /// Extends the lease of every row still `running` under one of `tokens`.
    fn renew_claims<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        tokens: &'a [i64],
        until: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a;
    /// Gives claimed events that never started back to the queue (`pending`,
    /// as due as before, no attempt counted); the rows handed back.
    fn hand_back<'a>(
        db: &'a Database<Self>,
        leases: &'a [Lease],
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a;
}

sql_bounds! {
    impl<DB> Progress {
        async fn progress<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            done: &'a [Lease],
            started: &'a [Lease],
            now: i64,
        ) -> Result<Progressed, sqlx::Error> {
            let (done_slots, start_slots) = (padded(done.len()), padded(started.len()));
            let one_statement = db.dialect.modifies_in_with();
            // A done mark commits synchronously, as the handler's own would;
            // a batch of start marks alone need not.
            let durable = if done.is_empty() { "" } else { db.dialect.durable_commit() };
            let sql = progress_statement(done_slots, start_slots, one_statement, durable);
            let mut query = sqlx::query(&sql)
                .persistent(done_slots + start_slots <= 32)
                .bind(State::Done.as_str())
                .bind(State::Running.as_str())
                .bind(now)
                .bind(namespace)
                .bind(AttemptOutcome::Done.as_str());
            for (leases, slots) in [(done, done_slots), (started, start_slots)] {
                for slot in 0..slots {
                    let lease = leases.get(slot);
                    query = query.bind(lease.map(|lease| lease.0)).bind(lease.map(|lease| lease.1));
                }
            }
            let mut out = Progressed::default();
            let mut recorded = Vec::new();
            let rows = if one_statement {
                query.fetch_all(&db.pool).await?
            } else {
                // SQLite: the mark and the attempts record in one transaction
                // (one turn of the write lock).
                let mut tx = db.pool.begin().await?;
                let rows = query.fetch_all(&mut *tx).await?;
                let finished: Vec<_> = rows
                    .iter()
                    .filter(|row| row.try_get::<String, _>("state").is_ok_and(|s| s == State::Done.as_str()))
                    .map(|row| {
                        Ok::<_, sqlx::Error>((
                            row.try_get::<i64, _>("arrival")?,
                            row.try_get::<i64, _>("attempts")?,
                            row.try_get::<Option<i64>, _>("last_attempt_at")?,
                        ))
                    })
                    .collect::<Result<_, _>>()?;
                if !finished.is_empty() {
                    let sql = record_attempts_statement(finished.len());
                    let mut insert = sqlx::query(&sql).persistent(finished.len() <= 16).bind(namespace);
                    for &(arrival, attempt, started_at) in &finished {
                        let started_at = started_at.unwrap_or(now);
                        insert = insert
                            .bind(arrival)
                            .bind(attempt)
                            .bind(started_at)
                            .bind(now)
                            .bind(now.saturating_sub(started_at).max(0))
                            .bind(AttemptOutcome::Done.as_str())
                            .bind(None::<&str>);
                    }
                    insert.execute(&mut *tx).await?;
                }
                tx.commit().await?;
                rows
            };
            for row in rows {
                let arrival: i64 = row.try_get("arrival")?;
                let state: String = row.try_get("state")?;
                let attempts: i64 = row.try_get("attempts")?;
                if state == State::Done.as_str() {
                    out.done.insert(arrival, attempts);
                    if attempts > MAX_ATTEMPT_RECORDS {
                        recorded.push((arrival, attempts));
                    }
                } else {
                    out.started.insert(arrival, attempts);
                }
            }
            // The bound on the record, for the rare event done after more
            // attempts than it keeps.
            for (arrival, attempt) in recorded {
                sqlx::query(TRIM_ATTEMPTS)
                    .bind(arrival)
                    .bind(attempt - MAX_ATTEMPT_RECORDS)
                    .execute(&db.pool)
                    .await?;
            }
            Ok(out)
        }

        async fn renew_claims<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            tokens: &'a [i64],
            until: i64,
        ) -> Result<u64, sqlx::Error> {
            let slots = padded(tokens.len());
            let mut list = String::new();
            for index in 0..slots {
                if index > 0 {
                    list.push_str(", ");
                }
                list.push_str(&format!("${}", 4 + index));
            }
            let sql = format!(
                concat!("UPDATE ", table!(), " SET lease_until = $1 WHERE namespace = $2 AND state = $3 AND lease_token IN ({})"),
                list
            );
            let mut query = sqlx::query(&sql)
                .persistent(slots <= 16)
                .bind(until)
                .bind(namespace)
                .bind(State::Running.as_str());
            for index in 0..slots {
                query = query.bind(tokens.get(index).copied());
            }
            let renewed = query.execute(&db.pool).await?;
            Ok(DB::rows_affected(&renewed))
        }

        async fn hand_back<'a>(db: &'a Database<Self>, leases: &'a [Lease]) -> Result<u64, sqlx::Error> {
            let slots = padded(leases.len());
            let (arrivals, tokens) = lease_lists(3, slots);
            let sql = format!(
                concat!(
                    "UPDATE ",
                    table!(),
                    " SET state = $1, lease_token = NULL, lease_until = NULL \
                     WHERE arrival IN ({arrivals}) AND state = $2 AND lease_token = CASE arrival{tokens} END"
                ),
                arrivals = arrivals,
                tokens = tokens
            );
            let mut query = sqlx::query(&sql)
                .persistent(slots <= 16)
                .bind(State::Pending.as_str())
                .bind(State::Running.as_str());
            for slot in 0..slots {
                let lease = leases.get(slot);
                query = query.bind(lease.map(|lease| lease.0)).bind(lease.map(|lease| lease.1));
            }
            let handed = query.execute(&db.pool).await?;
            Ok(DB::rows_affected(&handed))
        }
    }
}

/// Rows of one batched statement, padded to the next power of two so that
/// only a few statements exist.
fn padded(rows: usize) -> usize {
    rows.max(1).next_power_of_two()
}

/// `$first, $first+2, …` (the arrivals) and ` WHEN $a THEN $a+1 …` (each
/// arrival's token) for `slots` (arrival, token) parameter pairs.
fn lease_lists(first: usize, slots: usize) -> (String, String) {
    let mut arrivals = String::with_capacity(slots * 6);
    let mut tokens = String::with_capacity(slots * 18);
    for slot in 0..slots {
        let arrival = first + slot * 2;
        if slot > 0 {
            arrivals.push_str(", ");
        }
        arrivals.push_str(&format!("${arrival}"));
        tokens.push_str(&format!(" WHEN ${arrival} THEN ${}", arrival + 1));
    }
    (arrivals, tokens)
}

/// The start marks and done marks of one batch: `$1` done, `$2` running, `$3`
/// now, `$4` the namespace, `$5` the done outcome, then an (arrival, token)
/// pair per done mark and per start mark. A done row's `last_error` is
/// cleared; `attempts` and `last_attempt_at` keep its history. With
/// `in_one_statement` (PostgreSQL) the done rows' attempts are recorded by the
/// same statement; otherwise the caller records them from what it returns.
/// `durable` ends the `WHERE` ([`Dialect::durable_commit`](crate::dialect::Dialect::durable_commit)).
fn progress_statement(done: usize, started: usize, in_one_statement: bool, durable: &str) -> String {
    let (done_arrivals, done_tokens) = lease_lists(6, done);
    let (start_arrivals, start_tokens) = lease_lists(6 + done * 2, started);
    let update = format!(
        concat!(
            "UPDATE ",
            table!(),
            " SET state = CASE WHEN arrival IN ({d}) THEN $1 ELSE state END, \
             done_at = CASE WHEN arrival IN ({d}) THEN $3 ELSE done_at END, \
             lease_token = CASE WHEN arrival IN ({d}) THEN NULL ELSE lease_token END, \
             lease_until = CASE WHEN arrival IN ({d}) THEN NULL ELSE lease_until END, \
             last_error = CASE WHEN arrival IN ({d}) THEN NULL ELSE last_error END, \
             attempts = CASE WHEN arrival IN ({s}) THEN attempts + 1 ELSE attempts END, \
             last_attempt_at = CASE WHEN arrival IN ({s}) THEN $3 ELSE last_attempt_at END \
             WHERE arrival IN ({d}, {s}) AND state = $2 \
             AND lease_token = CASE arrival{dt}{st} END AND namespace = $4{durable} \
             RETURNING arrival, namespace, state, attempts, last_attempt_at, done_at"
        ),
        d = done_arrivals,
        s = start_arrivals,
        dt = done_tokens,
        st = start_tokens,
        durable = durable,
    );
    if !in_one_statement {
        // `$5` (the done outcome) is the PostgreSQL form's; every bound
        // parameter must appear in the statement.
        return update.replacen("AND namespace = $4", "AND namespace = $4 AND $5 IS NOT NULL", 1);
    }
    format!(
        concat!(
            "WITH progressed AS ({update}), recorded AS ( \
               INSERT INTO ",
            attempts_table!(),
            " (arrival, namespace, attempt, started_at, finished_at, duration_ms, outcome, error) \
               SELECT arrival, namespace, attempts, COALESCE(last_attempt_at, done_at), done_at, \
                 GREATEST(done_at - COALESCE(last_attempt_at, done_at), 0), $5, NULL \
               FROM progressed WHERE state = $1 \
               ON CONFLICT (arrival, attempt) DO NOTHING) \
             SELECT arrival, state, attempts FROM progressed"
        ),
        update = update
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_parameter_is_numbered_once_per_pair() {
        let sql = progress_statement(2, 1, false, "");
        assert!(sql.contains("arrival IN ($6, $8)"), "{sql}");
        assert!(sql.contains("arrival IN ($10)"), "{sql}");
        assert!(
            sql.contains("WHEN $6 THEN $7 WHEN $8 THEN $9 WHEN $10 THEN $11 END"),
            "{sql}"
        );
        assert!(progress_statement(1, 1, true, "").starts_with("WITH progressed AS (UPDATE"));
    }
}
