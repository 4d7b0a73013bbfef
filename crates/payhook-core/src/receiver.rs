//! The framework-neutral receiver pipeline: verify → parse → claim.
//!
//! [`Receiver::receive`] takes the request headers and the raw body and returns an
//! [`Outcome`]: either a [`Reply`] to send at once (rejected, duplicate, in flight
//! elsewhere, store down), or a [`Delivery`] — the verified, parsed event and a
//! [`ClaimGuard`] that owns the claim on its id. The guard completes the claim when
//! the handler succeeded and releases it otherwise; dropping it without a verdict
//! (handler error, panic, cancelled request) releases the claim too, so the
//! sender's retry is handled.
//!
//! Framework adapters only translate their request and response types around
//! this; everything a delivery goes through is here.
//!
//! ```
//! use bytes::Bytes;
//! use payhook::{sign, Outcome, Receiver, Secret};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
//!
//! let body = Bytes::from_static(br#"{"id":"evt_1","type":"customer.created","data":{}}"#);
//! let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
//! let mut headers = http::HeaderMap::new();
//! let header = sign(&body, &Secret::new("whsec_test_secret").unwrap(), now);
//! headers.insert("x-service-signature", header.parse().unwrap());
//!
//! let Outcome::Deliver(delivery) = receiver.receive(&headers, body.clone()).await else { panic!() };
//! assert_eq!(delivery.event().id(), "evt_1");
//! let reply = delivery.into_claim().complete().await; // the handler succeeded
//! assert_eq!(reply.body(), r#"{"received":true}"#);
//!
//! // The same event again is acknowledged without being handed out.
//! let Outcome::Respond(reply) = receiver.receive(&headers, body).await else { panic!() };
//! assert_eq!(reply.status().as_u16(), 200);
//! # });
//! ```

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use tracing::Instrument;

use crate::clock::Clock;
use crate::error::{ConfigError, Error};
use crate::event::Event;
use crate::headers::Headers;
use crate::reply::Reply;
use crate::signature::{SignatureScheme, VerifierBuilder};
use crate::store::{Claim, ClaimToken, MemoryStore, Store};

/// The body size limit unless configured otherwise: 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;
/// How long a handled id is remembered unless configured otherwise: 7 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long an in-flight claim lasts before another delivery may take the id
/// over, unless configured otherwise: 5 minutes.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(300);
/// The store namespace unless configured otherwise.
pub const DEFAULT_NAMESPACE: &str = "payhook";

/// One webhook endpoint's configuration and pipeline. Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct Receiver {
    inner: Arc<Inner>,
}

struct Inner {
    scheme: Arc<dyn SignatureScheme>,
    store: Arc<dyn Store>,
    namespace: Arc<str>,
    lease: Duration,
    retention: Duration,
    body_limit: usize,
}

impl fmt::Debug for Receiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("namespace", &self.inner.namespace)
            .field("lease", &self.inner.lease)
            .field("retention", &self.inner.retention)
            .field("body_limit", &self.inner.body_limit)
            .finish_non_exhaustive()
    }
}

/// What to do with a request.
#[derive(Debug)]
#[must_use]
// Moved once per request, straight into a match: boxing the large variant would
// only add an allocation to every delivery.
#[allow(clippy::large_enum_variant)]
pub enum Outcome {
    /// Send this reply; the handler does not run.
    Respond(Reply),
    /// A new, verified event: run the handler, then settle the claim.
    Deliver(Delivery),
}

/// A verified, claimed event on its way to the handler.
#[derive(Debug)]
pub struct Delivery {
    event: Event,
    body: Bytes,
    claim: ClaimGuard,
}

impl Delivery {
    /// The typed event.
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// The raw body, exactly as signed.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Drops the event and keeps the claim.
    pub fn into_claim(self) -> ClaimGuard {
        self.claim
    }

    /// The event, the raw body and the claim.
    pub fn into_parts(self) -> (Event, Bytes, ClaimGuard) {
        (self.event, self.body, self.claim)
    }
}

impl Receiver {
    /// Starts a builder. At least one secret is required.
    pub fn builder() -> ReceiverBuilder {
        ReceiverBuilder::default()
    }

    /// The largest body accepted, in bytes. Adapters stop reading past it and
    /// answer with [`Error::BodyTooLarge`].
    pub fn body_limit(&self) -> usize {
        self.inner.body_limit
    }

