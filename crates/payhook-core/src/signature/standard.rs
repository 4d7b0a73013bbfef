//! The Standard Webhooks scheme: three headers (`webhook-id`,
//! `webhook-timestamp`, `webhook-signature`) and signatures over
//! `{id}.{timestamp}.{raw body}`, symmetric (`v1`, HMAC-SHA256 with a
//! `whsec_` secret) or asymmetric (`v1a`, Ed25519 with a `whpk_` public key).
//! [`StandardWebhooks`] verifies them; its docs give the rules.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use hmac::Mac;

use super::constant_time;
use super::tolerance::{timestamp_setters, TimestampCheck, Tolerance};
use super::SignatureScheme;
use crate::clock::Clock;
use crate::error::{ConfigError, Error};
use crate::headers::{HeaderLookup, Headers};
use crate::secret::Secret;
use crate::secret_set::{Format, Keys, SecretSet};

/// The header carrying the message id: the event id deliveries are
/// deduplicated by.
pub const WEBHOOK_ID: &str = "webhook-id";
/// The header carrying the signing time, in unix seconds.
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// The header carrying the space-separated signatures.
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

/// The longest `webhook-id` accepted, in bytes.
const MAX_ID_LEN: usize = 255;

/// The most items a `webhook-signature` header may hold, of any version.
///
/// A sender signs once per key it holds, two or three during a rotation;
/// each `v1a` item costs an Ed25519 check per public key, so without a bound a
/// header of thousands of items signed by any key costs a second of CPU. Past
/// this many the header is refused before any cryptography.
pub const MAX_SIGNATURE_ITEMS: usize = 8;

/// The Standard Webhooks [`SignatureScheme`]: any number of `whsec_` secrets
/// (`v1` signatures) and `whpk_` Ed25519 public keys (`v1a` signatures, feature
/// `ed25519`), a replay tolerance and a clock. Select it on a receiver with
/// [`ReceiverBuilder::scheme`](crate::ReceiverBuilder::scheme).
///
/// A delivery carries three headers, each exactly once:
///
/// * `webhook-id`: the message id, 1 to 255 visible ASCII characters. It is
///   the event id deliveries are deduplicated by ([`Event::id`](crate::Event::id),
///   the inbox's id); the body's own `id`, if any, is ignored.
/// * `webhook-timestamp`: the signing time, a whole number of unix seconds
///   (ASCII digits only). It must lie within the tolerance (300 s by default)
///   on both sides of the receiver's clock, the same rule as the service's
///   scheme.
/// * `webhook-signature`: space-separated items `version,base64`, at most
///   [`MAX_SIGNATURE_ITEMS`] of them (more is a malformed header). A `v1` item
///   is the base64 HMAC-SHA256 of `{id}.{timestamp}.{raw body}` keyed with a
///   secret's decoded bytes; a `v1a` item the base64 Ed25519 signature of the
///   same content. The delivery is genuine when any `v1` or `v1a` item matches
///   any configured key of its kind. Items of other versions are ignored; an
///   item without a comma, or whose base64 does not decode to a signature of
///   its version's length, is ignored too, unless no `v1` or `v1a` item is
///   left (then the header is malformed). An item repeated is checked once. The
///   timestamp is signed in its plain decimal form, as the reference libraries
///   do.
///
/// Missing, repeated or malformed headers are answered `400 Webhook Error: …`
/// naming the header; a signature that matches no key with
/// [`Error::NoSignatureMatch`]. HMACs are compared in constant time, and every
/// candidate is compared with every secret.
///
/// `v1a` signatures are checked with `ed25519-dalek`'s `verify_strict`: every
/// signature a conforming signer makes passes it, and it refuses the
/// small-order points that let one signature verify for several messages or
/// keys. Public keys that are such points (weak keys) are refused at build.
///
/// Keys: a secret is `whsec_` followed by the standard base64 (with padding)
/// of 24 to 64 random bytes; a public key `whpk_` followed by the base64 of a
/// 32-byte Ed25519 public key. The prefix may be left out, as the reference
/// libraries allow. A key that cannot be used is a [`ConfigError::InvalidKey`]
/// naming its kind and position, never its value.
///
/// ```
/// use payhook::signature::StandardWebhooks;
/// use payhook::{FixedClock, Receiver};
///
/// // The specification's own example.
/// let scheme = StandardWebhooks::builder()
///     .secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
///     .clock(FixedClock::new(1614265330))
///     .build()
///     .unwrap();
/// let mut headers = http::HeaderMap::new();
/// headers.insert("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek".parse().unwrap());
/// headers.insert("webhook-timestamp", "1614265330".parse().unwrap());
/// headers.insert(
///     "webhook-signature",
///     "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=".parse().unwrap(),
/// );
/// assert!(scheme.verify_headers(&headers, br#"{"test": 2432232314}"#).is_ok());
///
/// // On a receiver, beside or instead of the service's scheme.
/// let receiver = Receiver::builder().scheme(scheme).build().unwrap();
/// # let _ = receiver;
/// ```
#[derive(Clone)]
pub struct StandardWebhooks {
    /// The secrets and public keys, fixed at build or a set replaced while
    /// the scheme runs.
    keys: SecretSet,
    tolerance: Tolerance,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for StandardWebhooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = self.keys.current();
        let mut out = f.debug_struct("StandardWebhooks");
        out.field("secrets", &format_args!("[<{} redacted>]", keys.secrets.len()));
        #[cfg(feature = "ed25519")]
        out.field("public_keys", &keys.public_keys.len());
        out.field("tolerance", &self.tolerance).finish_non_exhaustive()
    }
}

