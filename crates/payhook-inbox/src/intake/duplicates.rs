//! The duplicates records, written by the intake after the replies, so a
//! duplicate is never answered later for them:
//!
//! * when each duplicate delivery (of an event already stored) was
//!   acknowledged, so that the overview counts every delivery it
//!   acknowledged and not only first deliveries; kept for [`KEPT_MS`], as the
//!   overview shows the last hour;
//! * the duplicates whose content differed from the stored event (the same
//!   id with another `type` or `data`): one row per event, kept while the
//!   event is, shown on its dashboard page and by `payhook inbox show`;
//!   a copy the service's events list carries counts as one too;
//! * when a delivery of an event the reconciler stored first arrived
//!   (`delivered_at` on the event's row, migration 17).
//!
//! A duplicate's body is compared with the stored one only off the reply
//! path: identical bytes (a sender's retry) cost one read of the stored
//! body; other bytes are compared by what the event says
//! ([`same_content`](payhook_core::event::same_content)), so a copy
//! serialised differently — the events list's copy of an event against its
//! delivery — is an ordinary duplicate.

use std::collections::HashMap;
use std::future::Future;

use crate::database::dialect::{differing_table, duplicates_table, table};
use crate::database::driver::{sql_bounds, Driver};
use crate::database::Database;
use crate::model::{DifferingCopies, Source, StoredCopy};

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
    /// The stored copies of the events `ids` names (body, source, when a
    /// reconciled one was delivered), by id; an id not stored (never, or
    /// purged since) is absent.
    fn stored_copies<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        ids: &'a [&'a str],
    ) -> impl Future<Output = Result<HashMap<String, StoredCopy>, sqlx::Error>> + Send + 'a;
    /// Records that a delivery of a reconciled event arrived at `at` (the
    /// earliest is kept); a delivered event is left alone.
    fn mark_delivered<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        event_id: &'a str,
        at: i64,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
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

        async fn stored_copies<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            ids: &'a [&'a str],
        ) -> Result<HashMap<String, StoredCopy>, sqlx::Error> {
            use sqlx::Row as _;
            let mut copies = HashMap::with_capacity(ids.len());
            for chunk in ids.chunks(100) {
                let mut sql = format!(
                    concat!("SELECT event_id, {} AS body, source, delivered_at FROM ", table!(), " e WHERE namespace = $1 AND event_id IN ("),
                    db.dialect.body_of("e")
                );
                for index in 0..chunk.len() {
                    if index > 0 {
                        sql.push_str(", ");
                    }
                    sql.push_str(&format!("${}", index + 2));
                }
                sql.push(')');
                let mut query = sqlx::query(&sql).persistent(chunk.len() == 1).bind(namespace);
                for id in chunk {
                    query = query.bind(*id);
                }
                for row in query.fetch_all(&db.pool).await? {
                    let source: Option<String> = row.try_get("source")?;
                    copies.insert(
                        row.try_get("event_id")?,
                        StoredCopy {
                            body: row.try_get("body")?,
                            source: Source::of_column(source.as_deref()),
                            delivered_at: row.try_get("delivered_at")?,
                        },
                    );
                }
            }
            Ok(copies)
        }

        async fn mark_delivered<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            event_id: &'a str,
            at: i64,
        ) -> Result<(), sqlx::Error> {
            const MARK: &str = concat!(
                "UPDATE ",
                table!(),
                " SET delivered_at = $3 WHERE namespace = $1 AND event_id = $2 \
                 AND source IS NOT NULL AND (delivered_at IS NULL OR delivered_at > $3)"
            );
            sqlx::query(MARK).bind(namespace).bind(event_id).bind(at).execute(&db.pool).await?;
            Ok(())
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
