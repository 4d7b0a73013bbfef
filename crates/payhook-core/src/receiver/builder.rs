//! [`ReceiverBuilder`]: a receiver's settings, each checked once at
//! [`build`](ReceiverBuilder::build) so a built receiver never fails on its
//! configuration.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{Inner, Receiver, SourcePolicy};
use crate::clock::Clock;
use crate::defaults::{
    DEFAULT_BODY_LIMIT, DEFAULT_BODY_TIMEOUT, DEFAULT_LEASE, DEFAULT_NAMESPACE, DEFAULT_RETENTION,
    MAX_DURATION, MIN_LEASE,
};
use crate::error::ConfigError;
use crate::metrics;
use crate::signature::{SignatureScheme, VerifierBuilder};
use crate::source::Networks;
use crate::store::{DynStore, MemoryStore, Store};

/// Builder for [`Receiver`].
pub struct ReceiverBuilder {
    verifier: VerifierBuilder,
    scheme: Option<Arc<dyn SignatureScheme>>,
    store: Option<Arc<dyn DynStore>>,
    namespace: Option<String>,
    lease: Duration,
    retention: Duration,
    body_limit: usize,
    body_timeout: Duration,
    allowed_networks: Option<Vec<String>>,
    trusted_proxies: Option<Vec<String>>,
}

impl Default for ReceiverBuilder {
    fn default() -> Self {
        Self {
            verifier: VerifierBuilder::default(),
            scheme: None,
            store: None,
            namespace: None,
            lease: DEFAULT_LEASE,
            retention: DEFAULT_RETENTION,
            body_limit: DEFAULT_BODY_LIMIT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            allowed_networks: None,
            trusted_proxies: None,
        }
    }
}

impl fmt::Debug for ReceiverBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReceiverBuilder")
            .field("verifier", &self.verifier)
            .field("namespace", &self.namespace)
            .field("lease", &self.lease)
            .field("retention", &self.retention)
            .field("body_limit", &self.body_limit)
            .field("body_timeout", &self.body_timeout)
            .field("allowed_networks", &self.allowed_networks)
            .field("trusted_proxies", &self.trusted_proxies)
            .finish_non_exhaustive()
    }
}

impl ReceiverBuilder {
    /// Adds a signing secret (`whsec_…`). Add several during a rotation.
    pub fn secret(mut self, secret: impl AsRef<[u8]>) -> Self {
        self.verifier = self.verifier.secret(secret);
        self
    }

    /// Adds several signing secrets.
    pub fn secrets<I, S>(mut self, secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<[u8]>,
    {
        self.verifier = self.verifier.secrets(secrets);
        self
    }

    /// Verifies with a [`SecretSet`](crate::SecretSet) of the service's
    /// secrets, which can be replaced while the receiver runs (keep a clone:
    /// [`SecretSet::replace`](crate::SecretSet::replace),
    /// [`reload`](crate::SecretSet::reload) of its file), instead of fixed
    /// secrets (not with [`secret`](Self::secret) or [`secrets`](Self::secrets)).
    /// Every adapter, inline or in inbox mode, sees a replacement with the
    /// next delivery. For Standard Webhooks, give the set to
    /// [`StandardWebhooksBuilder::secret_set`](crate::signature::StandardWebhooksBuilder::secret_set).
    ///
    /// ```
    /// use payhook::{Receiver, SecretSet};
    ///
    /// # fn main() -> Result<(), payhook::ConfigError> {
    /// let secrets = SecretSet::new(["whsec_current"])?;
    /// let receiver = Receiver::builder().secret_set(&secrets).build()?;
    /// secrets.replace(["whsec_current", "whsec_next"])?;
    /// # let _ = receiver;
    /// # Ok(())
    /// # }
    /// ```
    pub fn secret_set(mut self, secrets: &crate::SecretSet) -> Self {
        self.verifier = self.verifier.secret_set(secrets);
        self
    }

    /// Reads the signature from this header instead of `x-service-signature`.
    pub fn header_name(mut self, name: &str) -> Self {
        self.verifier = self.verifier.header_name(name);
        self
    }

    /// The replay tolerance, in whole seconds, both directions (default 300 s).
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.verifier = self.verifier.tolerance(tolerance);
        self
    }