/// The headers of one delivery, checked, with the signatures decoded.
struct Parts<'a> {
    id: &'a [u8],
    timestamp: u64,
    v1: Decoded<32>,
    v1a: Decoded<64>,
}

impl StandardWebhooks {
    /// Starts a builder: at least one secret or public key is required.
    pub fn builder() -> StandardWebhooksBuilder {
        StandardWebhooksBuilder::default()
    }

    /// Verifies a delivery from its headers and raw body, by the rules in the
    /// [type's docs](StandardWebhooks). The same as
    /// [`SignatureScheme::verify`], without naming the trait.
    ///
    /// # Errors
    /// [`Error::MissingHeader`], [`Error::RepeatedHeader`],
    /// [`Error::InvalidHeader`], [`Error::NoSignatureMatch`],
    /// [`Error::TimestampTooOld`] or [`Error::TimestampInFuture`].
    pub fn verify_headers(&self, headers: &dyn Headers, body: &[u8]) -> Result<(), Error> {
        let parts = Parts::read(headers)?;
        let mut t = itoa::Buffer::new();
        let t = t.format(parts.timestamp).as_bytes();
        // One read of the keys in force: every candidate is checked against it.
        let keys = self.keys.current();
        if !(v1_matches(&keys, &parts, t, body) || v1a_matches(&keys, &parts, t, body)) {
            return Err(Error::NoSignatureMatch);
        }
        self.tolerance.check(parts.timestamp, &*self.clock)
    }
}

fn v1_matches(keys: &Keys, parts: &Parts<'_>, t: &[u8], body: &[u8]) -> bool {
    let mut matched = subtle::Choice::from(0);
    for secret in keys.secrets.iter() {
        let expected = hmac_of(secret, parts.id, t, body);
        // Every candidate is compared, so the time taken does not tell
        // which one (or which byte of it) was close.
        for candidate in parts.v1.as_slice() {
            matched |= constant_time::eq(&expected, candidate.as_slice());
        }
    }
    bool::from(matched)
}

