//! Object ids and signing secrets: a prefix and random alphanumerics from the
//! operating system's generator (never from the fault seed, so a reproducible
//! fault pattern never makes secrets predictable).

const ALPHANUMERIC: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// How many random characters follow an id's prefix.
pub(crate) const ID_RANDOM_CHARS: usize = 24;
/// How many random characters follow `whsec_` in a signing secret.
const SECRET_RANDOM_CHARS: usize = 32;

/// `prefix` followed by `n` random alphanumerics.
pub(crate) fn random_string(prefix: &str, n: usize) -> String {
    let mut out = String::with_capacity(prefix.len() + n);
    out.push_str(prefix);
    let mut buf = [0u8; 64];
    while out.len() < prefix.len() + n {
        fill(&mut buf);
        for &byte in &buf {
            // 248 = 4 × 62: rejecting the top 8 values keeps every character equally likely.
            if byte < 248 && out.len() < prefix.len() + n {
                out.push(char::from(ALPHANUMERIC[usize::from(byte % 62)]));
            }
        }
    }
    out
}

/// A fresh object id: `prefix` and 24 random alphanumerics (`pi_…`, `evt_…`).
pub(crate) fn new_id(prefix: &str) -> String {
    random_string(prefix, ID_RANDOM_CHARS)
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
}
