//! The Redis store's integration tests, in one test binary: each module
//! below was a test file of its own (`tests/<module>.rs`), and is run alone
//! with `cargo test -p payhook-redis --all-features --test integration
//! <module>::`. Each test uses the shared server under keys of its own, or a
//! `redis-server` of its own ([`common`]).

mod common;

mod conformance;
mod outage;
mod round_trips;
mod tls;
