//! The in-memory dedupe store, the embedded default.

use std::cmp::Reverse;
use std::collections::hash_map::RandomState;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{Claim, ClaimToken, Completion, Store, MAX_TTL};
use crate::error::{ConfigError, StoreError};

/// How many ids a [`MemoryStore`] holds unless told otherwise.
pub const DEFAULT_CAPACITY: usize = 1_000_000;

/// How many shards a store of at least [`SHARDED_FROM`] ids is split into.
const SHARDS: usize = 16;

/// Smaller stores keep one shard, so their capacity and eviction order are exact.
const SHARDED_FROM: usize = 1024;

/// One shard, alone on its cache lines: threads working on different shards
/// then never invalidate each other's cached lock or table headers.
#[repr(align(128))]
struct Shard(Mutex<Inner>);

fn lock(shard: &Shard) -> MutexGuard<'_, Inner> {
    // A panic while holding the lock cannot leave the tables half-updated in a
    // way that matters (each operation is a few inserts and removes), so a
    // poisoned lock is used as it is rather than failing every later delivery.
    shard.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An in-process dedupe store with bounded memory.
///
/// * It holds at most `capacity` ids (done and in flight together). Done ids whose
///   retention is over and claims whose lease ran out are dropped first, whatever
///   retention or lease each was given (namespaces sharing one store may use
///   different ones). When the store is still full, the done id nearest to the end
///   of its retention is forgotten first (with one retention for all: the id
///   marked done longest ago); a live in-flight claim is never evicted. A store
///   whose every slot is a live in-flight claim answers [`StoreError`] to new
///   claims, so those deliveries get 503 and are retried, instead of growing
///   without bound.
/// * From 1 024 ids of capacity up, the store is split by key into 16 shards, each
///   with its own lock and a sixteenth of the capacity, so deliveries on several
///   threads rarely wait for each other. "Full" and "oldest" then apply per
///   shard: the id forgotten first is the oldest done id of the new id's shard.
/// * It keeps a 96-bit keyed hash of `namespace` and `id`, not the strings, so
///   a retained id costs about 50 bytes whatever the id's length. The hash keys are
///   random per process, so nobody can craft two ids that collide; the chance of an
///   accidental collision among a million ids is about 10^-17.
/// * Done ids expire after the retention passed to [`Store::complete`], measured
///   in tenths of a second and rounded up. Leases and retentions longer than
///   [`MAX_TTL`](super::MAX_TTL) count as that (as in every store); a retention
///   reaching more than about 13 years past the store's creation keeps the id
///   until it is evicted for room.
///
/// It serves one process. Replicas of an app that share deliveries need a shared
/// store (the Redis store).
///
/// ```
/// use std::time::Duration;
/// use payhook::store::{Claim, Completion};
/// use payhook::{MemoryStore, Store};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let lease = Duration::from_secs(30);
/// let Claim::Claimed(token) = store.claim("ns", "evt_1", lease).await.unwrap() else { panic!() };
/// assert_eq!(store.claim("ns", "evt_1", lease).await.unwrap(), Claim::InFlight);
/// assert!(store.renew("ns", "evt_1", token, lease).await.unwrap());
/// assert_eq!(
///     store.complete("ns", "evt_1", token, Duration::from_secs(60)).await.unwrap(),
///     Completion::Completed
/// );
/// assert_eq!(store.claim("ns", "evt_1", lease).await.unwrap(), Claim::Done);
/// # });
/// ```
pub struct MemoryStore {
    shards: Box<[Shard]>,
    hasher: [RandomState; 2],
    started: Instant,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (mut capacity, mut done, mut in_flight) = (0, 0, 0);
        for shard in self.shards.iter() {
            let inner = lock(shard);
            capacity += inner.capacity;
            done += inner.done.len();
            in_flight += inner.in_flight.len();
        }
        f.debug_struct("MemoryStore")
            .field("capacity", &capacity)
            .field("done", &done)
            .field("in_flight", &in_flight)
            .field("shards", &self.shards.len())
            .finish()
    }
}

