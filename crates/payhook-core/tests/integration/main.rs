//! The core's integration tests, in one test binary: each module below was a
//! test file of its own (`tests/<module>.rs`), and is run alone with
//! `cargo test -p payhook-core --all-features --test integration <module>::`.
//!
//! `tests/metrics.rs` has a test binary of its own: it installs the
//! process-wide metrics recorder and counts every delivery the process makes.

mod adapter;
mod memory_store_conformance;
mod pipeline;
mod properties;
mod signature_differential;
mod standard_webhooks;
mod standard_webhooks_conformance;
mod stripe_compat;
