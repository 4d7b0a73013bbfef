//! The conformance suite every dedupe store must pass.
//!
//! Each check takes a store and works in a namespace of its own, so the checks
//! can share one store (one Redis server) and run in parallel. The
//! [`store_conformance_tests!`](crate::store_conformance_tests) macro turns the
//! whole suite into `#[tokio::test]`s for one store:
//!
//! ```ignore
//! payhook_core::store_conformance_tests!(payhook_core::MemoryStore::new());
//! ```
//!
//! The calling crate needs `tokio` with the `macros` and `rt-multi-thread`
//! features as a dev-dependency.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::store::{Claim, ClaimToken, Completion, Store, MAX_TTL};

const LEASE: Duration = Duration::from_secs(30);
const RETENTION: Duration = Duration::from_secs(3600);

fn namespace(check: &str) -> String {
    format!("conformance-{check}-{}", ClaimToken::random())
}

async fn claimed<S: Store + ?Sized>(store: &S, ns: &str, id: &str, lease: Duration) -> ClaimToken {
    match store.claim(ns, id, lease).await {
        Ok(Claim::Claimed(token)) => token,
        other => panic!("claim of {id} in {ns}: expected Claimed, got {other:?}"),
    }
}

async fn state<S: Store + ?Sized>(store: &S, ns: &str, id: &str) -> Claim {
    store.claim(ns, id, LEASE).await.expect("store reachable")
}

/// absent → claimed → in flight; release gives it back; complete makes it done.
pub async fn claim_complete_release<S: Store + ?Sized>(store: &S) {
    let ns = namespace("lifecycle");
    let first = claimed(store, &ns, "evt_1", LEASE).await;
    assert_eq!(state(store, &ns, "evt_1").await, Claim::InFlight);
    assert!(
        store.release(&ns, "evt_1", first).await.unwrap(),
        "owner's release"
    );
    let second = claimed(store, &ns, "evt_1", LEASE).await;
    assert_ne!(first, second, "each claim has its own token");
    assert_eq!(
        store.complete(&ns, "evt_1", second, RETENTION).await.unwrap(),
        Completion::Completed,
        "owner's complete"
    );
    assert_eq!(state(store, &ns, "evt_1").await, Claim::Done);
    assert_eq!(state(store, &ns, "evt_1").await, Claim::Done, "done stays done");
    assert_eq!(
        store.complete(&ns, "evt_1", second, RETENTION).await.unwrap(),
        Completion::AlreadyDone,
        "a repeated complete (its first reply lost) says the id is done"
    );
    assert!(
        !store.release(&ns, "evt_1", second).await.unwrap(),
        "a done id is not released"
    );
    assert_eq!(state(store, &ns, "evt_1").await, Claim::Done);
}

/// Only the token holder can complete or release a claim.
pub async fn token_ownership<S: Store + ?Sized>(store: &S) {
    let ns = namespace("ownership");
    let owner = claimed(store, &ns, "evt_1", LEASE).await;
    let stranger = ClaimToken::random();
    assert!(!store.release(&ns, "evt_1", stranger).await.unwrap());
    assert_eq!(state(store, &ns, "evt_1").await, Claim::InFlight);
    assert_eq!(
        store.complete(&ns, "evt_1", stranger, RETENTION).await.unwrap(),
        Completion::NotOwner
    );
    assert_eq!(state(store, &ns, "evt_1").await, Claim::InFlight);
    assert!(!store.renew(&ns, "evt_1", stranger, LEASE).await.unwrap());
    assert!(store.release(&ns, "evt_1", owner).await.unwrap());
    let _ = claimed(store, &ns, "evt_1", LEASE).await;
}

/// A claim whose lease ran out (its worker crashed) hands the id to the next
/// delivery, and the old owner can no longer settle it.
pub async fn lease_expiry<S: Store + ?Sized>(store: &S) {
    let ns = namespace("lease");
    let crashed = claimed(store, &ns, "evt_1", Duration::from_millis(300)).await;
    assert_eq!(state(store, &ns, "evt_1").await, Claim::InFlight);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let next = claimed(store, &ns, "evt_1", LEASE).await;
    assert_ne!(crashed, next);
    assert!(
        !store.release(&ns, "evt_1", crashed).await.unwrap(),
        "stale owner cannot release"
    );
    assert_eq!(
        store.complete(&ns, "evt_1", crashed, RETENTION).await.unwrap(),
        Completion::NotOwner,
        "stale owner cannot complete"
    );
    assert_eq!(state(store, &ns, "evt_1").await, Claim::InFlight);
    assert_eq!(
        store.complete(&ns, "evt_1", next, RETENTION).await.unwrap(),
        Completion::Completed
    );
    assert_eq!(state(store, &ns, "evt_1").await, Claim::Done);
    assert_eq!(
        store.complete(&ns, "evt_1", crashed, RETENTION).await.unwrap(),
        Completion::AlreadyDone,
        "a late complete after another delivery finished finds the id done"
    );
}

