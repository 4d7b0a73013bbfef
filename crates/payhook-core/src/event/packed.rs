//! A small string-to-string map packed into one buffer, for the maps an event
//! carries (a payment intent's metadata, the envelope's other fields).
//!
//! The keys and values are copied back to back into one `String` as they are
//! read, with one index entry per pair: two allocations for the whole map
//! rather than one per key and per value, which would make a typed parse of a
//! metadata-heavy event cost as much as a generic `serde_json::Value` one
//! (BENCHMARKS.md, section 2). A lookup is a binary search.

use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeSeed, Deserializer, Visitor};

/// Keys and values back to back in `text`; `entries` sorted by key, one per key.
#[derive(Clone, Default)]
pub(crate) struct PackedMap {
    text: String,
    entries: Vec<Entry>,
}

/// One pair: the key is `text[start..key_end]`, the value `text[key_end..end]`.
#[derive(Clone, Copy, Debug)]
struct Entry {
    start: usize,
    key_end: usize,
    end: usize,
}

impl PackedMap {
    /// An empty map with room for about `entries` pairs of `text_len` bytes in all.
    pub(crate) fn with_capacity(entries: usize, text_len: usize) -> Self {
        Self {
            text: String::with_capacity(text_len),
            entries: Vec::with_capacity(entries),
        }
    }

    /// The buffer pairs are written into: a reader appends a key, then its
    /// value, and [`commit`](Self::commit)s the pair.
    pub(crate) fn text_mut(&mut self) -> &mut String {
        &mut self.text
    }

    /// The length of the buffer, where the next pair will start.
    pub(crate) fn text_len(&self) -> usize {
        self.text.len()
    }

    /// Records the pair written since `start`: the key up to `key_end`, the
    /// value up to the end of the buffer. Unsorted until [`finish`](Self::finish).
    pub(crate) fn commit(&mut self, start: usize, key_end: usize) {
        self.entries.push(Entry {
            start,
            key_end,
            end: self.text.len(),
        });
    }

    /// Appends a pair. The map is unsorted until [`finish`](Self::finish).
    pub(crate) fn push(&mut self, key: &str, value: &str) {
        let start = self.text.len();
        self.text.push_str(key);
        let key_end = self.text.len();
        self.text.push_str(value);
        self.commit(start, key_end);
    }

    /// Sorts the pairs by key; of pairs with one key the last pushed stays,
    /// as inserting into a map one by one would keep it. Senders usually write
    /// keys sorted, and a sorted map is only checked.
    pub(crate) fn finish(mut self) -> Self {
        let text = &self.text;
        let key = |entry: &Entry| &text[entry.start..entry.key_end];
        let strictly_sorted = self
            .entries
            .windows(2)
            .all(|pair| precedes(key(&pair[0]).as_bytes(), key(&pair[1]).as_bytes()));
        if !strictly_sorted {
            // Stable: pairs with one key keep their order, the last pushed last.
            self.entries.sort_by(|a, b| key(a).cmp(key(b)));
            let mut kept: Vec<Entry> = Vec::with_capacity(self.entries.len());
            for entry in self.entries.drain(..) {
                match kept.last_mut() {
                    Some(last) if key(last) == key(&entry) => *last = entry,
                    _ => kept.push(entry),
                }
            }
            self.entries = kept;
        }
        self
    }

    /// Sorts the pairs by key, as [`finish`](Self::finish), but refuses a key
    /// sent twice: the map read from an event, where a repeated key would let
    /// two readers of the same body see different values. Gives the repeated
    /// key. Costs nothing more for keys sent in order (checked, not sorted).
    pub(crate) fn finish_unique(mut self) -> Result<Self, String> {
        let text = &self.text;
        let key = |entry: &Entry| &text[entry.start..entry.key_end];
        let strictly_sorted = self
            .entries
            .windows(2)
            .all(|pair| precedes(key(&pair[0]).as_bytes(), key(&pair[1]).as_bytes()));
        if !strictly_sorted {
            self.entries.sort_by(|a, b| key(a).cmp(key(b)));
            if let Some(pair) = self
                .entries
                .windows(2)
                .find(|pair| key(&pair[0]) == key(&pair[1]))
            {
                return Err(key(&pair[0]).to_owned());
            }
        }
        Ok(self)
    }

    fn key(&self, entry: &Entry) -> &str {
        &self.text[entry.start..entry.key_end]
    }

