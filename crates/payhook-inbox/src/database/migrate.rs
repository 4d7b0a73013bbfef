//! Running the numbered migrations ([`dialect::migrations`](crate::database::dialect::migrations)):
//! each not yet recorded in [`SCHEMA_TABLE`](crate::SCHEMA_TABLE) runs in its
//! own transaction whose first statement records it, so a second process doing
//! the same waits for the first, then finds it done.

use std::future::Future;

use sqlx::{Connection as _, Executor as _};

use crate::clock::now_ms;
use crate::database::dialect::migrations::MIGRATIONS;
use crate::database::dialect::{table, Dialect};
use crate::database::driver::{sql_bounds, Driver};
use crate::database::Database;
use crate::error::InboxError;

/// The advisory lock key the migrations serialize on where the dialect takes
/// one (PostgreSQL): "payhook" in ASCII, so that it is recognisable in
/// `pg_locks`.
pub(crate) const PG_LOCK_KEY: i64 = 0x0070_6179_686f_6f6b;

const CREATE_SCHEMA_TABLE: &str = concat!(
    "CREATE TABLE IF NOT EXISTS ",
    table!(),
    "_schema (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)"
);

const RECORD_MIGRATION: &str = concat!(
    "INSERT INTO ",
    table!(),
    "_schema (version, applied_at) VALUES ($1, $2) ON CONFLICT (version) DO NOTHING"
);

/// The migrations on one backend. Not nameable outside the crate.
pub trait Migrate: Driver {
    /// Runs the numbered migrations that have not run yet.
    fn migrate(db: &Database<Self>) -> impl Future<Output = Result<(), InboxError>> + Send;
}

sql_bounds! {
    impl<DB> Migrate {
        async fn migrate(db: &Database<Self>) -> Result<(), InboxError> {
            let mut conn = db.pool.acquire().await?;
            (&mut *conn).execute(db.dialect.before_migrations()).await?;
            let Some((lock, unlock)) = db.dialect.migration_lock() else {
                return run::<DB>(&mut conn, db.dialect).await;
            };
            sqlx::query(lock).bind(PG_LOCK_KEY).execute(&mut *conn).await?;
            let result = run::<DB>(&mut conn, db.dialect).await;
            sqlx::query(unlock).bind(PG_LOCK_KEY).execute(&mut *conn).await?;
            result
        }
    }
}

/// Runs the migrations not yet recorded on one connection.
async fn run<DB>(conn: &mut DB::Connection, dialect: Dialect) -> Result<(), InboxError>
where
    DB: Driver,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    (&mut *conn).execute(CREATE_SCHEMA_TABLE).await?;
    for migration in &MIGRATIONS {
        let mut tx = conn.begin().await?;
        let recorded = sqlx::query(RECORD_MIGRATION)
            .bind(migration.version)
            .bind(now_ms())
            .execute(&mut *tx)
            .await?;
        if DB::rows_affected(&recorded) == 0 {
            continue; // already applied; the transaction rolls back
        }
        for statement in migration.statements(dialect) {
            (&mut *tx).execute(statement.as_str()).await?;
        }
        if let Some((statement, state)) = migration.then {
            sqlx::query(statement)
                .bind(state.as_str())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
    }
    Ok(())
}

/// SQLite's plan for `sql` (`EXPLAIN QUERY PLAN`, one step a line) on a
/// freshly migrated file without statistics, as every inbox file is: the
/// inbox never runs `ANALYZE`, so this is the plan its statements get.
#[cfg(test)]
pub(crate) async fn sqlite_plan(sql: &str) -> String {
    use sqlx::Row as _;
    let dir = std::env::temp_dir().join(format!(
        "payhook-inbox-plan-{}-{}",
        std::process::id(),
        crate::clock::random_u64()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("inbox.db").display());
    let db = Database::<sqlx::Any>::connect(
        &url,
        crate::database::UrlOptions {
            max_connections: 1,
            acquire_timeout: std::time::Duration::from_secs(5),
            sqlite_full_sync: false,
            sqlite_cache_kib: 256,
            sqlite_busy_timeout: std::time::Duration::from_secs(10),
            create: true,
        },
    )
    .await
    .unwrap();
    <sqlx::Any as Migrate>::migrate(&db).await.unwrap();
    let plan: Vec<String> = sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}"))
        .fetch_all(&db.pool)
        .await
        .unwrap()
        .iter()
        .map(|row| row.get::<String, _>("detail"))
        .collect();
    db.pool.close().await;
    std::fs::remove_dir_all(&dir).unwrap();
    plan.join("\n")
}

/// Asserts that SQLite finds the inbox table's rows in `sql` by their key,
/// through no index: `plan` is [`sqlite_plan`]'s.
#[cfg(test)]
pub(crate) fn assert_rows_found_by_key(plan: &str) {
    let inbox_steps: Vec<&str> = plan
        .lines()
        .filter(|step| step.contains(concat!(table!(), " ")) || step.ends_with(table!()))
        .collect();
    assert!(!inbox_steps.is_empty(), "{plan}");
    for step in inbox_steps {
        assert!(step.contains("INTEGER PRIMARY KEY"), "{plan}");
    }
}