/// A done id is forgotten after its retention, and handled again.
pub async fn retention_expiry<S: Store + ?Sized>(store: &S) {
    let ns = namespace("retention");
    let token = claimed(store, &ns, "evt_1", LEASE).await;
    assert_eq!(
        store
            .complete(&ns, "evt_1", token, Duration::from_millis(300))
            .await
            .unwrap(),
        Completion::Completed
    );
    assert_eq!(state(store, &ns, "evt_1").await, Claim::Done);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let _ = claimed(store, &ns, "evt_1", LEASE).await;
}

/// 64 concurrent claims of one new id: exactly one wins; after complete, every
/// concurrent claim sees a duplicate.
pub async fn concurrent_claims<S: Store>(store: Arc<S>) {
    let ns: Arc<str> = namespace("concurrent").into();
    let race = |store: Arc<S>, ns: Arc<str>| async move {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (store, ns) = (Arc::clone(&store), Arc::clone(&ns));
                tokio::spawn(async move { store.claim(&ns, "evt_hot", LEASE).await.unwrap() })
            })
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.expect("claim task"));
        }
        results
    };
    let results = race(Arc::clone(&store), Arc::clone(&ns)).await;
    let winners: Vec<ClaimToken> = results
        .iter()
        .filter_map(|c| match c {
            Claim::Claimed(t) => Some(*t),
            _ => None,
        })
        .collect();
    assert_eq!(winners.len(), 1, "exactly one of 64 claims wins: {results:?}");
    assert_eq!(results.iter().filter(|c| **c == Claim::InFlight).count(), 63);
    assert_eq!(
        store
            .complete(&ns, "evt_hot", winners[0], RETENTION)
            .await
            .unwrap(),
        Completion::Completed
    );
    let results = race(Arc::clone(&store), Arc::clone(&ns)).await;
    assert!(results.iter().all(|c| *c == Claim::Done), "{results:?}");
}

/// Renewing keeps a claim alive past its first lease: no other delivery can
/// take the id over while the handler still runs, and the owner completes it.
pub async fn renew_extends_lease<S: Store + ?Sized>(store: &S) {
    let ns = namespace("renew");
    let owner = claimed(store, &ns, "evt_1", Duration::from_millis(1000)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        store.renew(&ns, "evt_1", owner, LEASE).await.unwrap(),
        "the owner renews a live claim"
    );
    // Well past the first lease: still in flight, so a concurrent copy waits.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(state(store, &ns, "evt_1").await, Claim::InFlight);
    assert!(
        store.renew(&ns, "evt_1", owner, LEASE).await.unwrap(),
        "renew again"
    );
    assert_eq!(
        store.complete(&ns, "evt_1", owner, RETENTION).await.unwrap(),
        Completion::Completed
    );
    // A renewal can also shorten the lease: it is `lease` from now, not added.
    let short = claimed(store, &ns, "evt_2", LEASE).await;
    assert!(store
        .renew(&ns, "evt_2", short, Duration::from_millis(300))
        .await
        .unwrap());
    tokio::time::sleep(Duration::from_millis(700)).await;
    let _ = claimed(store, &ns, "evt_2", LEASE).await;
}

/// A token that no longer owns a live claim cannot renew: not after its lease
/// ran out and the id was claimed again, not once the id is done, not for
/// another id, and not after a release.
pub async fn renew_refused_without_ownership<S: Store + ?Sized>(store: &S) {
    let ns = namespace("renew-stale");
    let stale = claimed(store, &ns, "evt_1", Duration::from_millis(300)).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !store.renew(&ns, "evt_1", stale, LEASE).await.unwrap(),
        "a claim whose lease ran out is lost, even before anyone took it over"
    );
    let next = claimed(store, &ns, "evt_1", Duration::from_millis(300)).await;
    assert!(
        !store.renew(&ns, "evt_1", stale, LEASE).await.unwrap(),
        "stale token after a takeover"
    );
    assert!(
        !store.renew(&ns, "evt_other", next, LEASE).await.unwrap(),
        "a token renews only its own id"
    );
    // The refused renewals left the new owner's short lease as it was.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let next = claimed(store, &ns, "evt_1", LEASE).await;
    assert_eq!(
        store.complete(&ns, "evt_1", next, RETENTION).await.unwrap(),
        Completion::Completed
    );
    assert!(
        !store.renew(&ns, "evt_1", next, LEASE).await.unwrap(),
        "renew after done"
    );
    assert_eq!(state(store, &ns, "evt_1").await, Claim::Done);

    let released = claimed(store, &ns, "evt_2", LEASE).await;
    assert!(store.release(&ns, "evt_2", released).await.unwrap());
    assert!(
        !store.renew(&ns, "evt_2", released, LEASE).await.unwrap(),
        "renew after release"
    );
    let _ = claimed(store, &ns, "evt_2", LEASE).await;
}

