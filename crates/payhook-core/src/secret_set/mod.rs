//! Signing secrets that change under a running receiver: [`SecretSet`].
//!
//! A set is shared by the verifier that reads it and the code that replaces
//! it (a secret manager's callback, a file re-read on `SIGHUP`, a timer). A
//! replacement is one pointer swap under the write lock; a verification
//! holds the read lock (uncontended: one atomic operation each way, no
//! reference count) while it checks every candidate against the one set it
//! found, so a delivery verified during a swap sees the old set or the new
//! one, never a mix of the two or an empty one. A replacement waits for the
//! verifications under way, microseconds.
//! A set never becomes empty: a replacement without a usable secret is
//! refused and the current set stays.
//!
//! `file.rs` adds the file source: reading one secret per line, reloading on
//! request, on `SIGHUP` (feature `sighup`) and when the file changes.

mod file;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard};

use crate::error::ConfigError;
use crate::secret::Secret;

/// The secrets and keys in force at one moment; replaced whole, never edited.
pub(crate) struct Keys {
    /// HMAC secrets: the service's `whsec_` strings, or Standard Webhooks'
    /// decoded `whsec_` keys.
    pub(crate) secrets: Box<[Secret]>,
    /// Standard Webhooks `whpk_` keys (`v1a`).
    #[cfg(feature = "ed25519")]
    pub(crate) public_keys: Box<[ed25519_dalek::VerifyingKey]>,
}

impl Keys {
    fn count(&self) -> usize {
        #[cfg(feature = "ed25519")]
        return self.secrets.len() + self.public_keys.len();
        #[cfg(not(feature = "ed25519"))]
        self.secrets.len()
    }
}

/// Which scheme a set's lines are keys of: it decides how a line is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// The service's `x-service-signature`: each secret is the whole
    /// `whsec_…` string.
    Service,
    /// Standard Webhooks: `whsec_` (base64) secrets and `whpk_` public keys.
    StandardWebhooks,
}

/// A set of signing secrets that can be replaced while receivers use it.
///
/// Give it to a receiver with [`ReceiverBuilder::secret_set`](crate::ReceiverBuilder::secret_set)
/// (the service's `x-service-signature`), or to
/// [`StandardWebhooksBuilder::secret_set`](crate::signature::StandardWebhooksBuilder::secret_set);
/// keep a clone (it is an `Arc`) to change the secrets later, in every
/// adapter, inline or in inbox mode, without a restart:
///
/// * [`replace`](Self::replace) swaps the whole set at once: a delivery
///   verified meanwhile is checked against the old set or the new one, never
///   a mix or none;
/// * [`from_file`](Self::from_file) reads one secret per line, and
///   [`reload`](Self::reload) reads the file again;
///   [`reload_on_sighup`](Self::reload_on_sighup) (feature `sighup`) does it
///   when the process gets `SIGHUP`, and [`watch_file`](Self::watch_file)
///   when the file changes (Kubernetes and other secret managers rotate by
///   rewriting a mounted file).
///
/// A set is never empty, and a replacement or file that cannot be used is
/// refused whole: the set in force stays, and a reload logs why at `WARN`
/// (which line and what is wrong with it, never its content). Each reload
/// logs how many secrets are now active at `INFO`. No secret is ever logged,
/// and `Debug` shows only the count.
///
/// The service's secrets start with `whsec_`; the whole string is the HMAC
/// key, as with [`ReceiverBuilder::secret`](crate::ReceiverBuilder::secret).
/// A Standard Webhooks set ([`standard_webhooks`](Self::standard_webhooks))
/// takes `whsec_` secrets and `whpk_` public keys (feature `ed25519`), each
/// with its prefix.
///
/// ```
/// use payhook::{Receiver, SecretSet};
///
/// # fn main() -> Result<(), payhook::ConfigError> {
/// let secrets = SecretSet::new(["whsec_current"])?;
/// let receiver = Receiver::builder().secret_set(&secrets).build()?;
///
/// // Rolling: the new secret beside the old one, then the new one alone.
/// secrets.replace(["whsec_current", "whsec_next"])?;
/// assert_eq!(secrets.count(), 2);
/// secrets.replace(["whsec_next"])?;
///
/// // A replacement that cannot be used changes nothing.
/// assert!(secrets.replace(["not_a_secret"]).is_err());
/// assert!(secrets.replace(Vec::<String>::new()).is_err());
/// assert_eq!(secrets.count(), 1);
/// # let _ = receiver;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SecretSet {
    inner: Arc<Inner>,
}

