//! The operator's state changes (`payhook inbox`, the dashboard's actions)
//! and the retention purge: each a named method with its statement beside it.
//! A dead or pending event is made due now ([`retry`](Operations::retry),
//! [`retry_dead`](Operations::retry_dead)), done events run again
//! ([`replay`](Operations::replay)), and old done events are deleted in
//! bounded batches ([`purge`](Operations::purge)). An event type is paused
//! ([`pause`](Operations::pause): the claim skips its events) and resumed
//! ([`resume`](Operations::resume)) by a row in the paused types' table.
//! SQLite's WAL is copied back off the writes' path
//! ([`checkpoint`](Operations::checkpoint)).

use std::future::Future;
use std::sync::LazyLock;

use crate::clock::now_ms;
use crate::database::dialect::{
    activity_table, parked, paused_table, phase_in, states_in, table, waiting_phase,
};
use crate::database::driver::{sql_bounds, Driver};
use crate::database::Database;
use crate::model::State;

/// Events parked or unparked per statement when a type is paused or
/// resumed: each statement is short, whatever the type's backlog.
pub(crate) const PARK_BATCH: i64 = 500;

/// The operator's state changes on one backend. Not nameable outside the crate.
pub trait Operations: Driver {
    /// Copies SQLite's WAL back into the database file without taking the
    /// write lock ([`Dialect::wal_checkpoint`](crate::database::dialect::Dialect::wal_checkpoint));
    /// nothing on PostgreSQL.
    fn checkpoint(db: &Database<Self>) -> impl Future<Output = Result<(), sqlx::Error>> + Send + '_;
    /// Forgets the activity chart's buckets before bucket `before` (the
    /// retention purge's, with the events it deletes).
    fn forget_activity<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        before: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a;
    /// `dead` or `pending` → `pending`, due now; whether there was one.
    fn retry<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        event_id: &'a str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'a;
    /// Every `dead` event → `pending`, due now.
    fn retry_dead<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a;
    /// `done` events received at or after `since` → `pending`, due now.
    fn replay<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        since: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a;
    /// Pauses `event_type`: its events are no longer claimed. Whether it was
    /// running (not paused already).
    fn pause<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        event_type: &'a str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'a;
    /// Resumes `event_type`; whether it was paused.
    fn resume<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        event_type: &'a str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'a;
    /// Parks (`park`) or unparks at most `limit` waiting events of
    /// `event_type`, earliest due first (see [`parked!`]); how many. Parking
    /// needs the type paused, unparking needs it not paused, so a pause and
    /// a resume racing each other leave no event parked while its type runs.
    fn park<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        event_type: &'a str,
        park: bool,
        limit: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a;
    /// Deletes at most `limit` done events marked done at or after `from`
    /// and before `before`, the oldest first; how many, and the latest
    /// `done_at` among them (where the next batch may start).
    fn purge<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        from: i64,
        before: i64,
        limit: i64,
    ) -> impl Future<Output = Result<(u64, Option<i64>), sqlx::Error>> + Send + 'a;
}

