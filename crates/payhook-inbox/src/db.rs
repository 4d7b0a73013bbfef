//! The database pool, which dialect it speaks, and the clock and tokens the
//! queue uses.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{Any, Executor, Pool};

use crate::error::InboxError;
use crate::queue::Dialect;

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
            let probe = match dialect {
                // Reading the schema reads the file's header.
                Dialect::Sqlite => "SELECT COUNT(*) FROM sqlite_master",
                Dialect::Postgres => "SELECT 1",
            };
            conn.execute(probe).await?;
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

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| {
        i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
    })
}

/// A duration in milliseconds, saturating.
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A random 64-bit number from the standard library's per-process random keys
/// (the lease tokens and the backoff jitter need unpredictability, not crypto).
pub(crate) fn random_u64() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_i64(now_ms());
    hasher.finish()
}

/// A fresh lease token.
pub(crate) fn new_token() -> i64 {
    // Tokens are compared, never ordered: the sign bit is as good as any other.
    i64::from_ne_bytes(random_u64().to_ne_bytes())
}
