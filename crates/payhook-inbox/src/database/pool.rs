//! The database an inbox runs on: a pool, the dialect it speaks and the
//! deadline its work is held to, and how a pool is opened from a URL.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{Any, Executor, Pool};

use crate::database::dialect::Dialect;
use crate::error::InboxError;

/// How long the database may take over one piece of work (a delivery's
/// intake, a claim, a renewal, a done mark, a purge batch, a read) unless
/// configured otherwise: 3 seconds, well under the 10 s a sender waits for a
/// reply.
pub const DEFAULT_DATABASE_TIMEOUT: Duration = Duration::from_secs(3);

/// A pool, its dialect, and the deadline of each piece of work on it.
#[derive(Debug)]
pub struct Database<DB: sqlx::Database> {
    pub(crate) pool: Pool<DB>,
    pub(crate) dialect: Dialect,
    /// The longest one piece of work may wait for the database (see
    /// [`bounded`](Self::bounded)).
    pub(crate) timeout: Duration,
    /// The turns of this process's writes on SQLite (see [`write`](Self::write)).
    pub(crate) write_turns: WriteTurns,
}

/// SQLite has one writer per file. Writes of one process that meet at its
/// lock wait in SQLite's busy handler, which sleeps (1, 2, 5, 10 ms …) and
/// retries, so two writes that meet cost each other a millisecond or more
/// however short they are. Taken in turns here instead, a write starts the
/// moment the one before it commits. `None` on PostgreSQL, whose writes to
/// different rows do not wait for each other. Clones share the turns, and
/// so does every inbox and admin of one process on the same file
/// ([`of_file`](Self::of_file)).
#[derive(Debug, Clone, Default)]
pub(crate) struct WriteTurns(Option<Arc<Turns>>);

/// One SQLite file's line of writes in this process.
#[derive(Debug, Default)]
struct Turns {
    /// Held by the write whose turn it is.
    current: tokio::sync::Mutex<()>,
    /// Turns taken so far: whether anything was written since a moment
    /// (the background WAL copy, [`upkeep`](crate::worker::upkeep)).
    taken: AtomicU64,
}

/// The turns of each SQLite file this process writes, by its path and
/// identity; an entry lives as long as a database that uses it.
type FileTurns = HashMap<(PathBuf, (u64, u64)), Weak<Turns>>;

static FILE_TURNS: std::sync::Mutex<Option<FileTurns>> = std::sync::Mutex::new(None);

impl WriteTurns {
    /// Turns for a database of `dialect` (its own until
    /// [`of_file`](Self::of_file) names its file).
    pub(crate) fn of(dialect: Dialect) -> Self {
        Self(dialect.one_writer().then(|| Arc::new(Turns::default())))
    }

    /// The turns every database of this process on the SQLite file at
    /// `path` (with `identity`, its device and inode) takes: two inboxes,
    /// or an inbox and an admin with pools of their own, then never meet
    /// at the file's lock.
    pub(crate) fn of_file(path: &Path, identity: (u64, u64)) -> Self {
        let mut files = FILE_TURNS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let files = files.get_or_insert_with(HashMap::new);
        files.retain(|_, turns| turns.strong_count() > 0);
        let key = (path.to_path_buf(), identity);
        if let Some(turns) = files.get(&key).and_then(Weak::upgrade) {
            return Self(Some(turns));
        }
        let turns = Arc::new(Turns::default());
        files.insert(key, Arc::downgrade(&turns));
        Self(Some(turns))
    }

    /// Waits for this process's turn to write; the turn lasts as long as
    /// the returned guard.
    pub(crate) async fn wait(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match &self.0 {
            Some(turns) => {
                turns.taken.fetch_add(1, Ordering::Relaxed);
                Some(turns.current.lock().await)
            }
            None => None,
        }
    }

    /// How many turns were taken so far, by every database sharing these
    /// turns (0 on PostgreSQL).
    pub(crate) fn taken(&self) -> u64 {
        self.0
            .as_ref()
            .map_or(0, |turns| turns.taken.load(Ordering::Relaxed))
    }
}

impl<DB: sqlx::Database> Clone for Database<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            dialect: self.dialect,
            timeout: self.timeout,
            write_turns: self.write_turns.clone(),
        }
    }
}

impl<DB: sqlx::Database> Database<DB> {
    /// A pool and its dialect, with the default deadline.
    pub(crate) fn new(pool: Pool<DB>, dialect: Dialect) -> Self {
        Self {
            pool,
            dialect,
            timeout: DEFAULT_DATABASE_TIMEOUT,
            write_turns: WriteTurns::of(dialect),
        }
    }