sql_bounds! {
    impl<DB> Operations {
        async fn checkpoint(db: &Database<Self>) -> Result<(), sqlx::Error> {
            if let Some(statement) = db.dialect.wal_checkpoint() {
                sqlx::query(statement).execute(&db.pool).await?;
            }
            Ok(())
        }

        async fn retry<'a>(db: &'a Database<Self>, namespace: &'a str, event_id: &'a str) -> Result<bool, sqlx::Error> {
            static RETRY: LazyLock<(String, Vec<&'static str>)> = LazyLock::new(|| {
                let (states, names) = states_in(5, State::can_be_made_due);
                let sql = format!(
                    concat!(
                        "UPDATE ",
                        table!(),
                        " SET state = $1, due_at = $2 WHERE namespace = $3 AND event_id = $4 AND state IN ({})"
                    ),
                    states
                );
                (sql, names)
            });
            let (sql, states) = &*RETRY;
            let mut query = sqlx::query(sql)
                .bind(State::Pending.as_str())
                .bind(now_ms())
                .bind(namespace)
                .bind(event_id);
            for &state in states {
                query = query.bind(state);
            }
            let updated = query.execute(&db.pool).await?;
            Ok(DB::rows_affected(&updated) > 0)
        }

        async fn retry_dead<'a>(db: &'a Database<Self>, namespace: &'a str) -> Result<u64, sqlx::Error> {
            static RETRY_DEAD: LazyLock<(String, Vec<&'static str>)> = LazyLock::new(|| {
                let (states, names) = states_in(4, State::is_retryable);
                let sql = format!(
                    concat!(
                        "UPDATE ",
                        table!(),
                        " SET state = $1, due_at = $2 WHERE namespace = $3 AND {} AND state IN ({})"
                    ),
                    phase_in("phase", State::is_retryable),
                    states
                );
                (sql, names)
            });
            let (sql, states) = &*RETRY_DEAD;
            let mut query = sqlx::query(sql)
                .bind(State::Pending.as_str())
                .bind(now_ms())
                .bind(namespace);
            for &state in states {
                query = query.bind(state);
            }
            let updated = query.execute(&db.pool).await?;
            Ok(DB::rows_affected(&updated))
        }

        async fn replay<'a>(db: &'a Database<Self>, namespace: &'a str, since: i64) -> Result<u64, sqlx::Error> {
            static REPLAY: LazyLock<(String, Vec<&'static str>)> = LazyLock::new(|| {
                let (states, names) = states_in(5, State::is_replayable);
                let sql = format!(
                    concat!(
                        "UPDATE ",
                        table!(),
                        " SET state = $1, due_at = $2, done_at = NULL \
                         WHERE namespace = $3 AND received_at >= $4 AND {} AND state IN ({})"
                    ),
                    phase_in("phase", State::is_replayable),
                    states
                );
                (sql, names)
            });
            let (sql, states) = &*REPLAY;
            let mut query = sqlx::query(sql)
                .bind(State::Pending.as_str())
                .bind(now_ms())
                .bind(namespace)
                .bind(since);
            for &state in states {
                query = query.bind(state);
            }
            let updated = query.execute(&db.pool).await?;
            Ok(DB::rows_affected(&updated))
        }

        async fn pause<'a>(db: &'a Database<Self>, namespace: &'a str, event_type: &'a str) -> Result<bool, sqlx::Error> {
            // A pause is a row every replica's claim reads: it takes effect
            // at the next claim of each, and survives restarts.
            const PAUSE: &str = concat!(
                "INSERT INTO ",
                paused_table!(),
                " (namespace, event_type, paused_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (namespace, event_type) DO NOTHING"
            );
            let inserted = sqlx::query(PAUSE)
                .bind(namespace)
                .bind(event_type)
                .bind(now_ms())
                .execute(&db.pool)
                .await?;
            Ok(DB::rows_affected(&inserted) > 0)
        }

        async fn resume<'a>(db: &'a Database<Self>, namespace: &'a str, event_type: &'a str) -> Result<bool, sqlx::Error> {
            // The paused events stayed `pending`, parked past their due
            // times; `Admin::resume` unparks them after this, so the next
            // claims take them oldest first, as if never held back.
            const RESUME: &str = concat!(
                "DELETE FROM ",
                paused_table!(),
                " WHERE namespace = $1 AND event_type = $2"
            );
            let deleted = sqlx::query(RESUME)
                .bind(namespace)
                .bind(event_type)
                .execute(&db.pool)
                .await?;
            Ok(DB::rows_affected(&deleted) > 0)
        }

        async fn park<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            event_type: &'a str,
            park: bool,
            limit: i64,
        ) -> Result<u64, sqlx::Error> {
            // The batch's keys first, read from the waiting events' index
            // (by due time) outside any write; then the change by primary key
            // (`park_statement`), re-checked on each row (on PostgreSQL under
            // the row's lock), so
            // an event claimed meanwhile is left alone. On PostgreSQL the
            // paused row is share-locked while parking, so a resume deleting
            // it waits, and its unparking then sees these.
            const PICK_PARK: &str = concat!(
                "SELECT arrival FROM ",
                table!(),
                " WHERE namespace = $1 AND phase = ",
                waiting_phase!(),
                " AND state = $2 AND event_type = $3 AND due_at < ",
                parked!(),
                " ORDER BY due_at, arrival LIMIT $4"
            );
            const PICK_UNPARK: &str = concat!(
                "SELECT arrival FROM ",
                table!(),
                " WHERE namespace = $1 AND phase = ",
                waiting_phase!(),
                " AND state = $2 AND event_type = $3 AND due_at >= ",
                parked!(),
                " ORDER BY due_at, arrival LIMIT $4"
            );
            let keys: Vec<i64> = sqlx::query_scalar(if park { PICK_PARK } else { PICK_UNPARK })
                .bind(namespace)
                .bind(State::Pending.as_str())
                .bind(event_type)
                .bind(limit)
                .fetch_all(&db.pool)
                .await?;
            if keys.is_empty() {
                return Ok(0);
            }
            let sql = park_statement(db.dialect, park, keys.len());
            let mut query = sqlx::query(&sql)
                .persistent(false)
                .bind(namespace)
                .bind(State::Pending.as_str())
                .bind(event_type);
            for key in keys {
                query = query.bind(key);
            }
            let changed = db.write(query.execute(&db.pool)).await?;
            Ok(DB::rows_affected(&changed))
        }

        async fn forget_activity<'a>(db: &'a Database<Self>, namespace: &'a str, before: i64) -> Result<u64, sqlx::Error> {
            const FORGET: &str = concat!("DELETE FROM ", activity_table!(), " WHERE namespace = $1 AND bucket < $2");
            let forgotten = sqlx::query(FORGET).bind(namespace).bind(before).execute(&db.pool).await?;
            Ok(DB::rows_affected(&forgotten))
        }

        async fn purge<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            from: i64,
            before: i64,
            limit: i64,
        ) -> Result<(u64, Option<i64>), sqlx::Error> {
            use sqlx::Row as _;
            let purged = sqlx::query(&purge_statement(db.dialect))
                .bind(namespace)
                .bind(before)
                .bind(limit)
                .bind(State::Done.phase().as_str())
                .bind(State::Done.as_str())
                .bind(from)
                .fetch_all(&db.pool)
                .await?;
            let mut latest = None;
            for row in &purged {
                let done_at: i64 = row.try_get("done_at")?;
                latest = latest.max(Some(done_at));
            }
            Ok((purged.len() as u64, latest))
        }
    }
}

