//! The framework-neutral receiver pipeline: verify → parse → claim.
//!
//! [`Receiver::receive`] takes the request headers and the raw body and returns an
//! [`Outcome`]: either a [`Reply`] to send at once (rejected, duplicate, in flight
//! elsewhere, store down), or a [`Delivery`] — the verified, parsed event and a
//! [`ClaimGuard`] that owns the claim on its id. The guard completes the claim when
//! the handler succeeded and releases it otherwise; dropping it without a verdict
//! (handler error, panic, cancelled request) releases the claim too, so the
//! sender's retry is handled. While the handler runs, the guard renews the
//! claim's lease; settling finishes even if the request is cancelled mid-way.
//!
//! Every outcome is logged under the `tracing` target `payhook` (request-derived
//! values escaped and shortened, see [`crate::untrusted`]) and counted through
//! the `metrics` facade (see [`crate::metrics`]).
//!
//! Framework adapters only translate their request and response types around
//! this; everything a delivery goes through is here.
//!
//! ```
//! use bytes::Bytes;
//! use payhook::adapter::Outcome;
//! use payhook::{sign, Receiver, Secret};
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
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use tracing::Instrument;

use crate::clock::Clock;
use crate::defaults::{
    DEFAULT_BODY_LIMIT, DEFAULT_BODY_TIMEOUT, DEFAULT_LEASE, DEFAULT_NAMESPACE, DEFAULT_RETENTION,
    MAX_DURATION, MIN_LEASE,
};
use crate::error::{ConfigError, Error};
use crate::event::Event;
use crate::headers::Headers;
use crate::metrics;
use crate::reply::Reply;
use crate::signature::{SignatureScheme, VerifierBuilder};
use crate::source::{client_address, Networks};
use crate::store::{Claim, ClaimToken, Completion, DynStore, MemoryStore, Store};
use crate::untrusted::Untrusted;

/// One webhook endpoint's configuration and pipeline. Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct Receiver {
    inner: Arc<Inner>,
}

struct Inner {
    scheme: Arc<dyn SignatureScheme>,
    store: Arc<dyn DynStore>,
    namespace: Arc<str>,
    lease: Duration,
    retention: Duration,
    body_limit: usize,
    body_timeout: Duration,
    /// The store is the in-memory one the builder made for this receiver alone.
    own_store: bool,
    /// The source-IP allowlist, when configured.
    source: Option<SourcePolicy>,
}

/// Who may deliver: the allowed networks, and the proxies trusted to name the client.
struct SourcePolicy {
    allowed: Networks,
    trusted_proxies: Networks,
}

