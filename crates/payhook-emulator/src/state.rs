//! The in-memory state: bounded collections in creation order, the cursor
//! pagination of list endpoints, and the idempotency keys.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;

use crate::error::ApiError;
use crate::model::{DeliveryAttempt, Endpoint, EventRecord, PaymentIntent};

/// Hashes the ids of a [`Collection`]: every id stored is one the emulator
/// drew itself (a prefix and random alphanumerics), never one a caller chose,
/// so no one can aim keys at one bucket and SipHash's resistance to that buys
/// nothing. SipHash showed as a sixth of the time spent creating events
/// (every object is hashed at insert and again at eviction); this is a
/// multiply-rotate mix a word at a time.
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl IdHasher {
    const K: u64 = 0xf135_7aea_2e62_a9c5;

    fn add(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(Self::K);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, byte: u8) {
        self.add(u64::from(byte));
    }

    fn finish(&self) -> u64 {
        // The product's high bits are its best mixed; the table indexes by the low ones.
        self.0.rotate_left(26)
    }
}

/// Objects in creation order, at most `capacity` of them: the oldest go first.
#[derive(Debug)]
pub(crate) struct Collection<T> {
    order: VecDeque<String>,
    items: HashMap<String, T, BuildHasherDefault<IdHasher>>,
    capacity: usize,
    /// How many objects were evicted to stay within `capacity`.
    pub evicted: u64,
}

impl<T> Collection<T> {
    pub fn new(capacity: usize) -> Self {
        Self {
            order: VecDeque::new(),
            items: HashMap::default(),
            capacity: capacity.max(1),
            evicted: 0,
        }
    }

    pub fn is_full(&self) -> bool {
        self.items.len() >= self.capacity
    }

    /// Adds the newest object, evicting the oldest when full.
    pub fn insert(&mut self, id: String, item: T) {
        while self.is_full() {
            match self.order.pop_front() {
                Some(old) => {
                    self.items.remove(&old);
                    self.evicted = self.evicted.saturating_add(1);
                }
                None => break,
            }
        }
        self.order.push_back(id.clone());
        self.items.insert(id, item);
    }

    pub fn get(&self, id: &str) -> Option<&T> {
        self.items.get(id)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut T> {
        self.items.get_mut(id)
    }

    pub fn remove(&mut self, id: &str) -> Option<T> {
        let item = self.items.remove(id)?;
        self.order.retain(|other| other != id);
        Some(item)
    }

    /// Oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> {
        self.order.iter().filter_map(|id| self.items.get(id))
    }
}

/// The newest delivery attempt records, at most `capacity`: the oldest go
/// first. Attempts are only ever listed, never looked up by id, so they need
/// no index (every attempt of every delivery lands here).
#[derive(Debug)]
pub(crate) struct AttemptLog {
    records: VecDeque<DeliveryAttempt>,
    capacity: usize,
    /// How many records were evicted to stay within `capacity`.
    pub evicted: u64,
}

impl AttemptLog {
    pub fn new(capacity: usize) -> Self {
        Self {
            records: VecDeque::new(),
            capacity: capacity.max(1),
            evicted: 0,
        }
    }

    /// Adds the newest record, evicting the oldest when full.
    pub fn push(&mut self, record: DeliveryAttempt) {
        while self.records.len() >= self.capacity {
            if self.records.pop_front().is_none() {
                break;
            }
            self.evicted = self.evicted.saturating_add(1);
        }
        self.records.push_back(record);
    }

    /// Oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &DeliveryAttempt> {
        self.records.iter()
    }
}

/// The query of a list endpoint.
#[derive(Debug, Clone, Default)]
pub(crate) struct Page {
    pub limit: usize,
    pub starting_after: Option<String>,
    pub ending_before: Option<String>,
}

/// One page of a list, newest first.
pub(crate) struct Listed<'a, T> {
    pub data: Vec<&'a T>,
    pub has_more: bool,
}

/// Pages through `items` (given oldest first, each with its id), newest first.
///
/// `starting_after` gives the `limit` objects just older than the cursor;
/// `ending_before` the `limit` objects just newer than it (still newest
/// first). `has_more` says whether more objects lie beyond the page in the
/// direction it was walked.
pub(crate) fn paginate<'a, T>(
    items: Vec<(&'a str, &'a T)>,
    page: &Page,
    cursor_missing: impl Fn(&str, &str) -> ApiError,
) -> Result<Listed<'a, T>, ApiError> {
    let position = |param: &str, id: &str| {
        items
            .iter()
            .position(|(item_id, _)| *item_id == id)
            .ok_or_else(|| cursor_missing(param, id))
    };
    if let Some(id) = &page.ending_before {
        // Newer than the cursor: indexes after it, the `limit` closest ones.
        let at = position("ending_before", id)?;
        let newer = &items[at.saturating_add(1)..];
        let take = newer.len().min(page.limit);
        let data = newer[..take].iter().rev().map(|(_, item)| *item).collect();
        return Ok(Listed {
            data,
            has_more: newer.len() > take,
        });
    }
    let older = match &page.starting_after {
        Some(id) => &items[..position("starting_after", id)?],
        None => &items[..],
    };
    let data: Vec<&T> = older
        .iter()
        .rev()
        .take(page.limit)
        .map(|(_, item)| *item)
        .collect();
    Ok(Listed {
        has_more: older.len() > data.len(),
        data,
    })
}

