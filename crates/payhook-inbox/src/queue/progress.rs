//! The workers' writes after a claim, each batched over many events: the
//! start of attempts and the done marks in one statement (with the attempts
//! record of each event marked done), the lease renewal of a claim's events
//! still waiting in the local queue, and the hand-back of events claimed but
//! never started.
//!
//! A claim takes events ahead of the handlers (see the `worker` module): it marks
//! them `running` under its lease token but does not count an attempt. An
//! attempt is counted with its end: the done mark writes its number and
//! start time. Only a *suspect* (an event taken back from a process that died
//! holding it) has its attempt counted when it starts
//! ([`progress`](Progress::progress)'s start marks: `attempts + 1`,
//! `last_attempt_at`, `suspect` 2: started), before its handler runs, so an
//! attempt that kills the process again is counted. Every statement names each row's lease token
//! and `state = running`, so a claim that was taken over changes nothing
//! here either.

use std::collections::HashMap;
use std::future::Future;

use sqlx::Row as _;

use crate::database::dialect::{attempts_table, table, Dialect};
use crate::database::driver::{sql_bounds, Driver};
use crate::database::Database;
use crate::model::{AttemptOutcome, ClaimedAttempt, State};
use crate::queue::attempts::{MAX_ATTEMPT_RECORDS, TRIM_ATTEMPTS};

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
    /// In one statement: starts an attempt of each `started` row (a suspect:
    /// `attempts + 1`, `last_attempt_at`) and marks each `done` row done with
    /// its attempt's number and start, recording the attempt (`done`
    /// outcome, from its start to now) in the attempts record. Each row at
    /// most once over both lists, each under its token.
    fn progress<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        done: &'a [ClaimedAttempt],
        started: &'a [Lease],
        now: i64,
    ) -> impl Future<Output = Result<Progressed, sqlx::Error>> + Send + 'a;
    /// Extends the lease of each row still `running` under its token in
    /// `leases`; the rows renewed.
    fn renew_claims<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        leases: &'a [Lease],
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
            done: &'a [ClaimedAttempt],
            started: &'a [Lease],
            now: i64,
        ) -> Result<Progressed, sqlx::Error> {
            let one_statement = db.dialect.modifies_in_with();
            // A done mark commits synchronously, as the handler's own would;
            // a batch of start marks alone need not.
            let durable = if done.is_empty() { "" } else { db.dialect.durable_commit() };
            let sql = progress_statement(db.dialect, one_statement, durable);
            let query = sqlx::query(&sql)
                .bind(State::Done.as_str())
                .bind(State::Running.as_str())
                .bind(now)
                .bind(namespace)
                .bind(AttemptOutcome::Done.as_str())
                .bind(marks_json(done, started));
            let mut out = Progressed::default();
            let mut recorded = Vec::new();
            let rows = if one_statement {
                query.fetch_all(&db.pool).await?
            } else {
                // SQLite: the mark and the attempts record in one transaction
                // (one turn of the write lock).
                let mut tx = db.begin().await?;
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
                    let mut records = String::with_capacity(finished.len() * 40);
                    for &(arrival, attempt, started_at) in &finished {
                        let started_at = started_at.unwrap_or(now);
                        let separator = if records.is_empty() { '[' } else { ',' };
                        records.push_str(&format!(
                            "{separator}[{arrival},{attempt},{started_at},{}]",
                            now.saturating_sub(started_at).max(0)
                        ));
                    }
                    records.push(']');
                    sqlx::query(&done_attempts_statement(db.dialect))
                        .bind(namespace)
                        .bind(now)
                        .bind(AttemptOutcome::Done.as_str())
                        .bind(records)
                        .execute(&mut *tx)
                        .await?;
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
            leases: &'a [Lease],
            until: i64,
        ) -> Result<u64, sqlx::Error> {
            let sql = format!(
                concat!(
                    "UPDATE ",
                    table!(),
                    " SET lease_until = $1 FROM {leases} AS lease \
                     WHERE ",
                    table!(),
                    ".arrival = lease.arrival AND ",
                    table!(),
                    ".lease_token = lease.token AND {state} = $3 AND {namespace} = $2"
                ),
                leases = db.dialect.json_rows(4, &["arrival", "token"]),
                state = db.dialect.unindexed(concat!(table!(), ".state")),
                namespace = db.dialect.unindexed(concat!(table!(), ".namespace")),
            );
            let renewed = sqlx::query(&sql)
                .bind(until)
                .bind(namespace)
                .bind(State::Running.as_str())
                .bind(leases_json(leases))
                .execute(&db.pool)
                .await?;
            Ok(DB::rows_affected(&renewed))
        }

        async fn hand_back<'a>(db: &'a Database<Self>, leases: &'a [Lease]) -> Result<u64, sqlx::Error> {
            let sql = format!(
                concat!(
                    "UPDATE ",
                    table!(),
                    " SET state = $1, lease_token = NULL, lease_until = NULL FROM {leases} AS lease \
                     WHERE ",
                    table!(),
                    ".arrival = lease.arrival AND ",
                    table!(),
                    ".lease_token = lease.token AND {state} = $2"
                ),
                leases = db.dialect.json_rows(3, &["arrival", "token"]),
                state = db.dialect.unindexed(concat!(table!(), ".state")),
            );
            let handed = sqlx::query(&sql)
                .bind(State::Pending.as_str())
                .bind(State::Running.as_str())
                .bind(leases_json(leases))
                .execute(&db.pool)
                .await?;
            Ok(DB::rows_affected(&handed))
        }
    }
}

