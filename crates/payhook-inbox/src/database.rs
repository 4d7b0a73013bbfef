//! The database an inbox runs on: a pool and the dialect it speaks, and how a
//! pool is opened from a URL.

use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{Any, Executor, Pool};

use crate::dialect::Dialect;
use crate::error::InboxError;

/// A pool and its dialect.
#[derive(Debug)]
pub struct Database<DB: sqlx::Database> {
    pub(crate) pool: Pool<DB>,
    pub(crate) dialect: Dialect,
}

impl<DB: sqlx::Database> Clone for Database<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            dialect: self.dialect,
        }
    }
}

/// How a pool built from a URL opens the database.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UrlOptions {
    pub(crate) max_connections: u32,
    pub(crate) acquire_timeout: Duration,
    pub(crate) sqlite_full_sync: bool,
    pub(crate) sqlite_cache_kib: u32,
    /// Create a missing SQLite file (the inbox) or refuse it (the admin
    /// commands, which never create or change a database's schema).
    pub(crate) create: bool,
}

impl Database<Any> {
    /// A pool for a `sqlite:` or `postgres:` URL, connecting lazily. Without
    /// `create`, one connection is opened and read first, so that a missing
    /// file or a file that is not a database is reported at once, by what it is
    /// (the pool would retry it until its acquire timeout).
    pub(crate) async fn connect(url: &str, options: UrlOptions) -> Result<Self, InboxError> {
        sqlx::any::install_default_drivers();
        let dialect = Dialect::of_url(url)?;
        let url = match dialect {
            // Create the file when it does not exist yet (or refuse to), unless
            // the URL says otherwise.
            Dialect::Sqlite if !url.contains("mode=") => {
                let mode = if options.create { "mode=rwc" } else { "mode=rw" };
                if url.contains('?') {
                    format!("{url}&{mode}")
                } else {
                    format!("{url}?{mode}")
                }
            }
            _ => url.to_owned(),
        };
        let connect_options = AnyConnectOptions::from_str(&url)
            .map_err(|_| InboxError::UnsupportedUrl("the database URL cannot be parsed"))?;
        if !options.create {
            if dialect == Dialect::Sqlite && !sqlite_file_exists(&url) {
                return Err(InboxError::NoInbox("there is no database file at this path"));
            }
            use sqlx::Connection as _;
            let mut conn = sqlx::AnyConnection::connect_with(&connect_options).await?;
            conn.execute(dialect.probe()).await?;
            let _ = conn.close().await;
        }
        let UrlOptions {
            sqlite_full_sync,
            sqlite_cache_kib,
            ..
        } = options;
        let pool = AnyPoolOptions::new()
            .max_connections(options.max_connections.max(2))
            .acquire_timeout(options.acquire_timeout)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if dialect == Dialect::Sqlite {
                        // Wait for the single write lock instead of failing at once.
                        conn.execute("PRAGMA busy_timeout = 10000").await?;
                        // In WAL mode NORMAL makes a commit durable against a
                        // crash of the process (SIGKILL included) without an
                        // fsync per commit; FULL also survives power loss.
                        conn.execute(if sqlite_full_sync {
                            "PRAGMA synchronous = FULL"
                        } else {
                            "PRAGMA synchronous = NORMAL"
                        })
                        .await?;
                        // A negative size is in KiB (a positive one in pages).
                        conn.execute(format!("PRAGMA cache_size = -{sqlite_cache_kib}").as_str())
                            .await?;
                    }
                    Ok(())
                })
            })
            .connect_lazy_with(connect_options);
        Ok(Self { pool, dialect })
    }
}

/// Whether the file a `sqlite:` URL names exists (in-memory databases do).
fn sqlite_file_exists(url: &str) -> bool {
    let path = url
        .trim_start_matches("sqlite:")
        .trim_start_matches("//")
        .split('?')
        .next()
        .unwrap_or("");
    path.is_empty() || path == ":memory:" || std::path::Path::new(path).exists()
}