/// The statement that parks (`park`) or unparks `keys` listed events of one
/// type, bound as `$4…`: each row looked up by its key (`namespace` and
/// `state` through [`Dialect::unindexed`](crate::database::dialect::Dialect::unindexed),
/// so no index on them drives it) and re-checked.
fn park_statement(dialect: crate::database::dialect::Dialect, park: bool, keys: usize) -> String {
    const PARK: &str = concat!(
        "UPDATE ",
        table!(),
        " SET due_at = due_at + ",
        parked!(),
        " WHERE {namespace} = $1 AND {state} = $2 AND event_type = $3 AND due_at < ",
        parked!(),
        " AND EXISTS (SELECT 1 FROM ",
        paused_table!(),
        " p WHERE p.namespace = $1 AND p.event_type = $3{share}) AND arrival IN ({keys})"
    );
    const UNPARK: &str = concat!(
        "UPDATE ",
        table!(),
        " SET due_at = due_at - ",
        parked!(),
        " WHERE {namespace} = $1 AND {state} = $2 AND event_type = $3 AND due_at >= ",
        parked!(),
        " AND NOT EXISTS (SELECT 1 FROM ",
        paused_table!(),
        " p WHERE p.namespace = $1 AND p.event_type = $3) AND arrival IN ({keys})"
    );
    let marks: Vec<String> = (0..keys).map(|index| format!("${}", 4 + index)).collect();
    if park { PARK } else { UNPARK }
        .replace("{share}", dialect.share_lock())
        .replace("{namespace}", &dialect.unindexed("namespace"))
        .replace("{state}", &dialect.unindexed("state"))
        .replace("{keys}", &marks.join(", "))
}

