//! The duplicates records, written by the intake after the replies, so a
//! duplicate is never answered later for them:
//!
//! * when each duplicate delivery (of an event already stored) was
//!   acknowledged, so that the overview counts every delivery it
//!   acknowledged and not only first deliveries; kept for [`KEPT_MS`], as the
//!   overview shows the last hour;
//! * the duplicates whose content differed from the stored event (the same
//!   id with another `type` or `data`): one row per event, kept while the
//!   event is, shown on its dashboard page and by `payhook inbox show`.
//!
//! A duplicate's body is compared with the stored one only off the reply
//! path: identical bytes (a sender's retry) cost one read of the stored
//! body; other bytes are compared by what the event says
//! ([`same_content`](payhook_core::event::same_content)), so a copy
//! serialised differently — the events list's copy of an event against its
//! delivery — is an ordinary duplicate.

use std::future::Future;

use crate::database::dialect::{differing_table, duplicates_table, table};
use crate::database::driver::{sql_bounds, Driver};
use crate::database::Database;
use crate::model::DifferingCopies;

/// How long a duplicate stays recorded (a day, in milliseconds).
pub(crate) const KEPT_MS: i64 = 24 * 3_600_000;

/// The duplicates records on one backend. Not nameable outside the crate.
pub trait DuplicatesRecord: Driver {
    /// Records duplicate deliveries `(event id, received at)` in one
    /// statement, and forgets the ones older than [`KEPT_MS`] before `now`.
    fn record_duplicates<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        duplicates: &'a [(&'a str, i64)],
        now: i64,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
    /// The stored body of an event, `None` when it is gone (purged since).
    fn stored_body<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        event_id: &'a str,
    ) -> impl Future<Output = Result<Option<String>, sqlx::Error>> + Send + 'a;
    /// Counts a duplicate whose content differed, received at `at`, and
    /// keeps its body as the event's last differing copy.
    fn record_differing<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        event_id: &'a str,
        at: i64,
        body: &'a str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
    /// The differing copies of one event, if any arrived.
    fn differing_copies<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        event_id: &'a str,
    ) -> impl Future<Output = Result<Option<DifferingCopies>, sqlx::Error>> + Send + 'a;
    /// Forgets the differing copies of events no longer stored (purged by
    /// retention, by hand or in bulk); returns how many.
    fn forget_orphaned_differing<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a;
}

sql_bounds! {
    impl<DB> DuplicatesRecord {
        async fn record_duplicates<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            duplicates: &'a [(&'a str, i64)],
            now: i64,
        ) -> Result<(), sqlx::Error> {
            const FORGET: &str = concat!(
                "DELETE FROM ",
                duplicates_table!(),
                " WHERE namespace = $1 AND received_at < $2"
            );
            for chunk in duplicates.chunks(64) {
                let sql = record_statement(chunk.len());
                let mut query = sqlx::query(&sql).persistent(chunk.len() == 1).bind(namespace);
                for &(event_id, received_at) in chunk {
                    query = query.bind(event_id).bind(received_at);
                }
                query.execute(&db.pool).await?;
            }
            sqlx::query(FORGET)
                .bind(namespace)
                .bind(now.saturating_sub(KEPT_MS))
                .execute(&db.pool)
                .await?;
            Ok(())
        }

        async fn stored_body<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            event_id: &'a str,
        ) -> Result<Option<String>, sqlx::Error> {
            const BODY: &str = concat!("SELECT body FROM ", table!(), " WHERE namespace = $1 AND event_id = $2");
            sqlx::query_scalar(BODY).bind(namespace).bind(event_id).fetch_optional(&db.pool).await
        }

        async fn record_differing<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            event_id: &'a str,
            at: i64,
            body: &'a str,
        ) -> Result<(), sqlx::Error> {
            // Copies of two batches are compared by tasks of their own, so
            // they may be recorded out of arrival order: the times and the
            // last body go by arrival, not by which was recorded last.
            const RECORD: &str = concat!(
                "INSERT INTO ",
                differing_table!(),
                " AS d (namespace, event_id, first_at, last_at, copies, last_body) VALUES ($1, $2, $3, $3, 1, $4) \
                 ON CONFLICT (namespace, event_id) DO UPDATE SET \
                 first_at = CASE WHEN excluded.first_at < d.first_at THEN excluded.first_at ELSE d.first_at END, \
                 last_body = CASE WHEN excluded.last_at >= d.last_at THEN excluded.last_body ELSE d.last_body END, \
                 last_at = CASE WHEN excluded.last_at > d.last_at THEN excluded.last_at ELSE d.last_at END, \
                 copies = d.copies + 1"
            );
            sqlx::query(RECORD).bind(namespace).bind(event_id).bind(at).bind(body).execute(&db.pool).await?;
            Ok(())
        }

        async fn differing_copies<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            event_id: &'a str,
        ) -> Result<Option<DifferingCopies>, sqlx::Error> {
            use sqlx::Row as _;
            const READ: &str = concat!(
                "SELECT copies, first_at, last_at, last_body FROM ",
                differing_table!(),
                " WHERE namespace = $1 AND event_id = $2"
            );
            let row = sqlx::query(READ).bind(namespace).bind(event_id).fetch_optional(&db.pool).await?;
            row.map(|row| {
                Ok(DifferingCopies {
                    copies: row.try_get("copies")?,
                    first_at: row.try_get("first_at")?,
                    last_at: row.try_get("last_at")?,
                    last_body: row.try_get("last_body")?,
                })
            })
            .transpose()
        }

        async fn forget_orphaned_differing<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
        ) -> Result<u64, sqlx::Error> {
            const FORGET: &str = concat!(
                "DELETE FROM ",
                differing_table!(),
                " WHERE namespace = $1 AND NOT EXISTS (SELECT 1 FROM ",
                table!(),
                " e WHERE e.namespace = ",
                differing_table!(),
                ".namespace AND e.event_id = ",
                differing_table!(),
                ".event_id)"
            );
            let forgotten = sqlx::query(FORGET).bind(namespace).execute(&db.pool).await?;
            Ok(DB::rows_affected(&forgotten))
        }
    }
}

/// One `INSERT` of `rows` duplicates: `$1` the namespace, then the id and
/// the time of each.
fn record_statement(rows: usize) -> String {
    let mut sql = String::from(concat!(
        "INSERT INTO ",
        duplicates_table!(),
        " (namespace, event_id, received_at) VALUES "
    ));
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!("($1, ${}, ${})", 2 + row * 2, 3 + row * 2));
    }
    sql
}
