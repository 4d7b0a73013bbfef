//! The workspace's own test helpers, written once: names no other test (or
//! earlier run) uses, a fresh SQLite file per test, the PostgreSQL server the
//! tests share, the Standard Webhooks conformance fixture, waiting for a
//! condition ([`eventually`]), one test per database ([`on_every_backend!`]),
//! a log captured in memory ([`CapturedLog`]), the samples of a Prometheus
//! scrape ([`prometheus_samples`]) and a program started for a test and
//! killed after it ([`Process`]). With the `database` feature: a pool on
//! either database (`any_pool`) and a PostgreSQL database of a test's own
//! (`fresh_postgres_database`, `drop_postgres_database`). Not published; the
//! crates' tests take it as a path dev-dependency.
//!
//! The tests never skip: without `PAYHOOK_TEST_DATABASE_URL`, the PostgreSQL
//! helpers panic with how to start a server (`.ci/start-postgres`, which the
//! test command `.ci/test` runs).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod captured_log;
#[cfg(feature = "database")]
mod database;
mod process;
mod prometheus;
pub mod standard_webhooks;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use captured_log::CapturedLog;
#[cfg(feature = "database")]
pub use database::{any_pool, drop_postgres_database, fresh_postgres_database};
pub use process::{payhook_emulate, Process};
pub use prometheus::prometheus_samples;

/// The variable that names the test PostgreSQL server.
pub const DATABASE_URL_VAR: &str = "PAYHOOK_TEST_DATABASE_URL";

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// `prefix` followed by this process's id, a counter and the clock's
/// nanoseconds: unique within a run and across runs, and a valid SQL
/// identifier and file name when `prefix` is one.
pub fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A `sqlite://` URL of a file in a fresh temporary directory (the file
/// itself is created by whoever connects).
pub fn sqlite_url(prefix: &str) -> String {
    let dir = std::env::temp_dir().join(unique(prefix));
    std::fs::create_dir_all(&dir).unwrap_or_else(|err| panic!("cannot create {}: {err}", dir.display()));
    format!("sqlite://{}", dir.join("inbox.db").display())
}

/// The test PostgreSQL server's URL, from [`DATABASE_URL_VAR`]; panics, with
/// how to start one, when it is not set.
pub fn postgres_url() -> String {
    std::env::var(DATABASE_URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{DATABASE_URL_VAR} is not set: start PostgreSQL with `eval \"$(.ci/start-postgres)\"` \
             (or run .ci/test); these tests never skip"
        )
    })
}

/// [`postgres_url`] with its database replaced by `database` (on the same
/// server, user and password, with the same parameters after `?`).
pub fn postgres_url_of(database: &str) -> String {
    let base = postgres_url();
    let (path, query) = base
        .split_once('?')
        .map_or((base.as_str(), None), |(path, query)| (path, Some(query)));
    let (server, _) = path
        .rsplit_once('/')
        .unwrap_or_else(|| panic!("{DATABASE_URL_VAR} names no database: {base}"));
    match query {
        Some(query) => format!("{server}/{database}?{query}"),
        None => format!("{server}/{database}"),
    }
}

/// How long [`eventually`] and [`eventually_async`] wait before they look
/// again the first time; the wait then doubles, up to [`LONGEST_POLL`], so
/// that a long wait does not keep a loaded machine busy looking.
const FIRST_POLL: Duration = Duration::from_millis(10);
/// The longest wait between two looks of [`eventually`].
const LONGEST_POLL: Duration = Duration::from_millis(50);

/// Waits until `check` holds, looking again after 10 ms, then less and less
/// often (every 50 ms at the most); fails the test, naming `what`, when it
/// still does not hold after `timeout`.
pub async fn eventually(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    eventually_async(timeout, what, || std::future::ready(check())).await;
}

/// [`eventually`] for a check that awaits (a database query, a request).
pub async fn eventually_async<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    let mut poll = FIRST_POLL;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting: {what}"
        );
        tokio::time::sleep(poll).await;
        poll = (poll * 2).min(LONGEST_POLL);
    }
}

/// One `#[tokio::test]` per database for each of the async functions named:
/// `sqlite::<test>` calls `<test>(<sqlite>)`, `postgres::<test>` calls
/// `<test>(<postgres>)`, each on a multi-thread runtime with
/// `worker_threads` workers. The two expressions are written as in the
/// module that invokes the macro (the tests `use super::*`).
///
/// ```text
/// payhook_test_support::on_every_backend! {
///     sqlite: Backend::Sqlite, postgres: Backend::Postgres, worker_threads: 2;
///     retries_after_a_failure, keeps_the_order,
/// }
/// ```
#[macro_export]
macro_rules! on_every_backend {
    (
        sqlite: $sqlite:expr, postgres: $postgres:expr, worker_threads: $threads:literal;
        $($test:ident),* $(,)?
    ) => {
        mod sqlite {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $test() {
                    super::$test($sqlite).await;
                }
            )*
        }
        mod postgres {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $test() {
                    super::$test($postgres).await;
                }
            )*
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_differ_within_a_run() {
        assert_ne!(unique("t"), unique("t"));
        assert!(unique("payhook_t").starts_with("payhook_t_"));
    }

    #[test]
    fn sqlite_urls_name_fresh_directories() {
        let (a, b) = (sqlite_url("payhook-support"), sqlite_url("payhook-support"));
        assert_ne!(a, b);
        let dir = std::path::Path::new(a.strip_prefix("sqlite://").unwrap())
            .parent()
            .unwrap();
        assert!(dir.is_dir());
        std::fs::remove_dir_all(dir).unwrap();
        std::fs::remove_dir_all(
            std::path::Path::new(b.strip_prefix("sqlite://").unwrap())
                .parent()
                .unwrap(),
        )
        .unwrap();
    }
}
