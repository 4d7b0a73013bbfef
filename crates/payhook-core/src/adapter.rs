//! The one interface between the core and a web framework adapter.
//!
//! An adapter (payhook's tower/axum and actix-web crates, or one of your own)
//! uses this module and nothing else of the core's internals; it only translates
//! its framework's request and response types:
//!
//! 0. **Source check.** [`Receiver::check_source`](crate::Receiver::check_source)
//!    with the connection's peer address and the headers, before anything
//!    else: without an allowlist it passes at once; otherwise a refused source
//!    is a ready `403` [`Reply`] (logged, counted, closing the connection).
//! 1. **Body intake.** [`BodyIntake::new`] checks the declared `Content-Length`
//!    against the receiver's limit before anything is read;
//!    [`BodyIntake::read`] pulls the body's chunks under the limit and the
//!    receiver's [body timeout](crate::ReceiverBuilder::body_timeout). A refusal
//!    is a ready [`Reply`] (`413`, `408`, or `400` for a body cut short), already
//!    logged; [`Reply::closes_connection`] tells the adapter to close the
//!    connection after it, because the rest of the body was left unread.
//! 2. **The pipeline.** [`Receiver::receive`](crate::Receiver::receive) verifies,
//!    parses and claims: an [`Outcome`] is either a [`Reply`] to send at once or
//!    a [`Delivery`] for the handler.
//! 3. **Settling.** After the handler, [`ClaimGuard::settle`] with a
//!    [`HandlerOutcome`] (its status, an error, a panic) marks the event done or
//!    releases the claim, logging inside the delivery's span
//!    ([`ClaimGuard::delivery_span`] is that span, for the handler's own lines). A
//!    request dropped mid-handler (client gone) just drops the guard, which
//!    releases the claim.
//! 4. **Replies.** Every reply is a [`Reply`]: the pipeline's, the intake's,
//!    [`Reply::handler_panicked`], and [`not_configured`] for a route without a
//!    receiver.
//! 5. **Setup checks.** [`SplitStoreCheck`] warns when one route is served by
//!    receivers with distinct in-memory stores (a receiver built per worker
//!    thread), whose dedupe would then only work per worker.
//! 6. **Handlers by event type.** [`HandlerTable`] is the one routing rule behind
//!    each adapter's `EventHandlers`: the exact type, then the kind shortcut,
//!    then the catch-all.
//!
//! ```
//! use std::convert::Infallible;
//! use std::net::IpAddr;
//! use std::task::Poll;
//!
//! use bytes::Bytes;
//! use payhook::adapter::{BodyIntake, HandlerOutcome, Outcome};
//! use payhook::sender::{EventBuilder, SignedDelivery};
//! use payhook::{Receiver, Reply};
//!
//! /// An adapter for a made-up framework whose body arrives as a list of chunks.
//! async fn serve(receiver: &Receiver, peer: IpAddr, headers: &http::HeaderMap, chunks: Vec<Bytes>) -> Reply {
//!     // First, before any body: the source-IP allowlist (passes without one).
//!     if let Err(refusal) = receiver.check_source(Some(peer), headers, "pass the peer address") {
//!         return refusal; // 403, closing the connection
//!     }
//!     let intake = match BodyIntake::new(receiver, headers) {
//!         Ok(intake) => intake,
//!         Err(refusal) => return refusal, // Content-Length over the limit
//!     };
//!     let mut chunks = chunks.into_iter();
//!     let body = match intake.read(|_cx| Poll::Ready(chunks.next().map(Ok::<_, Infallible>))).await {
//!         Ok(body) => body,
//!         Err(refusal) => return refusal,
//!     };
//!     let delivery = match receiver.receive(headers, body).await {
//!         Outcome::Respond(reply) => return reply,
//!         Outcome::Deliver(delivery) => delivery,
//!     };
//!     let (event, _body, claim) = delivery.into_parts();
//!     println!("handling {}", event.id()); // the user's handler runs here
//!     claim.settle(HandlerOutcome::Responded(http::StatusCode::OK)).await;
//!     Reply::received()
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
//! let delivery = SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), "whsec_test_secret").unwrap();
//! let request = delivery.to_request("/webhooks");
//! let (head, body) = (request.headers(), delivery.body.clone());
//! let chunks = vec![body.slice(..10), body.slice(10..)];
//! let peer: IpAddr = "192.0.2.1".parse().unwrap();
//! assert_eq!(serve(&receiver, peer, head, chunks).await, Reply::received());
//! # });
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::StatusCode;
use tracing::Instrument;

