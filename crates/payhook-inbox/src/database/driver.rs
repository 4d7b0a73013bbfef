//! What the inbox's code needs of a sqlx database type, and why that code is
//! written once for all of them.
//!
//! The inbox runs on sqlx's `Postgres`, `Sqlite` and `Any`. Each layer — the
//! queue's transitions, the operator's state changes, the reads, the attempts
//! record, the migrations, `NOTIFY` — is a trait with one blanket
//! implementation, generic over the sqlx database type, so the
//! statements and the code that runs them exist once.
//!
//! Why a trait per layer and not plain generic functions: sqlx 0.8 needs
//! bounds that a trait bound does not carry — `for<'c> &'c mut
//! DB::Connection: Executor<'c, Database = DB>` for the handler's transaction
//! and the pool, `for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>` for
//! `sqlx::query`, and `Encode`/`Decode`/`Type` for each bound and read Rust
//! type. Rust implies only a trait's supertraits, not its where-clauses, so
//! every generic function would have to repeat them, up to the public
//! `Inbox<DB>`, `Job<DB>` and `Admin<DB>`. Each layer's blanket
//! implementation states them once ([`sql_bounds!`]) and proves them for the
//! concrete types; the rest of the crate needs only `DB: Backend`
//! ([`Backend`](crate::Backend) is every layer's trait at once).
//!
//! The one per-type code is [`Driver`]: the dialect a pool type implies, and
//! `rows_affected`, which sqlx gives each driver's result type but no trait.
//! (`Listen` in [`notify`](crate::database::notify) is per type too: only PostgreSQL
//! listens, and an `Any` pool listens through a connection of its own.)

use std::time::Duration;

use sqlx::pool::PoolOptions;
use sqlx::Any;

use crate::database::dialect::Dialect;

/// What only the concrete sqlx type knows. Not nameable outside the crate,
/// which seals [`Backend`](crate::Backend).
pub trait Driver: sqlx::Database {
    /// The dialect of a pool of this type, when the type alone says it.
    const DIALECT: Option<Dialect>;
    /// Rows a statement changed.
    fn rows_affected(result: &Self::QueryResult) -> u64;
    /// A second pool of at most `connections` to the database `pool` opens,
    /// its statements cut off by the database after `deadline` where it can
    /// (PostgreSQL's `statement_timeout`), a checkout waiting at most
    /// `deadline`; `None` when a second pool would not reach the same data
    /// (an in-memory SQLite database).
    fn separate_pool(
        pool: &sqlx::Pool<Self>,
        connections: u32,
        deadline: Duration,
    ) -> Option<sqlx::Pool<Self>>;
}

/// The options of a small pool that gives up on a checkout after `deadline`.
fn small_pool<DB: sqlx::Database>(connections: u32, deadline: Duration) -> PoolOptions<DB> {
    PoolOptions::new()
        .max_connections(connections.max(1))
        .min_connections(0)
        .acquire_timeout(deadline)
}

/// PostgreSQL's `statement_timeout` for `deadline`, in milliseconds.
fn statement_timeout(deadline: Duration) -> String {
    deadline.as_millis().max(1).to_string()
}

impl Driver for Any {
    const DIALECT: Option<Dialect> = None;
    fn rows_affected(result: &Self::QueryResult) -> u64 {
        result.rows_affected()
    }
    fn separate_pool(
        pool: &sqlx::Pool<Self>,
        connections: u32,
        deadline: Duration,
    ) -> Option<sqlx::Pool<Self>> {
        let mut options = (*pool.connect_options()).clone();
        let url = &mut options.database_url;
        match url.scheme() {
            "postgres" | "postgresql" => {
                // sqlx adds each `options` of the URL to the ones before it.
                let timeout = format!("-c statement_timeout={}", statement_timeout(deadline));
                url.query_pairs_mut().append_pair("options", &timeout);
            }
            _ if url.path().contains(":memory:")
                || url.query().is_some_and(|q| q.contains("mode=memory")) =>
            {
                return None
            }
            _ => {}
        }
        Some(small_pool(connections, deadline).connect_lazy_with(options))
    }
}

#[cfg(feature = "postgres")]
impl Driver for sqlx::Postgres {
    const DIALECT: Option<Dialect> = Some(Dialect::Postgres);
    fn rows_affected(result: &Self::QueryResult) -> u64 {
        result.rows_affected()
    }
    fn separate_pool(
        pool: &sqlx::Pool<Self>,
        connections: u32,
        deadline: Duration,
    ) -> Option<sqlx::Pool<Self>> {
        let options = (*pool.connect_options())
            .clone()
            .options([("statement_timeout", statement_timeout(deadline))]);
        Some(small_pool(connections, deadline).connect_lazy_with(options))
    }
}