    /// Turns the timestamp check off (tests replaying recorded deliveries only).
    pub fn disable_timestamp_check(mut self) -> Self {
        self.verifier = self.verifier.disable_timestamp_check();
        self
    }

    /// The clock for the timestamp check (default: the system clock).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.verifier = self.verifier.clock(clock);
        self
    }

    /// Uses another signature scheme instead of the built-in one; the secret,
    /// header, tolerance and clock settings are then ignored.
    pub fn scheme(mut self, scheme: impl SignatureScheme) -> Self {
        self.scheme = Some(Arc::new(scheme));
        self
    }

    /// The dedupe store (default: a [`MemoryStore`] of its own). Requires a
    /// [`namespace`](Self::namespace): see there.
    pub fn store(mut self, store: impl Store) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// A store shared with other receivers: an `Arc` of any store, or an
    /// `Arc<dyn` [`DynStore`]`>` when the store's type is chosen at run time.
    /// Requires a [`namespace`](Self::namespace): see there.
    pub fn shared_store<S: Store + ?Sized>(mut self, store: Arc<S>) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// The namespace event ids are kept under in the store.
    ///
    /// Required with [`store`](Self::store) or [`shared_store`](Self::shared_store):
    /// a store passed in may serve other endpoints too (a Redis store usually
    /// does), and two endpoints under one namespace share their "done" ids — a
    /// holder of one endpoint's secret (say, a test-mode one) could then mark the
    /// other endpoint's events handled. Give each endpoint its own namespace, and
    /// the replicas of one endpoint the same one. [`build`](Self::build) answers
    /// [`ConfigError::NamespaceRequired`] when it is missing. A receiver with its
    /// own in-memory store uses [`DEFAULT_NAMESPACE`] unless told otherwise.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use payhook::store::DynStore;
    /// use payhook::{ConfigError, MemoryStore, Receiver};
    ///
    /// let store: Arc<dyn DynStore> = Arc::new(MemoryStore::new());
    /// let live = Receiver::builder()
    ///     .secret("whsec_live")
    ///     .shared_store(store.clone())
    ///     .namespace("payments-live")
    ///     .build()?;
    /// let test = Receiver::builder()
    ///     .secret("whsec_test")
    ///     .shared_store(store.clone())
    ///     .namespace("payments-test")
    ///     .build()?;
    /// let unnamed = Receiver::builder().secret("whsec_test").shared_store(store).build();
    /// assert_eq!(unnamed.unwrap_err(), ConfigError::NamespaceRequired);
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// How long a claim lasts before another delivery may take the event over
    /// (default [`DEFAULT_LEASE`], 5 seconds; from [`MIN_LEASE`] to
    /// [`MAX_DURATION`]). While the
    /// handler runs the lease is renewed every third of it, so a slow handler
    /// keeps its claim; the lease only decides how soon the event is handed on
    /// when a worker crashed mid-handler, and how long a process may stall
    /// before its claim can be taken over (see [`DEFAULT_LEASE`]).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long a handled event id is remembered (default
    /// [`DEFAULT_RETENTION`], 7 days; from 1 second to [`MAX_DURATION`]). Keep
    /// it longer than the sender retries an event.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// The largest body accepted, in bytes (default [`DEFAULT_BODY_LIMIT`],
    /// 1 MiB; at least 1).
    pub fn body_limit(mut self, limit: usize) -> Self {
        self.body_limit = limit;
        self
    }

    /// How long a request body may take to arrive in full (default
    /// [`DEFAULT_BODY_TIMEOUT`], 5 s). Counted from the moment the adapter starts
    /// reading the body; a body that is not complete by then gets
    /// `408 Webhook Error: the request body did not arrive within …` and the
    /// connection is closed. Both the tower/axum and the actix adapter honour it.
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// Turns on the source-IP allowlist: only clients in these networks may
    /// deliver; every other request gets `403` before its body is read (see
    /// [`Receiver::check_source`] and [`crate::source`] for how the client
    /// address is found). Off unless set.
    ///
    /// Each item is a CIDR network (`203.0.113.0/24`, `2001:db8::/32`), a bare
    /// address (`/32` or `/128`), or several of them separated by commas with
    /// spaces allowed — the form of an environment variable, so
    /// `.allowed_networks([std::env::var("PAYHOOK_ALLOWED_IPS")?])` works. Items
    /// add up over several calls. A malformed entry fails
    /// [`build`](Self::build) with [`ConfigError::InvalidNetwork`], naming it.
    ///
    /// The payment service does not publish the addresses it delivers from:
    /// list the networks you know (ones it gave you, or a relay of yours).
    ///
    /// ```
    /// use payhook::{ConfigError, Receiver};
    ///
    /// let receiver = Receiver::builder()
    ///     .secret("whsec_test_secret")
    ///     .allowed_networks(["203.0.113.0/24, 2001:db8::/32", "192.0.2.7"])
    ///     .build()?;
    /// assert!(receiver.has_allowlist());
    ///
    /// let typo = Receiver::builder().secret("whsec_test_secret").allowed_networks(["10.0.0.0/33"]).build();
    /// assert_eq!(
    ///     typo.unwrap_err().to_string(),
    ///     r#"invalid allowed_networks entry "10.0.0.0/33": the prefix length is over 32, the most an IPv4 network has"#
    /// );
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn allowed_networks<I>(mut self, networks: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.allowed_networks
            .get_or_insert_with(Vec::new)
            .extend(networks.into_iter().map(|item| item.as_ref().to_owned()));
        self
    }

    /// The proxies in front of the app (load balancer, ingress, CDN) whose
    /// `X-Forwarded-For` / `Forwarded` entries are believed: when the peer is
    /// in these networks, the client address is the rightmost forwarded
    /// address that is not one of them (see [`crate::source`]). Without it,
    /// forwarding headers are ignored and the client is the peer.
    ///
    /// Same forms as [`allowed_networks`](Self::allowed_networks), which it
    /// needs: [`build`](Self::build) refuses trusted proxies without an
    /// allowlist, as nothing would read them.
    pub fn trusted_proxies<I>(mut self, networks: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.trusted_proxies
            .get_or_insert_with(Vec::new)
            .extend(networks.into_iter().map(|item| item.as_ref().to_owned()));
        self
    }

    /// Checks the configuration and builds the receiver.
    ///
    /// Every setting is checked here, so a receiver that builds never fails or
    /// panics later because of its configuration.
    ///
    /// # Errors
    /// A [`ConfigError`]:
    ///
    /// | setting | error message |
    /// |---|---|
    /// | no secret / an empty secret | `no signing secret configured` / `a signing secret is empty` |
    /// | `store(…)`/`shared_store(…)` without `namespace(…)` | [`ConfigError::NamespaceRequired`]: `a store set with store() or shared_store() needs namespace(...) too, …` |
    /// | `namespace("")` | `invalid setting: namespace must not be empty` |
    /// | `lease` under [`MIN_LEASE`] | `invalid setting: lease must be at least 1 second` |
    /// | `lease` over [`MAX_DURATION`] | `invalid setting: lease must be at most 100 years` |
    /// | `retention` under 1 second | `invalid setting: retention must be at least 1 second` |
    /// | `retention` over [`MAX_DURATION`] | `invalid setting: retention must be at most 100 years` |
    /// | `body_limit(0)` | `invalid setting: body limit must be at least 1 byte` |
    /// | `body_timeout(Duration::ZERO)` | `invalid setting: body timeout must be longer than zero` |
    /// | a malformed `allowed_networks` / `trusted_proxies` entry | [`ConfigError::InvalidNetwork`]: `invalid allowed_networks entry "10.0.0.0/33": the prefix length is over 32, …` |
    /// | `allowed_networks` given no item | `invalid setting: allowed_networks lists no network; …` |
    /// | `trusted_proxies` given no item | `invalid setting: trusted_proxies lists no network; …` |
    /// | `trusted_proxies` without `allowed_networks` | `invalid setting: trusted_proxies is set without allowed_networks; …` |
    ///
    /// A `body_limit` up to `usize::MAX`, a `tolerance` up to `Duration::MAX`
    /// and a `body_timeout` up to `Duration::MAX` are accepted as they are (no
    /// limit, any timestamp passes, no body timeout).
    pub fn build(self) -> Result<Receiver, ConfigError> {
        let scheme = match self.scheme {
            Some(scheme) => scheme,
            None => Arc::new(self.verifier.build()?),
        };
        let namespace = match (self.namespace, &self.store) {
            (Some(namespace), _) => namespace,
            (None, Some(_)) => return Err(ConfigError::NamespaceRequired),
            (None, None) => DEFAULT_NAMESPACE.to_owned(),
        };
        if namespace.is_empty() {
            return Err(ConfigError::InvalidSetting("namespace must not be empty"));
        }
        if self.lease < MIN_LEASE {
            return Err(ConfigError::InvalidSetting("lease must be at least 1 second"));
        }
        if self.lease > MAX_DURATION {
            return Err(ConfigError::InvalidSetting("lease must be at most 100 years"));
        }
        if self.retention < Duration::from_secs(1) {
            return Err(ConfigError::InvalidSetting("retention must be at least 1 second"));
        }
        if self.retention > MAX_DURATION {
            return Err(ConfigError::InvalidSetting("retention must be at most 100 years"));
        }
        if self.body_limit == 0 {
            return Err(ConfigError::InvalidSetting("body limit must be at least 1 byte"));
        }
        if self.body_timeout.is_zero() {
            return Err(ConfigError::InvalidSetting(
                "body timeout must be longer than zero",
            ));
        }
        let source = source_policy(self.allowed_networks, self.trusted_proxies)?;
        // Descriptions go to whichever metrics recorder is installed by now.
        metrics::describe();
        let own_store = self.store.is_none();
        Ok(Receiver {
            inner: Arc::new(Inner {
                scheme,
                own_store,
                store: self.store.unwrap_or_else(|| Arc::new(MemoryStore::new())),
                namespace: namespace.into(),
                lease: self.lease,
                retention: self.retention,
                body_limit: self.body_limit,
                body_timeout: self.body_timeout,
                source,
            }),
        })
    }
}

