//! The service's `t=…,v1=…` scheme: parsing the header ([`Signature`]),
//! verifying it ([`Verifier`]) and signing ([`sign`]). HMAC-SHA256 over
//! `{t}.{raw body}`, hex encoded; the format and the parsing rules are on
//! [`Signature`].

use std::fmt;
use std::sync::Arc;

use hmac::Mac;

use super::constant_time;
use super::tolerance::Tolerance;
use super::SignatureScheme;
use crate::clock::Clock;
use crate::error::Error;
use crate::headers::{HeaderLookup, Headers};
use crate::secret::Secret;
use crate::secret_set::SecretSet;

/// The header that carries the signature unless configured otherwise.
pub const DEFAULT_HEADER: &str = "x-service-signature";

/// The most `v1` items a signature header may hold, well-formed or not.
///
/// A sender signs with one secret, two during a rotation. Each candidate is
/// compared with the HMAC of every secret, so the work grows with their
/// number: past this many the header is refused before any HMAC is computed.
/// The bound is above what Stripe's libraries were seen to accept in the
/// differential test's headers, so no header they agree on changes verdict.
pub const MAX_V1_SIGNATURES: usize = 16;

/// A parsed signature header value, borrowing from the header bytes.
///
/// The header value is a comma-separated list of `key=value` items:
/// `t` is the unix time of signing in seconds, and each `v1` is the lowercase hex
/// HMAC-SHA256 of `{t}.{raw body}` keyed with the whole secret string. This is the
/// format Stripe uses for `Stripe-Signature`, and parsing follows Stripe's official
/// libraries wherever they agree:
///
/// * items are split on `,`; the key is the text before the first `=`, the value
///   the text up to the next `=` (anything after a second `=` is ignored);
/// * keys are not trimmed: ` v1=…` (after a space) is an unknown key;
/// * unknown keys (`v0`, …) are ignored, and so is a `v1` that is empty or not 64
///   hex digits — another `v1` may still match;
/// * a `t` or `v1` item without `=` makes the header malformed (both libraries
///   fail on it);
/// * more than [`MAX_V1_SIGNATURES`] `v1` items make it malformed too, before
///   any signature is computed;
/// * signatures are compared as lowercase hex, so an uppercase signature does not match;
/// * `t` may carry a leading `+` or zeros, and whitespace around its digits (the
///   Unicode spaces both libraries' integer parsers skip: tab, line breaks,
///   space, no-break space and the other space separators; after the digits
///   also U+0085); the signed content uses its plain decimal value (`t=+0123` and
///   `t= 123 ` are checked over `123.{body}`).
///
/// Where the libraries disagree payhook is strict: a `t` with other trailing
/// characters, a fraction, underscores, non-ASCII digits or a sign other than
/// `+` is malformed, and so is a header whose `t` items differ. The timestamp
/// must lie within the tolerance (300 s by default) on *both* sides of the
/// receiver's clock: unlike Stripe's libraries, a timestamp far in the future
/// is rejected too. A differential test holds payhook to both libraries' verdicts
/// on thousands of generated headers.
///
/// The signature is computed over the raw body bytes exactly as received. The
/// libraries take the body as text, so a correctly signed body that is not
/// valid UTF-8 verifies in payhook (and then fails as an event, a `400`), where
/// they would refuse it.
///
/// ```
/// use payhook::signature::Signature;
///
/// let sig = Signature::parse(b"t=+0123,v1=abc,v0=x,v1=").unwrap();
/// assert_eq!(sig.timestamp(), 123);
/// // `abc` and the empty item are not 64 hex digits: kept out of the candidates.
/// assert_eq!(sig.v1().count(), 0);
/// ```
#[derive(Clone)]
pub struct Signature<'a> {
    timestamp: u64,
    /// The timestamp's digits as sent, when they are already its plain decimal
    /// form (no `+`, no leading zero): signed as they are, without formatting.
    plain_t: Option<&'a [u8]>,
    v1: Candidates<'a>,
    /// `v1` values the official libraries cannot compare; see [`Unusable`].
    unusable: Unusable,
}

