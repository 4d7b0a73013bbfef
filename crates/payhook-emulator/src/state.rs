//! The in-memory state: bounded collections in creation order, the cursor
//! pagination of list endpoints, and the idempotency keys.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;

use crate::error::ApiError;
use payhook_core::{PaymentIntent, PaymentIntentStatus, PaymentMethod};

use crate::keys::ShownKeys;
use crate::model::{DeliveryAttempt, Endpoint, EventRecord};

/// What one heap allocation costs beyond its bytes (the allocator's header
/// and rounding), counted so that many small values are not undercounted.
const ALLOCATION_OVERHEAD: usize = 16;

/// The heap bytes of a string (none when it holds no allocation).
pub(crate) fn heap(text: &str, capacity: usize) -> usize {
    if capacity == 0 && text.is_empty() {
        0
    } else {
        capacity.max(text.len()) + ALLOCATION_OVERHEAD
    }
}

fn string(text: &String) -> usize {
    heap(text, text.capacity())
}

/// An estimate of the bytes a kept object takes, its own size and what it
/// owns on the heap: what the byte budgets of [`Limits`](crate::Limits) count.
pub(crate) trait Weigh {
    fn weight(&self) -> usize;
}

impl Weigh for PaymentIntent {
    fn weight(&self) -> usize {
        std::mem::size_of::<Self>()
            + string(&self.id)
            + string(&self.currency)
            + string(&self.object)
            + heap(self.status.as_str(), 0)
            + self.payment_method_types.as_ref().map_or(0, |methods| {
                methods.len() * std::mem::size_of::<PaymentMethod>()
                    + ALLOCATION_OVERHEAD
                    + methods.iter().map(|method| heap(method.as_str(), 0)).sum::<usize>()
            })
            + self.description.as_ref().map_or(0, string)
            // One buffer holds every key and value, with an offset table.
            + ALLOCATION_OVERHEAD
            + self
                .metadata
                .iter()
                .map(|(key, value)| key.len() + value.len() + 16)
                .sum::<usize>()
    }
}

impl Weigh for Arc<EventRecord> {
    fn weight(&self) -> usize {
        std::mem::size_of::<Self>()
            + 2 * std::mem::size_of::<usize>()
            + ALLOCATION_OVERHEAD
            + std::mem::size_of::<EventRecord>()
            + string(&self.id)
            + string(&self.event_type)
            + self.body.len()
            + ALLOCATION_OVERHEAD
    }
}

impl Weigh for Endpoint {
    fn weight(&self) -> usize {
        std::mem::size_of::<Self>()
            + 2 * self.url.as_str().len()
            + self.enabled_events.iter().map(string).sum::<usize>()
            + self.description.as_ref().map_or(0, string)
            + 256
    }
}

impl Weigh for DeliveryAttempt {
    fn weight(&self) -> usize {
        std::mem::size_of::<Self>()
            + string(&self.id)
            + string(&self.event)
            + string(&self.event_type)
            + string(&self.webhook_endpoint)
            + string(&self.url)
            + self.error.as_ref().map_or(0, string)
            + self.response_body.as_ref().map_or(0, string)
    }
}

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

/// Objects in creation order, at most `capacity` of them and at most
/// `max_bytes` by their [weight](Weigh): the oldest go first.
#[derive(Debug)]
pub(crate) struct Collection<T> {
    order: VecDeque<String>,
    items: HashMap<String, T, BuildHasherDefault<IdHasher>>,
    capacity: usize,
    max_bytes: usize,
    /// The weight of every object kept, with its id twice (index and order).
    bytes: usize,
    /// How many objects were evicted to stay within `capacity` or `max_bytes`.
    pub evicted: u64,
}

impl<T: Weigh> Collection<T> {
    pub fn new(capacity: usize, max_bytes: usize) -> Self {
        Self {
            order: VecDeque::new(),
            items: HashMap::default(),
            capacity: capacity.max(1),
            max_bytes,
            bytes: 0,
            evicted: 0,
        }
    }

    fn weigh(id: &str, item: &T) -> usize {
        item.weight() + 2 * (std::mem::size_of::<String>() + heap(id, id.len()))
    }

    pub fn is_full(&self) -> bool {
        self.items.len() >= self.capacity
    }

    /// The estimated bytes kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Adds the newest object, evicting the oldest while full or over the byte budget.
    pub fn insert(&mut self, id: String, item: T) {
        let weight = Self::weigh(&id, &item);
        while self.is_full() || (!self.items.is_empty() && self.bytes.saturating_add(weight) > self.max_bytes)
        {
            match self.order.pop_front() {
                Some(old) => {
                    if let Some(gone) = self.items.remove(&old) {
                        self.bytes = self.bytes.saturating_sub(Self::weigh(&old, &gone));
                    }
                    self.evicted = self.evicted.saturating_add(1);
                }
                None => break,
            }
        }
        self.bytes = self.bytes.saturating_add(weight);
        self.order.push_back(id.clone());
        self.items.insert(id, item);
    }