fn source_policy(
    allowed: Option<Vec<String>>,
    trusted: Option<Vec<String>>,
) -> Result<Option<SourcePolicy>, ConfigError> {
    let parse = |setting: &'static str, items: Vec<String>| {
        if items.is_empty() {
            return Err(ConfigError::InvalidSetting(match setting {
                "allowed_networks" => {
                    "allowed_networks lists no network; list at least one, or leave the allowlist off"
                }
                _ => "trusted_proxies lists no network; list at least one, or leave it unset",
            }));
        }
        let mut networks = Networks::default();
        for item in &items {
            networks
                .extend_from(item)
                .map_err(|error| ConfigError::InvalidNetwork { setting, error })?;
        }
        Ok(networks)
    };
    let allowed = allowed
        .map(|items| parse("allowed_networks", items))
        .transpose()?;
    let trusted_proxies = trusted.map(|items| parse("trusted_proxies", items)).transpose()?;
    match (allowed, trusted_proxies) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(ConfigError::InvalidSetting(
            "trusted_proxies is set without allowed_networks; the client address they reveal is only used by the allowlist",
        )),
        (Some(allowed), trusted_proxies) => Ok(Some(SourcePolicy {
            allowed,
            trusted_proxies: trusted_proxies.unwrap_or_default(),
        })),
    }
}
