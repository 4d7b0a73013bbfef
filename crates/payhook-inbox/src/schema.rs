//! The inbox table and its migrations: one script per backend, alike but
//! for the type of the key column.
//!
//! Every statement is idempotent (`IF NOT EXISTS`), so running the migrations
//! on every start is safe, also from several processes at once: PostgreSQL
//! runs them under an advisory lock, SQLite under its single write lock.

use sqlx::{Any, Executor, Pool};

use crate::db::Backend;
use crate::error::InboxError;

/// The table every backend keeps events in.
pub const TABLE: &str = "payhook_inbox";

/// The advisory lock key the PostgreSQL migrations serialize on ("payhook"
/// in ASCII, so that it is recognisable in `pg_locks`).
pub(crate) const PG_LOCK_KEY: i64 = 0x0070_6179_686f_6f6b;

/// The first half of the two-part advisory lock key claims serialize on
/// ("phk!" in ASCII); the second half is a hash of the namespace, so the
/// claims of different namespaces do not wait for each other. (PostgreSQL
/// keeps one-part and two-part keys apart: this never meets [`PG_LOCK_KEY`].)
pub(crate) const PG_CLAIM_LOCK_CLASS: i32 = 0x7068_6b21;

/// The inbox table's `CREATE` statement with `$arrival` as the type of the
/// `arrival` key: the one column whose spelling differs between the dialects
/// (an auto-incrementing 64-bit key). Every other column is written once here.
macro_rules! create_table {
    ($arrival:literal) => {
        concat!(
            "CREATE TABLE IF NOT EXISTS payhook_inbox (
        arrival ",
            $arrival,
            ",
        namespace TEXT NOT NULL,
        event_id TEXT NOT NULL,
        event_type TEXT NOT NULL,
        intent_id TEXT,
        created BIGINT NOT NULL,
        body TEXT NOT NULL,
        received_at BIGINT NOT NULL,
        state TEXT NOT NULL,
        attempts BIGINT NOT NULL DEFAULT 0,
        due_at BIGINT NOT NULL,
        lease_token BIGINT,
        lease_until BIGINT,
        last_error TEXT,
        last_attempt_at BIGINT,
        done_at BIGINT,
        UNIQUE (namespace, event_id)
    )"
        )
    };
}

/// The indexes, the same text in both dialects.
const INDEXES: [&str; 3] = [
    // Claims read pending rows in (due_at, arrival) order straight from this
    // index and stop at their limit; the depth metric and `list` use its prefix.
    "CREATE INDEX IF NOT EXISTS payhook_inbox_claim ON payhook_inbox (namespace, state, due_at, arrival)",
    // Earlier versions' index: a prefix of the one above, so not needed beside it.
    "DROP INDEX IF EXISTS payhook_inbox_due",
    "CREATE INDEX IF NOT EXISTS payhook_inbox_intent ON payhook_inbox (namespace, intent_id, created, arrival)",
];

const SQLITE: [&str; 4] = [
    create_table!("INTEGER PRIMARY KEY AUTOINCREMENT"),
    INDEXES[0],
    INDEXES[1],
    INDEXES[2],
];

const POSTGRES: [&str; 4] = [
    create_table!("BIGSERIAL PRIMARY KEY"),
    INDEXES[0],
    INDEXES[1],
    INDEXES[2],
];

/// Creates the inbox table and indexes when they are missing.
pub(crate) async fn migrate(pool: &Pool<Any>, backend: Backend) -> Result<(), InboxError> {
    let mut conn = pool.acquire().await?;
    match backend {
        Backend::Postgres => {
            // "already exists, skipping" notices on every start are noise.
            (&mut *conn).execute("SET client_min_messages = warning").await?;
            // A function returning `void` cannot be read back through the `Any`
            // driver, hence the `SELECT 1 FROM`.
            sqlx::query("SELECT 1 FROM pg_advisory_lock($1)")
                .bind(PG_LOCK_KEY)
                .execute(&mut *conn)
                .await?;
            let mut result = Ok(());
            for statement in &POSTGRES {
                if let Err(err) = (&mut *conn).execute(*statement).await {
                    result = Err(err);
                    break;
                }
            }
            sqlx::query("SELECT 1 FROM pg_advisory_unlock($1)")
                .bind(PG_LOCK_KEY)
                .execute(&mut *conn)
                .await?;
            result?;
        }
        Backend::Sqlite => {
            // WAL lets readers (the CLI, metrics) run beside the writer; the mode
            // is stored in the file, so setting it once is enough.
            (&mut *conn).execute("PRAGMA journal_mode = WAL").await?;
            for statement in &SQLITE {
                (&mut *conn).execute(*statement).await?;
            }
        }
    }
    Ok(())
}
