//! Object ids and signing secrets: a prefix and random alphanumerics from the
//! operating system's generator (never from the fault seed, so a reproducible
//! fault pattern never makes secrets predictable).
//!
//! Ids draw on a small per-thread buffer of the generator's bytes, refilled
//! when used up: every event and every delivery attempt gets an id, and one
//! system call per id showed in the delivery profile. Secrets are read from
//! the generator directly.

use std::cell::RefCell;

const ALPHANUMERIC: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// How many random characters follow an id's prefix.
pub(crate) const ID_RANDOM_CHARS: usize = 24;
/// How many random characters follow `whsec_` in a signing secret.
const SECRET_RANDOM_CHARS: usize = 32;

/// `prefix` followed by `n` random alphanumerics.
pub(crate) fn random_string(prefix: &str, n: usize) -> String {
    let mut buf = [0u8; 64];
    alphanumerics(prefix, n, || {
        fill(&mut buf);
        buf
    })
}

/// `prefix` followed by `n` alphanumerics drawn from the bytes `refill` gives.
fn alphanumerics(prefix: &str, n: usize, mut refill: impl FnMut() -> [u8; 64]) -> String {
    let mut out = String::with_capacity(prefix.len() + n);
    out.push_str(prefix);
    while out.len() < prefix.len() + n {
        for byte in refill() {
            // 248 = 4 × 62: rejecting the top 8 values keeps every character equally likely.
            if byte < 248 && out.len() < prefix.len() + n {
                out.push(char::from(ALPHANUMERIC[usize::from(byte % 62)]));
            }
        }
    }
    out
}

/// The generator's bytes, fetched 1 KiB at a time and handed out 64 at a time,
/// each byte once.
struct BufferedRandom {
    bytes: [u8; 1024],
    used: usize,
}

impl BufferedRandom {
    fn next_64(&mut self) -> [u8; 64] {
        if self.used + 64 > self.bytes.len() {
            fill(&mut self.bytes);
            self.used = 0;
        }
        let mut out = [0u8; 64];
        out.copy_from_slice(&self.bytes[self.used..self.used + 64]);
        self.used += 64;
        out
    }
}

thread_local! {
    static ID_BYTES: RefCell<BufferedRandom> = const {
        RefCell::new(BufferedRandom { bytes: [0; 1024], used: 1024 })
    };
}

/// A fresh object id: `prefix` and 24 random alphanumerics (`pi_…`, `evt_…`).
pub(crate) fn new_id(prefix: &str) -> String {
    ID_BYTES.with(|random| match random.try_borrow_mut() {
        Ok(mut random) => alphanumerics(prefix, ID_RANDOM_CHARS, || random.next_64()),
        // Not reachable (nothing here re-enters), but never a panic.
        Err(_) => random_string(prefix, ID_RANDOM_CHARS),
    })
}

/// A fresh endpoint signing secret, `whsec_…`.
pub(crate) fn new_secret() -> String {
    random_string("whsec_", SECRET_RANDOM_CHARS)
}

/// 64 random bits, for a fault seed nobody chose.
pub(crate) fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    fill(&mut buf);
    u64::from_le_bytes(buf)
}

fn fill(buf: &mut [u8]) {
    if getrandom::fill(buf).is_err() {
        // The OS generator is unavailable (extremely rare): fall back to the
        // process's randomly keyed hasher, which still differs per call.
        use std::hash::{BuildHasher, Hasher};
        for chunk in buf.chunks_mut(8) {
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_usize(chunk.as_ptr() as usize);
            let bytes = hasher.finish().to_le_bytes();
            let n = chunk.len();
            chunk.copy_from_slice(&bytes[..n]);
        }
    }
}

/// Whether `id` looks like one of ours (`prefix` + 24 alphanumerics).
#[cfg(test)]
pub(crate) fn is_id(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix)
        .is_some_and(|rest| rest.len() == ID_RANDOM_CHARS && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefix_and_24_alphanumerics() {
        let a = new_id("pi_");
        let b = new_id("pi_");
        assert!(is_id(&a, "pi_"), "{a}");
        assert_ne!(a, b);
        assert!(new_secret().starts_with("whsec_"));
        assert_eq!(new_secret().len(), 6 + SECRET_RANDOM_CHARS);
        assert!(!is_id("pi_short", "pi_"));
        assert!(!is_id(&new_id("evt_"), "pi_"));
    }

    #[test]
    fn buffered_ids_never_repeat_across_refills() {
        // 1 KiB serves 16 ids (64 bytes each): 500 ids cross 31 refills.
        let ids: std::collections::HashSet<String> = (0..500).map(|_| new_id("da_")).collect();
        assert_eq!(ids.len(), 500);
        assert!(ids.iter().all(|id| is_id(id, "da_")));
    }
}