    pub fn get(&self, id: &str) -> Option<&T> {
        self.items.get(id)
    }

    /// Changes an object in place, keeping its weight counted.
    pub fn modify<R>(&mut self, id: &str, change: impl FnOnce(&mut T) -> R) -> Option<R> {
        let item = self.items.get_mut(id)?;
        let before = item.weight();
        let result = change(item);
        let after = item.weight();
        self.bytes = self.bytes.saturating_sub(before).saturating_add(after);
        Some(result)
    }

    pub fn remove(&mut self, id: &str) -> Option<T> {
        let item = self.items.remove(id)?;
        self.bytes = self.bytes.saturating_sub(Self::weigh(id, &item));
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
    max_bytes: usize,
    bytes: usize,
    /// How many records were evicted to stay within `capacity` or `max_bytes`.
    pub evicted: u64,
}

impl AttemptLog {
    pub fn new(capacity: usize, max_bytes: usize) -> Self {
        Self {
            records: VecDeque::new(),
            capacity: capacity.max(1),
            max_bytes,
            bytes: 0,
            evicted: 0,
        }
    }

    /// The estimated bytes kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Adds the newest record, evicting the oldest while full or over the byte budget.
    pub fn push(&mut self, record: DeliveryAttempt) {
        let weight = record.weight();
        while self.records.len() >= self.capacity
            || (!self.records.is_empty() && self.bytes.saturating_add(weight) > self.max_bytes)
        {
            let Some(old) = self.records.pop_front() else {
                break;
            };
            self.bytes = self.bytes.saturating_sub(old.weight());
            self.evicted = self.evicted.saturating_add(1);
        }
        self.bytes = self.bytes.saturating_add(weight);
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

/// Where a page starts in a list given oldest first.
pub(crate) enum Split {
    /// From the newest.
    Whole,
    /// Within `items[..n]`, the objects older than a `starting_after` cursor.
    Older(usize),
    /// Within `items[n..]`, the objects newer than an `ending_before` cursor.
    Newer(usize),
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
    let split = match (&page.starting_after, &page.ending_before) {
        (Some(id), _) => Split::Older(position("starting_after", id)?),
        // Newer than the cursor: the indexes after it.
        (None, Some(id)) => Split::Newer(position("ending_before", id)?.saturating_add(1)),
        (None, None) => Split::Whole,
    };
    let items: Vec<&T> = items.into_iter().map(|(_, item)| item).collect();
    let listed = page_of_split(&items, split, page.limit);
    Ok(Listed {
        data: listed.data.into_iter().copied().collect(),
        has_more: listed.has_more,
    })
}

/// One page of `items` (given oldest first), newest first: the `limit`
/// newest of the older part, or the `limit` oldest of the newer part (the
/// closest to the cursor), with whether more lie beyond it.
pub(crate) fn page_of_split<'a, T>(items: &'a [T], split: Split, limit: usize) -> Listed<'a, T> {
    if let Split::Newer(from) = split {
        let newer = &items[from.min(items.len())..];
        let take = newer.len().min(limit);
        return Listed {
            data: newer[..take].iter().rev().collect(),
            has_more: newer.len() > take,
        };
    }
    let older = match split {
        Split::Older(to) => &items[..to.min(items.len())],
        Split::Whole | Split::Newer(_) => items,
    };
    let data: Vec<&T> = older.iter().rev().take(limit).collect();
    Listed {
        has_more: older.len() > data.len(),
        data,
    }
}

/// A finished request's reply, kept to be replayed: by reference to the
/// object it returned where that object is kept anyway (a payment intent,
/// a webhook endpoint), so a large object is not held twice; as bytes
/// otherwise (errors, small replies).
#[derive(Debug, Clone)]
pub(crate) enum Stored {
    /// The reply body as sent.
    Bytes(Bytes),
    /// A payment intent as it was then: the kept one, with this status and
    /// amount received (the only fields that ever change).
    Intent {
        id: String,
        status: PaymentIntentStatus,
        amount_received: Option<u128>,
    },
    /// A webhook endpoint as created or rolled, with the keys the reply showed.
    Endpoint { id: String, shown: ShownKeys },
}

impl Stored {
    fn weight(&self) -> usize {
        std::mem::size_of::<Self>()
            + match self {
                Self::Bytes(bytes) => bytes.len() + ALLOCATION_OVERHEAD,
                Self::Intent { id, status, .. } => string(id) + heap(status.as_str(), 0),
                Self::Endpoint { id, shown } => {
                    string(id) + string(&shown.secret) + shown.public_key.as_ref().map_or(0, string)
                }
            }
    }
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
        reply: Stored,
    },
}