/// Leases as the JSON array of `[arrival, token]` the statements read.
fn leases_json(leases: &[Lease]) -> String {
    let mut json = String::with_capacity(leases.len() * 28 + 2);
    json.push('[');
    for (arrival, token) in leases {
        if json.len() > 1 {
            json.push(',');
        }
        json.push_str(&format!("[{arrival},{token}]"));
    }
    json.push(']');
    json
}

/// The marks of one batch as the JSON array the progress statement reads:
/// `[arrival, token, 1, attempt, started_at]` per done mark, `[arrival,
/// token, 0, 0, 0]` per start mark.
fn marks_json(done: &[ClaimedAttempt], started: &[Lease]) -> String {
    let mut json = String::with_capacity(done.len() * 56 + started.len() * 32 + 2);
    json.push('[');
    let marks = done
        .iter()
        .map(|done| (done.arrival, done.token, 1, done.number, done.started_at))
        .chain(started.iter().map(|&(arrival, token)| (arrival, token, 0, 0, 0)));
    for (arrival, token, is_done, attempt, started_at) in marks {
        if json.len() > 1 {
            json.push(',');
        }
        json.push_str(&format!("[{arrival},{token},{is_done},{attempt},{started_at}]"));
    }
    json.push(']');
    json
}

/// The start marks and done marks of one batch: `$1` done, `$2` running, `$3`
/// now, `$4` the namespace, `$5` the done outcome, `$6` the marks (see
/// [`marks_json`]). A row is marked only under its own lease token and while
/// it is `running`. A done row's `last_error` is cleared; its `attempts` and
/// `last_attempt_at` become the attempt's number and start. With `in_one_statement` (PostgreSQL)
/// the done rows' attempts are recorded by the same statement; otherwise the
/// caller records them from what it returns. `durable` ends the `WHERE`
/// ([`Dialect::durable_commit`](crate::database::dialect::Dialect::durable_commit)).
fn progress_statement(dialect: Dialect, in_one_statement: bool, durable: &str) -> String {
    let marks = dialect.json_rows(6, &["arrival", "token", "done", "attempt", "started_at"]);
    let update = format!(
        concat!(
            "UPDATE ",
            table!(),
            " SET state = CASE WHEN mark.done = 1 THEN $1 ELSE ",
            table!(),
            ".state END, \
             done_at = CASE WHEN mark.done = 1 THEN $3 ELSE done_at END, \
             lease_token = CASE WHEN mark.done = 1 THEN NULL ELSE lease_token END, \
             lease_until = CASE WHEN mark.done = 1 THEN NULL ELSE lease_until END, \
             last_error = CASE WHEN mark.done = 1 THEN NULL ELSE last_error END, \
             attempts = CASE WHEN mark.done = 1 THEN mark.attempt ELSE attempts + 1 END, \
             last_attempt_at = CASE WHEN mark.done = 1 THEN mark.started_at ELSE $3 END, \
             suspect = CASE WHEN mark.done = 1 THEN suspect ELSE 2 END \
             FROM {marks} AS mark \
             WHERE ",
            table!(),
            ".arrival = mark.arrival AND ",
            table!(),
            ".lease_token = mark.token AND {state} = $2 AND {namespace} = $4{durable} \
             RETURNING ",
            table!(),
            ".arrival, ",
            table!(),
            ".namespace, ",
            table!(),
            ".state, attempts, last_attempt_at, done_at"
        ),
        marks = marks,
        state = dialect.unindexed(concat!(table!(), ".state")),
        namespace = dialect.unindexed(concat!(table!(), ".namespace")),
        durable = durable,
    );
    if !in_one_statement {
        // `$5` (the done outcome) is the PostgreSQL form's; every bound
        // parameter must appear in the statement.
        return update.replacen(" = $4", " = $4 AND $5 IS NOT NULL", 1);
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

/// The attempts record of the rows a batch marked done, where the progress
/// statement cannot write it itself (SQLite): `$1` the namespace, `$2` now,
/// `$3` the done outcome, `$4` a JSON array of `[arrival, attempt,
/// started_at, duration_ms]`.
fn done_attempts_statement(dialect: Dialect) -> String {
    format!(
        concat!(
            "INSERT INTO ",
            attempts_table!(),
            " (arrival, namespace, attempt, started_at, finished_at, duration_ms, outcome, error) \
             SELECT arrival, $1, attempt, started_at, $2, duration_ms, $3, NULL FROM {records} AS record \
             WHERE true ON CONFLICT (arrival, attempt) DO NOTHING"
        ),
        records = dialect.json_rows(4, &["arrival", "attempt", "started_at", "duration_ms"])
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_one_json_array() {
        let done = ClaimedAttempt {
            arrival: 1,
            token: 10,
            number: 2,
            started_at: 99,
        };
        assert_eq!(
            marks_json(&[done], &[(2, 20), (3, 30)]),
            "[[1,10,1,2,99],[2,20,0,0,0],[3,30,0,0,0]]"
        );
        assert_eq!(marks_json(&[], &[]), "[]");
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            assert!(progress_statement(dialect, true, "").starts_with("WITH progressed AS (UPDATE"));
            assert!(progress_statement(dialect, false, "").contains("$5 IS NOT NULL"));
        }
    }

    /// The marks look each listed row up by its key. With `state` and
    /// `namespace` written plainly, SQLite drives the statement by an index
    /// on them instead and scans every running row of the namespace for
    /// each batch (as PostgreSQL did with stale statistics).
    #[tokio::test]
    async fn sqlite_marks_find_each_row_by_its_key() {
        // SQLite's form: the marks, then the attempts record apart.
        let plan =
            crate::database::migrate::sqlite_plan(&progress_statement(Dialect::Sqlite, false, "")).await;
        crate::database::migrate::assert_rows_found_by_key(&plan);
    }
}