#[cfg(feature = "ed25519")]
fn v1a_matches(keys: &Keys, parts: &Parts<'_>, t: &[u8], body: &[u8]) -> bool {
    if parts.v1a.is_empty() || keys.public_keys.is_empty() {
        return false;
    }
    let message = signed_content(parts.id, t, body);
    parts.v1a.as_slice().iter().any(|candidate| {
        let signature = ed25519_dalek::Signature::from_bytes(candidate);
        // Public values only: no need for constant time here.
        keys.public_keys
            .iter()
            .any(|key| key.verify_strict(&message, &signature).is_ok())
    })
}

#[cfg(not(feature = "ed25519"))]
fn v1a_matches(_: &Keys, _: &Parts<'_>, _: &[u8], _: &[u8]) -> bool {
    false
}

impl SignatureScheme for StandardWebhooks {
    fn verify(&self, headers: &dyn Headers, body: &[u8]) -> Result<(), Error> {
        self.verify_headers(headers, body)
    }

    /// The `webhook-id` header (the body of a Standard Webhooks delivery has
    /// no id of its own).
    fn event_id<'h>(&self, headers: &'h dyn Headers) -> Option<&'h str> {
        match headers.lookup(WEBHOOK_ID) {
            HeaderLookup::Once(id) => checked_id(id).ok().and_then(|id| std::str::from_utf8(id).ok()),
            _ => None,
        }
    }
}

impl<'a> Parts<'a> {
    fn read(headers: &'a dyn Headers) -> Result<Self, Error> {
        let id = checked_id(header(headers, WEBHOOK_ID)?)?;
        let timestamp = parse_timestamp(header(headers, WEBHOOK_TIMESTAMP)?)?;
        let mut parts = Self {
            id,
            timestamp,
            v1: Decoded::default(),
            v1a: Decoded::default(),
        };
        parts.read_signatures(header(headers, WEBHOOK_SIGNATURE)?)?;
        Ok(parts)
    }

    /// Sorts the well-formed `v1` and `v1a` items of the signature header into
    /// their lists, decoded, each distinct item once. The items are counted
    /// before any is decoded, so a flood of them costs no cryptography.
    fn read_signatures(&mut self, value: &[u8]) -> Result<(), Error> {
        let items = || value.split(|&b| b == b' ').filter(|item| !item.is_empty());
        if items().nth(MAX_SIGNATURE_ITEMS).is_some() {
            return Err(Error::InvalidHeader {
                header: http::HeaderName::from_static(WEBHOOK_SIGNATURE),
                reason: "more than 8 signatures",
            });
        }
        for item in items() {
            let Some(comma) = item.iter().position(|&b| b == b',') else {
                continue;
            };
            let (version, encoded) = (&item[..comma], &item[comma + 1..]);
            match version {
                b"v1" => self.v1.push_distinct(decode_exact::<32>(encoded)),
                b"v1a" => self.v1a.push_distinct(decode_exact::<64>(encoded)),
                _ => {}
            }
        }
        if self.v1.is_empty() && self.v1a.is_empty() {
            return Err(Error::InvalidHeader {
                header: http::HeaderName::from_static(WEBHOOK_SIGNATURE),
                reason: "no well-formed v1 or v1a signature",
            });
        }
        Ok(())
    }
}

/// The distinct decoded signatures of one version, at most
/// [`MAX_SIGNATURE_ITEMS`], kept inline: reading a header does not allocate.
struct Decoded<const N: usize> {
    items: [[u8; N]; MAX_SIGNATURE_ITEMS],
    len: usize,
}

impl<const N: usize> Default for Decoded<N> {
    fn default() -> Self {
        Self {
            items: [[0; N]; MAX_SIGNATURE_ITEMS],
            len: 0,
        }
    }
}

