//! The duplicates record: when each duplicate delivery (of an event already
//! stored) was acknowledged, so that the overview counts every delivery it
//! acknowledged and not only first deliveries. Written by the intake after
//! the replies, so a duplicate is never answered later for it; kept for
//! [`KEPT_MS`], as the overview shows the last hour.

use std::future::Future;

use crate::database::Database;
use crate::dialect::duplicates_table;
use crate::driver::{sql_bounds, Driver};

/// How long a duplicate stays recorded (a day, in milliseconds).
pub(crate) const KEPT_MS: i64 = 24 * 3_600_000;

/// The duplicates record on one backend. Not nameable outside the crate.
pub trait DuplicatesRecord: Driver {
    /// Records duplicate deliveries `(event id, received at)` in one
    /// statement, and forgets the ones older than [`KEPT_MS`] before `now`.
    fn record_duplicates<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        duplicates: &'a [(&'a str, i64)],
        now: i64,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;
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