/// 96 bits of keyed hash; `[u32; 3]` keeps it at 4-byte alignment so an entry
/// of the done table is 16 bytes.
type Key = [u32; 3];

/// Deciseconds since the store started.
type Tick = u32;

struct Inner {
    capacity: usize,
    done: HashMap<Key, Tick, BuildHasherDefault<KeyHasher>>,
    /// Done ids by expiry, soonest first (a min-heap, since ids completed with
    /// different retentions expire out of insertion order). An entry whose expiry
    /// no longer matches the table is stale and skipped. A new entry usually has
    /// the latest expiry, so pushing it costs one comparison. Within one tick the
    /// completion count keeps completion order (it only breaks ties, so its
    /// wrapping around is harmless).
    expiries: BinaryHeap<Reverse<(Tick, u32, Key)>>,
    completions: u32,
    in_flight: HashMap<Key, InFlight, BuildHasherDefault<KeyHasher>>,
    /// No claim in `in_flight` ends before this (a lower bound): until then,
    /// looking for expired claims would find none, so it costs one comparison.
    first_lease_end: Option<Instant>,
    /// Claims made in this shard: the low bits of each token. An id always lands
    /// in the same shard, so two claims of one id never share a count; a counter
    /// per shard keeps the threads from writing to one shared line.
    claims: u32,
}

struct InFlight {
    token: ClaimToken,
    until: Instant,
    /// [`fingerprint`] of the claimed namespace and id.
    check: u64,
}

/// The key a token of this store was issued for: the token carries the key in
/// its upper 96 bits, above a 32-bit claim counter.
fn token_key(token: ClaimToken) -> Key {
    let value = token.as_u128();
    [(value >> 32) as u32, (value >> 64) as u32, (value >> 96) as u32]
}

fn token_for(key: Key, counter: u32) -> ClaimToken {
    ClaimToken::from_u128(
        u128::from(counter) | u128::from(key[0]) << 32 | u128::from(key[1]) << 64 | u128::from(key[2]) << 96,
    )
}

/// A cheap, unkeyed digest of a namespace and an id. Completing or releasing a
/// claim finds it by the key inside the token, and this only confirms that the
/// token comes with the id it was issued for; that spares the second keyed
/// hash of every delivery. Every lookup by id still uses the keyed hash.
fn fingerprint(namespace: &str, id: &str) -> u64 {
    let mut h = 0x9e37_79b9_7f4a_7c15 ^ ((namespace.len() as u64) << 32 | id.len() as u64);
    for chunk in namespace.as_bytes().chunks(8).chain(id.as_bytes().chunks(8)) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        h = (h ^ u64::from_le_bytes(word))
            .wrapping_mul(0xff51_afd7_ed55_8ccd)
            .rotate_left(31);
    }
    h
}

