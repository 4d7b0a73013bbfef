//! [`VerifierBuilder`]: the built-in scheme's settings (secrets, header,
//! tolerance, clock), each checked once at [`build`](VerifierBuilder::build).

use std::fmt;
use std::time::Duration;

use super::stripe::{Verifier, DEFAULT_HEADER};
use super::tolerance::{timestamp_setters, TimestampCheck};
use crate::clock::Clock;
use crate::error::ConfigError;
use crate::secret::Secret;
use crate::secret_set::{Format, Keys, SecretSet};

impl Verifier {
    /// Starts a builder: at least one secret is required.
    pub fn builder() -> VerifierBuilder {
        VerifierBuilder::default()
    }
}

/// Builder for [`Verifier`].
#[derive(Default)]
pub struct VerifierBuilder {
    secrets: Vec<Result<Secret, ConfigError>>,
    secret_set: Option<SecretSet>,
    header: Option<Result<http::HeaderName, ConfigError>>,
    timestamp: TimestampCheck,
}

impl fmt::Debug for VerifierBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifierBuilder")
            .field("secrets", &format_args!("[<{} redacted>]", self.secrets.len()))
            .field("tolerance", &self.timestamp.tolerance)
            .finish_non_exhaustive()
    }
}

impl VerifierBuilder {
    /// Adds a signing secret. Call it again (or use [`secrets`](Self::secrets)) to
    /// accept several during a rotation: a delivery is genuine when any `v1` in its
    /// header matches any secret.
    pub fn secret(mut self, secret: impl AsRef<[u8]>) -> Self {
        self.secrets.push(Secret::new(secret));
        self
    }

    /// Adds several signing secrets.
    pub fn secrets<I, S>(mut self, secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<[u8]>,
    {
        self.secrets.extend(secrets.into_iter().map(Secret::new));
        self
    }

    /// Verifies with a [`SecretSet`] that can be replaced while the verifier
    /// runs, instead of fixed secrets (not with [`secret`](Self::secret) and
    /// its siblings).
    ///
    /// ```
    /// use payhook::{SecretSet, Verifier};
    ///
    /// let secrets = SecretSet::new(["whsec_current"]).unwrap();
    /// let verifier = Verifier::builder().secret_set(&secrets).build().unwrap();
    /// secrets.replace(["whsec_current", "whsec_next"]).unwrap(); // seen by `verifier` at once
    /// # let _ = verifier;
    /// ```
    pub fn secret_set(mut self, secrets: &SecretSet) -> Self {
        self.secret_set = Some(secrets.clone());
        self
    }

    /// Adds an already checked [`Secret`].
    pub fn secret_value(mut self, secret: Secret) -> Self {
        self.secrets.push(Ok(secret));
        self
    }

    /// The header to read instead of `x-service-signature` (case-insensitive).
    pub fn header_name(mut self, name: &str) -> Self {
        self.header = Some(
            http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ConfigError::InvalidHeaderName(name.to_owned())),
        );
        self
    }

    timestamp_setters! {
        /// The replay tolerance (default 300 s), checked in whole seconds in both
        /// directions. Use [`disable_timestamp_check`](Self::disable_timestamp_check)
        /// to turn the check off; a zero duration means "same second only".
        tolerance;
        /// The clock that gives "now" (default: the system clock). Tests inject a
        /// [`FixedClock`](crate::FixedClock).
        clock;
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// [`ConfigError::NoSecret`], [`ConfigError::EmptySecret`] or
    /// [`ConfigError::InvalidHeaderName`]; [`ConfigError::InvalidSetting`]
    /// for a secret set beside fixed secrets, or a Standard Webhooks set.
    pub fn build(self) -> Result<Verifier, ConfigError> {
        let secrets = self.secrets.into_iter().collect::<Result<Vec<_>, _>>()?;
        let secrets = match self.secret_set {
            Some(_) if !secrets.is_empty() => {
                return Err(ConfigError::InvalidSetting(
                    "a secret set replaces fixed secrets: give secret_set() or secret(), not both",
                ))
            }
            Some(set) if set.format() != Format::Service => {
                return Err(ConfigError::InvalidSetting(
                    "a Standard Webhooks secret set goes to StandardWebhooks::builder().secret_set(), \
                     not to the service's scheme",
                ))
            }
            Some(set) => set,
            None if secrets.is_empty() => return Err(ConfigError::NoSecret),
            None => SecretSet::fixed(
                Format::Service,
                Keys {
                    secrets: secrets.into(),
                    #[cfg(feature = "ed25519")]
                    public_keys: Box::default(),
                },
            ),
        };
        let header = match self.header {
            Some(header) => header?,
            None => http::HeaderName::from_static(DEFAULT_HEADER),
        };
        let (tolerance, clock) = self.timestamp.into_parts();
        Ok(Verifier::new(secrets, header, tolerance, clock))
    }
}
