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
//! * [`Store::renew`] extends the lease of a claim while its handler still runs;
//! * [`Store::complete`] marks it done (answering a [`Completion`]),
//!   [`Store::release`] gives it back after a failure — all three only for the
//!   holder of the token, so a worker whose lease expired cannot renew, complete
//!   or release someone else's claim.
//!
//! Keys are namespaced, so several endpoints can share one store. Stores are
//! `Send + Sync` and shared behind an `Arc`; their futures are boxed so the
//! receiver can hold any store as `Arc<dyn Store>`.
//!
//! Every store must pass the conformance suite in
//! `payhook_core::testing::store_conformance` (feature `testing`).

mod memory;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub use memory::{MemoryStore, MemoryStoreBuilder};

use crate::error::StoreError;

/// The longest lease or retention a store applies: about 100 years.
///
/// Every store treats a longer [`Duration`] (up to [`Duration::MAX`]) as this
/// one, so no setting can overflow a clock or make a store panic, and the
/// memory and Redis stores agree on what a huge setting means (in practice:
/// never expires). Redis refuses expiries much beyond this.
pub const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

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

/// The answer to a complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// This token's claim is now done (also when its lease had run out but nobody
    /// else claimed the id since).
    Completed,
    /// The id was done already, so nothing changed. A retried complete whose
    /// first reply was lost (a network store) answers this, as does a delivery
    /// whose lease ran out while another delivery handled and completed the id:
    /// the store cannot tell these apart, and either way the id is done.
    AlreadyDone,
    /// Another delivery holds the claim now (this token's lease ran out and the
    /// id was claimed again); nothing changed.
    NotOwner,
}

/// Proof of ownership of one claim: a 128-bit value unique to that claim.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClaimToken(u128);

impl ClaimToken {
    /// A token no other claim has: 128 bits from the operating system's
    /// random source, so tokens from separate processes sharing one store do
    /// not collide.
    pub fn random() -> Self {
        let mut bytes = [0u8; 16];
        if getrandom::fill(&mut bytes).is_err() {
            // The OS source does not fail on the platforms payhook runs on; if
            // it ever does, a claim still needs a token: fall back to std's
            // per-process random hash keys over a counter and the time.
            return Self(fallback_random());
        }
        Self(u128::from_le_bytes(bytes))
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

#[cold]
fn fallback_random() -> u128 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let half = || {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(n);
        h.write_u128(nanos);
        h.finish()
    };
    (u128::from(half()) << 64) | u128::from(half())
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
/// one absent id, exactly one gets [`Claim::Claimed`]. They accept any
/// [`Duration`] for a lease or retention without panicking: one longer than
/// [`MAX_TTL`] counts as [`MAX_TTL`], and a zero lease expires at once.
pub trait Store: Send + Sync + 'static {
    /// Claims `id` in `namespace` for `lease`.
    fn claim<'a>(&'a self, namespace: &'a str, id: &'a str, lease: Duration) -> StoreFuture<'a, Claim>;

    /// Extends the lease of the claim `token` owns to `lease` from now, for a
    /// handler that runs longer than its first lease. Returns `false` (and
    /// changes nothing) when `token` no longer owns a live claim on `id`: its
    /// lease ran out, another delivery took the id over, or it is done.
    fn renew<'a>(
        &'a self,
        namespace: &'a str,
        id: &'a str,
        token: ClaimToken,
        lease: Duration,
    ) -> StoreFuture<'a, bool>;

    /// Marks `id` done for `retention`, if `token` still owns the claim or its
    /// expired claim was not taken by anyone else ([`Completion::Completed`]).
    /// Changes nothing when the id is done already ([`Completion::AlreadyDone`])
    /// or another delivery owns it now ([`Completion::NotOwner`]).
    fn complete<'a>(
        &'a self,
        namespace: &'a str,
        id: &'a str,
        token: ClaimToken,
        retention: Duration,
    ) -> StoreFuture<'a, Completion>;

    /// Deletes the claim if `token` owns it, so the next delivery of `id` is
    /// handled. Returns whether it did.
    fn release<'a>(&'a self, namespace: &'a str, id: &'a str, token: ClaimToken) -> StoreFuture<'a, bool>;
}

impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn claim<'a>(&'a self, namespace: &'a str, id: &'a str, lease: Duration) -> StoreFuture<'a, Claim> {
        (**self).claim(namespace, id, lease)
    }
    fn renew<'a>(
        &'a self,
        namespace: &'a str,
        id: &'a str,
        token: ClaimToken,
        lease: Duration,
    ) -> StoreFuture<'a, bool> {
        (**self).renew(namespace, id, token, lease)
    }
    fn complete<'a>(
        &'a self,
        namespace: &'a str,
        id: &'a str,
        token: ClaimToken,
        retention: Duration,
    ) -> StoreFuture<'a, Completion> {
        (**self).complete(namespace, id, token, retention)
    }
    fn release<'a>(&'a self, namespace: &'a str, id: &'a str, token: ClaimToken) -> StoreFuture<'a, bool> {
        (**self).release(namespace, id, token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_tokens_differ() {
        let tokens: std::collections::HashSet<u128> =
            (0..10_000).map(|_| ClaimToken::random().as_u128()).collect();
        assert_eq!(tokens.len(), 10_000);
        assert_ne!(fallback_random(), fallback_random());
    }
}