/// The keys are already uniform random bits; hashing them again would only cost time.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(32) ^ u64::from_le_bytes(word);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 << 32) | u64::from(n);
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store holding at most 1 000 000 ids.
    pub fn new() -> Self {
        Self::with_capacity_unchecked(DEFAULT_CAPACITY)
    }

    /// Starts a builder.
    pub fn builder() -> MemoryStoreBuilder {
        MemoryStoreBuilder {
            capacity: DEFAULT_CAPACITY,
        }
    }

    fn with_capacity_unchecked(capacity: usize) -> Self {
        let count = if capacity >= SHARDED_FROM { SHARDS } else { 1 };
        let shards = (0..count)
            .map(|i| {
                Shard(Mutex::new(Inner {
                    capacity: capacity / count + usize::from(i < capacity % count),
                    done: HashMap::default(),
                    expiries: BinaryHeap::new(),
                    completions: 0,
                    in_flight: HashMap::default(),
                    first_lease_end: None,
                    claims: 0,
                }))
            })
            .collect();
        Self {
            shards,
            hasher: [RandomState::new(), RandomState::new()],
            started: Instant::now(),
        }
    }

    /// How many ids are held (done and in flight).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let inner = lock(shard);
                inner.done.len() + inner.in_flight.len()
            })
            .sum()
    }

    /// Whether no id is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The shard that holds `key`, locked. The low bits of the key's first word
    /// pick it: the hash tables index by other bits, so every shard's table still
    /// sees uniformly spread keys.
    fn shard(&self, key: &Key) -> MutexGuard<'_, Inner> {
        lock(&self.shards[key[0] as usize % self.shards.len()])
    }

    fn key(&self, namespace: &str, id: &str) -> Key {
        // `0xff` never occurs in UTF-8, so no namespace/id split hashes like another.
        // Hashing one contiguous buffer costs noticeably less than three writes
        // (each pays the hasher's tail handling); ids are short, so the buffer
        // is on the stack and longer input takes the three-write path.
        const STACK: usize = 192;
        let len = namespace.len() + 1 + id.len();
        let mut buf = [0u8; STACK];
        let joined = (len <= STACK).then(|| {
            buf[..namespace.len()].copy_from_slice(namespace.as_bytes());
            buf[namespace.len()] = 0xff;
            buf[namespace.len() + 1..len].copy_from_slice(id.as_bytes());
            &buf[..len]
        });
        let hash = |state: &RandomState| {
            let mut h = state.build_hasher();
            match joined {
                Some(bytes) => h.write(bytes),
                None => {
                    h.write(namespace.as_bytes());
                    h.write_u8(0xff);
                    h.write(id.as_bytes());
                }
            }
            h.finish()
        };
        let (a, b) = (hash(&self.hasher[0]), hash(&self.hasher[1]));
        [a as u32, (a >> 32) as u32, b as u32]
    }

    fn tick(&self, at: Instant) -> Tick {
        let ds = at.duration_since(self.started).as_millis() / 100;
        Tick::try_from(ds).unwrap_or(Tick::MAX)
    }

    fn expiry(&self, now: Instant, retention: Duration) -> Tick {
        // Round up, so an id is never forgotten before its retention is over.
        let ds = now
            .duration_since(self.started)
            .saturating_add(retention.min(MAX_TTL))
            .as_millis()
            .div_ceil(100);
        Tick::try_from(ds).unwrap_or(Tick::MAX)
    }

    /// The claim step, synchronous: the memory store never waits.
    pub(crate) fn claim_now(&self, namespace: &str, id: &str, lease: Duration) -> Result<Claim, StoreError> {
        let key = self.key(namespace, id);
        let now = Instant::now();
        let tick = self.tick(now);
        let mut inner = self.shard(&key);
        inner.purge_expired(tick, now);
        if let Some(&expiry) = inner.done.get(&key) {
            if expiry > tick {
                return Ok(Claim::Done);
            }
            inner.done.remove(&key);
        }
        if let Some(claim) = inner.in_flight.get(&key) {
            if claim.until > now {
                return Ok(Claim::InFlight);
            }
            // The holder's lease ran out (its worker crashed or hung): hand the id on.
            inner.in_flight.remove(&key);
        }
        inner.make_room()?;
        inner.claims = inner.claims.wrapping_add(1);
        let token = token_for(key, inner.claims);
        let until = lease_end(now, lease);
        inner.note_lease_end(until);
        inner.in_flight.insert(
            key,
            InFlight {
                token,
                until,
                check: fingerprint(namespace, id),
            },
        );
        Ok(Claim::Claimed(token))
    }

    /// The renew step, synchronous.
    pub(crate) fn renew_now(&self, namespace: &str, id: &str, token: ClaimToken, lease: Duration) -> bool {
        let now = Instant::now();
        let check = fingerprint(namespace, id);
        let until = lease_end(now, lease);
        let renew = |inner: &mut Inner, key: &Key| match inner.in_flight.get_mut(key) {
            Some(claim) if claim.token == token && claim.check == check && claim.until > now => {
                claim.until = until;
                inner.note_lease_end(until);
                true
            }
            _ => false,
        };
        let issued_for = token_key(token);
        if renew(&mut self.shard(&issued_for), &issued_for) {
            return true;
        }
        let key = self.key(namespace, id);
        renew(&mut self.shard(&key), &key)
    }

    /// The complete step, synchronous.
    pub(crate) fn complete_now(
        &self,
        namespace: &str,
        id: &str,
        token: ClaimToken,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        let now = Instant::now();
        let check = fingerprint(namespace, id);
        // The usual case: the token still owns the claim it was issued for.
        let issued_for = token_key(token);
        {
            let mut inner = self.shard(&issued_for);
            if inner
                .in_flight
                .get(&issued_for)
                .is_some_and(|claim| claim.token == token && claim.check == check)
            {
                inner.in_flight.remove(&issued_for);
                inner.mark_done(issued_for, self.expiry(now, retention));
                return Ok(Completion::Completed);
            }
        }
        let key = self.key(namespace, id);
        let tick = self.tick(now);
        let mut inner = self.shard(&key);
        inner.purge_expired(tick, now);
        match inner.in_flight.get(&key) {
            Some(claim) if claim.token == token => {
                inner.in_flight.remove(&key);
            }
            // Our lease ran out and another delivery claimed the id: leave it to them.
            Some(claim) if claim.until > now => return Ok(Completion::NotOwner),
            Some(_) => {
                inner.in_flight.remove(&key);
            }
            None => {
                if inner.done.get(&key).is_some_and(|&expiry| expiry > tick) {
                    return Ok(Completion::AlreadyDone);
                }
                inner.make_room()?;
            }
        }
        inner.mark_done(key, self.expiry(now, retention));
        Ok(Completion::Completed)
    }

    /// The release step, synchronous.
    pub(crate) fn release_now(&self, namespace: &str, id: &str, token: ClaimToken) -> bool {
        let check = fingerprint(namespace, id);
        let issued_for = token_key(token);
        {
            let mut inner = self.shard(&issued_for);
            if inner
                .in_flight
                .get(&issued_for)
                .is_some_and(|claim| claim.token == token && claim.check == check)
            {
                inner.in_flight.remove(&issued_for);
                return true;
            }
        }
        let key = self.key(namespace, id);
        let mut inner = self.shard(&key);
        match inner.in_flight.get(&key) {
            Some(claim) if claim.token == token => {
                inner.in_flight.remove(&key);
                true
            }
            _ => false,
        }
    }
}

