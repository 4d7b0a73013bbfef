//! The workspace's end-to-end tests, in one test binary: each module below
//! was a test file of its own (`tests/<module>.rs`), and is run alone with
//! `cargo test --test integration <module>::`. One binary links the facade
//! and its dependencies once, where one per file linked them again for each.
//!
//! They share one process, so none of them installs anything process-wide (a
//! global `tracing` subscriber or `metrics` recorder, OpenTelemetry's globals,
//! an environment variable). The tests that must have test binaries of
//! their own:
//!
//! * `tests/captured_log/` (`actix_worker_stores`, `redis_replicas`): they
//!   read what payhook logs process-wide, through the global subscriber
//!   installed there before any of their spans exists;
//! * `tests/otel.rs`: sets `OTEL_EXPORTER_OTLP_ENDPOINT` for its process
//!   (examples started from here would inherit it) and OpenTelemetry's global
//!   tracer provider;
//! * `tests/otel_init.rs`: `payhook::otel::init` installs the global
//!   subscriber, after clearing `OTEL_EXPORTER_OTLP_ENDPOINT` and `RUST_LOG`;
//! * `tests/prometheus_alerts.rs`: installs the process-wide metrics recorder,
//!   and its Prometheus must see no other test's inbox.

// Shared by the modules below.
mod actix_loopback;
mod axum_loopback;
mod dashboard_app;
mod example_process;
mod own_postgres;
mod support;

mod actix_behaviour;
mod actix_inbox_postgres;
mod axum_behaviour;
mod axum_integration;
mod dashboard;
mod dashboard_browser;
mod dashboard_example;
mod dashboard_pause_bulk;
mod demo;
mod emulator_helpers_docs;
mod event_catalogue_docs;
mod example_receivers;
mod example_secret_file;
mod example_standard_webhooks;
mod inbox_adapters;
mod inbox_outage;
mod inbox_process;
mod inbox_typed_pool;
mod interop;
mod metrics_example;
mod reconcile_bounds;
mod reconcile_e2e;
mod rotation_procedure;
mod secret_rotation;
mod settle_by_status;
mod source_allowlist;
mod standard_webhooks;
mod standard_webhooks_conformance;