pub use crate::headers::{HeaderLookup, Headers};
pub use crate::receiver::{Delivery, Outcome};

use crate::error::Error;
use crate::event::{Event, EventKind};
use crate::receiver::{ClaimGuard, Receiver};
use crate::reply::Reply;
use crate::store::DynStore;

/// Smaller than most limits, so a `Content-Length` alone cannot make every open
/// connection allocate a full limit's worth up front.
const MAX_INITIAL_CAPACITY: usize = 64 * 1024;

/// Reads one request body under the receiver's size limit and body timeout.
///
/// Made by [`BodyIntake::new`], which refuses a declared `Content-Length` over the
/// limit before anything is read; then either [`read`](Self::read) the whole
/// body, or [`push`](Self::push) chunks and [`finish`](Self::finish) yourself
/// (under your own timer of [`timeout`](Self::timeout)).
#[derive(Debug)]
pub struct BodyIntake {
    limit: usize,
    timeout: Duration,
    body: BytesMut,
}

impl BodyIntake {
    /// Starts reading a body for `receiver`; `headers` are the request's.
    ///
    /// # Errors
    /// The `413` reply (logged, closing the connection) when `Content-Length`
    /// declares more than the limit. A `Content-Length` that is not a number is
    /// left to the framework (which rejects it); the limit is then enforced while
    /// reading.
    pub fn new(receiver: &Receiver, headers: &dyn Headers) -> Result<Self, Reply> {
        let limit = receiver.body_limit();
        let declared = match headers.lookup("content-length") {
            HeaderLookup::Once(value) => std::str::from_utf8(value)
                .ok()
                .and_then(|value| value.trim().parse::<u64>().ok()),
            HeaderLookup::Missing | HeaderLookup::Repeated => None,
        };
        let intake = Self {
            limit,
            timeout: receiver.body_timeout(),
            body: BytesMut::new(),
        };
        let Some(declared) = declared else {
            return Ok(intake);
        };
        intake.refuse_over(declared)?;
        let capacity = usize::try_from(declared)
            .unwrap_or(usize::MAX)
            .min(MAX_INITIAL_CAPACITY);
        Ok(Self {
            body: BytesMut::with_capacity(capacity),
            ..intake
        })
    }

    /// Refuses the body when at least `length` bytes of it are known to come
    /// (for a body type that knows its size without a header).
    ///
    /// # Errors
    /// The `413` reply, logged and closing the connection.
    pub fn refuse_over(&self, length: u64) -> Result<(), Reply> {
        if length > u64::try_from(self.limit).unwrap_or(u64::MAX) {
            return Err(refusal(Error::BodyTooLarge { limit: self.limit }));
        }
        Ok(())
    }

    /// How long the whole body may take to arrive (the receiver's body timeout).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Adds a chunk of the body.
    ///
    /// # Errors
    /// The `413` reply (logged, closing the connection) as soon as the body
    /// passes the limit; the chunk is not kept.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), Reply> {
        if chunk.len() > self.limit.saturating_sub(self.body.len()) {
            return Err(refusal(Error::BodyTooLarge { limit: self.limit }));
        }
        self.body.extend_from_slice(chunk);
        Ok(())
    }

    /// The body read so far, as one buffer.
    pub fn finish(self) -> Bytes {
        self.body.freeze()
    }

    /// Reads the whole body: calls `poll_chunk` (the framework's "next chunk",
    /// `None` at the end) until the body ends, passes the limit, fails, or the
    /// [timeout](Self::timeout) runs out. Needs a tokio runtime (the timer).
    ///
    /// # Errors
    /// The reply to send, already logged: `413` over the limit, `408` when the
    /// timeout ran out (both closing the connection), `400` when the framework
    /// reported a read error (the client went away, a corrupt chunk).
    pub async fn read<E: fmt::Display>(
        mut self,
        mut poll_chunk: impl FnMut(&mut Context<'_>) -> Poll<Option<Result<Bytes, E>>>,
    ) -> Result<Bytes, Reply> {
        let timeout = self.timeout;
        let body = &mut self;
        let read_all = std::future::poll_fn(|cx| loop {
            match poll_chunk(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Ready(Some(Ok(chunk))) => {
                    if let Err(reply) = body.push(&chunk) {
                        return Poll::Ready(Err(reply));
                    }
                }
                Poll::Ready(Some(Err(err))) => {
                    return Poll::Ready(Err(rejected(Error::BodyRead(err.to_string()))))
                }
            }
        });
        match tokio::time::timeout(timeout, read_all).await {
            Ok(Ok(())) => Ok(self.finish()),
            Ok(Err(reply)) => Err(reply),
            Err(_elapsed) => Err(refusal(Error::BodyTimeout(timeout))),
        }
    }
}