/// `now + lease`, the lease clamped to [`MAX_TTL`]. A platform whose clock
/// cannot reach that far gets the furthest end it can represent.
fn lease_end(now: Instant, lease: Duration) -> Instant {
    let mut lease = lease.min(MAX_TTL);
    loop {
        if let Some(end) = now.checked_add(lease) {
            return end;
        }
        lease /= 2;
    }
}

impl Inner {
    fn mark_done(&mut self, key: Key, expiry: Tick) {
        self.done.insert(key, expiry);
        self.completions = self.completions.wrapping_add(1);
        self.expiries.push(Reverse((expiry, self.completions, key)));
    }

    fn note_lease_end(&mut self, until: Instant) {
        self.first_lease_end = Some(self.first_lease_end.map_or(until, |first| first.min(until)));
    }

    /// Forgets done ids whose retention is over and claims whose lease ran out.
    fn purge_expired(&mut self, tick: Tick, now: Instant) {
        while let Some(&Reverse((expiry, _, key))) = self.expiries.peek() {
            if expiry > tick {
                break;
            }
            self.expiries.pop();
            if self.done.get(&key) == Some(&expiry) {
                self.done.remove(&key);
            }
        }
        if self.first_lease_end.is_some_and(|first| first <= now) {
            // The holders of these claims crashed or hung past their lease;
            // their ids are free to claim again, and they no longer take room.
            self.in_flight.retain(|_, claim| claim.until > now);
            self.first_lease_end = self.in_flight.values().map(|claim| claim.until).min();
        }
    }

