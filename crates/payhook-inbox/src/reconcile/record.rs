//! The reconciler's state in the inbox's database, each change a named
//! method with its statement beside it: whose turn it is to reconcile a
//! namespace (a lease one process holds, renewed between pages and taken
//! over once it runs out), up to when the service's events are known to be
//! in the inbox, how the last passes went; and the two statements a page
//! needs: which of its ids the inbox has, and storing the rest.

use std::collections::HashSet;
use std::future::Future;

use crate::database::dialect::{reconciler_table, table};
use crate::database::driver::{sql_bounds, Driver};
use crate::database::Database;

/// The reconciler's statements on one backend. Not nameable outside the crate.
pub trait ReconcilerRecord: Driver {
    /// Takes or renews the namespace's turn for `owner` until `until` (Unix
    /// ms): granted when nobody holds it, `owner` does, or the holder's
    /// lease ran out before `now`. Whether `owner` holds it now.
    fn take_turn<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        owner: &'a str,
        now: i64,
        until: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'a;
    /// Gives the turn up (a process stopping), so another takes it at once.
    fn give_up_turn<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        owner: &'a str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
    /// Up to when every event the service created (its `created`, Unix
    /// seconds) is known to be in the inbox; `None` before the first pass
    /// that reached its end.
    fn reconciled_until<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
    ) -> impl Future<Output = Result<Option<i64>, sqlx::Error>> + Send + 'a;
    /// A pass that reached its end: every event up to `until` (seconds) is
    /// in the inbox. Recorded only while `owner` holds the turn.
    fn record_pass<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        owner: &'a str,
        until: i64,
        now: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'a;
    /// A pass that failed, with what went wrong (no key or secret in it).
    fn record_pass_failure<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        now: i64,
        error: &'a str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
    /// Which of `ids` the namespace holds.
    fn present_ids<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        ids: &'a [&'a str],
    ) -> impl Future<Output = Result<HashSet<String>, sqlx::Error>> + Send + 'a;
}

sql_bounds! {
    impl<DB> ReconcilerRecord {
        async fn take_turn<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            owner: &'a str,
            now: i64,
            until: i64,
        ) -> Result<bool, sqlx::Error> {
            const ADD: &str = concat!(
                "INSERT INTO ",
                reconciler_table!(),
                " (namespace, failures) VALUES ($1, 0) ON CONFLICT (namespace) DO NOTHING"
            );
            const TAKE: &str = concat!(
                "UPDATE ",
                reconciler_table!(),
                " SET owner = $2, lease_until = $4 \
                 WHERE namespace = $1 AND (owner IS NULL OR owner = $2 OR lease_until IS NULL OR lease_until < $3)"
            );
            sqlx::query(ADD).bind(namespace).execute(&db.pool).await?;
            let taken = sqlx::query(TAKE)
                .bind(namespace)
                .bind(owner)
                .bind(now)
                .bind(until)
                .execute(&db.pool)
                .await?;
            Ok(DB::rows_affected(&taken) == 1)
        }

        async fn give_up_turn<'a>(db: &'a Database<Self>, namespace: &'a str, owner: &'a str) -> Result<(), sqlx::Error> {
            const GIVE_UP: &str = concat!(
                "UPDATE ",
                reconciler_table!(),
                " SET owner = NULL, lease_until = NULL WHERE namespace = $1 AND owner = $2"
            );
            sqlx::query(GIVE_UP).bind(namespace).bind(owner).execute(&db.pool).await?;
            Ok(())
        }

        async fn reconciled_until<'a>(db: &'a Database<Self>, namespace: &'a str) -> Result<Option<i64>, sqlx::Error> {
            const STATE: &str = concat!(
                "SELECT reconciled_until FROM ",
                reconciler_table!(),
                " WHERE namespace = $1"
            );
            let until: Option<Option<i64>> = sqlx::query_scalar(STATE).bind(namespace).fetch_optional(&db.pool).await?;
            Ok(until.flatten())
        }

        async fn record_pass<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            owner: &'a str,
            until: i64,
            now: i64,
        ) -> Result<bool, sqlx::Error> {
            // Never backwards: a pass of a replica whose clock runs behind
            // leaves the mark where a faster one put it.
            const PASSED: &str = concat!(
                "UPDATE ",
                reconciler_table!(),
                " SET reconciled_until = CASE WHEN reconciled_until IS NULL OR reconciled_until < $3 \
                   THEN $3 ELSE reconciled_until END, \
                 last_success_at = $4, failures = 0, last_error = NULL \
                 WHERE namespace = $1 AND owner = $2"
            );
            let passed = sqlx::query(PASSED)
                .bind(namespace)
                .bind(owner)
                .bind(until)
                .bind(now)
                .execute(&db.pool)
                .await?;
            Ok(DB::rows_affected(&passed) == 1)
        }

        async fn record_pass_failure<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            now: i64,
            error: &'a str,
        ) -> Result<(), sqlx::Error> {
            const FAILED: &str = concat!(
                "UPDATE ",
                reconciler_table!(),
                " SET failures = failures + 1, last_failure_at = $2, last_error = $3 WHERE namespace = $1"
            );
            sqlx::query(FAILED).bind(namespace).bind(now).bind(error).execute(&db.pool).await?;
            Ok(())
        }

        async fn present_ids<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            ids: &'a [&'a str],
        ) -> Result<HashSet<String>, sqlx::Error> {
            if ids.is_empty() {
                return Ok(HashSet::new());
            }
            let mut sql = String::from(concat!(
                "SELECT event_id FROM ",
                table!(),
                " WHERE namespace = $1 AND event_id IN ("
            ));
            for index in 0..ids.len() {
                if index > 0 {
                    sql.push_str(", ");
                }
                sql.push_str(&format!("${}", index + 2));
            }
            sql.push(')');
            let mut query = sqlx::query_scalar(&sql).persistent(false).bind(namespace);
            for id in ids {
                query = query.bind(*id);
            }
            let present: Vec<String> = query.fetch_all(&db.pool).await?;
            Ok(present.into_iter().collect())
        }
    }
}
