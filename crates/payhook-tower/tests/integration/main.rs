//! The tower layer's integration tests, in one test binary: each module
//! below was a test file of its own (`tests/<module>.rs`), and is run alone
//! with `cargo test -p payhook-tower --test integration <module>::`.

mod serve;
mod tower_service;
