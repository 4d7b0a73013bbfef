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
//! `Send + Sync` and shared behind an `Arc`; a store implements [`Store`]
//! with `async fn`s, and the receiver holds it as `Arc<dyn DynStore>`, the
//! object-safe form whose futures are boxed.
//!
//! Every store must pass the conformance suite in
//! `payhook::testing::store_conformance` (feature `testing`).

mod memory;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub use memory::{MemoryStore, MemoryStoreBuilder};

use crate::error::StoreError;

/// The longest lease or retention a store applies: 100 years of 365 days
/// (3 153 600 000 seconds).
///
/// Every store treats a longer [`Duration`] (up to [`Duration::MAX`]) as this
/// one, so no setting can overflow a clock or make a store panic, and the
/// memory and Redis stores agree on what a huge setting means (in practice:
/// never expires). Redis refuses expiries much beyond this.
pub const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

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
///
/// Implement the methods with `async fn`; their futures must be `Send` (the
/// compiler checks it), so a store can serve a multi-threaded runtime. A
/// receiver keeps its store as `Arc<dyn` [`DynStore`]`>`, the object-safe form
/// every `Store` gets for free.
///
/// ```
/// use std::time::Duration;
/// use payhook::store::{Claim, ClaimToken, Completion};
/// use payhook::{MemoryStore, Store, StoreError};
///
/// /// A store that logs every claim, then asks the memory store.
/// struct Logged(MemoryStore);
///
/// impl Store for Logged {
///     async fn claim(&self, namespace: &str, id: &str, lease: Duration) -> Result<Claim, StoreError> {
///         println!("claim {namespace}/{id}");
///         self.0.claim(namespace, id, lease).await
///     }
///     async fn renew(&self, ns: &str, id: &str, token: ClaimToken, lease: Duration) -> Result<bool, StoreError> {
///         self.0.renew(ns, id, token, lease).await
///     }
///     async fn complete(
///         &self,
///         ns: &str,
///         id: &str,
///         token: ClaimToken,
///         retention: Duration,
///     ) -> Result<Completion, StoreError> {
///         self.0.complete(ns, id, token, retention).await
///     }
///     async fn release(&self, ns: &str, id: &str, token: ClaimToken) -> Result<bool, StoreError> {
///         self.0.release(ns, id, token).await
///     }
/// }
///
/// let receiver = payhook::Receiver::builder()
///     .secret("whsec_test")
///     .store(Logged(MemoryStore::new()))
///     .namespace("orders")
///     .build();
/// assert!(receiver.is_ok());
/// ```
pub trait Store: Send + Sync + 'static {
    /// Claims `id` in `namespace` for `lease`.
    fn claim(
        &self,
        namespace: &str,
        id: &str,
        lease: Duration,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send;

    /// Extends the lease of the claim `token` owns to `lease` from now, for a
    /// handler that runs longer than its first lease. Returns `false` (and
    /// changes nothing) when `token` no longer owns a live claim on `id`: its
    /// lease ran out, another delivery took the id over, or it is done.
    fn renew(
        &self,
        namespace: &str,
        id: &str,
        token: ClaimToken,
        lease: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Marks `id` done for `retention`, if `token` still owns the claim or its
    /// expired claim was not taken by anyone else ([`Completion::Completed`]).
    /// Changes nothing when the id is done already ([`Completion::AlreadyDone`])
    /// or another delivery owns it now ([`Completion::NotOwner`]).
    fn complete(
        &self,
        namespace: &str,
        id: &str,
        token: ClaimToken,
        retention: Duration,
    ) -> impl Future<Output = Result<Completion, StoreError>> + Send;

    /// Deletes the claim if `token` owns it, so the next delivery of `id` is
    /// handled. Returns whether it did.
    fn release(
        &self,
        namespace: &str,
        id: &str,
        token: ClaimToken,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// The boxed future a [`DynStore`] method returns.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The object-safe form of [`Store`], implemented for every `Store`: what a
/// store shared between receivers is held as (`Arc<dyn DynStore>`, see
/// [`ReceiverBuilder::shared_store`](crate::ReceiverBuilder::shared_store)).
///
/// Implement [`Store`], never this trait; its methods box the store's futures.
pub trait DynStore: Send + Sync + 'static {
    /// [`Store::claim`], boxed.
    fn dyn_claim<'a>(&'a self, namespace: &'a str, id: &'a str, lease: Duration) -> StoreFuture<'a, Claim>;
    /// [`Store::renew`], boxed.
    fn dyn_renew<'a>(
        &'a self,
        namespace: &'a str,
        id: &'a str,
        token: ClaimToken,
        lease: Duration,
    ) -> StoreFuture<'a, bool>;
    /// [`Store::complete`], boxed.
    fn dyn_complete<'a>(
        &'a self,
        namespace: &'a str,
        id: &'a str,
        token: ClaimToken,
        retention: Duration,
    ) -> StoreFuture<'a, Completion>;
    /// [`Store::release`], boxed.
    fn dyn_release<'a>(&'a self, namespace: &'a str, id: &'a str, token: ClaimToken)
        -> StoreFuture<'a, bool>;
}

impl<S: Store> DynStore for S {
    fn dyn_claim<'a>(&'a self, namespace: &'a str, id: &'a str, lease: Duration) -> StoreFuture<'a, Claim> {
        Box::pin(self.claim(namespace, id, lease))
    }
    fn dyn_renew<'a>(
        &'a self,
        namespace: &'a str,
        id: &'a str,
        token: ClaimToken,
        lease: Duration,
    ) -> StoreFuture<'a, bool> {
        Box::pin(self.renew(namespace, id, token, lease))
    }
    fn dyn_complete<'a>(
        &'a self,
        namespace: &'a str,
        id: &'a str,
        token: ClaimToken,
        retention: Duration,
    ) -> StoreFuture<'a, Completion> {
        Box::pin(self.complete(namespace, id, token, retention))
    }
    fn dyn_release<'a>(
        &'a self,
        namespace: &'a str,
        id: &'a str,
        token: ClaimToken,
    ) -> StoreFuture<'a, bool> {
        Box::pin(self.release(namespace, id, token))
    }
}

/// A type-erased store is a store too, so `Arc<dyn DynStore>` can be passed
/// wherever a [`Store`] is expected.
impl Store for dyn DynStore {
    async fn claim(&self, namespace: &str, id: &str, lease: Duration) -> Result<Claim, StoreError> {
        self.dyn_claim(namespace, id, lease).await
    }
    async fn renew(
        &self,
        namespace: &str,
        id: &str,
        token: ClaimToken,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        self.dyn_renew(namespace, id, token, lease).await
    }
    async fn complete(
        &self,
        namespace: &str,
        id: &str,
        token: ClaimToken,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        self.dyn_complete(namespace, id, token, retention).await
    }
    async fn release(&self, namespace: &str, id: &str, token: ClaimToken) -> Result<bool, StoreError> {
        self.dyn_release(namespace, id, token).await
    }
}

impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    async fn claim(&self, namespace: &str, id: &str, lease: Duration) -> Result<Claim, StoreError> {
        (**self).claim(namespace, id, lease).await
    }
    async fn renew(
        &self,
        namespace: &str,
        id: &str,
        token: ClaimToken,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        (**self).renew(namespace, id, token, lease).await
    }
    async fn complete(
        &self,
        namespace: &str,
        id: &str,
        token: ClaimToken,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        (**self).complete(namespace, id, token, retention).await
    }
    async fn release(&self, namespace: &str, id: &str, token: ClaimToken) -> Result<bool, StoreError> {
        (**self).release(namespace, id, token).await
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