/// `v1` values that make Stripe's official verifiers fail, tracked so payhook
/// refuses what both of them refuse. Python refuses a header whose first
/// non-ASCII `v1` comes before the matching one (it cannot compare such text);
/// node refuses one with an empty `v1`, or with a non-ASCII `v1` as long as a
/// signature in UTF-16 units. Where only one of them refuses, the protocol
/// ignores the value, as it ignores any `v1` that is not 64 hex digits.
#[derive(Clone, Copy, Default)]
struct Unusable {
    /// How many well-formed candidates came before the first non-ASCII `v1`.
    before_non_ascii: Option<usize>,
    /// An empty `v1`, or a non-ASCII one 64 UTF-16 units long.
    node_fails: bool,
}

/// The `v1` candidates of one header. A delivery carries one, two during a
/// rotation: those are kept inline, so parsing a header does not allocate.
#[derive(Clone, Default)]
struct Candidates<'a> {
    inline: [&'a [u8]; Candidates::INLINE],
    len: usize,
    spill: Vec<&'a [u8]>,
}

impl<'a> Candidates<'a> {
    const INLINE: usize = 4;

    fn push(&mut self, candidate: &'a [u8]) {
        match self.inline.get_mut(self.len) {
            Some(slot) => *slot = candidate,
            None => self.spill.push(candidate),
        }
        self.len += 1;
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn iter(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        let inline = &self.inline[..self.len.min(Self::INLINE)];
        inline.iter().chain(&self.spill).copied()
    }
}

impl fmt::Debug for Signature<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The signatures themselves are never printed.
        f.debug_struct("Signature")
            .field("timestamp", &self.timestamp)
            .field("v1_count", &self.v1.len)
            .finish()
    }
}

impl<'a> Signature<'a> {
    /// Parses a header value by the rules in the [type's docs](Signature).
    ///
    /// # Errors
    /// [`Error::MalformedHeader`] with the reason: empty value, no `t`, a `t` that is
    /// not a plain non-negative integer, or `t` items that differ.
    pub fn parse(value: &'a [u8]) -> Result<Self, Error> {
        if value.is_empty() {
            return Err(Error::MalformedHeader("header value is empty"));
        }
        let mut timestamp = None;
        let mut plain_t = None;
        let mut v1 = Candidates::default();
        let mut unusable = Unusable::default();
        let mut v1_items = 0;
        let mut rest = value;
        loop {
            // The usual item, `v1=` and 64 hex digits ending the item, is taken in
            // one pass over its bytes; anything else goes the general way below.
            if let Some((candidate, after)) = whole_v1_item(rest) {
                count_v1(&mut v1_items)?;
                v1.push(candidate);
                match after {
                    Some(after) => {
                        rest = after;
                        continue;
                    }
                    None => break,
                }
            }
            let (item, after) = match rest.iter().position(|&b| b == b',') {
                Some(comma) => (&rest[..comma], Some(&rest[comma + 1..])),
                None => (rest, None),
            };
            if let Some(eq) = item.iter().position(|&b| b == b'=') {
                let (key, tail) = (&item[..eq], &item[eq + 1..]);
                let val = tail
                    .iter()
                    .position(|&b| b == b'=')
                    .map_or(tail, |end| &tail[..end]);
                match key {
                    b"t" => {
                        let (t, digits) = parse_timestamp(val)?;
                        if timestamp.is_some_and(|prev| prev != t) {
                            return Err(Error::MalformedHeader("header has several different t values"));
                        }
                        timestamp = Some(t);
                        if digits.len() == 1 || digits.first() != Some(&b'0') {
                            plain_t = Some(digits);
                        }
                    }
                    b"v1" => {
                        count_v1(&mut v1_items)?;
                        if is_hex64(val) {
                            v1.push(val);
                        } else if val.is_ascii() {
                            unusable.node_fails |= val.is_empty();
                        } else {
                            unusable.before_non_ascii.get_or_insert(v1.len);
                            unusable.node_fails |= utf16_len(val) == Some(64);
                        }
                    }
                    _ => {}
                }
            } else if item == b"t" || item == b"v1" {
                return Err(Error::MalformedHeader(
                    "header has a t or v1 item without a value",
                ));
            } // else: any other item without `=` carries nothing
            match after {
                Some(after) => rest = after,
                None => break,
            }
        }
        let timestamp = timestamp.ok_or(Error::MalformedHeader("header has no t timestamp"))?;
        Ok(Self {
            timestamp,
            plain_t,
            v1,
            unusable,
        })
    }

