//! The CLI's integration tests, in one test binary: each module below was a
//! test file of its own (`tests/<module>.rs`), and is run alone with
//! `cargo test -p payhook-cli --all-features --test integration <module>::`.
//! They run the real `payhook` binary, which cargo builds for this test
//! binary (`CARGO_BIN_EXE_payhook`); nothing here is process-wide.

mod support;

mod emulate;
mod faults;
mod hostile_peer;
mod https;
mod inbox;
mod inbox_pause_bulk;
mod inbox_sources;
mod reconcile;
mod secrets_and_output;
mod send;
mod sign_verify;
mod standard_webhooks;
mod trigger;

/// Waits until `check` holds, for 20 s at the most.
#[cfg(any(feature = "emulate", feature = "inbox"))]
async fn eventually(what: &str, check: impl FnMut() -> bool) {
    payhook_test_support::eventually(std::time::Duration::from_secs(20), what, check).await;
}