    fn value(&self, entry: &Entry) -> &str {
        &self.text[entry.key_end..entry.end]
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .binary_search_by(|entry| self.key(entry).cmp(key))
            .ok()
            .map(|index| self.value(&self.entries[index]))
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn iter(&self) -> Iter<'_> {
        Iter {
            map: self,
            range: 0..self.entries.len(),
        }
    }
}

impl PartialEq for PackedMap {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for PackedMap {}

impl fmt::Debug for PackedMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// `a < b` in byte order, compared in line: keys are short and usually differ
/// in their first bytes, where a call to `memcmp` per pair cost more than the
/// comparison (2 % of a whole verify and parse of a 1 KiB event).
fn precedes(a: &[u8], b: &[u8]) -> bool {
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x < y;
        }
    }
    a.len() < b.len()
}

/// The pairs of a [`PackedMap`] in key order.
#[derive(Clone, Debug)]
pub(crate) struct Iter<'a> {
    map: &'a PackedMap,
    range: Range<usize>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        let entry = self.map.entries.get(self.range.next()?)?;
        Some((self.map.key(entry), self.map.value(entry)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.range.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let entry = self.map.entries.get(self.range.next_back()?)?;
        Some((self.map.key(entry), self.map.value(entry)))
    }
}

impl ExactSizeIterator for Iter<'_> {}

/// Reads a JSON string (an object key, or a string value) and appends its
/// unescaped text to a buffer: no allocation of its own, escaped or not.
pub(crate) struct AppendStr<'b>(pub(crate) &'b mut String);

impl<'de> DeserializeSeed<'de> for AppendStr<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for AppendStr<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        self.0.push_str(s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn packed(pairs: &[(&str, &str)]) -> PackedMap {
        let mut map = PackedMap::default();
        for (key, value) in pairs {
            map.push(key, value);
        }
        map.finish()
    }

    #[test]
    fn behaves_like_a_btree_map_filled_in_the_same_order() {
        let cases: &[&[(&str, &str)]] = &[
            &[],
            &[("a", "1")],
            &[("a", "1"), ("b", "2"), ("c", "3")],
            &[("c", "3"), ("a", "1"), ("b", "2")],
            &[("a", "1"), ("a", "2")],
            &[("b", "x"), ("a", "1"), ("b", "y"), ("a", "2"), ("b", "z")],
            &[("", ""), ("é", "ü"), ("e", "")],
            &[("a", "1"), ("ab", "2"), ("b", "3")],
            &[("ab", "2"), ("a", "1"), ("abc", "0"), ("ab", "4")],
        ];
        for pairs in cases {
            let map = packed(pairs);
            let want: BTreeMap<&str, &str> = pairs.iter().copied().collect();
            assert_eq!(
                map.iter().collect::<Vec<_>>(),
                want.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>()
            );
            assert_eq!(map.len(), want.len());
            for (key, value) in *pairs {
                assert_eq!(map.get(key), want.get(key).copied(), "{key:?} in {pairs:?}");
                let _ = value;
            }
            assert_eq!(map.get("missing"), None);
            assert_eq!(map.iter().rev().count(), want.len());
        }
    }

    #[test]
    fn finish_unique_refuses_a_repeated_key_and_sorts_like_finish() {
        let unique = |pairs: &[(&str, &str)]| {
            let mut map = PackedMap::default();
            for (key, value) in pairs {
                map.push(key, value);
            }
            map.finish_unique()
        };
        assert_eq!(
            unique(&[("b", "2"), ("a", "1")]),
            Ok(packed(&[("a", "1"), ("b", "2")]))
        );
        assert_eq!(unique(&[]), Ok(packed(&[])));
        assert_eq!(unique(&[("a", "1"), ("a", "2")]), Err("a".to_owned()));
        assert_eq!(
            unique(&[("b", "x"), ("a", "1"), ("c", ""), ("b", "y")]),
            Err("b".to_owned())
        );
        assert!(unique(&[("ab", "c"), ("a", "bc")]).is_ok());
    }

    #[test]
    fn equality_is_by_content_not_by_layout() {
        assert_eq!(
            packed(&[("a", "1"), ("b", "2")]),
            packed(&[("b", "2"), ("a", "1")])
        );
        assert_eq!(packed(&[("a", "0"), ("a", "1")]), packed(&[("a", "1")]));
        assert_ne!(packed(&[("a", "1")]), packed(&[("a", "2")]));
        // The boundary between key and value is part of the content.
        assert_ne!(packed(&[("ab", "c")]), packed(&[("a", "bc")]));
    }
}