    /// Makes room for one more id by forgetting the done id nearest to its
    /// expiry, or fails when every slot is a live in-flight claim. Expired
    /// entries are gone already ([`purge_expired`](Self::purge_expired) runs first).
    fn make_room(&mut self) -> Result<(), StoreError> {
        while self.done.len() + self.in_flight.len() >= self.capacity {
            let Some(Reverse((expiry, _, key))) = self.expiries.pop() else {
                return Err(StoreError::refused(format!(
                    "memory store is full: all {} slots for this id hold in-flight claims",
                    self.capacity
                )));
            };
            if self.done.get(&key) == Some(&expiry) {
                self.done.remove(&key);
            }
        }
        Ok(())
    }
}

impl Store for MemoryStore {
    async fn claim(&self, namespace: &str, id: &str, lease: Duration) -> Result<Claim, StoreError> {
        self.claim_now(namespace, id, lease)
    }

    async fn renew(
        &self,
        namespace: &str,
        id: &str,
        token: ClaimToken,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        Ok(self.renew_now(namespace, id, token, lease))
    }

    async fn complete(
        &self,
        namespace: &str,
        id: &str,
        token: ClaimToken,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        self.complete_now(namespace, id, token, retention)
    }

    async fn release(&self, namespace: &str, id: &str, token: ClaimToken) -> Result<bool, StoreError> {
        Ok(self.release_now(namespace, id, token))
    }
}

/// Builder for [`MemoryStore`].
#[derive(Debug, Clone)]
pub struct MemoryStoreBuilder {
    capacity: usize,
}