struct Inner {
    format: Format,
    /// Read once per verification; written by a replacement.
    current: RwLock<Arc<Keys>>,
    /// The file the set is read from, if any.
    file: Option<PathBuf>,
    /// What the file watcher saw last (a digest of the contents, or the
    /// error it logged), so a change is acted on and logged once.
    seen: Mutex<Option<file::Seen>>,
}

impl fmt::Debug for SecretSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretSet")
            .field("format", &self.inner.format)
            .field("secrets", &format_args!("[<{} redacted>]", self.count()))
            .field("file", &self.inner.file)
            .finish()
    }
}

impl SecretSet {
    /// A set of the service's signing secrets (`whsec_…`, each the whole HMAC
    /// key).
    ///
    /// # Errors
    /// [`ConfigError::NoSecret`] for none, [`ConfigError::InvalidKey`] naming
    /// the first secret that does not start with `whsec_` or has characters
    /// other than visible ASCII (by position, never by value).
    pub fn new<I, S>(secrets: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let keys = parse(Format::Service, secrets)?;
        Ok(Self::with(Format::Service, keys, None))
    }

    /// A set of Standard Webhooks keys: `whsec_` secrets (`v1`) and, with
    /// feature `ed25519`, `whpk_` public keys (`v1a`), in any order.
    ///
    /// ```
    /// use payhook::signature::StandardWebhooks;
    /// use payhook::{Receiver, SecretSet};
    ///
    /// # fn main() -> Result<(), payhook::ConfigError> {
    /// let keys = SecretSet::standard_webhooks(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])?;
    /// let scheme = StandardWebhooks::builder().secret_set(&keys).build()?;
    /// let receiver = Receiver::builder().scheme(scheme).build()?;
    /// # let _ = receiver;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ConfigError::NoKey`] for none, [`ConfigError::InvalidKey`] naming the
    /// first key that cannot be used (its kind and position, never its value).
    pub fn standard_webhooks<I, S>(keys: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let keys = parse(Format::StandardWebhooks, keys)?;
        Ok(Self::with(Format::StandardWebhooks, keys, None))
    }

    /// Replaces every secret at once, and returns how many are now active.
    /// Deliveries being verified finish with the set they started with; the
    /// next ones use the new set.
    ///
    /// # Errors
    /// As [`new`](Self::new) (or [`standard_webhooks`](Self::standard_webhooks)
    /// for such a set); the set in force then stays.
    pub fn replace<I, S>(&self, secrets: I) -> Result<usize, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let keys = parse(self.inner.format, secrets)?;
        Ok(self.swap(keys))
    }

    /// How many secrets (and public keys) are active now.
    pub fn count(&self) -> usize {
        self.current().count()
    }

    /// The file the set is read from, when it came from
    /// [`from_file`](Self::from_file).
    pub fn path(&self) -> Option<&Path> {
        self.inner.file.as_deref()
    }

    /// A set of already checked secrets, for a verifier built with fixed
    /// secrets (any non-empty string, as the builder has always taken).
    pub(crate) fn fixed(format: Format, keys: Keys) -> Self {
        Self::with(format, keys, None)
    }

    fn with(format: Format, keys: Keys, file: Option<PathBuf>) -> Self {
        Self {
            inner: Arc::new(Inner {
                format,
                current: RwLock::new(Arc::new(keys)),
                file,
                seen: Mutex::new(None),
            }),
        }
    }

    pub(crate) fn format(&self) -> Format {
        self.inner.format
    }

    /// The keys in force: one read, held while a verification checks every
    /// candidate against this one set. A replacement waits for the
    /// verifications under way (microseconds), so the verify path costs one
    /// uncontended read lock and no reference count.
    pub(crate) fn current(&self) -> RwLockReadGuard<'_, Arc<Keys>> {
        self.inner.current.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts `keys` in force whole; returns how many there are.
    fn swap(&self, keys: Keys) -> usize {
        let count = keys.count();
        let keys = Arc::new(keys);
        // The old set is dropped after the lock is released.
        let _old = std::mem::replace(
            &mut *self.inner.current.write().unwrap_or_else(PoisonError::into_inner),
            keys,
        );
        count
    }
}

