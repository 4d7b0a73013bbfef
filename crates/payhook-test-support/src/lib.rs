//! The workspace's own test helpers, written once: names no other test (or
//! earlier run) uses, a fresh SQLite file per test, the PostgreSQL server the
//! tests share, and the Standard Webhooks conformance fixture. Not published;
//! the crates' tests take it as a path dev-dependency.
//!
//! The tests never skip: without `PAYHOOK_TEST_DATABASE_URL`, the PostgreSQL
//! helpers panic with how to start a server (`.ci/start-postgres`, which the
//! test command `.ci/test` runs).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod standard_webhooks;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

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
/// server, user and password).
pub fn postgres_url_of(database: &str) -> String {
    let base = postgres_url();
    let (server, _) = base
        .rsplit_once('/')
        .unwrap_or_else(|| panic!("{DATABASE_URL_VAR} names no database: {base}"));
    format!("{server}/{database}")
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
