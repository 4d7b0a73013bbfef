//! The clock and the randomness the queue uses: Unix milliseconds, lease
//! tokens, backoff jitter.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Milliseconds since the Unix epoch (the clock every payhook tool reads).
pub(crate) fn now_ms() -> i64 {
    payhook_core::time::now_ms()
}

/// A duration in milliseconds, saturating.
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A random 64-bit number from the standard library's per-process random keys
/// (the lease tokens and the backoff jitter need unpredictability, not crypto).
pub(crate) fn random_u64() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_i64(now_ms());
    hasher.finish()
}

/// A fresh lease token.
pub(crate) fn new_token() -> i64 {
    // Tokens are compared, never ordered: the sign bit is as good as any other.
    i64::from_ne_bytes(random_u64().to_ne_bytes())
}