    /// Runs the pipeline on one request.
    ///
    /// Verification and parsing happen before this returns (the future does not
    /// borrow `headers`); the returned future only talks to the store.
    pub fn receive(
        &self,
        headers: &dyn Headers,
        body: Bytes,
    ) -> impl Future<Output = Outcome> + Send + 'static {
        // Read the clock only when the completion log that reports it is wanted.
        let started = tracing::enabled!(target: "payhook", tracing::Level::INFO).then(Instant::now);
        let checked = self.check(headers, &body);
        let inner = Arc::clone(&self.inner);
        async move {
            match checked {
                Err(error) => {
                    tracing::warn!(target: "payhook", status = error.status().as_u16(), reason = %error, "delivery rejected");
                    Outcome::Respond(Reply::error(&error))
                }
                Ok(event) => claim(inner, event, body, started).await,
            }
        }
    }

    /// Verifies the signature over the raw bytes, then parses the event.
    /// Nothing touches the store before the signature is checked.
    ///
    /// # Errors
    /// The first check that failed.
    pub fn check(&self, headers: &dyn Headers, body: &[u8]) -> Result<Event, Error> {
        if body.len() > self.inner.body_limit {
            return Err(Error::BodyTooLarge {
                limit: self.inner.body_limit,
            });
        }
        self.inner.scheme.verify(headers, body)?;
        Event::from_slice(body)
    }

    /// Refuses a body from its declared `Content-Length` alone, before any of it
    /// is read. A value that is not a number is left to the framework (which
    /// rejects it) and the limit is then enforced while reading.
    ///
    /// # Errors
    /// [`Error::BodyTooLarge`] when the declared length is over the limit.
    pub fn check_content_length(&self, content_length: Option<&[u8]>) -> Result<(), Error> {
        let declared = content_length
            .and_then(|value| std::str::from_utf8(value).ok())
            .and_then(|value| value.trim().parse::<u64>().ok());
        let limit = self.inner.body_limit;
        match declared {
            Some(length) if length > u64::try_from(limit).unwrap_or(u64::MAX) => {
                Err(Error::BodyTooLarge { limit })
            }
            _ => Ok(()),
        }
    }

    /// The reply for a body that could not be read: over the limit, or cut short.
    pub fn body_error(&self, error: &Error) -> Reply {
        tracing::warn!(target: "payhook", status = error.status().as_u16(), reason = %error, "delivery rejected");
        Reply::error(error)
    }
}

async fn claim(inner: Arc<Inner>, event: Event, body: Bytes, started: Option<Instant>) -> Outcome {
    let span = tracing::info_span!(target: "payhook", "delivery", event_id = %event.id(), event_type = %event.event_type());
    async move {
        match inner.store.claim(&inner.namespace, event.id(), inner.lease).await {
            Ok(Claim::Claimed(token)) => {
                tracing::debug!(target: "payhook", "event claimed");
                let claim = ClaimGuard {
                    state: Some(ClaimState {
                        id: event.id().to_owned(),
                        event_type: event.event_type().to_owned(),
                        inner,
                        token,
                        started,
                    }),
                };
                Outcome::Deliver(Delivery { event, body, claim })
            }
            Ok(Claim::Done) => {
                tracing::info!(target: "payhook", "duplicate delivery acknowledged; the event was processed before");
                Outcome::Respond(Reply::received())
            }
            Ok(Claim::InFlight) => {
                let error = Error::InFlight(event.id().to_owned());
                tracing::info!(target: "payhook", status = 409, "delivery refused: the event is in flight elsewhere");
                Outcome::Respond(Reply::error(&error))
            }
            Err(err) => {
                let error = Error::from(err);
                tracing::error!(target: "payhook", status = 503, reason = %error, "dedupe store unavailable");
                Outcome::Respond(Reply::error(&error))
            }
        }
    }
    .instrument(span)
    .await
}

/// Ownership of the claim on one event id, while the handler runs.
///
/// Settle it with [`complete`](Self::complete) after the handler succeeded,
/// [`release`](Self::release) after it failed, or [`finish`](Self::finish) with
/// the handler's status. If it is dropped unsettled — the handler returned early,
/// panicked, or the request was cancelled — the claim is released in the
/// background, so the sender's retry is handled rather than refused.
#[must_use = "an unsettled claim is released when dropped"]
pub struct ClaimGuard {
    state: Option<ClaimState>,
}

struct ClaimState {
    inner: Arc<Inner>,
    id: String,
    event_type: String,
    token: ClaimToken,
    started: Option<Instant>,
}

impl fmt::Debug for ClaimGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClaimGuard")
            .field("event_id", &self.state.as_ref().map(|s| s.id.as_str()))
            .finish()
    }
}

impl ClaimGuard {
    /// The claimed event id.
    pub fn event_id(&self) -> &str {
        self.state.as_ref().map_or("", |s| s.id.as_str())
    }