impl<const N: usize> Decoded<N> {
    /// Adds a decoded signature unless it is already listed: a header
    /// repeating one item costs one check, not one per copy. The header's
    /// items were counted first, so there is always room.
    fn push_distinct(&mut self, signature: Option<[u8; N]>) {
        let Some(signature) = signature else { return };
        if self.as_slice().contains(&signature) {
            return;
        }
        if let Some(slot) = self.items.get_mut(self.len) {
            *slot = signature;
            self.len += 1;
        }
    }

    fn as_slice(&self) -> &[[u8; N]] {
        &self.items[..self.len]
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The value of a header that must appear exactly once.
fn header<'h>(headers: &'h dyn Headers, name: &'static str) -> Result<&'h [u8], Error> {
    match headers.lookup(name) {
        HeaderLookup::Once(value) => Ok(value),
        HeaderLookup::Missing => Err(Error::MissingHeader(http::HeaderName::from_static(name))),
        HeaderLookup::Repeated => Err(Error::RepeatedHeader(http::HeaderName::from_static(name))),
    }
}

fn checked_id(id: &[u8]) -> Result<&[u8], Error> {
    let malformed = |reason| Error::InvalidHeader {
        header: http::HeaderName::from_static(WEBHOOK_ID),
        reason,
    };
    if id.is_empty() {
        return Err(malformed("the id is empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(malformed("the id is longer than 255 bytes"));
    }
    if !id.iter().all(|b| b.is_ascii_graphic()) {
        return Err(malformed("the id has characters other than visible ASCII"));
    }
    Ok(id)
}

fn parse_timestamp(value: &[u8]) -> Result<u64, Error> {
    let malformed = |reason| Error::InvalidHeader {
        header: http::HeaderName::from_static(WEBHOOK_TIMESTAMP),
        reason,
    };
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return Err(malformed("not a whole number of unix seconds"));
    }
    value.iter().try_fold(0u64, |t, &d| {
        t.checked_mul(10)
            .and_then(|t| t.checked_add(u64::from(d - b'0')))
            .ok_or_else(|| malformed("the timestamp is too large"))
    })
}

/// Standard base64 (with padding) that decodes to exactly `N` bytes.
fn decode_exact<const N: usize>(encoded: &[u8]) -> Option<[u8; N]> {
    // A longer text cannot decode to `N` bytes; checking first bounds the work.
    if encoded.len() != N.div_ceil(3) * 4 {
        return None;
    }
    let mut out = [0u8; N];
    let written = base64::engine::general_purpose::STANDARD
        .decode_slice(encoded, &mut out)
        .ok()?;
    (written == N).then_some(out)
}

/// The HMAC-SHA256 of `{id}.{t}.{body}`.
pub(crate) fn hmac_of(secret: &Secret, id: &[u8], t: &[u8], body: &[u8]) -> [u8; 32] {
    let mut mac = secret.mac();
    mac.update(id);
    mac.update(b".");
    mac.update(t);
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// `{id}.{t}.{body}` in one buffer, the message an Ed25519 signature covers.
#[cfg(feature = "ed25519")]
pub(crate) fn signed_content(id: &[u8], t: &[u8], body: &[u8]) -> Vec<u8> {
    let mut message = Vec::with_capacity(id.len() + t.len() + body.len() + 2);
    message.extend_from_slice(id);
    message.push(b'.');
    message.extend_from_slice(t);
    message.push(b'.');
    message.extend_from_slice(body);
    message
}

/// The prefixes of the three kinds of Standard Webhooks keys.
pub(crate) const SECRET_PREFIX: &str = "whsec_";
/// See [`SECRET_PREFIX`].
pub(crate) const PUBLIC_KEY_PREFIX: &str = "whpk_";
/// See [`SECRET_PREFIX`].
pub(crate) const SIGNING_KEY_PREFIX: &str = "whsk_";

/// The bytes of a key: the base64 after its prefix (which may be left out).
/// A key carrying another kind's prefix is refused, so a signing key is never
/// taken for a public key. `Err` is the reason, for [`ConfigError::InvalidKey`].
pub(crate) fn decode_key(key: &str, prefix: &str) -> Result<Vec<u8>, &'static str> {
    let encoded = match key.strip_prefix(prefix) {
        Some(encoded) => encoded,
        None if [SECRET_PREFIX, PUBLIC_KEY_PREFIX, SIGNING_KEY_PREFIX]
            .iter()
            .any(|other| key.starts_with(other)) =>
        {
            return Err(match prefix {
                SECRET_PREFIX => "does not start with whsec_",
                PUBLIC_KEY_PREFIX => "does not start with whpk_",
                _ => "does not start with whsk_",
            });
        }
        None => key,
    };
    if encoded.is_empty() {
        return Err("is empty");
    }
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| "is not base64")
}

/// A `whsec_` secret's HMAC key: 24 to 64 decoded bytes.
pub(crate) fn secret_of(key: &str) -> Result<Secret, &'static str> {
    let bytes = decode_key(key, SECRET_PREFIX)?;
    if !(24..=64).contains(&bytes.len()) {
        return Err("does not decode to 24 to 64 bytes");
    }
    Secret::new(bytes).map_err(|_| "is empty")
}

/// A `whpk_` public key: 32 decoded bytes, a valid point that is not of small order.
#[cfg(feature = "ed25519")]
pub(crate) fn public_key_of(key: &str) -> Result<ed25519_dalek::VerifyingKey, &'static str> {
    let bytes = decode_key(key, PUBLIC_KEY_PREFIX)?;
    let bytes = <[u8; 32]>::try_from(bytes).map_err(|_| "does not decode to 32 bytes")?;
    let key = ed25519_dalek::VerifyingKey::from_bytes(&bytes).map_err(|_| "is not an Ed25519 public key")?;
    if key.is_weak() {
        return Err("is a weak (small-order) Ed25519 key");
    }
    Ok(key)
}