/// The one rejection path of every intake (inline receiver, inbox, body
/// intake): counts the rejection in `payhook_deliveries_total` under its
/// reason, logs it at `WARN` (the reason's request-derived parts are escaped by
/// [`Error`]'s `Display`), and builds the `4xx` reply.
pub fn reject(error: &Error) -> Reply {
    crate::metrics::rejected(error);
    tracing::warn!(target: "payhook", status = error.status().as_u16(), reason = %error, "delivery rejected");
    Reply::error(error)
}

fn rejected(error: Error) -> Reply {
    reject(&error)
}

/// A rejection whose body was left unread: the connection must close after it.
fn refusal(error: Error) -> Reply {
    rejected(error).closing_connection()
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

/// The `500` reply for a webhook route that has no receiver (the adapter's setup
/// step is missing), logged as an error. `fix` names the step, in the adapter's
/// terms.
pub fn not_configured(fix: &str) -> Reply {
    tracing::error!(target: "payhook", fix, "webhook handler reached without a payhook receiver on its route");
    Reply::not_configured(fix)
}

/// The `500` reply for a receiver with a source-IP allowlist reached without
/// the connection's peer address ([`Reply::peer_address_unknown`]), logged as
/// an error. `fix` names how to pass the address, in the adapter's terms.
pub fn peer_address_unknown(fix: &str) -> Reply {
    tracing::error!(
        target: "payhook",
        fix,
        "webhook request refused: the source-IP allowlist is on but the server passed no peer address"
    );
    Reply::peer_address_unknown(fix)
}

/// Notices one route served by receivers with distinct in-memory stores.
///
/// A receiver that keeps its own [`MemoryStore`](crate::MemoryStore) (no store
/// set on its builder) dedupes only the requests it sees itself. A framework
/// that builds the app once per worker thread (actix-web's `HttpServer::new`
/// closure) makes one receiver, hence one store, per worker when the receiver is
/// built inside that closure: a duplicate that lands on another worker runs the
/// handler again. An adapter keeps one `SplitStoreCheck` per configured
/// receiver and calls [`check`](Self::check) with the route of each request; the
/// first request of each logs a warning (target `payhook`) if the same route in
/// the same namespace is already served by another live in-memory store.
#[derive(Debug, Clone, Default)]
pub struct SplitStoreCheck {
    done: Arc<OnceLock<()>>,
}

type RouteStores = HashMap<(String, String), Weak<dyn DynStore>>;

/// At most this many routes are remembered (their patterns, not request paths).
const MAX_CHECKED_ROUTES: usize = 256;

impl SplitStoreCheck {
    /// A check not run yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks `receiver` serving `route` (the route's pattern, e.g. `/webhooks`)
    /// once; returns `true` when it warned.
    pub fn check(&self, receiver: &Receiver, route: &str) -> bool {
        let mut warned = false;
        self.done.get_or_init(|| {
            warned = record_route_store(receiver, route);
        });
        warned
    }
}

fn record_route_store(receiver: &Receiver, route: &str) -> bool {
    static ROUTES: OnceLock<Mutex<RouteStores>> = OnceLock::new();
    let Some((namespace, store)) = receiver.own_store() else {
        return false; // a store set on the builder may well be shared
    };
    let Ok(mut routes) = ROUTES.get_or_init(Mutex::default).lock() else {
        return false;
    };
    routes.retain(|_, seen| seen.strong_count() > 0);
    let key = (route.to_owned(), namespace.to_owned());
    match routes.get(&key) {
        Some(seen) if !seen.ptr_eq(&store) => {
            tracing::warn!(
                target: "payhook",
                route = %crate::untrusted::Untrusted::value(route),
                namespace = %crate::untrusted::Untrusted::value(namespace),
                "this route is served by several receivers, each with its own in-memory store, \
                 so a duplicate delivery reaching another worker runs the handler again; \
                 build the Receiver once, outside the per-worker app factory, and clone it in \
                 (or give every receiver one shared store)"
            );
            true
        }
        Some(_) => false,
        None => {
            if routes.len() < MAX_CHECKED_ROUTES {
                routes.insert(key, store);
            }
            false
        }
    }
}

/// Which of several handlers takes an event: the routing rule behind each
/// adapter's `EventHandlers`, written once so every framework routes alike.
///
/// For an event, [`handler_for`](Self::handler_for) picks, in order:
/// 1. the handler registered with [`on`](Self::on) for its exact `type` (any
///    string, known to payhook or not);
/// 2. for a payment success (`payment_intent.succeeded` or `payment.succeeded`)
///    or failure, the [`payment_succeeded`](Self::payment_succeeded) or
///    [`payment_failed`](Self::payment_failed) handler;
/// 3. the [`other`](Self::other) handler, which takes what nothing else does;
/// 4. none: the adapter acknowledges the event without running anything.
///
/// `H` is the adapter's boxed handler type. Cloning is cheap (the by-type map is
/// shared), because some frameworks clone their handler for every request.
///
/// ```
/// use payhook::adapter::HandlerTable;
/// use payhook::Event;
///
/// let mut table = HandlerTable::new();
/// table.on("payment_intent.succeeded", "exact");
/// table.payment_succeeded("success");
/// table.other("fallback");
///
/// let event = |ty: &str| {
///     let body = format!(
///         r#"{{"id":"evt_1","type":"{ty}","data":{{"object":{{"id":"pi_1","amount":1,"currency":"btc","status":"succeeded"}}}}}}"#
///     );
///     Event::from_slice(body.as_bytes()).unwrap()
/// };
/// assert_eq!(table.handler_for(&event("payment_intent.succeeded")), Some(&"exact"));
/// assert_eq!(table.handler_for(&event("payment.succeeded")), Some(&"success"));
/// assert_eq!(table.handler_for(&event("payment_intent.failed")), Some(&"fallback"));
/// assert_eq!(table.handler_for(&event("payout.paid")), Some(&"fallback"));
/// ```
pub struct HandlerTable<H> {
    by_type: Arc<HashMap<String, H>>,
    payment_succeeded: Option<H>,
    payment_failed: Option<H>,
    other: Option<H>,
}

impl<H: Clone> HandlerTable<H> {
    /// No handlers: every event is acknowledged without running anything.
    pub fn new() -> Self {
        Self {
            by_type: Arc::default(),
            payment_succeeded: None,
            payment_failed: None,
            other: None,
        }
    }

    /// Routes events whose `type` is exactly `event_type` to `handler`,
    /// replacing an earlier handler for that type.
    pub fn on(&mut self, event_type: impl Into<String>, handler: H) {
        Arc::make_mut(&mut self.by_type).insert(event_type.into(), handler);
    }

    /// Routes payment successes (both spellings) without an exact-type handler.
    pub fn payment_succeeded(&mut self, handler: H) {
        self.payment_succeeded = Some(handler);
    }

    /// Routes payment failures without an exact-type handler.
    pub fn payment_failed(&mut self, handler: H) {
        self.payment_failed = Some(handler);
    }

    /// Routes every event that no other handler takes.
    pub fn other(&mut self, handler: H) {
        self.other = Some(handler);
    }
}

impl<H> HandlerTable<H> {
    /// The handler for `event` (see the type's docs for the order), if any.
    pub fn handler_for(&self, event: &Event) -> Option<&H> {
        self.by_type
            .get(event.event_type())
            .or(match event.kind() {
                EventKind::PaymentIntentSucceeded(_) => self.payment_succeeded.as_ref(),
                EventKind::PaymentIntentFailed(_) => self.payment_failed.as_ref(),
                EventKind::Other { .. } => None,
            })
            .or(self.other.as_ref())
    }
}

impl<H: Clone> Default for HandlerTable<H> {
    fn default() -> Self {
        Self::new()
    }
}

impl<H: Clone> Clone for HandlerTable<H> {
    fn clone(&self) -> Self {
        Self {
            by_type: Arc::clone(&self.by_type),
            payment_succeeded: self.payment_succeeded.clone(),
            payment_failed: self.payment_failed.clone(),
            other: self.other.clone(),
        }
    }
}

impl<H> fmt::Debug for HandlerTable<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut types: Vec<&String> = self.by_type.keys().collect();
        types.sort();
        f.debug_struct("HandlerTable")
            .field("types", &types)
            .field("payment_succeeded", &self.payment_succeeded.is_some())
            .field("payment_failed", &self.payment_failed.is_some())
            .field("other", &self.other.is_some())
            .finish()
    }
}
