//! The query plans of the dashboard's statements (`EXPLAIN QUERY PLAN` on
//! SQLite, `EXPLAIN` on PostgreSQL), so an operator can check they read
//! indexes.

use std::future::Future;

use sqlx::Row as _;

use crate::clock::now_ms;
use crate::database::dialect::ACTIVITY_BUCKET_MS;
use crate::database::driver::{sql_bounds, Driver};
use crate::database::Database;
use crate::model::{Cursor, Filter, PageQuery, State};
use crate::reads::dashboard::{
    page_statement, ACTIVITY_PER_BUCKET, OLDEST_PENDING, RECOVERED, TALLY_BY_PHASE,
};

/// One statement with example parameters: (what, SQL, text parameters,
/// number parameters), the text ones bound first.
type Example = (&'static str, String, Vec<&'static str>, Vec<i64>);

/// The statements behind the overview and the events page with example
/// parameters.
fn dashboard_statements() -> Vec<Example> {
    let by_state = PageQuery {
        filter: Filter {
            state: Some(State::Dead),
            ..Filter::default()
        },
        after: Some(Cursor {
            received_at: 1_700_000_000_000,
            arrival: 1,
        }),
        ..PageQuery::default()
    };
    let by_type = PageQuery {
        filter: Filter {
            event_type: Some("payment_intent.succeeded".to_owned()),
            ..Filter::default()
        },
        ..PageQuery::default()
    };
    let hour_ago = now_ms() - 3_600_000;
    vec![
        (
            "counts by state",
            TALLY_BY_PHASE.to_owned(),
            vec![State::Running.as_str()],
            vec![],
        ),
        (
            "oldest pending",
            OLDEST_PENDING.to_owned(),
            vec![State::Pending.as_str(), State::Pending.phase().as_str()],
            vec![],
        ),
        ("recovered events", RECOVERED.to_owned(), vec![], vec![]),
        (
            "activity chart buckets",
            ACTIVITY_PER_BUCKET.to_owned(),
            vec![],
            vec![hour_ago / ACTIVITY_BUCKET_MS],
        ),
        (
            "events page",
            page_statement(&PageQuery::default()),
            vec![],
            vec![51],
        ),
        (
            "events page, by type",
            page_statement(&by_type),
            vec!["payment_intent.succeeded"],
            vec![51],
        ),
        (
            "events page, by state, after a cursor",
            page_statement(&by_state),
            vec![State::Dead.phase().as_str(), State::Dead.as_str()],
            vec![1_700_000_000_000, 1_700_000_000_000, 1, 51],
        ),
    ]
}

/// The query plans on one backend. Not nameable outside the crate.
pub trait Plans: Driver {
    /// (what, plan lines) of each of the dashboard's statements.
    fn query_plans<'a>(
        db: &'a Database<Self>,
        namespace: &'a str,
    ) -> impl Future<Output = Result<Vec<(&'static str, Vec<String>)>, sqlx::Error>> + Send + 'a;
}

sql_bounds! {
    impl<DB> Plans {
        async fn query_plans<'a>(
            db: &'a Database<Self>,
            namespace: &'a str,
        ) -> Result<Vec<(&'static str, Vec<String>)>, sqlx::Error> {
            let mut plans = Vec::new();
            for (what, sql, texts, numbers) in dashboard_statements() {
                let explain = db.dialect.explain(&sql);
                let mut query = sqlx::query::<DB>(&explain).bind(namespace);
                for text in texts {
                    query = query.bind(text);
                }
                for number in numbers {
                    query = query.bind(number);
                }
                let rows = query.fetch_all(&db.pool).await?;
                let mut lines = Vec::new();
                for row in &rows {
                    let line: String = match db.dialect.plan_column() {
                        Some(column) => row.try_get(column)?,
                        None => row.try_get(0usize)?,
                    };
                    lines.push(line);
                }
                plans.push((what, lines));
            }
            Ok(plans)
        }
    }
}