    /// A transaction of the inbox's own statements, begun by
    /// [`Dialect::begin_own`]: on PostgreSQL with JIT compilation off, so
    /// that no plan's cost, which grows with the history the table keeps,
    /// makes the server compile a statement that reads a few index entries.
    pub(crate) async fn begin(&self) -> Result<sqlx::Transaction<'static, DB>, sqlx::Error> {
        match self.dialect.begin_own() {
            Some(statement) => self.pool.begin_with(statement).await,
            None => self.pool.begin().await,
        }
    }

    /// Runs `work` (every statement of it, the pool checkout and the commit
    /// included) within the deadline, or gives it up with [`timed_out`].
    ///
    /// Bounded on this side of the connection because a database that is
    /// frozen (stopped, paused, its host gone) never answers, so a limit the
    /// server keeps (`statement_timeout`) would never fire. Giving up drops
    /// the work's connection: sqlx then rolls back any open transaction and,
    /// before the connection goes back to the pool, waits for the server to
    /// finish what was sent (a statement already sent may still commit when
    /// the server comes back: a timed-out delivery may be stored, never
    /// half-stored, and its redelivery is recognised).
    pub(crate) async fn bounded<T>(
        &self,
        work: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, sqlx::Error> {
        tokio::time::timeout(self.timeout, work)
            .await
            .unwrap_or_else(|_| Err(timed_out()))
    }

    /// [`bounded`](Self::bounded) work that writes: on SQLite it waits for
    /// this process's turn to write first (see [`WriteTurns`]), within the
    /// same deadline.
    pub(crate) async fn write<T>(
        &self,
        work: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, sqlx::Error> {
        self.bounded(async {
            let _turn = self.write_turns.wait().await;
            work.await
        })
        .await
    }
}

/// The error of work given up at its deadline: an I/O error of kind
/// `TimedOut`, which [`error`](crate::error) reports as "did not answer in
/// time".
pub(crate) fn timed_out() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the database did not answer within the deadline",
    ))
}

/// How a pool built from a URL opens the database.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UrlOptions {
    pub(crate) max_connections: u32,
    pub(crate) acquire_timeout: Duration,
    pub(crate) sqlite_full_sync: bool,
    pub(crate) sqlite_cache_kib: u32,
    /// How long a SQLite statement waits for the write lock before it fails
    /// ("database is locked").
    pub(crate) sqlite_busy_timeout: Duration,
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
            sqlite_busy_timeout,
            ..
        } = options;
        let busy_timeout_ms = sqlite_busy_timeout.as_millis().clamp(1, i32::MAX as u128);
        let pool = AnyPoolOptions::new()
            .max_connections(options.max_connections.max(2))
            .acquire_timeout(options.acquire_timeout)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if dialect == Dialect::Sqlite {
                        // Wait for the single write lock instead of failing at
                        // once, but no longer than the work's deadline: the
                        // statement keeps its connection until SQLite gives up.
                        conn.execute(format!("PRAGMA busy_timeout = {busy_timeout_ms}").as_str())
                            .await?;
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
        Ok(Self::new(pool, dialect))
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::WriteTurns;
    use crate::database::dialect::Dialect;

    /// On SQLite a write waits until the one holding the turn is over; on
    /// PostgreSQL writes never wait for each other here.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_writes_take_turns_and_postgres_writes_do_not() {
        for (dialect, waits) in [(Dialect::Sqlite, true), (Dialect::Postgres, false)] {
            let turns = WriteTurns::of(dialect);
            let writing = Arc::new(AtomicBool::new(false));
            let first = {
                let (turns, writing) = (turns.clone(), Arc::clone(&writing));
                tokio::spawn(async move {
                    let _turn = turns.wait().await;
                    writing.store(true, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    writing.store(false, Ordering::SeqCst);
                })
            };
            while !writing.load(Ordering::SeqCst) {
                tokio::task::yield_now().await;
            }
            let _turn = turns.wait().await;
            assert_eq!(!writing.load(Ordering::SeqCst), waits, "{dialect:?}");
            drop(_turn);
            first.await.unwrap();
        }
    }

    /// Two databases on one file share their turns; on another file not.
    #[test]
    fn one_file_has_one_line_of_turns() {
        let path = std::path::Path::new("/nonexistent/inbox.db");
        let one = WriteTurns::of_file(path, (1, 2));
        let same = WriteTurns::of_file(path, (1, 2));
        let other = WriteTurns::of_file(path, (1, 3));
        let (Some(one), Some(same), Some(other)) = (one.0, same.0, other.0) else {
            panic!("a file has turns");
        };
        assert!(Arc::ptr_eq(&one, &same));
        assert!(!Arc::ptr_eq(&one, &other));
    }
}
