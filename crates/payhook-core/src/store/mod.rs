//! Deduplication by event id: the store trait and the in-memory store.
//!
//! A delivery *claims* its event id before the handler runs. An id moves from
//! absent to in flight (a claim with a lease and an owner token) to done (kept for
//! the retention period):
//!
//! * [`Store::claim`] answers [`Claim::Claimed`] with a fresh [`ClaimToken`] for an
//!   absent id (or one whose lease ran out because its worker crashed),
//!   [`Claim::InFlight`] while another delivery holds it, and [`Claim::Done`] once
//!   it was handled;
//! * [`Store::complete`] marks it done, [`Store::release`] gives it back after a
//!   failure — both only for the holder of the token, so a worker whose lease
//!   expired cannot complete or release someone else's claim.
//!
//! Keys are namespaced, so several endpoints can share one store. Stores are
//! `Send + Sync` and shared behind an `Arc`; their futures are boxed so the
//! receiver can hold any store as `Arc<dyn Store>`.
//!
//! Every store must pass the conformance suite in
//! `payhook::testing::store_conformance` (feature `testing`).

mod memory;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub use memory::{MemoryStore, MemoryStoreBuilder};

use crate::error::StoreError;

/// The boxed future a store method returns.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The answer to a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This delivery owns the id until it completes, releases, or the lease runs out.
    Claimed(ClaimToken),
    /// Another delivery holds a live claim on the id.
    InFlight,
    /// The id was handled already (and is still within its retention period).
    Done,
}

/// Proof of ownership of one claim: a 128-bit value unique to that claim.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClaimToken(u128);

impl ClaimToken {
    /// A token no other claim has (random, so tokens from separate processes
    /// sharing one store do not collide).
    pub fn random() -> Self {
        use std::collections::hash_map::RandomState;
        use std::hash::{BuildHasher, Hasher};
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        // Each RandomState carries fresh random keys; hashing a counter with two
        // of them gives 128 unpredictable bits without another dependency.
        let half = || {
            let mut h = RandomState::new().build_hasher();
            h.write_u64(n);
            h.finish()
        };
        Self((u128::from(half()) << 64) | u128::from(half()))
    }

    /// A token with a given value (for stores that keep tokens themselves).
    pub fn from_u128(value: u128) -> Self {
        Self(value)
    }

    /// The token's value.
    pub fn as_u128(self) -> u128 {
        self.0
    }
}

impl std::fmt::Debug for ClaimToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClaimToken({:032x})", self.0)
    }
}

/// 32 lowercase hex digits.
impl std::fmt::Display for ClaimToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// A dedupe store. See the [module docs](self) for the states an id goes through.
///
/// Implementations must be atomic per id: with any number of concurrent claims of
/// one absent id, exactly one gets [`Claim::Claimed`].
pub trait Store: Send + Sync + 'static {
    /// Claims `id` in `namespace` for `lease`.
    fn claim<'a>(&'a self, namespace: &'a str, id: &'a str, lease: Duration) -> StoreFuture<'a, Claim>;

    /// Marks `id` done for `retention`, if `token` still owns the claim or the
    /// expired claim was not taken by anyone else. Returns `false` (and changes
    /// nothing) when another delivery owns the id now.
    fn complete<'a>(
        &'a self,
        namespace: &'a str,
        id: &'a str,
        token: ClaimToken,
        retention: Duration,
    ) -> StoreFuture<'a, bool>;

    /// Deletes the claim if `token` owns it, so the next delivery of `id` is
    /// handled. Returns whether it did.
    fn release<'a>(&'a self, namespace: &'a str, id: &'a str, token: ClaimToken) -> StoreFuture<'a, bool>;
}

impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn claim<'a>(&'a self, namespace: &'a str, id: &'a str, lease: Duration) -> StoreFuture<'a, Claim> {
        (**self).claim(namespace, id, lease)
    }
    fn complete<'a>(
        &'a self,
        namespace: &'a str,
        id: &'a str,
        token: ClaimToken,
        retention: Duration,
    ) -> StoreFuture<'a, bool> {
        (**self).complete(namespace, id, token, retention)
    }
    fn release<'a>(&'a self, namespace: &'a str, id: &'a str, token: ClaimToken) -> StoreFuture<'a, bool> {
        (**self).release(namespace, id, token)
    }
}
