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
//! (`Listen` in [`notify`](crate::notify) is per type too: only PostgreSQL
//! listens, and an `Any` pool listens through a connection of its own.)

use sqlx::Any;

use crate::dialect::Dialect;

/// What only the concrete sqlx type knows. Not nameable outside the crate,
/// which seals [`Backend`](crate::Backend).
pub trait Driver: sqlx::Database {
    /// The dialect of a pool of this type, when the type alone says it.
    const DIALECT: Option<Dialect>;
    /// Rows a statement changed.
    fn rows_affected(result: &Self::QueryResult) -> u64;
}

impl Driver for Any {
    const DIALECT: Option<Dialect> = None;
    fn rows_affected(result: &Self::QueryResult) -> u64 {
        result.rows_affected()
    }
}

#[cfg(feature = "postgres")]
impl Driver for sqlx::Postgres {
    const DIALECT: Option<Dialect> = Some(Dialect::Postgres);
    fn rows_affected(result: &Self::QueryResult) -> u64 {
        result.rows_affected()
    }
}

#[cfg(feature = "sqlite")]
impl Driver for sqlx::Sqlite {
    const DIALECT: Option<Dialect> = Some(Dialect::Sqlite);
    fn rows_affected(result: &Self::QueryResult) -> u64 {
        result.rows_affected()
    }
}

/// The sqlx bounds of every layer's blanket implementation (see the module
/// docs): written here once, pasted by each `impl` as its where-clause.
macro_rules! sql_bounds {
    ($(#[$meta:meta])* impl<$db:ident> $trait:path { $($body:tt)* }) => {
        $(#[$meta])*
        impl<$db> $trait for $db
        where
            $db: $crate::driver::Driver + sqlx::database::HasStatementCache,
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