/// What an idempotency key stands for.
#[derive(Debug, Clone)]
pub(crate) enum Idempotent {
    /// The first request with this key is still running.
    InFlight { fingerprint: [u8; 32], since: Instant },
    /// Its reply, replayed for the same parameters.
    Done {
        fingerprint: [u8; 32],
        since: Instant,
        status: StatusCode,
        body: Bytes,
    },
}

impl Idempotent {
    fn since(&self) -> Instant {
        match self {
            Self::InFlight { since, .. } | Self::Done { since, .. } => *since,
        }
    }
}

/// Idempotency keys per API key, kept for `ttl`, at most `capacity` at once.
#[derive(Debug)]
pub(crate) struct IdempotencyKeys {
    entries: HashMap<(String, String), Idempotent>,
    order: VecDeque<(String, String)>,
    capacity: usize,
    ttl: Duration,
}

impl IdempotencyKeys {
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        Self {
            entries: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
            ttl,
        }
    }

    fn expire(&mut self, now: Instant) {
        while let Some(oldest) = self.order.front() {
            let expired = self
                .entries
                .get(oldest)
                .is_none_or(|entry| now.saturating_duration_since(entry.since()) > self.ttl);
            if !expired && self.entries.len() < self.capacity {
                break;
            }
            // Over capacity: a finished key goes first; an in-flight one is kept
            // until its request ends (it removes or completes itself).
            if let Some(key) = self.order.pop_front() {
                if let Some(Idempotent::InFlight { .. }) = self.entries.get(&key) {
                    if !expired {
                        self.order.push_back(key);
                        break;
                    }
                }
                self.entries.remove(&key);
            }
        }
    }

    pub fn get(&mut self, key: &(String, String), now: Instant) -> Option<&Idempotent> {
        self.expire(now);
        self.entries.get(key)
    }

    pub fn set(&mut self, key: (String, String), value: Idempotent) {
        if self.entries.insert(key.clone(), value).is_none() {
            self.order.push_back(key);
        }
    }

    pub fn remove(&mut self, key: &(String, String)) {
        if self.entries.remove(key).is_some() {
            self.order.retain(|other| other != key);
        }
    }
}

/// Everything the API reads and writes.
#[derive(Debug)]
pub(crate) struct State {
    pub intents: Collection<PaymentIntent>,
    /// Shared with the deliveries of each event, which read it without copying it.
    pub events: Collection<Arc<EventRecord>>,
    pub endpoints: Collection<Endpoint>,
    pub attempts: AttemptLog,
    pub idempotency: IdempotencyKeys,
    pub next_event_seq: u64,
    pub next_endpoint_seq: u64,
    /// Resends requested so far (the last one's number).
    pub resends: u64,
}

impl State {
    pub fn new(limits: &crate::Limits) -> Self {
        Self {
            intents: Collection::new(limits.objects),
            events: Collection::new(limits.objects),
            endpoints: Collection::new(limits.endpoints),
            attempts: AttemptLog::new(limits.attempts),
            idempotency: IdempotencyKeys::new(limits.idempotency_keys, Duration::from_secs(24 * 3600)),
            next_event_seq: 0,
            next_endpoint_seq: 0,
            resends: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("id{i}")).collect()
    }

    fn page<'a>(ids: &'a [String], page: &Page) -> (Vec<&'a str>, bool) {
        let items: Vec<(&str, &String)> = ids.iter().map(|id| (id.as_str(), id)).collect();
        let listed = paginate(items, page, |p, _| ApiError::bad_request("x", p.to_owned())).unwrap();
        (
            listed.data.into_iter().map(String::as_str).collect(),
            listed.has_more,
        )
    }

    #[test]
    fn cursors_walk_both_ways() {
        let ids = list(5);
        let p = |limit, after: Option<&str>, before: Option<&str>| Page {
            limit,
            starting_after: after.map(str::to_owned),
            ending_before: before.map(str::to_owned),
        };
        assert_eq!(page(&ids, &p(2, None, None)), (vec!["id4", "id3"], true));
        assert_eq!(page(&ids, &p(2, Some("id3"), None)), (vec!["id2", "id1"], true));
        assert_eq!(page(&ids, &p(2, Some("id1"), None)), (vec!["id0"], false));
        assert_eq!(page(&ids, &p(2, None, Some("id1"))), (vec!["id3", "id2"], true));
        assert_eq!(
            page(&ids, &p(5, None, None)),
            (ids.iter().rev().map(String::as_str).collect(), false)
        );
        assert_eq!(page(&[], &p(10, None, None)), (vec![], false));
    }

    #[test]
    fn collections_evict_the_oldest() {
        let mut c = Collection::new(2);
        c.insert("a".into(), 1);
        c.insert("b".into(), 2);
        c.insert("c".into(), 3);
        assert!(c.get("a").is_none());
        assert_eq!(c.evicted, 1);
        assert_eq!(c.iter().copied().collect::<Vec<_>>(), [2, 3]);
    }

    #[test]
    fn the_attempt_log_keeps_the_newest() {
        let mut log = AttemptLog::new(2);
        for id in ["da_a", "da_b", "da_c"] {
            log.push(DeliveryAttempt::example(id));
        }
        assert_eq!(log.evicted, 1);
        assert_eq!(
            log.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["da_b", "da_c"]
        );
    }
}
