//! The claim a handler holds on one event id: [`ClaimGuard`], the renewal of
//! its lease while the handler runs, and its one way to settle,
//! [`ClaimGuard::settle`] with the [`HandlerOutcome`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http::StatusCode;
use tracing::Instrument;

use super::Inner;
use crate::metrics;
use crate::store::{ClaimToken, Completion};
use crate::untrusted::Untrusted;

/// Ownership of the claim on one event id, while the handler runs.
///
/// Settle it once the handler is over with [`settle`](Self::settle) and how it
/// ended: its status (a 2xx marks the event done, anything else gives the id
/// back for the sender's retry), an error, or a panic. If it is dropped
/// unsettled — the handler returned early, panicked, or the request was
/// cancelled — the claim is released in the background, so the sender's retry is
/// handled rather than refused.
///
/// While the guard lives, its lease is renewed every third of the lease (a task
/// on the tokio runtime), so a handler slower than the lease keeps the event and
/// concurrent retries keep getting 409. If the lease is lost anyway (the store
/// was unreachable for the rest of the lease), an ERROR is logged, and the late
/// completion is refused with another ERROR: the event may then be handled twice.
///
/// Settling is cancel-safe: once `settle` has been called, the store call runs
/// to its end even if the future awaiting it is dropped (the client
/// disconnected, an outer timeout fired). The rest of the call then finishes on
/// the tokio runtime in the background, so the id always ends up done or
/// released — never stuck in flight until its lease runs out.
///
/// ```
/// use payhook::adapter::{HandlerOutcome, ReceiveOutcome};
/// use payhook::sender::{EventBuilder, SignedDelivery};
/// use payhook::Receiver;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
/// let signed = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), "whsec_test_secret").unwrap();
/// let request = signed.to_request("/webhooks");
/// let ReceiveOutcome::Deliver(delivery) = receiver.receive(request.headers(), signed.body.clone()).await else {
///     panic!("a genuine delivery");
/// };
/// // The handler answered 200: the event is done.
/// delivery.into_claim().settle(http::StatusCode::OK).await;
///
/// // The same event again is acknowledged without reaching a handler.
/// let again = receiver.receive(request.headers(), signed.body.clone()).await;
/// assert!(matches!(again, ReceiveOutcome::Respond(reply) if reply.status() == 200));
///
/// // A failed handler gives the id back: the sender's retry is handled.
/// # let other = SignedDelivery::now(EventBuilder::payment_intent_failed().to_json(), "whsec_test_secret").unwrap();
/// # let request = other.to_request("/webhooks");
/// let ReceiveOutcome::Deliver(delivery) = receiver.receive(request.headers(), other.body.clone()).await else { panic!() };
/// delivery.into_claim().settle(HandlerOutcome::Failed).await;
/// let retry = receiver.receive(request.headers(), other.body).await;
/// assert!(matches!(retry, ReceiveOutcome::Deliver(_)));
/// # });
/// ```
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
    /// Takes the claim the store just granted and starts renewing its lease.
    pub(super) fn new(
        inner: Arc<Inner>,
        id: String,
        token: ClaimToken,
        started: Option<Instant>,
        span: tracing::Span,
    ) -> Self {
        let lease_lost = Arc::new(AtomicBool::new(false));
        let renewal = LeaseRenewal::start(&inner, &id, token, &lease_lost, &span);
        Self {
            state: Some(ClaimState {
                id,
                inner,
                token,
                started,
                handed_out: Instant::now(),
                span,
                renewal,
                lease_lost,
            }),
        }
    }

    /// The claimed event id.
    pub fn event_id(&self) -> &str {
        self.state.as_ref().map_or("", |s| s.id.as_str())
    }

    /// The delivery's span (target `payhook`, fields `event_id` and
    /// `event_type`): instrument the handler with it so its log lines and the
    /// core's sit together.
    pub fn delivery_span(&self) -> tracing::Span {
        self.state
            .as_ref()
            .map_or_else(tracing::Span::none, |s| s.span.clone())
    }

    /// Settles the claim from how the handler ended, and logs it in the
    /// delivery's span: the event is marked done for a 2xx status and the
    /// claim released for anything else (so the sender's retry runs the
    /// handler again). A [`StatusCode`] converts into
    /// [`HandlerOutcome::Responded`], so `claim.settle(StatusCode::OK)` says
    /// what happened.
    ///
    /// A 2xx is acknowledged whatever the store answers: if marking the event
    /// done fails, the handler has already run, and an error reply would make
    /// the sender deliver again and run it twice. The failure is logged and the
    /// claim expires with its lease.
    pub async fn settle(mut self, outcome: impl Into<HandlerOutcome>) {
        let Some(state) = self.state.take() else {
            return;
        };
        let outcome = outcome.into();
        let span = state.span.clone();
        let elapsed_ms = state
            .started
            .map(|started| u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        async move {
            match outcome {
                HandlerOutcome::Responded(status) if status.is_success() => {
                    tracing::debug!(target: "payhook", status = status.as_u16(), elapsed_ms, "handler succeeded");
                    Settling::new(state.complete()).await;
                    return;
                }
                HandlerOutcome::Responded(status) => {
                    tracing::warn!(target: "payhook", status = status.as_u16(), elapsed_ms, "handler answered with an error status");
                }
                HandlerOutcome::Failed => {
                    tracing::warn!(target: "payhook", elapsed_ms, "handler returned an error");
                }
                HandlerOutcome::Panicked => {
                    tracing::error!(target: "payhook", elapsed_ms, "handler panicked");
                }
            }
            Settling::new(state.release("handler failed")).await;
        }
        .instrument(span)
        .await;
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
    /// with [`Reply::handler_panicked`](crate::Reply::handler_panicked).
    Panicked,
}

impl From<StatusCode> for HandlerOutcome {
    fn from(status: StatusCode) -> Self {
        Self::Responded(status)
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
