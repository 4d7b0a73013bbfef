//! The inbox's integration tests, in one test binary: each module below was
//! a test file of its own (`tests/<module>.rs`), and is run alone with
//! `cargo test -p payhook-inbox --test integration <module>::`.
//!
//! The metrics and log lines a test reads come from [`telemetry`], the one
//! recorder and subscriber of this process, by the test's own namespace and
//! event ids. `tests/metrics.rs` has a test binary of its own: it reads
//! series no namespace tells apart (`payhook_deliveries_total`, the default
//! namespace's counters from 0), which every other test here would add to.

mod telemetry;

mod attempts;
mod bodies;
mod bulk;
mod conformance;
mod guarantees;
mod history;
mod operations;
mod pause;
mod pause_metrics;
mod reconciled_copies;
mod suspects;
mod upgrade;
mod wal;

use std::future::Future;
use std::time::Duration;

use payhook_inbox::admin::Admin;

/// Unix time now, in milliseconds, as the inbox writes its times.
fn now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Waits until `check` holds, for 20 s at the most: the wait of the tests
/// here (see [`payhook_test_support::eventually_async`]).
async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    payhook_test_support::eventually_async(Duration::from_secs(20), what, check).await;
}

/// An event's attempts record as the operator's tools read it, newest
/// first: (attempt, outcome).
async fn attempt_record(admin: &Admin, id: &str) -> Vec<(i64, String)> {
    admin
        .attempts(id)
        .await
        .unwrap()
        .iter()
        .map(|attempt| (attempt.attempt, attempt.outcome.clone()))
        .collect()
}