/// One bounded batch: at most `$3` done rows, done at or after `$6` and
/// before `$2`, the oldest first, found through the
/// `(namespace, phase, done_at)` index (`$4` done's phase, `$5` done; on
/// SQLite `(namespace, state, done_at)`), so each statement is short. (That index is also the narrowest one the
/// overview's counts by phase read on PostgreSQL: without it the planner
/// scans the table.) The rows found are deleted by their address
/// ([`Dialect::rows_among`](crate::database::dialect::Dialect::rows_among)),
/// and each one's `done_at` comes back.
///
/// `$6` is where the batch before ended: the index entries of the rows
/// purged before stay in the index, dead, until vacuum, and a batch that
/// started from the namespace's oldest done event would step over all of
/// them (at a tenth of a large table, before autovacuum runs, millions).
///
/// A row picked while done may be changed before the delete reaches it (a
/// replay or a retry making it pending): the delete waits for that change to
/// commit, then checks its own conditions on the row's new version, never
/// the subquery's. Its new address is not in the list, and the outer
/// conditions repeat the inner ones besides, so the replayed event stays.
/// Those outer conditions name `namespace` and `state` through
/// [`Dialect::unindexed`](crate::database::dialect::Dialect::unindexed): written
/// plainly, SQLite drives the delete by the same done index and, for each
/// batch, walks every done entry before `$2` to test it against the list
/// (the whole day being purged; 8 ms a batch instead of 3 at a million
/// stored).
fn purge_statement(dialect: crate::database::dialect::Dialect) -> String {
    format!(
        concat!(
            "DELETE FROM ",
            table!(),
            " WHERE {among} AND {namespace} = $1 AND {state} = $5 AND done_at < $2 RETURNING done_at"
        ),
        among = dialect.rows_among(concat!(
            "FROM ",
            table!(),
            " WHERE namespace = $1 AND phase = $4 AND state = $5 AND done_at >= $6 AND done_at < $2 \
             ORDER BY done_at LIMIT $3"
        )),
        namespace = dialect.unindexed("namespace"),
        state = dialect.unindexed("state"),
    )
}

/// Parks (`park`) or unparks every waiting event of `event_type`, in
/// batches of [`PARK_BATCH`] in due order: a paused type's events are kept
/// out of the claims' index range, so claims do not step over them, and come
/// back in the order they had. Run on every pause and resume, even a repeated
/// one, so a second call finishes an interrupted one.
pub(crate) async fn park_all<DB: Operations>(
    db: &Database<DB>,
    namespace: &str,
    event_type: &str,
    park: bool,
) -> Result<u64, sqlx::Error> {
    let mut total = 0;
    loop {
        let changed = DB::park(db, namespace, event_type, park, PARK_BATCH).await?;
        total += changed;
        if changed < u64::try_from(PARK_BATCH).unwrap_or(u64::MAX) {
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parking and unparking look each listed row up by its key. With
    /// `namespace` and `state` written plainly, SQLite drives them by the
    /// waiting events' `(namespace, due_at)` index and walks every pending
    /// (or every parked) row of the namespace for each batch.
    #[tokio::test]
    async fn sqlite_parks_a_batchs_rows_by_their_keys() {
        for park in [true, false] {
            let plan = crate::database::migrate::sqlite_plan(&park_statement(
                crate::database::dialect::Dialect::Sqlite,
                park,
                500,
            ))
            .await;
            crate::database::migrate::assert_rows_found_by_key(&plan);
        }
    }

    /// The retention purge reads old done rows through its index, from where
    /// the last batch ended, the oldest first, never every done row of the
    /// namespace, and deletes the rows it found by their key, not by walking
    /// the done index again.
    #[tokio::test]
    async fn sqlite_purge_reads_old_done_rows_through_its_index() {
        let plan = crate::database::migrate::sqlite_plan(&purge_statement(
            crate::database::dialect::Dialect::Sqlite,
        ))
        .await;
        let delete = plan.lines().next().unwrap_or_default();
        assert!(
            delete.contains("USING INTEGER PRIMARY KEY (rowid=?)"),
            "the delete by key: {plan}"
        );
        assert!(
            plan.contains("payhook_inbox_done (namespace=? AND state=? AND done_at>? AND done_at<?)"),
            "{plan}"
        );
        assert!(
            !plan.contains("TEMP B-TREE"),
            "the oldest first, not sorted: {plan}"
        );
    }
}
