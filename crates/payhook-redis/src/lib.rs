//! A Redis dedupe store for payhook, for apps that run several replicas.
//!
//! The payment service may deliver one event to two replicas at once, and a
//! replica may crash while its handler runs. [`RedisStore`] keeps the claim on
//! each event id in one Redis server that every replica shares, so the handler
//! runs once per event across all of them.
//!
//! ```no_run
//! use std::time::Duration;
//! use payhook::Receiver;
//! use payhook::redis::RedisStore;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = RedisStore::builder("redis://:password@redis.internal:6379/0")
//!     .prefix("shop")
//!     .timeout(Duration::from_secs(1))
//!     .build()?; // connects on first use
//! let receiver = Receiver::builder()
//!     .secret("whsec_...")
//!     .namespace("payments")
//!     .store(store)
//!     .build()?;
//! # let _ = receiver; Ok(()) }
//! ```
//!
//! # Data layout
//!
//! One string key per event id: `{prefix}:{namespace}:{id}`, with `%` and `:`
//! in the namespace percent-encoded so no namespace/id split can be read as
//! another. While a delivery handles the event the value is its claim token (32
//! hex digits) with the lease as expiry; once handled it is `done` with the
//! retention as expiry. Every key expires, so the database never grows without
//! bound.
//!
//! # Commands
//!
//! * claim — `SET key token NX PX lease GET`: takes a free key, or in the same
//!   round trip reads whether the event is `done` or in flight;
//! * renew — a Lua script: `PEXPIRE`s the key if the value is the caller's token;
//! * complete — a Lua script: sets `done` if the value is the caller's token, or
//!   if the key is gone (the caller's lease ran out and nobody claimed it since),
//!   and says whether the key was `done` already or held by another token;
//! * release — a Lua script: deletes the key if the value is the caller's token.
//!
//! A delivery that succeeds costs two round trips (claim, complete), a
//! duplicate one. The scripts go with `EVAL` rather than `EVALSHA`, so a
//! restarted server, with an empty script cache, costs no extra round trip.
//!
//! **Redis 7.0 or later** is required (for `SET … NX GET`); Debian 12 ships
//! 7.0, and Valkey 7.2+ works too. A single server (or a primary with
//! replicas, pointing the URL at the primary) is supported; Redis Cluster is
//! not. [`RedisStoreBuilder::connect`] checks that the server runs the store's
//! commands (version and ACL permissions).
//!
//! # When Redis is down, slow or restarted
//!
//! Every store call is bounded by the [timeout](RedisStoreBuilder::timeout)
//! (default 2 s), connecting included, and fails with a
//! [`StoreError`](payhook_core::StoreError) when Redis is unreachable, too slow
//! or refuses the call. The receiver answers such a delivery with 503 and marks
//! nothing, so the sender retries later. The connection is a redis
//! [`ConnectionManager`](redis::aio::ConnectionManager): one multiplexed
//! connection that reconnects by itself, so calls succeed again as soon as Redis
//! is back, without restarting the app. A call whose connection failed (refused,
//! or dropped by a restarted server) is tried once more within its deadline on
//! the new connection; this is safe because a repeated claim recognises its own
//! token and complete and release check the token before they write. A claim
//! that timed out may still reach Redis later (a frozen server that thaws): the
//! store sends a release for it right behind, so the sender's retry is handled
//! rather than refused as in flight until the lease runs out.
//!
//! At app start, [`RedisStoreBuilder::build`] does not connect: the app starts
//! while Redis is down and answers 503 until it is reachable.
//! [`RedisStoreBuilder::connect`] checks the server instead and returns an error,
//! for apps that prefer not to start.
//!
//! Redis without persistence forgets `done` ids when it restarts; the next
//! delivery of such an event is handled again. Keep persistence on (AOF or
//! RDB) if that matters to your handler.
//!
//! # URLs and credentials
//!
//! `redis://[user][:password@]host[:port][/db]`, with a database number; Unix
//! sockets as `redis+unix:///path?db=N&pass=…`. With feature `tls`,
//! `rediss://…`: rustls with the platform's root certificates (for a private
//! CA, name its certificate file in `SSL_CERT_FILE`); without it, a `rediss://`
//! URL is a build error that names the feature. Errors, replies and `Debug`
//! output never contain the URL or the password.
//!
//! # Source map
//!
//! For contributors: `store.rs` holds `RedisStore`, its builder and the three
//! Redis calls behind the `Store` implementation; `key.rs` how a (namespace,
//! event id) pair becomes one key (the data layout above); `error.rs` the failure
//! messages, built from the kind of failure and never from the connection URL.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod key;
mod store;

pub use error::BuildError;
pub use store::{RedisStore, RedisStoreBuilder};
