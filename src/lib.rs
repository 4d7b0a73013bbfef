//! payhook: verified, deduplicated, typed webhook events from the crypto payment
//! service, for axum and actix-web apps.
//!
//! This facade re-exports the framework-neutral core ([`payhook_core`]) and, behind
//! features, the adapters:
//!
//! | feature | what it adds |
//! |---|---|
//! | `tower` | [`tower`]: a `tower::Layer` for any tower/hyper server |
//! | `axum` | the tower layer plus an axum extractor and typed handler routing |
//! | `actix` | [`actix`]: an actix-web extractor |
//! | `redis` | [`redis`]: a Redis dedupe store for apps with several replicas |
//! | `redis-tls` | the Redis store with `rediss://` URLs |
//! | `inbox-sqlite`, `inbox-postgres` | [`inbox`]: a durable inbox — acknowledge at once, process after, effects exactly once |
//! | `testing` | [`testing`]: signed deliveries and event builders for your tests |
//!
//! See the README for the protocol decisions and a quick start.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use payhook_core::*;

/// The tower layer and, with feature `axum`, the axum extractor.
#[cfg(feature = "tower")]
pub use payhook_tower as tower;

/// The actix-web extractor.
#[cfg(feature = "actix")]
pub use payhook_actix as actix;

/// The Redis dedupe store.
#[cfg(feature = "redis")]
pub use payhook_redis as redis;

/// The durable inbox (SQLite or PostgreSQL).
#[cfg(any(feature = "inbox-sqlite", feature = "inbox-postgres"))]
pub use payhook_inbox as inbox;

/// The README's code blocks, compiled (and the runnable ones run) as doctests so
/// the quick starts cannot drift from the API.
#[cfg(all(
    doctest,
    feature = "axum",
    feature = "actix",
    feature = "redis",
    feature = "testing"
))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
