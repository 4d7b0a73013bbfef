//! Comparing an expected signature with a candidate in constant time, so the
//! time taken does not tell how much of a forged signature was right.

use subtle::ConstantTimeEq;

/// Whether `candidate` equals `expected`, in time that depends only on their
/// lengths.
///
/// The bytes are folded into one difference, eight at a time, with no branch
/// on their contents, and only the result goes through `subtle`: `subtle`'s
/// own slice `ct_eq` puts an optimisation barrier on every byte, which costs
/// as much as a third of a 1 KiB body's HMAC per candidate and secret (the
/// `hex_compare` group in BENCHMARKS.md).
#[inline]
pub(super) fn eq<const N: usize>(expected: &[u8; N], candidate: &[u8]) -> subtle::Choice {
    if candidate.len() != N {
        return subtle::Choice::from(0);
    }
    let mut diff = 0u64;
    let words = expected.chunks_exact(8).zip(candidate.chunks_exact(8));
    for (a, b) in words {
        let mut wa = [0u8; 8];
        let mut wb = [0u8; 8];
        wa.copy_from_slice(a);
        wb.copy_from_slice(b);
        diff |= u64::from_ne_bytes(wa) ^ u64::from_ne_bytes(wb);
    }
    let tail = N - N % 8;
    for (a, b) in expected[tail..].iter().zip(&candidate[tail..]) {
        diff |= u64::from(a ^ b);
    }
    diff.ct_eq(&0)
}

#[cfg(test)]
mod tests {
    use super::eq;

    #[test]
    fn equal_only_when_every_byte_and_the_length_match() {
        let expected = *b"0123456789abcdef0123456789abcdef0123456789abc"; // 45: a tail too
        assert!(bool::from(eq(&expected, &expected)));
        for i in 0..expected.len() {
            let mut other = expected;
            other[i] ^= 1;
            assert!(!bool::from(eq(&expected, &other)), "byte {i}");
        }
        assert!(!bool::from(eq(&expected, &expected[..44])));
        assert!(!bool::from(eq(&[0u8; 64], &[0u8; 65])));
    }
}
