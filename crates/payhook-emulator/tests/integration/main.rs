//! The emulator's integration tests, in one test binary: each module below
//! was a test file of its own (`tests/<module>.rs`), and is run alone with
//! `cargo test -p payhook-emulator --test integration <module>::`. Each test
//! starts its own emulator and receivers on free loopback ports; nothing here
//! is process-wide.

mod support;

mod api;
mod delivery;
mod handle;
mod library;
mod memory;
mod settings;
mod standard_webhooks;