    /// Marks the event done and returns the `200 {"received":true}` reply.
    ///
    /// If the store fails at this point the handler has already run, so the
    /// delivery is still acknowledged (a 503 would make the sender deliver again
    /// and run the handler twice); the failure is logged and the claim simply
    /// expires with its lease.
    pub async fn complete(mut self) -> Reply {
        if let Some(state) = self.state.take() {
            let span = state.span();
            async move {
                let inner = &state.inner;
                match inner
                    .store
                    .complete(&inner.namespace, &state.id, state.token, inner.retention)
                    .await
                {
                    Ok(true) => tracing::info!(
                        target: "payhook",
                        elapsed_ms = state.started.map(|started| started.elapsed().as_millis() as u64),
                        "delivery completed"
                    ),
                    Ok(false) => tracing::warn!(
                        target: "payhook",
                        "handler finished after its lease ran out and another delivery took the event over"
                    ),
                    Err(err) => tracing::error!(
                        target: "payhook",
                        reason = %err,
                        "handler succeeded but the event could not be marked done; acknowledging anyway"
                    ),
                }
            }
            .instrument(span)
            .await;
        }
        Reply::received()
    }

    /// Gives the id back so the next delivery of the event is handled.
    pub async fn release(mut self) {
        if let Some(state) = self.state.take() {
            let span = state.span();
            state.release("handler failed").instrument(span).await;
        }
    }

    /// Completes the claim for a 2xx `status` and releases it otherwise.
    pub async fn finish(self, status: StatusCode) {
        if status.is_success() {
            let _ = self.complete().await;
        } else {
            self.release().await;
        }
    }
}

impl ClaimState {
    fn span(&self) -> tracing::Span {
        tracing::info_span!(target: "payhook", "delivery", event_id = %self.id, event_type = %self.event_type)
    }

    async fn release(self, why: &'static str) {
        let inner = &self.inner;
        match inner.store.release(&inner.namespace, &self.id, self.token).await {
            Ok(_) => {
                tracing::warn!(target: "payhook", reason = why, "claim released; the next delivery of the event runs the handler again")
            }
            Err(err) => tracing::error!(
                target: "payhook",
                reason = %err,
                "claim could not be released; a retry is refused until the lease runs out"
            ),
        }
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        let Some(state) = self.state.take() else {
            return;
        };
        let span = state.span();
        let mut release = Box::pin(state.release("handler did not finish").instrument(span));
        // In-process stores answer at once: finish here without needing a runtime.
        if release
            .as_mut()
            .poll(&mut Context::from_waker(std::task::Waker::noop()))
            == Poll::Ready(())
        {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(release);
            }
            Err(_) => tracing::error!(
                target: "payhook",
                "claim dropped outside a tokio runtime; it is released when its lease runs out"
            ),
        }
    }
}

/// Builder for [`Receiver`].
pub struct ReceiverBuilder {
    verifier: VerifierBuilder,
    scheme: Option<Arc<dyn SignatureScheme>>,
    store: Option<Arc<dyn Store>>,
    namespace: String,
    lease: Duration,
    retention: Duration,
    body_limit: usize,
}

impl Default for ReceiverBuilder {
    fn default() -> Self {
        Self {
            verifier: VerifierBuilder::default(),
            scheme: None,
            store: None,
            namespace: DEFAULT_NAMESPACE.to_owned(),
            lease: DEFAULT_LEASE,
            retention: DEFAULT_RETENTION,
            body_limit: DEFAULT_BODY_LIMIT,
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

    /// The dedupe store (default: a [`MemoryStore`] of its own).
    pub fn store(mut self, store: impl Store) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// A store shared with other receivers.
    pub fn shared_store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// The namespace event ids are kept under in the store (default `payhook`).
    /// Give each endpoint its own when several share one store.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// How long a claim lasts before another delivery may take the event over
    /// (default 5 minutes). Make it longer than your slowest handler.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long a handled event id is remembered (default 7 days).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// The largest body accepted, in bytes (default 1 MiB).
    pub fn body_limit(mut self, limit: usize) -> Self {
        self.body_limit = limit;
        self
    }

    /// Checks the configuration and builds the receiver.
    ///
    /// # Errors
    /// A [`ConfigError`]: no secret, an empty secret, a bad header name, an empty
    /// namespace, or a zero lease or retention.
    pub fn build(self) -> Result<Receiver, ConfigError> {
        let scheme = match self.scheme {
            Some(scheme) => scheme,
            None => Arc::new(self.verifier.build()?),
        };
        if self.namespace.is_empty() {
            return Err(ConfigError::InvalidSetting("namespace must not be empty"));
        }
        if self.lease.is_zero() {
            return Err(ConfigError::InvalidSetting("lease must be longer than zero"));
        }
        if self.retention.is_zero() {
            return Err(ConfigError::InvalidSetting("retention must be longer than zero"));
        }
        Ok(Receiver {
            inner: Arc::new(Inner {
                scheme,
                store: self.store.unwrap_or_else(|| Arc::new(MemoryStore::new())),
                namespace: self.namespace.into(),
                lease: self.lease,
                retention: self.retention,
                body_limit: self.body_limit,
            }),
        })
    }
}