/// Why one secret or key cannot be used (never quoting it).
fn check_line(format: Format, line: &str) -> Result<Key, (&'static str, &'static str)> {
    match format {
        Format::Service => {
            let Some(rest) = line.strip_prefix(crate::signature::SECRET_PREFIX) else {
                return Err(("secret", "does not start with whsec_"));
            };
            if rest.is_empty() {
                return Err(("secret", "is whsec_ alone"));
            }
            if !rest.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(("secret", "has characters other than visible ASCII"));
            }
            Secret::new(line)
                .map(Key::Secret)
                .map_err(|_| ("secret", "is empty"))
        }
        Format::StandardWebhooks => {
            if line.starts_with(crate::signature::SECRET_PREFIX) {
                return crate::signature::secret_of(line)
                    .map(Key::Secret)
                    .map_err(|reason| ("secret", reason));
            }
            #[cfg(feature = "ed25519")]
            if line.starts_with(crate::signature::PUBLIC_KEY_PREFIX) {
                return crate::signature::public_key_of(line)
                    .map(Key::Public)
                    .map_err(|reason| ("public key", reason));
            }
            #[cfg(not(feature = "ed25519"))]
            if line.starts_with("whpk_") {
                return Err(("public key", "needs payhook's ed25519 feature"));
            }
            Err(("key", "does not start with whsec_ or whpk_"))
        }
    }
}

enum Key {
    Secret(Secret),
    #[cfg(feature = "ed25519")]
    Public(ed25519_dalek::VerifyingKey),
}

/// Collects checked keys; `Err((kind, index from 0, reason))` for the first
/// that cannot be used, or a set with no key.
fn collect<'a>(format: Format, lines: impl Iterator<Item = (usize, &'a str)>) -> Result<Keys, KeysError> {
    let mut secrets = Vec::new();
    #[cfg(feature = "ed25519")]
    let mut public_keys = Vec::new();
    for (index, line) in lines {
        match check_line(format, line) {
            Ok(Key::Secret(secret)) => secrets.push(secret),
            #[cfg(feature = "ed25519")]
            Ok(Key::Public(key)) => public_keys.push(key),
            Err((kind, reason)) => return Err(KeysError::Invalid { kind, index, reason }),
        }
    }
    let keys = Keys {
        secrets: secrets.into(),
        #[cfg(feature = "ed25519")]
        public_keys: public_keys.into(),
    };
    if keys.count() == 0 {
        return Err(KeysError::None);
    }
    Ok(keys)
}

enum KeysError {
    None,
    Invalid {
        kind: &'static str,
        index: usize,
        reason: &'static str,
    },
}

/// The keys of a list given in code: positions count from 1.
fn parse<I, S>(format: Format, items: I) -> Result<Keys, ConfigError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let items: Vec<S> = items.into_iter().collect();
    collect(format, items.iter().map(AsRef::as_ref).enumerate()).map_err(|error| match error {
        KeysError::None if format == Format::Service => ConfigError::NoSecret,
        KeysError::None => ConfigError::NoKey,
        KeysError::Invalid { kind, index, reason } => ConfigError::InvalidKey {
            kind,
            position: index + 1,
            reason,
        },
    })
}