/// Any `Duration` is a valid lease or retention: huge ones (up to
/// `Duration::MAX`) are clamped to `MAX_TTL` and mean "keep", never a panic or
/// an error; a zero lease ends at once.
pub async fn extreme_durations<S: Store + ?Sized>(store: &S) {
    let ns = namespace("durations");
    for (i, huge) in [Duration::MAX, Duration::from_secs(u64::MAX), MAX_TTL]
        .into_iter()
        .enumerate()
    {
        let id = format!("evt_{i}");
        let token = claimed(store, &ns, &id, huge).await;
        assert_eq!(state(store, &ns, &id).await, Claim::InFlight, "lease {huge:?}");
        assert!(
            store.renew(&ns, &id, token, huge).await.unwrap(),
            "renew {huge:?}"
        );
        assert_eq!(state(store, &ns, &id).await, Claim::InFlight, "renewed {huge:?}");
        assert_eq!(
            store.complete(&ns, &id, token, huge).await.unwrap(),
            Completion::Completed,
            "retention {huge:?}"
        );
        assert_eq!(state(store, &ns, &id).await, Claim::Done, "retention {huge:?}");
    }
    let zero = claimed(store, &ns, "evt_zero", Duration::ZERO).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let next = claimed(store, &ns, "evt_zero", LEASE).await;
    assert_ne!(zero, next, "a zero lease has ended");
}

/// Namespaces never see each other's ids, and no (namespace, id) split can be
/// confused with another.
pub async fn namespaces_isolated<S: Store + ?Sized>(store: &S) {
    let a = namespace("ns-a");
    let b = namespace("ns-b");
    let token = claimed(store, &a, "evt_1", LEASE).await;
    assert_eq!(
        store.complete(&a, "evt_1", token, RETENTION).await.unwrap(),
        Completion::Completed
    );
    assert_eq!(state(store, &a, "evt_1").await, Claim::Done);
    let _ = claimed(store, &b, "evt_1", LEASE).await;
    // `x:y` + `z` must not be the same key as `x` + `y:z`.
    let base = namespace("split");
    let joined = format!("{base}:y");
    let token = claimed(store, &joined, "z", LEASE).await;
    assert_eq!(
        store.complete(&joined, "z", token, RETENTION).await.unwrap(),
        Completion::Completed
    );
    let _ = claimed(store, &base, "y:z", LEASE).await;
}

/// Distinct ids are distinct keys, whatever they contain.
pub async fn ids_are_exact<S: Store + ?Sized>(store: &S) {
    let ns = namespace("ids");
    let ids = [
        "evt_1",
        "evt_10",
        "EVT_1",
        "evt_1 ",
        "evt_ü",
        "evt_*",
        "evt_{x}",
        "evt_\"q\"",
    ];
    let mut seen = HashSet::new();
    for id in ids {
        let token = claimed(store, &ns, id, LEASE).await;
        assert!(seen.insert(token));
    }
    for id in ids {
        assert_eq!(state(store, &ns, id).await, Claim::InFlight, "{id:?}");
    }
}

/// Generates one `#[tokio::test]` per conformance check for the store that
/// `$make` evaluates to (evaluated once per test).
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:expr) => {
        mod store_conformance {
            #[allow(unused_imports)]
            use super::*;
            use $crate::testing::store_conformance as suite;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn claim_complete_release() {
                suite::claim_complete_release(&$make).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn token_ownership() {
                suite::token_ownership(&$make).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn lease_expiry() {
                suite::lease_expiry(&$make).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn retention_expiry() {
                suite::retention_expiry(&$make).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn renew_extends_lease() {
                suite::renew_extends_lease(&$make).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn renew_refused_without_ownership() {
                suite::renew_refused_without_ownership(&$make).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn extreme_durations() {
                suite::extreme_durations(&$make).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrent_claims() {
                suite::concurrent_claims(::std::sync::Arc::new($make)).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn namespaces_isolated() {
                suite::namespaces_isolated(&$make).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn ids_are_exact() {
                suite::ids_are_exact(&$make).await;
            }
        }
    };
}
