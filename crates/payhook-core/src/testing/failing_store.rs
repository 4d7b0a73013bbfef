//! [`FailingStore`]: a working store that fails on demand.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::error::StoreError;
use crate::store::{Claim, ClaimToken, Completion, MemoryStore, Store};

/// A [`MemoryStore`] whose calls can be made to fail, for testing what an app
/// does when its dedupe store goes away (a Redis restarting, a network cut).
///
/// Each kind of call fails while its switch is on, with a [`StoreError`] of
/// kind [`Unavailable`](crate::error::StoreErrorKind::Unavailable); the
/// switches can be flipped while requests are in flight.
///
/// ```
/// use payhook::sender::{EventBuilder, SignedDelivery};
/// use payhook::testing::FailingStore;
/// use payhook::Receiver;
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = std::sync::Arc::new(FailingStore::down());
/// let receiver = Receiver::builder()
///     .secret("whsec_test")
///     .shared_store(store.clone())
///     .namespace("orders")
///     .build()
///     .unwrap();
/// let signed = SignedDelivery::now(EventBuilder::payment_succeeded().to_json(), "whsec_test").unwrap();
/// let mut headers = http::HeaderMap::new();
/// headers.insert("x-service-signature", signed.signature.parse().unwrap());
/// match receiver.receive(&headers, signed.body.clone()).await {
///     payhook::adapter::ReceiveOutcome::Respond(reply) => assert_eq!(reply.status().as_u16(), 503),
///     payhook::adapter::ReceiveOutcome::Deliver(_) => panic!("the store is down"),
/// }
/// store.fail_claims(false); // back up
/// # });
/// ```
#[derive(Debug, Default)]
pub struct FailingStore {
    inner: MemoryStore,
    claims: AtomicBool,
    renewals: AtomicBool,
    settles: AtomicBool,
}

impl FailingStore {
    /// A store that works until told to fail.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store whose every call fails until told otherwise.
    pub fn down() -> Self {
        let store = Self::new();
        store.fail_all(true);
        store
    }

    /// Whether claims fail (the receiver answers 503 and runs no handler).
    pub fn fail_claims(&self, fail: bool) {
        self.claims.store(fail, Ordering::SeqCst);
    }

    /// Whether lease renewals fail.
    pub fn fail_renewals(&self, fail: bool) {
        self.renewals.store(fail, Ordering::SeqCst);
    }

    /// Whether completes and releases fail (a store lost after the claim).
    pub fn fail_settles(&self, fail: bool) {
        self.settles.store(fail, Ordering::SeqCst);
    }

    /// Every switch at once.
    pub fn fail_all(&self, fail: bool) {
        self.fail_claims(fail);
        self.fail_renewals(fail);
        self.fail_settles(fail);
    }

    fn check(switch: &AtomicBool) -> Result<(), StoreError> {
        if switch.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable("the store is down"));
        }
        Ok(())
    }
}

impl Store for FailingStore {
    async fn claim(&self, namespace: &str, id: &str, lease: Duration) -> Result<Claim, StoreError> {
        Self::check(&self.claims)?;
        self.inner.claim(namespace, id, lease).await
    }

    async fn renew(
        &self,
        namespace: &str,
        id: &str,
        token: ClaimToken,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        Self::check(&self.renewals)?;
        self.inner.renew(namespace, id, token, lease).await
    }

    async fn complete(
        &self,
        namespace: &str,
        id: &str,
        token: ClaimToken,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        Self::check(&self.settles)?;
        self.inner.complete(namespace, id, token, retention).await
    }

    async fn release(&self, namespace: &str, id: &str, token: ClaimToken) -> Result<bool, StoreError> {
        Self::check(&self.settles)?;
        self.inner.release(namespace, id, token).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::StoreErrorKind;

    #[tokio::test]
    async fn each_switch_fails_its_calls_until_turned_off() {
        let store = FailingStore::new();
        let lease = Duration::from_secs(30);
        let Claim::Claimed(token) = store.claim("ns", "evt_1", lease).await.unwrap() else {
            panic!("not claimed")
        };
        store.fail_renewals(true);
        let err = store.renew("ns", "evt_1", token, lease).await.unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Unavailable);
        store.fail_settles(true);
        assert!(store.release("ns", "evt_1", token).await.is_err());
        assert!(store.complete("ns", "evt_1", token, lease).await.is_err());
        // Claims still work: only renewals and settles are down.
        assert_eq!(store.claim("ns", "evt_1", lease).await.unwrap(), Claim::InFlight);
        store.fail_all(false);
        assert!(store.renew("ns", "evt_1", token, lease).await.unwrap());
        assert!(store.release("ns", "evt_1", token).await.unwrap());
        store.fail_claims(true);
        assert!(store.claim("ns", "evt_2", lease).await.is_err());
    }
}
