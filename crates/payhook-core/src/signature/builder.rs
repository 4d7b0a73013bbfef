//! [`VerifierBuilder`]: the built-in scheme's settings (secrets, header,
//! tolerance, clock), each checked once at [`build`](VerifierBuilder::build).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::stripe::{Verifier, DEFAULT_HEADER};
use super::tolerance::Tolerance;
use crate::clock::{Clock, SystemClock};
use crate::error::ConfigError;
use crate::secret::Secret;

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
    header: Option<Result<http::HeaderName, ConfigError>>,
    tolerance: Tolerance,
    clock: Option<Arc<dyn Clock>>,
}

impl fmt::Debug for VerifierBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifierBuilder")
            .field("secrets", &format_args!("[<{} redacted>]", self.secrets.len()))
            .field("tolerance", &self.tolerance)
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

    /// The replay tolerance (default 300 s), checked in whole seconds in both
    /// directions. Use [`disable_timestamp_check`](Self::disable_timestamp_check)
    /// to turn the check off; a zero duration means "same second only".
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = Tolerance::Within(tolerance);
        self
    }

    /// Turns the timestamp check off. Only for tests replaying old deliveries:
    /// without it a captured delivery can be replayed forever.
    pub fn disable_timestamp_check(mut self) -> Self {
        self.tolerance = Tolerance::Disabled;
        self
    }

    /// The clock that gives "now" (default: the system clock). Tests inject a
    /// [`FixedClock`](crate::FixedClock).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// [`ConfigError::NoSecret`], [`ConfigError::EmptySecret`] or
    /// [`ConfigError::InvalidHeaderName`].
    pub fn build(self) -> Result<Verifier, ConfigError> {
        let secrets = self.secrets.into_iter().collect::<Result<Vec<_>, _>>()?;
        if secrets.is_empty() {
            return Err(ConfigError::NoSecret);
        }
        let header = match self.header {
            Some(header) => header?,
            None => http::HeaderName::from_static(DEFAULT_HEADER),
        };
        Ok(Verifier::new(
            secrets.into(),
            header,
            self.tolerance,
            self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
        ))
    }
}