/// Builder for [`StandardWebhooks`]. Keys are checked at [`build`](Self::build).
#[derive(Default)]
pub struct StandardWebhooksBuilder {
    secrets: Vec<String>,
    secret_set: Option<SecretSet>,
    #[cfg(feature = "ed25519")]
    public_keys: Vec<String>,
    timestamp: TimestampCheck,
}

impl fmt::Debug for StandardWebhooksBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("StandardWebhooksBuilder");
        out.field("secrets", &format_args!("[<{} redacted>]", self.secrets.len()));
        #[cfg(feature = "ed25519")]
        out.field("public_keys", &self.public_keys.len());
        out.field("tolerance", &self.timestamp.tolerance)
            .finish_non_exhaustive()
    }
}

impl StandardWebhooksBuilder {
    /// Adds a `whsec_` secret, verifying `v1` signatures. Call it again (or use
    /// [`secrets`](Self::secrets)) to accept several during a rotation.
    pub fn secret(mut self, secret: impl AsRef<str>) -> Self {
        self.secrets.push(secret.as_ref().to_owned());
        self
    }

    /// Adds several `whsec_` secrets.
    pub fn secrets<I, S>(mut self, secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.secrets
            .extend(secrets.into_iter().map(|key| key.as_ref().to_owned()));
        self
    }

    /// Adds a `whpk_` Ed25519 public key, verifying `v1a` signatures. Call it
    /// again (or use [`public_keys`](Self::public_keys)) to accept several.
    #[cfg(feature = "ed25519")]
    #[cfg_attr(docsrs, doc(cfg(feature = "ed25519")))]
    pub fn public_key(mut self, key: impl AsRef<str>) -> Self {
        self.public_keys.push(key.as_ref().to_owned());
        self
    }