    /// The signing time, in unix seconds.
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }

    /// The well-formed `v1` candidates (64 hex digits each), in header order.
    pub fn v1(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        self.v1.iter()
    }
}

/// Counts one more `v1` item, refusing the header past [`MAX_V1_SIGNATURES`].
fn count_v1(items: &mut usize) -> Result<(), Error> {
    *items += 1;
    if *items > MAX_V1_SIGNATURES {
        return Err(Error::MalformedHeader("header has more than 16 v1 signatures"));
    }
    Ok(())
}

/// Whether `val` is a well-formed `v1` value: exactly 64 hex digits.
fn is_hex64(val: &[u8]) -> bool {
    // No early exit: a fixed-length check without branches per byte is one the
    // compiler turns into a few vector instructions.
    val.len() == 64 && val.iter().fold(true, |ok, b| ok & b.is_ascii_hexdigit())
}

/// `rest` starting with a complete `v1=<64 hex>` item (followed by `,` or the
/// end): the candidate, and what follows the comma (`None` at the end).
fn whole_v1_item(rest: &[u8]) -> Option<(&[u8], Option<&[u8]>)> {
    const LEN: usize = 3 + 64;
    let item = rest.get(..LEN)?;
    let after = match rest.get(LEN) {
        None => None,
        Some(b',') => Some(&rest[LEN + 1..]),
        Some(_) => return None,
    };
    (item.starts_with(b"v1=") && is_hex64(&item[3..])).then_some((&item[3..], after))
}

/// The length of UTF-8 `text` in UTF-16 units (what a JavaScript string's
/// `length` counts), or `None` for bytes that are not UTF-8.
fn utf16_len(text: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(text).ok()?;
    Some(text.chars().map(char::len_utf16).sum())
}

/// The length of the whitespace character at the start of `bytes`, if there is
/// one that both libraries' integer parsers skip before the digits of `t`
/// (Python's `int()` and JavaScript's `parseInt`): tab, LF, VT, FF, CR, space,
/// U+00A0, U+1680, U+2000–U+200A, U+2028, U+2029, U+202F, U+205F, U+3000. After
/// the digits `int()` also skips U+0085 (`parseInt` ignores whatever follows),
/// so `trailing` adds it.
fn space_len(bytes: &[u8], trailing: bool) -> Option<usize> {
    match *bytes {
        [b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ', ..] => Some(1),
        [0xc2, 0xa0, ..] => Some(2),
        [0xc2, 0x85, ..] if trailing => Some(2),
        [0xe1, 0x9a, 0x80, ..] => Some(3),
        [0xe2, 0x80, 0x80..=0x8a | 0xa8 | 0xa9 | 0xaf, ..] => Some(3),
        [0xe2, 0x81, 0x9f, ..] | [0xe3, 0x80, 0x80, ..] => Some(3),
        _ => None,
    }
}

/// Reads a `t` value: its seconds, and its digits (without sign or spaces).
fn parse_timestamp(val: &[u8]) -> Result<(u64, &[u8]), Error> {
    const BAD: Error = Error::MalformedHeader("t is not a non-negative whole number of seconds");
    let mut rest = val;
    while let Some(len) = space_len(rest, false) {
        rest = &rest[len..];
    }
    let rest = rest.strip_prefix(b"+").unwrap_or(rest);
    let end = rest
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(rest.len());
    let (digits, mut tail) = rest.split_at(end);
    while let Some(len) = space_len(tail, true) {
        tail = &tail[len..];
    }
    if digits.is_empty() || !tail.is_empty() {
        return Err(BAD);
    }
    let mut t: u64 = 0;
    for &d in digits {
        t = t
            .checked_mul(10)
            .and_then(|t| t.checked_add(u64::from(d - b'0')))
            .ok_or(Error::MalformedHeader("t is too large"))?;
    }
    Ok((t, digits))
}

/// Computes the lowercase hex HMAC-SHA256 of `{t}.{body}`, where `t_digits` is
/// the timestamp in plain decimal.
fn expected_hex(secret: &Secret, t_digits: &[u8], body: &[u8]) -> [u8; 64] {
    let mut mac = secret.mac();
    mac.update(t_digits);
    mac.update(b".");
    mac.update(body);
    hex_lower(&mac.finalize().into_bytes().into())
}

fn hex_lower(bytes: &[u8; 32]) -> [u8; 64] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 64];
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(b >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(b & 0x0f)];
    }
    out
}

