//! The intake's statement: new events stored `pending` in one multi-row
//! `INSERT`, a repeat of a stored id skipped, an event of a paused type
//! parked until it is resumed. The intake writer (deliveries) and the
//! reconciler (events the service listed) both store through it.

use std::collections::HashSet;
use std::future::Future;

use sqlx::Row as _;

use crate::database::dialect::{bodies_table, parked, paused_table, table, Dialect};
use crate::database::driver::{sql_bounds, Driver};
use crate::database::Database;
use crate::model::{NewRow, Source, State};

/// The intake's statement on one backend. Not nameable outside the crate.
pub trait Intake: Driver {
    /// Stores new events `pending`, in one statement committed synchronously
    /// ([`Dialect::durable_commit`]), as coming from `source`; for each row,
    /// whether it was new (a repeat is skipped).
    fn insert<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
        rows: &'a [&'a NewRow],
        source: Source,
    ) -> impl Future<Output = Result<Vec<bool>, sqlx::Error>> + Send + 'a;
}

sql_bounds! {
    impl<DB> Intake {
        async fn insert<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
            rows: &'a [&'a NewRow],
            source: Source,
        ) -> Result<Vec<bool>, sqlx::Error> {
            // Insert in id order so two writers holding the same ids in their
            // batches wait for each other instead of deadlocking (PostgreSQL).
            // A repeated id within the batch is written once; its later
            // copies are duplicates.
            let mut order: Vec<usize> = (0..rows.len()).collect();
            order.sort_by(|&a, &b| rows[a].event_id.cmp(&rows[b].event_id));
            order.dedup_by(|&mut later, &mut first| rows[later].event_id == rows[first].event_id);
            let padded = padded(order.len());
            let sql = insert_statement(db.dialect, padded, source);
            // Statements for up to 16 rows stay prepared on their connection.
            // Larger ones are prepared for each use: kept on every connection
            // of the pool, the 32- to 256-row ones add up to several hundred
            // KiB per connection (SQLite), and their parse is shared by at
            // least 17 rows.
            let mut query = sqlx::query(&sql)
                .persistent(padded <= 16)
                .bind(namespace)
                .bind(State::Pending.as_str());
            for &index in &order {
                let row = rows[index];
                query = query
                    .bind(Some(row.event_id.as_str()))
                    .bind(Some(row.event_type.as_str()))
                    .bind(row.intent_id.as_deref())
                    .bind(Some(row.created))
                    .bind(Some(row.body.as_str()))
                    .bind(Some(row.received_at))
                    .bind(row.trace_context.as_deref());
            }
            for _ in order.len()..padded {
                query = query
                    .bind(None::<&str>)
                    .bind(None::<&str>)
                    .bind(None::<&str>)
                    .bind(None::<i64>)
                    .bind(None::<&str>)
                    .bind(None::<i64>)
                    .bind(None::<&str>);
            }
            let inserted: HashSet<String> = query
                .fetch_all(&db.pool)
                .await?
                .iter()
                .map(|row| row.try_get("event_id"))
                .collect::<Result<_, _>>()?;
            // The first row of each id is new when its id came back; every
            // other row is a duplicate.
            let mut new = vec![false; rows.len()];
            for index in order {
                new[index] = inserted.contains(&rows[index].event_id);
            }
            Ok(new)
        }
    }
}

/// One `INSERT … SELECT … FROM (VALUES …)` for `rows` rows: `$1` is the
/// namespace, `$2` the state of new rows, then seven parameters per row
/// (`received_at` is also the first `due_at`, [`parked!`] when the type is
/// paused; the last is the trace context). Padding rows are all NULL and
/// filtered out; repeats are skipped by `ON CONFLICT`, and the new rows' ids
/// come back.
///
/// On PostgreSQL the batch is a `WITH` part read twice: the events are
/// inserted with an empty `body`, and each new one's body goes to
/// [`bodies_table!`] under the `arrival` the insert returned, in the same
/// statement (a repeat skipped by `ON CONFLICT` returns nothing, so writes
/// no body).
fn insert_statement(dialect: Dialect, rows: usize, source: Source) -> String {
    let mut sql = String::with_capacity(rows * 40 + 600);
    let apart = dialect.bodies_apart();
    if apart {
        sql.push_str("WITH batch AS (SELECT * FROM (VALUES ");
        push_values(&mut sql, rows);
        sql.push_str(") AS batch WHERE column1 IS NOT NULL");
        sql.push_str(dialect.durable_commit());
        sql.push_str("), stored AS (");
    }
    sql.push_str(concat!(
        "INSERT INTO ",
        table!(),
        " (namespace, event_id, event_type, intent_id, created, body, received_at, state, attempts, due_at, trace_context"
    ));
    // A delivery leaves `source` NULL: the intake's statement is the same
    // as before the column existed. The source is a constant of `Source`,
    // never input.
    let source = source.column();
    if source.is_some() {
        sql.push_str(", source");
    }
    sql.push_str(") SELECT $1, column1, column2, column3, column4, ");
    sql.push_str(if apart { "''" } else { "column5" });
    sql.push_str(concat!(
        ", column6, $2, 0, \
           CASE WHEN EXISTS (SELECT 1 FROM ",
        paused_table!(),
        " p WHERE p.namespace = $1 AND p.event_type = column2"
    ));
    sql.push_str(dialect.share_lock());
    sql.push_str(concat!(
        ") THEN column6 + ",
        parked!(),
        " ELSE column6 END, column7"
    ));
    if let Some(source) = source {
        sql.push_str(&format!(", '{source}'"));
    }
    if apart {
        sql.push_str(" FROM batch");
    } else {
        sql.push_str(" FROM (VALUES ");
        push_values(&mut sql, rows);
        // The WHERE also tells SQLite's parser that ON CONFLICT is the upsert clause.
        sql.push_str(") AS batch WHERE column1 IS NOT NULL");
        sql.push_str(dialect.durable_commit());
    }
    if apart {
        sql.push_str(concat!(
            " ON CONFLICT (namespace, event_id) DO NOTHING RETURNING arrival, event_id), \
             bodies AS (INSERT INTO ",
            bodies_table!(),
            " (arrival, body) SELECT stored.arrival, batch.column5 FROM stored \
             JOIN batch ON batch.column1 = stored.event_id) \
             SELECT event_id FROM stored"
        ));
    } else {
        sql.push_str(" ON CONFLICT (namespace, event_id) DO NOTHING RETURNING event_id");
    }
    sql
}

/// `($3, …, $9), ($10, …)`: seven parameters for each of `rows` rows.
fn push_values(sql: &mut String, rows: usize) {
    for row in 0..rows {
        let first = 3 + row * 7;
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!(
            "(${}, ${}, ${}, ${}, ${}, ${}, ${})",
            first,
            first + 1,
            first + 2,
            first + 3,
            first + 4,
            first + 5,
            first + 6
        ));
    }
}

/// Rows of one batched statement: its batch, padded with empty rows to the
/// next power of two, so that only a few statements exist.
fn padded(rows: usize) -> usize {
    rows.max(1).next_power_of_two()
}