impl Idempotent {
    fn since(&self) -> Instant {
        match self {
            Self::InFlight { since, .. } | Self::Done { since, .. } => *since,
        }
    }

    fn weight(&self) -> usize {
        std::mem::size_of::<Self>()
            + match self {
                Self::InFlight { .. } => 0,
                Self::Done { reply, .. } => reply.weight(),
            }
    }
}

/// The weight of one key: the entry and its key, held twice (map and order).
fn entry_weight(key: &(String, String), value: &Idempotent) -> usize {
    value.weight() + 2 * (std::mem::size_of::<(String, String)>() + string(&key.0) + string(&key.1))
}

/// Idempotency keys per API key, kept for `ttl`, at most `capacity` at once
/// and at most `max_bytes` by weight.
#[derive(Debug)]
pub(crate) struct IdempotencyKeys {
    entries: HashMap<(String, String), Idempotent>,
    order: VecDeque<(String, String)>,
    capacity: usize,
    max_bytes: usize,
    bytes: usize,
    ttl: Duration,
}

impl IdempotencyKeys {
    pub fn new(capacity: usize, max_bytes: usize, ttl: Duration) -> Self {
        Self {
            entries: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
            max_bytes,
            bytes: 0,
            ttl,
        }
    }

    /// The estimated bytes kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn expire(&mut self, now: Instant) {
        while let Some(oldest) = self.order.front() {
            let expired = self
                .entries
                .get(oldest)
                .is_none_or(|entry| now.saturating_duration_since(entry.since()) > self.ttl);
            if !expired && self.entries.len() < self.capacity && self.bytes <= self.max_bytes {
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
                if let Some(gone) = self.entries.remove(&key) {
                    self.bytes = self.bytes.saturating_sub(entry_weight(&key, &gone));
                }
            }
        }
    }

    pub fn get(&mut self, key: &(String, String), now: Instant) -> Option<&Idempotent> {
        self.expire(now);
        self.entries.get(key)
    }

    pub fn set(&mut self, key: (String, String), value: Idempotent) {
        let weight = entry_weight(&key, &value);
        self.bytes = self.bytes.saturating_add(weight);
        match self.entries.insert(key.clone(), value) {
            Some(previous) => self.bytes = self.bytes.saturating_sub(entry_weight(&key, &previous)),
            None => self.order.push_back(key),
        }
    }

    pub fn remove(&mut self, key: &(String, String)) {
        if let Some(gone) = self.entries.remove(key) {
            self.bytes = self.bytes.saturating_sub(entry_weight(key, &gone));
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
        let budget = limits.budget();
        Self {
            intents: Collection::new(limits.objects, budget.intents),
            events: Collection::new(limits.objects, budget.events),
            endpoints: Collection::new(limits.endpoints, usize::MAX),
            attempts: AttemptLog::new(limits.attempts, budget.attempts),
            idempotency: IdempotencyKeys::new(
                limits.idempotency_keys,
                budget.idempotency,
                Duration::from_secs(24 * 3600),
            ),
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

    impl Weigh for i32 {
        fn weight(&self) -> usize {
            usize::try_from(*self).unwrap_or(0)
        }
    }

    #[test]
    fn collections_evict_the_oldest_by_count_and_by_bytes() {
        let id_weight = 2 * (std::mem::size_of::<String>() + heap("a", 1));
        let mut c = Collection::new(10, 3 * id_weight + 300);
        c.insert("a".into(), 100);
        c.insert("b".into(), 100);
        c.insert("c".into(), 100);
        assert_eq!((c.evicted, c.bytes()), (0, 3 * id_weight + 300));
        c.insert("d".into(), 150);
        assert_eq!(c.evicted, 2, "two had to go to make room for 150 bytes");
        assert_eq!(c.iter().copied().collect::<Vec<_>>(), [100, 150]);
        c.modify("c", |n| *n = 10);
        assert_eq!(c.bytes(), 2 * id_weight + 160);
        assert_eq!(c.remove("d"), Some(150));
        assert_eq!(c.bytes(), id_weight + 10);
        // One object over the whole budget is still kept, alone.
        c.insert("e".into(), 10_000);
        assert_eq!(c.iter().copied().collect::<Vec<_>>(), [10_000]);

        let mut c = Collection::new(2, usize::MAX);
        c.insert("a".into(), 1);
        c.insert("b".into(), 2);
        c.insert("c".into(), 3);
        assert!(c.get("a").is_none());
        assert_eq!(c.evicted, 1);
        assert_eq!(c.iter().copied().collect::<Vec<_>>(), [2, 3]);
    }

    #[test]
    fn the_attempt_log_keeps_the_newest() {
        let one = DeliveryAttempt::example("da_a").weight();
        let mut log = AttemptLog::new(100, 2 * one);
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
