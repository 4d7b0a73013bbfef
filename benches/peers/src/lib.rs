//! Empty: the benchmark is `benches/standard_webhooks.rs`.