/// Produces the signature header value for `body`, signed with `secret` at
/// `timestamp` (unix seconds): `t={timestamp},v1={hex}`.
///
/// This is the exact header the sender produces, so it is what tests and the
/// `payhook` command-line tool use to make genuine deliveries.
pub fn sign(body: &[u8], secret: &Secret, timestamp: u64) -> String {
    let mut t = itoa::Buffer::new();
    let t = t.format(timestamp);
    let hex = expected_hex(secret, t.as_bytes(), body);
    let mut header = String::with_capacity(88);
    header.push_str("t=");
    header.push_str(t);
    header.push_str(",v1=");
    header.push_str(std::str::from_utf8(&hex).unwrap_or_default());
    header
}

/// The built-in [`SignatureScheme`]: HMAC-SHA256 `v1` signatures over `{t}.{body}`,
/// any of several secrets (for rotation), a replay tolerance and a clock.
///
/// Build one with [`Verifier::builder`]. `Debug` never shows the secrets.
/// Its secrets are fixed when it is built, or a [`SecretSet`] replaced while
/// it runs ([`VerifierBuilder::secret_set`](super::VerifierBuilder::secret_set)).
#[derive(Clone)]
pub struct Verifier {
    secrets: SecretSet,
    header: http::HeaderName,
    tolerance: Tolerance,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("secrets", &format_args!("[<{} redacted>]", self.secrets.count()))
            .field("header", &self.header)
            .field("tolerance", &self.tolerance)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// A verifier of the checked settings ([`VerifierBuilder::build`] checks them).
    pub(super) fn new(
        secrets: SecretSet,
        header: http::HeaderName,
        tolerance: Tolerance,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            secrets,
            header,
            tolerance,
            clock,
        }
    }

    /// The header this verifier reads.
    pub fn header_name(&self) -> &http::HeaderName {
        &self.header
    }

    /// Verifies one header value against the raw body.
    ///
    /// # Errors
    /// [`Error::MalformedHeader`], [`Error::NoSignatureMatch`],
    /// [`Error::TimestampTooOld`] or [`Error::TimestampInFuture`].
    pub fn verify_value(&self, value: &[u8], body: &[u8]) -> Result<(), Error> {
        let signature = Signature::parse(value)?;
        if signature.v1.is_empty() {
            return Err(Error::NoSignature);
        }
        let mut formatted = itoa::Buffer::new();
        let t_digits = match signature.plain_t {
            Some(digits) => digits,
            None => formatted.format(signature.timestamp).as_bytes(),
        };
        let mut matched = subtle::Choice::from(0);
        // A match ahead of the first non-ASCII `v1` (see `Unusable`).
        let usable_before = signature.unusable.before_non_ascii.unwrap_or(usize::MAX);
        let mut matched_early = subtle::Choice::from(0);
        // One read of the set in force: every candidate is checked against it.
        let keys = self.secrets.current();
        for secret in keys.secrets.iter() {
            let expected = expected_hex(secret, t_digits, body);
            for (index, candidate) in signature.v1.iter().enumerate() {
                // Every candidate is compared, so the time taken does not tell
                // which one (or which byte of it) was close.
                let equal = constant_time::eq(&expected, candidate);
                matched |= equal;
                matched_early |= equal & subtle::Choice::from(u8::from(index < usable_before));
            }
        }
        if !bool::from(matched) {
            return Err(Error::NoSignatureMatch);
        }
        if signature.unusable.node_fails && !bool::from(matched_early) {
            return Err(Error::MalformedHeader(
                "header has non-ASCII v1 values that the official verifiers cannot compare",
            ));
        }
        self.tolerance.check(signature.timestamp, &*self.clock)
    }
}

