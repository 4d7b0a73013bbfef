//! The refused events record: events the inbox was offered and could not
//! take — a listed event of the service's events list that does not parse
//! as a delivery's body must, is longer than a delivery's body may be, or
//! cannot be stored (an id over `MAX_ID_BYTES`, a NUL) — one row per event,
//! so that an operator sees each with its reason and id (the dashboard's
//! overview, `payhook inbox refused`) while the rest of its page is stored.
//!
//! Its growth is bounded: an event seen again (every pass lists the overlap
//! again) adds to its row's count; rows older than the retention are
//! forgotten when the next ones are recorded, as the duplicates record
//! forgets its own, and at most [`MAX_REFUSED_KEPT`] rows are kept per
//! namespace, the latest.

use std::future::Future;

use crate::database::dialect::refused_table;
use crate::database::driver::{sql_bounds, Driver};
use crate::database::Database;
use crate::model::{Refused, RefusedRow, Source};

/// The most refused events recorded per namespace: the latest are kept.
pub const MAX_REFUSED_KEPT: i64 = 1000;

/// The refused events record on one backend. Not nameable outside the
/// crate.
pub trait RefusedRecord: Driver {
    /// Records `rows`, offered from `source`, at `now`; forgets the rows last
    /// refused before `forget_before`, and all but the latest
    /// [`MAX_REFUSED_KEPT`].
    fn record_refused<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        rows: &'a [RefusedRow],
        source: Source,
        now: i64,
        forget_before: i64,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
    /// The refused events, last refused first, at most `limit`.
    fn refused<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<Refused>, sqlx::Error>> + Send + 'a;
}

sql_bounds! {
    impl<DB> RefusedRecord {
        async fn record_refused<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            rows: &'a [RefusedRow],
            source: Source,
            now: i64,
            forget_before: i64,
        ) -> Result<(), sqlx::Error> {
            const RECORD: &str = concat!(
                "INSERT INTO ",
                refused_table!(),
                " AS r (namespace, refused_key, event_id, source, reason, bytes, first_at, last_at, times) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $7, 1) \
                 ON CONFLICT (namespace, refused_key) DO UPDATE SET \
                 reason = excluded.reason, bytes = excluded.bytes, \
                 last_at = CASE WHEN excluded.last_at > r.last_at THEN excluded.last_at ELSE r.last_at END, \
                 times = r.times + 1"
            );
            const FORGET: &str = concat!(
                "DELETE FROM ",
                refused_table!(),
                " WHERE namespace = $1 AND last_at < $2"
            );
            // All but the latest kept, by when last refused (ties by key):
            // the table holds a bounded number of rows, so this reads at
            // most that many and a page's more.
            const CAP: &str = concat!(
                "DELETE FROM ",
                refused_table!(),
                " WHERE namespace = $1 AND refused_key NOT IN (SELECT k.refused_key FROM ",
                refused_table!(),
                " k WHERE k.namespace = $1 ORDER BY k.last_at DESC, k.refused_key DESC LIMIT $2)"
            );
            // One transaction: one commit (on SQLite one turn of the write
            // lock) for a page's refused events, however many.
            let mut tx = db.begin().await?;
            for row in rows {
                sqlx::query(RECORD)
                    .bind(namespace)
                    .bind(row.key.as_str())
                    .bind(row.event_id.as_deref())
                    .bind(source.as_str())
                    .bind(row.reason.as_str())
                    .bind(row.bytes)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
            }
            sqlx::query(FORGET).bind(namespace).bind(forget_before).execute(&mut *tx).await?;
            sqlx::query(CAP).bind(namespace).bind(MAX_REFUSED_KEPT).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(())
        }

        async fn refused<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            limit: i64,
        ) -> Result<Vec<Refused>, sqlx::Error> {
            use sqlx::Row as _;
            const READ: &str = concat!(
                "SELECT event_id, source, reason, bytes, first_at, last_at, times FROM ",
                refused_table!(),
                " WHERE namespace = $1 ORDER BY last_at DESC LIMIT $2"
            );
            sqlx::query(READ)
                .bind(namespace)
                .bind(limit)
                .fetch_all(&db.pool)
                .await?
                .iter()
                .map(|row| {
                    let source: String = row.try_get("source")?;
                    Ok(Refused {
                        event_id: row.try_get("event_id")?,
                        source: source.parse().unwrap_or(Source::Reconciled),
                        reason: row.try_get("reason")?,
                        bytes: row.try_get("bytes")?,
                        first_at: row.try_get("first_at")?,
                        last_at: row.try_get("last_at")?,
                        times: row.try_get("times")?,
                    })
                })
                .collect()
        }
    }
}