    /// Adds several `whpk_` public keys.
    #[cfg(feature = "ed25519")]
    #[cfg_attr(docsrs, doc(cfg(feature = "ed25519")))]
    pub fn public_keys<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.public_keys
            .extend(keys.into_iter().map(|key| key.as_ref().to_owned()));
        self
    }

    /// Verifies with a Standard Webhooks [`SecretSet`]
    /// ([`SecretSet::standard_webhooks`], or read from a file with
    /// [`SecretSet::standard_webhooks_from_file`]) that can be replaced while
    /// the scheme runs, instead of fixed keys (not with
    /// [`secret`](Self::secret) or [`public_key`](Self::public_key) and their
    /// siblings).
    ///
    /// ```
    /// use payhook::signature::StandardWebhooks;
    /// use payhook::SecretSet;
    ///
    /// let keys = SecretSet::standard_webhooks(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).unwrap();
    /// let scheme = StandardWebhooks::builder().secret_set(&keys).build().unwrap();
    /// # let _ = scheme;
    /// ```
    pub fn secret_set(mut self, keys: &SecretSet) -> Self {
        self.secret_set = Some(keys.clone());
        self
    }

    timestamp_setters! {
        /// The replay tolerance (default 300 s), checked in whole seconds in both
        /// directions; a zero duration means "same second only".
        tolerance;
        /// The clock that gives "now" (default: the system clock).
        clock;
    }

    /// Checks every key.
    ///
    /// # Errors
    /// [`ConfigError::NoKey`] without any key, or [`ConfigError::InvalidKey`]
    /// naming the first key that cannot be used by its kind and position
    /// (`secret #2 is not base64`); [`ConfigError::InvalidSetting`] for a
    /// secret set beside fixed keys, or a set of the service's secrets.
    pub fn build(self) -> Result<StandardWebhooks, ConfigError> {
        #[cfg(feature = "ed25519")]
        let fixed_keys = !self.secrets.is_empty() || !self.public_keys.is_empty();
        #[cfg(not(feature = "ed25519"))]
        let fixed_keys = !self.secrets.is_empty();
        match self.secret_set {
            Some(_) if fixed_keys => {
                return Err(ConfigError::InvalidSetting(
                    "a secret set replaces fixed keys: give secret_set() or secret()/public_key(), not both",
                ))
            }
            Some(set) if set.format() != Format::StandardWebhooks => {
                return Err(ConfigError::InvalidSetting(
                    "this secret set holds the service's secrets: make a Standard Webhooks one with \
                     SecretSet::standard_webhooks() or SecretSet::standard_webhooks_from_file()",
                ))
            }
            Some(keys) => {
                let (tolerance, clock) = self.timestamp.into_parts();
                return Ok(StandardWebhooks {
                    keys,
                    tolerance,
                    clock,
                });
            }
            None => {}
        }
        let invalid = |kind, index: usize| {
            move |reason| ConfigError::InvalidKey {
                kind,
                position: index + 1,
                reason,
            }
        };
        let secrets = (self.secrets.iter().enumerate())
            .map(|(i, key)| secret_of(key).map_err(invalid("secret", i)))
            .collect::<Result<Vec<_>, _>>()?;
        #[cfg(feature = "ed25519")]
        let public_keys = (self.public_keys.iter().enumerate())
            .map(|(i, key)| public_key_of(key).map_err(invalid("public key", i)))
            .collect::<Result<Vec<_>, _>>()?;
        #[cfg(feature = "ed25519")]
        let no_key = secrets.is_empty() && public_keys.is_empty();
        #[cfg(not(feature = "ed25519"))]
        let no_key = secrets.is_empty();
        if no_key {
            return Err(ConfigError::NoKey);
        }
        let (tolerance, clock) = self.timestamp.into_parts();
        Ok(StandardWebhooks {
            keys: SecretSet::fixed(
                Format::StandardWebhooks,
                Keys {
                    secrets: secrets.into(),
                    #[cfg(feature = "ed25519")]
                    public_keys: public_keys.into(),
                },
            ),
            tolerance,
            clock,
        })
    }
}

#[cfg(test)]
mod tests;