#[cfg(feature = "sqlite")]
impl Driver for sqlx::Sqlite {
    const DIALECT: Option<Dialect> = Some(Dialect::Sqlite);
    fn rows_affected(result: &Self::QueryResult) -> u64 {
        result.rows_affected()
    }
    fn separate_pool(
        pool: &sqlx::Pool<Self>,
        connections: u32,
        deadline: Duration,
    ) -> Option<sqlx::Pool<Self>> {
        let options = (*pool.connect_options()).clone();
        // A shared-cache in-memory database is reached by its name while the
        // inbox's pool keeps it open; a private one is not.
        let name = options.get_filename().to_string_lossy();
        if name == ":memory:" {
            return None;
        }
        Some(small_pool(connections, deadline).connect_lazy_with(options))
    }
}

/// The sqlx bounds of every layer's blanket implementation (see the module
/// docs): written here once, pasted by each `impl` as its where-clause.
macro_rules! sql_bounds {
    ($(#[$meta:meta])* impl<$db:ident> $trait:path { $($body:tt)* }) => {
        $(#[$meta])*
        impl<$db> $trait for $db
        where
            $db: $crate::database::driver::Driver + sqlx::database::HasStatementCache,
            for<'c> &'c mut <$db as sqlx::Database>::Connection: sqlx::Executor<'c, Database = $db>,
            for<'c> &'c sqlx::Pool<$db>: sqlx::Executor<'c, Database = $db>,
            for<'q> <$db as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, $db>,
            for<'q> &'q str: sqlx::Encode<'q, $db> + sqlx::Type<$db>,
            for<'q> i64: sqlx::Encode<'q, $db> + sqlx::Type<$db>,
            for<'q> i32: sqlx::Encode<'q, $db> + sqlx::Type<$db>,
            for<'q> Option<&'q str>: sqlx::Encode<'q, $db>,
            for<'q> Option<i64>: sqlx::Encode<'q, $db>,
            for<'r> i64: sqlx::Decode<'r, $db>,
            for<'r> String: sqlx::Decode<'r, $db> + sqlx::Encode<'r, $db> + sqlx::Type<$db>,
            usize: sqlx::ColumnIndex<<$db as sqlx::Database>::Row>,
            for<'n> &'n str: sqlx::ColumnIndex<<$db as sqlx::Database>::Row>,
        {
            $($body)*
        }
    };
}
pub(crate) use sql_bounds;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Driver;

    #[tokio::test]
    async fn a_separate_pool_is_small_and_bounds_postgres_statements() {
        sqlx::any::install_default_drivers();
        let url = "postgres://u:p@127.0.0.1:1/db?application_name=app&options=-c%20geqo%3Doff";
        let inbox = sqlx::any::AnyPoolOptions::new().connect_lazy(url).unwrap();
        let own = sqlx::Any::separate_pool(&inbox, 2, Duration::from_millis(2500)).unwrap();
        assert_eq!(own.options().get_max_connections(), 2);
        assert_eq!(own.options().get_acquire_timeout(), Duration::from_millis(2500));
        let options: Vec<_> = own
            .connect_options()
            .database_url
            .query_pairs()
            .filter(|(key, _)| key == "options")
            .map(|(_, value)| value.into_owned())
            .collect();
        assert_eq!(options, ["-c geqo=off", "-c statement_timeout=2500"]);

        let typed = sqlx::postgres::PgPoolOptions::new().connect_lazy(url).unwrap();
        let own = sqlx::Postgres::separate_pool(&typed, 3, Duration::from_secs(3)).unwrap();
        assert_eq!(own.options().get_max_connections(), 3);
        assert_eq!(
            own.connect_options().get_options(),
            Some("-c geqo=off -c statement_timeout=3000")
        );
    }

    #[tokio::test]
    async fn an_in_memory_sqlite_database_keeps_its_one_pool() {
        sqlx::any::install_default_drivers();
        let inbox = sqlx::any::AnyPoolOptions::new()
            .connect_lazy("sqlite::memory:")
            .unwrap();
        assert!(sqlx::Any::separate_pool(&inbox, 2, Duration::from_secs(1)).is_none());
        let file = sqlx::any::AnyPoolOptions::new()
            .connect_lazy("sqlite:///tmp/inbox.db?mode=rwc")
            .unwrap();
        assert!(sqlx::Any::separate_pool(&file, 2, Duration::from_secs(1)).is_some());
    }
}