impl SignatureScheme for Verifier {
    fn verify(&self, headers: &dyn Headers, body: &[u8]) -> Result<(), Error> {
        match headers.lookup(self.header.as_str()) {
            HeaderLookup::Missing => Err(Error::MissingHeader(self.header.clone())),
            HeaderLookup::Repeated => Err(Error::RepeatedHeader(self.header.clone())),
            HeaderLookup::Once(value) => self.verify_value(value, body),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::ConfigError;
    use crate::FixedClock;

    const BODY: &[u8] = br#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{}}}"#;
    const T: u64 = 1732264800;
    const SIG: &str = "47e6632c169b959135c86d19df2cb565cdbea26c53beb45123d38a1437d37287";

    fn verifier(now: i64) -> Verifier {
        Verifier::builder()
            .secret("whsec_test_secret")
            .clock(FixedClock::new(now))
            .build()
            .unwrap()
    }

    fn check(header: &str, body: &[u8]) -> Result<(), Error> {
        verifier(T as i64).verify_value(header.as_bytes(), body)
    }

    #[test]
    fn worked_example_byte_for_byte() {
        let secret = Secret::new("whsec_test_secret").unwrap();
        assert_eq!(sign(BODY, &secret, T), format!("t={T},v1={SIG}"));
        assert_eq!(check(&format!("t={T},v1={SIG}"), BODY), Ok(()));
    }

    #[test]
    fn timestamp_is_signed_in_plain_decimal() {
        assert_eq!(check(&format!("t=+000{T},v1={SIG}"), BODY), Ok(()));
        assert_eq!(check(&format!("t=0{T},t={T},v1={SIG}"), BODY), Ok(()));
    }

    #[test]
    fn strict_timestamp_forms_are_malformed() {
        for t in [
            "1732264800.5",
            "1732264800s",
            "",
            "-1732264800",
            "+",
            "abc",
            "1e9",
            "1732264800 x",
            "1_732_264_800",
            "\u{ff11}\u{ff17}",
            "\u{feff}1732264800",
            "1732264800\u{feff}",
            "\u{85}1732264800",
            "+ 1732264800",
            "++1732264800",
        ] {
            let err = check(&format!("t={t},v1={SIG}"), BODY).unwrap_err();
            assert!(matches!(err, Error::MalformedHeader(_)), "t={t:?} gave {err:?}");
        }
        let err = check(&format!("t=99999999999999999999999,v1={SIG}"), BODY).unwrap_err();
        assert_eq!(err, Error::MalformedHeader("t is too large"));
        let err = check(&format!("t={T},t=1,v1={SIG}"), BODY).unwrap_err();
        assert_eq!(
            err,
            Error::MalformedHeader("header has several different t values")
        );
        assert_eq!(
            check(&format!("v1={SIG}"), BODY),
            Err(Error::MalformedHeader("header has no t timestamp"))
        );
        assert_eq!(
            check("", BODY),
            Err(Error::MalformedHeader("header value is empty"))
        );
    }

    /// Both official libraries skip these spaces around the digits of `t`
    /// (their integer parsers do), so payhook does too.
    #[test]
    fn spaces_around_the_timestamp_digits_are_skipped() {
        for t in [
            " 1732264800",
            "1732264800 ",
            "\t+01732264800\r\n",
            "\u{a0}1732264800\u{85}",
            "\u{3000}\u{2028}1732264800\u{202f}",
        ] {
            assert_eq!(check(&format!("t={t},v1={SIG}"), BODY), Ok(()), "t={t:?}");
        }
        // The signed content is the plain decimal value.
        let parsed = Signature::parse(b"t=\t+123 ,v1=x").unwrap();
        assert_eq!((parsed.timestamp(), parsed.plain_t), (123, Some(&b"123"[..])));
    }

    /// Both libraries fail on a `t` or `v1` item without `=`; any other such
    /// item is skipped.
    #[test]
    fn a_t_or_v1_item_without_a_value_is_malformed() {
        for header in [
            format!("v1,t={T},v1={SIG}"),
            format!("t={T},t,v1={SIG}"),
            format!("t={T},v1={SIG},v1"),
        ] {
            assert_eq!(
                check(&header, BODY),
                Err(Error::MalformedHeader(
                    "header has a t or v1 item without a value"
                )),
                "{header}"
            );
        }
        assert_eq!(check(&format!("t={T},v1x,T,,v1={SIG}"), BODY), Ok(()));
    }

    /// Non-ASCII `v1` values: refused where both libraries refuse, ignored
    /// where only one does.
    #[test]
    fn non_ascii_signatures_follow_the_libraries() {
        let e64 = "é".repeat(64);
        let refused = Err(Error::MalformedHeader(
            "header has non-ASCII v1 values that the official verifiers cannot compare",
        ));
        // Python cannot compare the non-ASCII value before the match, node
        // fails on a 64-unit one (or an empty one) anywhere.
        assert_eq!(check(&format!("t={T},v1={e64},v1={SIG}"), BODY), refused);
        assert_eq!(check(&format!("t={T},v1=é,v1=,v1={SIG}"), BODY), refused);
        // Only one library refuses these: the value is ignored.
        assert_eq!(check(&format!("t={T},v1={SIG},v1={e64}"), BODY), Ok(()));
        assert_eq!(check(&format!("t={T},v1=é,v1={SIG}"), BODY), Ok(()));
        assert_eq!(check(&format!("t={T},v1=,v1={SIG}"), BODY), Ok(()));
    }

    #[test]
    fn any_v1_may_match_and_bad_items_are_ignored() {
        let other = "0".repeat(64);
        assert_eq!(
            check(&format!("t={T},v1={other},v0=zz,v1=,v1=xyz,v1={SIG}"), BODY),
            Ok(())
        );
        assert_eq!(check(&format!("t={T},v1={SIG},v1={other}"), BODY), Ok(()));
        // Only text up to a second `=` is the value.
        assert_eq!(check(&format!("t={T},v1={SIG}=trailing"), BODY), Ok(()));
        // Items without `=` are skipped, unless their key is `t` or `v1`.
        assert_eq!(check(&format!("t={T},junk,v1={SIG}"), BODY), Ok(()));
    }

    #[test]
    fn no_trimming_and_lowercase_only() {
        assert_eq!(check(&format!("t={T}, v1={SIG}"), BODY), Err(Error::NoSignature));
        let upper = SIG.to_uppercase();
        assert_eq!(
            check(&format!("t={T},v1={upper}"), BODY),
            Err(Error::NoSignatureMatch)
        );
        assert_eq!(check(&format!("t={T},v1=zz"), BODY), Err(Error::NoSignature));
    }

    #[test]
    fn wrong_secret_or_body_does_not_match() {
        let other = Verifier::builder()
            .secret("whsec_other")
            .clock(FixedClock::new(T as i64))
            .build()
            .unwrap();
        assert_eq!(
            other.verify_value(format!("t={T},v1={SIG}").as_bytes(), BODY),
            Err(Error::NoSignatureMatch)
        );
        assert_eq!(
            check(&format!("t={T},v1={SIG}"), b"{}"),
            Err(Error::NoSignatureMatch)
        );
        assert_eq!(
            check(&format!("t={},v1={SIG}", T + 1), BODY),
            Err(Error::NoSignatureMatch)
        );
    }

    #[test]
    fn rotation_accepts_any_configured_secret() {
        let v = Verifier::builder()
            .secrets(["whsec_new", "whsec_test_secret"])
            .clock(FixedClock::new(T as i64))
            .build()
            .unwrap();
        assert_eq!(v.verify_value(format!("t={T},v1={SIG}").as_bytes(), BODY), Ok(()));
        // The second secret matching a later `v1`, after one for another secret.
        let other = sign(BODY, &Secret::new("whsec_elsewhere").unwrap(), T);
        let other_v1 = other.split_once(",v1=").unwrap().1;
        assert_eq!(
            v.verify_value(format!("t={T},v1={other_v1},v1={SIG}").as_bytes(), BODY),
            Ok(())
        );
    }

    /// More `v1` items than are kept inline: a match in the spilled ones counts.
    #[test]
    fn a_match_beyond_the_inline_candidates_counts() {
        let decoys: Vec<String> = (0..Candidates::INLINE + 3)
            .map(|i| format!("v1={}", format!("{i:x}").repeat(64).get(..64).unwrap().to_owned()))
            .collect();
        let header = format!("t={T},{},v1={SIG}", decoys.join(","));
        assert_eq!(
            Signature::parse(header.as_bytes()).unwrap().v1().count(),
            Candidates::INLINE + 4
        );
        assert_eq!(check(&header, BODY), Ok(()));
        let without = format!("t={T},{}", decoys.join(","));
        assert_eq!(check(&without, BODY), Err(Error::NoSignatureMatch));
    }

    /// Up to the maximum of `v1` items, well-formed or not, a header is
    /// read; one more is malformed, even with the genuine signature in it.
    #[test]
    fn more_v1_items_than_the_maximum_are_refused() {
        let decoy = format!("v1={}", "0".repeat(64));
        let mut items = vec![decoy.as_str(); MAX_V1_SIGNATURES - 2];
        items.push("v1=not-hex");
        let genuine = format!("v1={SIG}");
        items.push(&genuine);
        let header = format!("t={T},{}", items.join(","));
        assert_eq!(check(&header, BODY), Ok(()));
        for extra in ["v1=", "v1=not-hex", decoy.as_str(), genuine.as_str()] {
            let header = format!("t={T},{extra},{}", items.join(","));
            let refused = check(&header, BODY).unwrap_err();
            assert_eq!(
                refused,
                Error::MalformedHeader("header has more than 16 v1 signatures"),
                "{extra}"
            );
            assert!(refused.to_string().contains(&MAX_V1_SIGNATURES.to_string()));
        }
        // Other keys do not count.
        let header = format!("t={T},{},v0=x,v2=y", items.join(","));
        assert_eq!(check(&header, BODY), Ok(()));
    }

    /// The raw bytes are signed, so a body that is not UTF-8 verifies (the
    /// official libraries decode it as text first and would refuse it).
    #[test]
    fn a_body_that_is_not_utf8_verifies_over_its_bytes() {
        let body = b"{\"id\":\"evt_1\",\"x\":\"\xff\xfe\"}";
        let header = sign(body, &Secret::new("whsec_test_secret").unwrap(), T);
        assert_eq!(check(&header, body), Ok(()));
        assert_eq!(
            check(&header, b"{\"id\":\"evt_1\",\"x\":\"\xff\xff\"}"),
            Err(Error::NoSignatureMatch)
        );
    }

    /// A zero tolerance accepts the same second only.
    #[test]
    fn zero_tolerance_means_the_same_second() {
        let at = |now: i64| {
            Verifier::builder()
                .secret("whsec_test_secret")
                .tolerance(Duration::ZERO)
                .clock(FixedClock::new(now))
                .build()
                .unwrap()
                .verify_value(format!("t={T},v1={SIG}").as_bytes(), BODY)
        };
        assert_eq!(at(T as i64), Ok(()));
        assert_eq!(
            at(T as i64 + 1),
            Err(Error::TimestampTooOld { age: 1, tolerance: 0 })
        );
        assert_eq!(
            at(T as i64 - 1),
            Err(Error::TimestampInFuture {
                ahead: 1,
                tolerance: 0
            })
        );
    }

    #[test]
    fn tolerance_is_inclusive_in_both_directions() {
        let header = format!("t={T},v1={SIG}");
        let at = |now: i64| verifier(now).verify_value(header.as_bytes(), BODY);
        assert_eq!(at(T as i64 + 300), Ok(()));
        assert_eq!(at(T as i64 - 300), Ok(()));
        assert_eq!(
            at(T as i64 + 301),
            Err(Error::TimestampTooOld {
                age: 301,
                tolerance: 300
            })
        );
        assert_eq!(
            at(T as i64 - 301),
            Err(Error::TimestampInFuture {
                ahead: 301,
                tolerance: 300
            })
        );
        let off = Verifier::builder()
            .secret("whsec_test_secret")
            .disable_timestamp_check()
            .clock(FixedClock::new(0))
            .build()
            .unwrap();
        assert_eq!(off.verify_value(header.as_bytes(), BODY), Ok(()));
    }

    #[test]
    fn configuration_errors_come_at_build_time() {
        assert_eq!(Verifier::builder().build().unwrap_err(), ConfigError::NoSecret);
        assert_eq!(
            Verifier::builder().secret("").build().unwrap_err(),
            ConfigError::EmptySecret
        );
        assert!(matches!(
            Verifier::builder().secret("s").header_name("bad header").build(),
            Err(ConfigError::InvalidHeaderName(_))
        ));
    }

    #[test]
    fn debug_never_shows_secrets_or_signatures() {
        let v = verifier(0);
        let shown = format!("{v:?}");
        assert!(!shown.contains("whsec_test_secret"), "{shown}");
        let header = format!("t={T},v1={SIG}");
        let shown = format!("{:?}", Signature::parse(header.as_bytes()).unwrap());
        assert!(!shown.contains(SIG), "{shown}");
        let shown = format!("{:?}", Verifier::builder().secret("whsec_test_secret"));
        assert!(!shown.contains("whsec_test_secret"), "{shown}");
    }
}