impl fmt::Debug for Receiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("namespace", &self.inner.namespace)
            .field("lease", &self.inner.lease)
            .field("retention", &self.inner.retention)
            .field("body_limit", &self.inner.body_limit)
            .field("body_timeout", &self.inner.body_timeout)
            .field(
                "allowed_networks",
                &self.inner.source.as_ref().map(|source| &source.allowed),
            )
            .field(
                "trusted_proxies",
                &self.inner.source.as_ref().map(|source| &source.trusted_proxies),
            )
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

    /// How long a request body may take to arrive in full; past it the adapters
    /// answer `408` ([`Error::BodyTimeout`]) and close the connection.
    pub fn body_timeout(&self) -> Duration {
        self.inner.body_timeout
    }

    /// The namespace event ids are kept under (in the dedupe store, or in the
    /// inbox's table).
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// How long a claim lasts before another worker may take the event over.
    pub fn lease(&self) -> Duration {
        self.inner.lease
    }

    /// How long a handled event id is remembered.
    pub fn retention(&self) -> Duration {
        self.inner.retention
    }

    /// Whether the receiver keeps handled event ids in its own in-memory
    /// store (none was given to the builder). The durable inbox, whose table
    /// is its dedupe store, refuses a receiver built with another store.
    pub fn has_own_store(&self) -> bool {
        self.inner.own_store
    }

    /// The namespace, and the store when it is the receiver's own in-memory
    /// store (none was set on the builder): what tells two receivers built
    /// alike apart when their dedupe is not shared.
    pub(crate) fn own_store(&self) -> Option<(&str, std::sync::Weak<dyn DynStore>)> {
        self.inner
            .own_store
            .then(|| (&*self.inner.namespace, Arc::downgrade(&self.inner.store)))
    }

    /// Whether a source-IP allowlist is configured
    /// ([`ReceiverBuilder::allowed_networks`]).
    pub fn has_allowlist(&self) -> bool {
        self.inner.source.is_some()
    }

    /// The source-IP allowlist check, the first step of every intake: adapters
    /// call it with the connection's peer address and the request headers
    /// before they read the body. Without an allowlist it passes at once.
    ///
    /// The client address is decided by [`crate::source::client_address`]
    /// (the peer, or the rightmost untrusted hop of the forwarding headers when
    /// the peer is a trusted proxy). A client outside the allowed networks, or
    /// forwarding headers that cannot be trusted to name one, get
    /// `403 Webhook Error: the source address is not allowed to deliver to this
    /// endpoint` ([`Error::SourceNotAllowed`]): counted under the `reason`
    /// `source_not_allowed`, logged at `WARN` with the peer, the client address
    /// and why (request text escaped), and closing the connection, as the body
    /// is left unread.
    ///
    /// `peer` is `None` when the server did not pass the adapter a peer address:
    /// with an allowlist that is a setup mistake, answered with the `500` of
    /// [`Reply::peer_address_unknown`] naming `missing_peer_fix`, never a silent
    /// allow.
    ///
    /// # Errors
    /// The ready reply, already logged and counted.
    ///
    /// ```
    /// use payhook::Receiver;
    ///
    /// let receiver = Receiver::builder()
    ///     .secret("whsec_test_secret")
    ///     .allowed_networks(["203.0.113.0/24"])
    ///     .trusted_proxies(["10.0.0.0/8"])
    ///     .build()
    ///     .unwrap();
    /// let mut headers = http::HeaderMap::new();
    /// assert!(receiver.check_source(Some("203.0.113.9".parse().unwrap()), &headers, "").is_ok());
    /// let refused = receiver.check_source(Some("192.0.2.1".parse().unwrap()), &headers, "").unwrap_err();
    /// assert_eq!(refused.status().as_u16(), 403);
    ///
    /// // Through the load balancer, which appends the address it saw.
    /// headers.insert("x-forwarded-for", "203.0.113.9".parse().unwrap());
    /// assert!(receiver.check_source(Some("10.0.0.2".parse().unwrap()), &headers, "").is_ok());
    /// ```
    pub fn check_source(
        &self,
        peer: Option<IpAddr>,
        headers: &dyn Headers,
        missing_peer_fix: &str,
    ) -> Result<(), Reply> {
        let Some(source) = &self.inner.source else {
            return Ok(());
        };
        let Some(peer) = peer else {
            return Err(crate::reject::peer_address_unknown(missing_peer_fix));
        };
        let error = Error::SourceNotAllowed;
        match client_address(peer, headers, &source.trusted_proxies) {
            Ok(client) if source.allowed.contains(client) => Ok(()),
            Ok(client) => {
                metrics::rejected(&error);
                tracing::warn!(
                    target: "payhook",
                    status = 403,
                    reason = %error,
                    %peer,
                    %client,
                    "delivery rejected: the client address is outside the allowlist"
                );
                Err(Reply::error(&error).closing_connection())
            }
            Err(forwarded) => {
                metrics::rejected(&error);
                tracing::warn!(
                    target: "payhook",
                    status = 403,
                    reason = %error,
                    %peer,
                    forwarded = %forwarded,
                    "delivery rejected: the forwarding headers from a trusted proxy do not name a client"
                );
                Err(Reply::error(&error).closing_connection())
            }
        }
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
        let admitted = self.admit(headers, &body);
        let inner = Arc::clone(&self.inner);
        async move {
            match admitted {
                Err(reply) => Outcome::Respond(reply),
                Ok(event) => claim(inner, event, body, started).await,
            }
        }
    }

    /// The intake every delivery goes through, inline or into the inbox:
    /// checks the size, verifies the signature over the raw bytes and parses
    /// the event, counting the outcome (`payhook_deliveries_total`) and logging
    /// a rejection at `WARN` with its reason escaped.
    ///
    /// # Errors
    /// The ready reply for a rejected delivery (`400`/`413`), already logged
    /// and counted.
    pub fn admit(&self, headers: &dyn Headers, body: &[u8]) -> Result<Event, Reply> {
        match self.check(headers, body) {
            Ok(event) => {
                metrics::verified();
                Ok(event)
            }
            Err(error) => Err(crate::reject::reject(&error)),
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
}

async fn claim(inner: Arc<Inner>, event: Event, body: Bytes, started: Option<Instant>) -> Outcome {
    let span = tracing::info_span!(target: "payhook", "delivery", event_id = %Untrusted::value(event.id()), event_type = %Untrusted::value(event.event_type()));
    let claim_span = span.clone();
    async move {
        match inner.store.dyn_claim(&inner.namespace, event.id(), inner.lease).await {
            Ok(Claim::Claimed(token)) => {
                tracing::debug!(target: "payhook", "event claimed");
                let id = event.id().to_owned();
                let lease_lost = Arc::new(AtomicBool::new(false));
                let renewal = LeaseRenewal::start(&inner, &id, token, &lease_lost, &claim_span);
                let claim = ClaimGuard {
                    state: Some(ClaimState {
                        id,
                        inner,
                        token,
                        started,
                        handed_out: Instant::now(),
                        span: claim_span,
                        renewal,
                        lease_lost,
                    }),
                };
                Outcome::Deliver(Delivery { event, body, claim })
            }
            Ok(Claim::Done) => {
                metrics::duplicate();
                tracing::info!(target: "payhook", "duplicate delivery acknowledged; the event was processed before");
                Outcome::Respond(Reply::received())
            }
            Ok(Claim::InFlight) => {
                metrics::in_flight();
                let error = Error::InFlight(event.id().to_owned());
                tracing::info!(target: "payhook", status = 409, "delivery refused: the event is in flight elsewhere");
                Outcome::Respond(Reply::error(&error))
            }
            Err(err) => {
                metrics::store_error();
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
///
/// While the guard lives, its lease is renewed every third of the lease (a task
/// on the tokio runtime), so a handler slower than the lease keeps the event and
/// concurrent retries keep getting 409. If the lease is lost anyway (the store
/// was unreachable for the rest of the lease), an ERROR is logged, and the late
/// completion is refused with another ERROR: the event may then be handled twice.
///
/// Settling is cancel-safe: once `complete`, `release` or `finish` has been
/// called, the store call runs to its end even if the future awaiting it is
/// dropped (the client disconnected, an outer timeout fired). The rest of the
/// call then finishes on the tokio runtime in the background, so the id always
/// ends up done or released — never stuck in flight until its lease runs out.
#[must_use = "an unsettled claim is released when dropped"]
pub struct ClaimGuard {
    state: Option<ClaimState>,
}

struct ClaimState {
    inner: Arc<Inner>,
    id: String,
    token: ClaimToken,
    started: Option<Instant>,
    /// When the event was handed to the handler, for `payhook_handler_seconds`.
    handed_out: Instant,
    span: tracing::Span,
    renewal: LeaseRenewal,
    /// Set once the lease is known lost, so it is counted once per claim.
    lease_lost: Arc<AtomicBool>,
}

/// The task that renews a claim's lease every third of it while the handler
/// runs, so a handler slower than its lease keeps its claim and a concurrent
/// retry is refused rather than run a second time. It stops when the claim is
/// settled (or dropped); a crashed worker stops renewing, so its claim still
/// expires with the lease.
struct LeaseRenewal(Option<tokio::task::AbortHandle>);

impl LeaseRenewal {
    fn start(
        inner: &Arc<Inner>,
        id: &str,
        token: ClaimToken,
        lease_lost: &Arc<AtomicBool>,
        span: &tracing::Span,
    ) -> Self {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Once per process: a program that polls the pipeline outside tokio
            // does so for every delivery.
            static WARNED: AtomicBool = AtomicBool::new(false);
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    target: "payhook",
                    parent: span,
                    "no tokio runtime: leases are not renewed while handlers run"
                );
            }
            return Self(None);
        };
        let renew = renew_while_handled(Arc::clone(inner), id.to_owned(), token, Arc::clone(lease_lost))
            .instrument(span.clone());
        Self(Some(runtime.spawn(renew).abort_handle()))
    }

    fn stop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

impl Drop for LeaseRenewal {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn renew_while_handled(inner: Arc<Inner>, id: String, token: ClaimToken, lease_lost: Arc<AtomicBool>) {
    // The builder keeps the lease at 1 s or more, so this is never zero.
    let every = inner.lease / 3;
    loop {
        tokio::time::sleep(every).await;
        match inner
            .store
            .dyn_renew(&inner.namespace, &id, token, inner.lease)
            .await
        {
            Ok(true) => tracing::trace!(target: "payhook", "lease renewed"),
            Ok(false) => {
                if !lease_lost.swap(true, Ordering::Relaxed) {
                    metrics::lease_lost();
                }
                tracing::error!(
                    target: "payhook",
                    "lease lost while the handler runs: it ran out before it could be renewed, \
                     so another delivery may be handling the event at the same time"
                );
                return;
            }
            // The lease is still good for two more thirds: try again then.
            Err(err) => {
                metrics::store_failed("renew");
                tracing::warn!(target: "payhook", reason = %err, "lease could not be renewed; trying again");
            }
        }
    }
}

impl fmt::Debug for ClaimGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClaimGuard")
            .field(
                "event_id",
                &self
                    .state
                    .as_ref()
                    .map(|s| format!("{}", Untrusted::value(&s.id))),
            )
            .finish()
    }
}

impl ClaimGuard {
    /// The claimed event id.
    pub fn event_id(&self) -> &str {
        self.state.as_ref().map_or("", |s| s.id.as_str())
    }

    /// The delivery's span (`payhook` target, with the event id and type), for
    /// the handler's log lines and the settling ones.
    pub(crate) fn span(&self) -> tracing::Span {
        self.state
            .as_ref()
            .map_or_else(tracing::Span::none, |s| s.span.clone())
    }

    /// When the claim was taken, if the completion log that reports it is enabled.
    pub(crate) fn started(&self) -> Option<Instant> {
        self.state.as_ref().and_then(|s| s.started)
    }

    /// Marks the event done and returns the `200 {"received":true}` reply.
    ///
    /// If the store fails at this point the handler has already run, so the
    /// delivery is still acknowledged (a 503 would make the sender deliver again
    /// and run the handler twice); the failure is logged and the claim simply
    /// expires with its lease.
    pub async fn complete(mut self) -> Reply {
        if let Some(state) = self.state.take() {
            Settling::new(state.complete()).await;
        }
        Reply::received()
    }

    /// Gives the id back so the next delivery of the event is handled.
    pub async fn release(mut self) {
        if let Some(state) = self.state.take() {
            Settling::new(state.release("handler failed")).await;
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
    fn complete(mut self) -> impl Future<Output = ()> + Send + 'static {
        self.renewal.stop();
        metrics::settled(true, self.handed_out.elapsed());
        let span = self.span.clone();
        async move {
            let inner = &self.inner;
            match inner
                .store
                .dyn_complete(&inner.namespace, &self.id, self.token, inner.retention)
                .await
            {
                Ok(Completion::Completed) => tracing::info!(
                    target: "payhook",
                    elapsed_ms = self.started.map(|started| u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)),
                    "delivery completed"
                ),
                // The store cannot tell which happened, so the log says both.
                Ok(Completion::AlreadyDone) => tracing::warn!(
                    target: "payhook",
                    "handler finished and the event was already marked done: an earlier attempt \
                     of this completion was applied and its reply lost, or this delivery's lease \
                     ran out and another delivery handled the event meanwhile"
                ),
                Ok(Completion::NotOwner) => {
                    if !self.lease_lost.swap(true, Ordering::Relaxed) {
                        metrics::lease_lost();
                    }
                    tracing::error!(
                        target: "payhook",
                        "handler finished but its lease was lost: another delivery holds the event now, \
                         so this completion was refused and the event may be handled again"
                    );
                }
                Err(err) => {
                    metrics::store_failed("complete");
                    tracing::error!(
                        target: "payhook",
                        reason = %err,
                        "handler succeeded but the event could not be marked done; acknowledging anyway"
                    );
                }
            }
        }
        .instrument(span)
    }

    fn release(mut self, why: &'static str) -> impl Future<Output = ()> + Send + 'static {
        self.renewal.stop();
        metrics::settled(false, self.handed_out.elapsed());
        let span = self.span.clone();
        async move {
            let inner = &self.inner;
            match inner.store.dyn_release(&inner.namespace, &self.id, self.token).await {
                Ok(_) => {
                    tracing::warn!(target: "payhook", reason = why, "claim released; the next delivery of the event runs the handler again")
                }
                Err(err) => {
                    metrics::store_failed("release");
                    tracing::error!(
                        target: "payhook",
                        reason = %err,
                        "claim could not be released; a retry is refused until the lease runs out"
                    );
                }
            }
        }
        .instrument(span)
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        let Some(state) = self.state.take() else {
            return;
        };
        let mut release = Settling::new(state.release("handler did not finish"));
        // In-process stores answer at once: finish here without needing a runtime.
        // Otherwise dropping `release` hands the rest to the runtime.
        let _ = Pin::new(&mut release).poll(&mut Context::from_waker(std::task::Waker::noop()));
    }
}

/// How the user's handler ended, for [`ClaimGuard::settle`].
///
/// A request that is dropped while the handler runs (the client went away, the
/// server shuts down) has no outcome: dropping the [`ClaimGuard`] releases the
/// claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandlerOutcome {
    /// The handler answered with this status: a 2xx marks the event done,
    /// anything else releases the claim for the sender's retry.
    Responded(StatusCode),
    /// The handler (or the service around it) returned an error instead of a
    /// response: the claim is released.
    Failed,
    /// The handler panicked: the claim is released, and the adapter answers
    /// with [`Reply::handler_panicked`].
    Panicked,
}

impl ClaimGuard {
    /// The delivery's span (target `payhook`, fields `event_id` and
    /// `event_type`): instrument the handler with it so its log lines and the
    /// core's sit together.
    pub fn delivery_span(&self) -> tracing::Span {
        self.span()
    }

    /// Settles the claim from the handler's outcome and logs it in the
    /// delivery's span: marked done for a 2xx, released otherwise.
    pub async fn settle(self, outcome: HandlerOutcome) {
        let span = self.span();
        let elapsed_ms = self
            .started()
            .map(|started| u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        async move {
            match outcome {
                HandlerOutcome::Responded(status) if status.is_success() => {
                    tracing::debug!(target: "payhook", status = status.as_u16(), elapsed_ms, "handler succeeded");
                    let _received = self.complete().await;
                }
                HandlerOutcome::Responded(status) => {
                    tracing::warn!(target: "payhook", status = status.as_u16(), elapsed_ms, "handler answered with an error status");
                    self.release().await;
                }
                HandlerOutcome::Failed => {
                    tracing::warn!(target: "payhook", elapsed_ms, "handler returned an error");
                    self.release().await;
                }
                HandlerOutcome::Panicked => {
                    tracing::error!(target: "payhook", elapsed_ms, "handler panicked");
                    self.release().await;
                }
            }
        }
        .instrument(span)
        .await;
    }
}
/// A store call that settles a claim, finished even if whoever awaits it goes away.
///
/// Awaiting it drives the call; dropping it before the end (a cancelled request,
/// an outer timeout) spawns the rest onto the current tokio runtime instead of
/// abandoning it half-way, which would leave the id in flight with nobody to
/// complete or release it.
struct Settling {
    future: Option<Pin<Box<dyn Future<Output = ()> + Send + 'static>>>,
}

impl Settling {
    fn new(future: impl Future<Output = ()> + Send + 'static) -> Self {
        Self {
            future: Some(Box::pin(future)),
        }
    }
}

impl Future for Settling {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(future) = self.future.as_mut() {
            if future.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.future = None;
        }
        Poll::Ready(())
    }
}

impl Drop for Settling {
    fn drop(&mut self) {
        let Some(future) = self.future.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(future);
            }
            Err(_) => tracing::error!(
                target: "payhook",
                "claim settled outside a tokio runtime and the store did not answer at once; \
                 it is released when its lease runs out"
            ),
        }
    }
}

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
    /// (default [`DEFAULT_LEASE`], 5 minutes; from [`MIN_LEASE`] to
    /// [`MAX_DURATION`]). While the
    /// handler runs the lease is renewed every third of it, so a slow handler
    /// keeps its claim; the lease only decides how soon the event is handed on
    /// when a worker crashed mid-handler.
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
