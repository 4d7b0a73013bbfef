//! The database pool, which backend it talks to, and the clock and tokens the
//! queue uses.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{Any, Executor, Pool};

use tokio::sync::oneshot;

use crate::error::{describe, InboxError};

/// Which SQL dialect a URL speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub(crate) fn of_url(url: &str) -> Result<Self, InboxError> {
        let scheme = url.split_once(':').map_or("", |(scheme, _)| scheme);
        match scheme {
            "sqlite" if cfg!(feature = "sqlite") => Ok(Self::Sqlite),
            "postgres" | "postgresql" if cfg!(feature = "postgres") => Ok(Self::Postgres),
            "sqlite" => Err(InboxError::UnsupportedUrl(
                "sqlite: URLs need payhook-inbox's `sqlite` feature",
            )),
            "postgres" | "postgresql" => Err(InboxError::UnsupportedUrl(
                "postgres: URLs need payhook-inbox's `postgres` feature",
            )),
            _ => Err(InboxError::UnsupportedUrl(
                "expected sqlite://FILE or postgres://USER@HOST/DB",
            )),
        }
    }
}

/// A pool and its backend.
#[derive(Debug, Clone)]
pub(crate) struct Database {
    pub(crate) pool: Pool<Any>,
    pub(crate) backend: Backend,
}

impl Database {
    /// Connects (lazily checking the URL first) with at most `max_connections`;
    /// on SQLite each connection keeps a page cache of at most `sqlite_cache_kib`.
    pub(crate) async fn connect(
        url: &str,
        max_connections: u32,
        acquire_timeout: Duration,
        sqlite_full_sync: bool,
        sqlite_cache_kib: u32,
    ) -> Result<Self, InboxError> {
        sqlx::any::install_default_drivers();
        let backend = Backend::of_url(url)?;
        let url = match backend {
            // Create the file when it does not exist yet, unless the URL says otherwise.
            Backend::Sqlite if !url.contains("mode=") => {
                if url.contains('?') {
                    format!("{url}&mode=rwc")
                } else {
                    format!("{url}?mode=rwc")
                }
            }
            _ => url.to_owned(),
        };
        let options = AnyConnectOptions::from_str(&url)
            .map_err(|_| InboxError::UnsupportedUrl("the database URL cannot be parsed"))?;
        let pool = AnyPoolOptions::new()
            .max_connections(max_connections.max(2))
            .acquire_timeout(acquire_timeout)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
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
            .connect_lazy_with(options);
        Ok(Self { pool, backend })
    }
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

/// Answers everyone waiting on one batched statement: each its own result in
/// batch order, or all of them the statement's error (as safe text). A waiter
/// that went away (its request was dropped) is skipped.
pub(crate) fn answer_batch<T>(
    waiters: impl Iterator<Item = oneshot::Sender<Result<T, String>>>,
    result: Result<Vec<T>, sqlx::Error>,
) {
    match result {
        Ok(answers) => {
            for (waiter, answer) in waiters.zip(answers) {
                let _ = waiter.send(Ok(answer));
            }
        }
        Err(err) => {
            let message = describe(&err);
            for waiter in waiters {
                let _ = waiter.send(Err(message.clone()));
            }
        }
    }
}