impl MemoryStoreBuilder {
    /// The most ids the store holds (default 1 000 000).
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// Builds the store.
    ///
    /// # Errors
    /// [`ConfigError::InvalidSetting`] for a capacity of 0.
    pub fn build(self) -> Result<MemoryStore, ConfigError> {
        if self.capacity == 0 {
            return Err(ConfigError::InvalidSetting(
                "memory store capacity must be at least 1",
            ));
        }
        Ok(MemoryStore::with_capacity_unchecked(self.capacity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(60);
    const KEEP: Duration = Duration::from_secs(3600);

    fn claimed(store: &MemoryStore, id: &str) -> ClaimToken {
        claimed_in(store, "ns", id)
    }

    fn claimed_in(store: &MemoryStore, namespace: &str, id: &str) -> ClaimToken {
        match store.claim_now(namespace, id, LEASE).unwrap() {
            Claim::Claimed(token) => token,
            other => panic!("{id}: {other:?}"),
        }
    }

    #[test]
    fn full_store_evicts_oldest_done_first_and_keeps_in_flight_claims() {
        let store = MemoryStore::builder().capacity(4).build().unwrap();
        let in_flight = claimed(&store, "evt_busy");
        for i in 0..10 {
            let id = format!("evt_{i}");
            let token = claimed(&store, &id);
            assert_eq!(
                store.complete_now("ns", &id, token, KEEP).unwrap(),
                Completion::Completed
            );
            assert!(store.len() <= 4, "len {} after {id}", store.len());
        }
        // The in-flight claim survived every eviction.
        assert_eq!(store.claim_now("ns", "evt_busy", LEASE).unwrap(), Claim::InFlight);
        // The three newest done ids are kept, older ones were forgotten.
        for i in 7..10 {
            assert_eq!(
                store.claim_now("ns", &format!("evt_{i}"), LEASE).unwrap(),
                Claim::Done
            );
        }
        assert!(matches!(
            store.claim_now("ns", "evt_0", LEASE).unwrap(),
            Claim::Claimed(_)
        ));
        assert!(store.release_now("ns", "evt_busy", in_flight));
    }

    #[test]
    fn store_full_of_claims_refuses_instead_of_growing() {
        let store = MemoryStore::builder().capacity(3).build().unwrap();
        for i in 0..3 {
            claimed(&store, &format!("evt_{i}"));
        }
        let err = store.claim_now("ns", "evt_3", LEASE).unwrap_err();
        assert!(err.to_string().contains("full"), "{err}");
        assert_eq!(store.len(), 3);
        for i in 0..3 {
            assert_eq!(
                store.claim_now("ns", &format!("evt_{i}"), LEASE).unwrap(),
                Claim::InFlight
            );
        }
    }

    #[test]
    fn any_duration_is_accepted_and_clamped() {
        let store = MemoryStore::new();
        for (i, huge) in [Duration::MAX, Duration::from_secs(u64::MAX), MAX_TTL * 2]
            .into_iter()
            .enumerate()
        {
            let id = format!("evt_{i}");
            let token = match store.claim_now("ns", &id, huge).unwrap() {
                Claim::Claimed(token) => token,
                other => panic!("{other:?}"),
            };
            assert_eq!(store.claim_now("ns", &id, LEASE).unwrap(), Claim::InFlight);
            assert!(store.renew_now("ns", &id, token, huge));
            assert_eq!(
                store.complete_now("ns", &id, token, huge).unwrap(),
                Completion::Completed
            );
            assert_eq!(store.claim_now("ns", &id, LEASE).unwrap(), Claim::Done);
        }
        // A huge retention for an id whose claim is gone takes the slow path.
        assert_eq!(
            store
                .complete_now("ns", "evt_unclaimed", ClaimToken::random(), Duration::MAX)
                .unwrap(),
            Completion::Completed
        );
        assert_eq!(
            store.claim_now("ns", "evt_unclaimed", LEASE).unwrap(),
            Claim::Done
        );
        // The clamp: past MAX_TTL every setting means the same.
        let now = Instant::now();
        assert_eq!(store.expiry(now, Duration::MAX), store.expiry(now, MAX_TTL));
        assert_eq!(lease_end(now, Duration::MAX), lease_end(now, MAX_TTL));
        assert!(lease_end(now, Duration::MAX) > now + Duration::from_secs(99 * 365 * 86_400));
    }

    /// Namespaces with different retentions share a store: the short-lived ids
    /// expire first, and the long-retention id is still known.
    #[test]
    fn expired_ids_go_before_live_ones_whatever_their_order() {
        let store = MemoryStore::builder().capacity(4).build().unwrap();
        let long = claimed_in(&store, "long", "evt_long");
        assert_eq!(
            store.complete_now("long", "evt_long", long, KEEP).unwrap(),
            Completion::Completed
        );
        for i in 0..3 {
            let id = format!("evt_short_{i}");
            let token = claimed_in(&store, "short", &id);
            assert_eq!(
                store
                    .complete_now("short", &id, token, Duration::from_millis(100))
                    .unwrap(),
                Completion::Completed
            );
        }
        assert_eq!(store.len(), 4);
        std::thread::sleep(Duration::from_millis(350));
        // The next claim purges every expired id, not only those ahead of the
        // first live one in completion order.
        let fresh = claimed(&store, "evt_new");
        assert_eq!(store.len(), 2, "{store:?}");
        assert_eq!(store.claim_now("long", "evt_long", LEASE).unwrap(), Claim::Done);
        for i in 0..3 {
            assert!(matches!(
                store
                    .claim_now("short", &format!("evt_short_{i}"), LEASE)
                    .unwrap(),
                Claim::Claimed(_)
            ));
        }
        assert!(store.release_now("ns", "evt_new", fresh));
    }

    /// When full of live ids, the one nearest to its expiry goes first, not
    /// the one completed first.
    #[test]
    fn a_full_store_forgets_the_id_nearest_to_expiry() {
        let store = MemoryStore::builder().capacity(2).build().unwrap();
        for (id, keep) in [("evt_long", KEEP), ("evt_short", Duration::from_secs(60))] {
            let token = claimed(&store, id);
            assert_eq!(
                store.complete_now("ns", id, token, keep).unwrap(),
                Completion::Completed
            );
        }
        let _ = claimed(&store, "evt_new");
        assert_eq!(store.claim_now("ns", "evt_long", LEASE).unwrap(), Claim::Done);
        assert_eq!(store.len(), 2);
    }

    /// Claims whose lease ran out (handlers that hung) do not fill the store.
    #[test]
    fn expired_claims_are_cleaned_up_and_take_no_room() {
        let store = MemoryStore::builder().capacity(3).build().unwrap();
        let mut stale = Vec::new();
        for i in 0..3 {
            match store
                .claim_now("ns", &format!("evt_{i}"), Duration::from_millis(100))
                .unwrap()
            {
                Claim::Claimed(token) => stale.push(token),
                other => panic!("{other:?}"),
            }
        }
        assert!(
            store.claim_now("ns", "evt_3", LEASE).is_err(),
            "full of live claims"
        );
        std::thread::sleep(Duration::from_millis(300));
        let fresh = claimed(&store, "evt_3");
        assert_eq!(store.len(), 1, "{store:?}");
        // The lost claims can no longer be renewed or released; their ids are free.
        assert!(!store.renew_now("ns", "evt_0", stale[0], LEASE));
        assert!(!store.release_now("ns", "evt_1", stale[1]));
        let _ = claimed(&store, "evt_0");
        assert!(store.release_now("ns", "evt_3", fresh));
    }

    #[test]
    fn zero_capacity_is_a_config_error() {
        assert!(MemoryStore::builder().capacity(0).build().is_err());
    }

    #[test]
    fn a_sharded_store_stays_within_capacity_and_keeps_claims() {
        let store = MemoryStore::builder().capacity(2048).build().unwrap();
        assert_eq!(store.shards.len(), SHARDS);
        let busy = claimed(&store, "evt_busy");
        for i in 0..10_000 {
            let id = format!("evt_{i}");
            let token = claimed(&store, &id);
            assert_eq!(
                store.complete_now("ns", &id, token, KEEP).unwrap(),
                Completion::Completed
            );
        }
        assert!(store.len() <= 2048, "len {}", store.len());
        assert!(store.len() > 2048 - SHARDS * 16, "len {}", store.len());
        assert_eq!(store.claim_now("ns", "evt_busy", LEASE).unwrap(), Claim::InFlight);
        // The newest ids are still known; each shard forgot its oldest first.
        for i in 9_900..10_000 {
            assert_eq!(
                store.claim_now("ns", &format!("evt_{i}"), LEASE).unwrap(),
                Claim::Done
            );
        }
        assert_eq!(
            store.complete_now("ns", "evt_busy", busy, KEEP).unwrap(),
            Completion::Completed
        );
    }

    #[test]
    fn a_token_settles_only_the_id_it_was_issued_for() {
        let store = MemoryStore::new();
        let token = claimed(&store, "evt_a");
        // Presented with another id or namespace, the token leaves evt_a's claim alone.
        assert!(!store.release_now("ns", "evt_b", token));
        assert!(!store.release_now("other", "evt_a", token));
        assert_eq!(store.claim_now("ns", "evt_a", LEASE).unwrap(), Claim::InFlight);
        assert_eq!(
            store.complete_now("ns", "evt_b", token, KEEP).unwrap(),
            Completion::Completed
        );
        assert_eq!(store.claim_now("ns", "evt_a", LEASE).unwrap(), Claim::InFlight);
        assert_eq!(
            store.complete_now("ns", "evt_a", token, KEEP).unwrap(),
            Completion::Completed
        );
        assert_eq!(store.claim_now("ns", "evt_a", LEASE).unwrap(), Claim::Done);
    }

    #[test]
    fn stale_owner_cannot_complete_a_reclaimed_id() {
        let store = MemoryStore::new();
        let old = match store.claim_now("ns", "evt_1", Duration::ZERO).unwrap() {
            Claim::Claimed(t) => t,
            other => panic!("{other:?}"),
        };
        let new = claimed(&store, "evt_1");
        assert_ne!(old, new);
        assert_eq!(
            store.complete_now("ns", "evt_1", old, KEEP).unwrap(),
            Completion::NotOwner
        );
        assert!(!store.release_now("ns", "evt_1", old));
        assert_eq!(store.claim_now("ns", "evt_1", LEASE).unwrap(), Claim::InFlight);
        assert_eq!(
            store.complete_now("ns", "evt_1", new, KEEP).unwrap(),
            Completion::Completed
        );
        assert_eq!(
            store.complete_now("ns", "evt_1", old, KEEP).unwrap(),
            Completion::AlreadyDone
        );
    }
}
