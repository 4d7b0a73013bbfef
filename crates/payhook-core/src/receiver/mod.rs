//! The framework-neutral receiver pipeline: verify → parse → claim.
//!
//! [`Receiver::receive`] takes the request headers and the raw body and returns an
//! [`ReceiveOutcome`]: either a [`Reply`](crate::Reply) to send at once (rejected, duplicate, in flight
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
//! use payhook::adapter::ReceiveOutcome;
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
//! let ReceiveOutcome::Deliver(delivery) = receiver.receive(&headers, body.clone()).await else { panic!() };
//! assert_eq!(delivery.event().id(), "evt_1");
//! delivery.into_claim().settle(http::StatusCode::OK).await; // the handler succeeded
//!
//! // The same event again is acknowledged without being handed out.
//! let ReceiveOutcome::Respond(reply) = receiver.receive(&headers, body).await else { panic!() };
//! assert_eq!(reply.status().as_u16(), 200);
//! # });
//! ```
//!
//! The module is split by concern: the pipeline (`pipeline.rs`: source check,
//! verification, parsing, the claim), the claim a handler holds (`claim.rs`:
//! [`ClaimGuard`], its lease renewal and its one settle call) and the builder
//! (`builder.rs`: every setting checked once, at [`ReceiverBuilder::build`]).

mod builder;
mod claim;
mod pipeline;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::signature::SignatureScheme;
use crate::source::Networks;
use crate::store::DynStore;

pub use builder::ReceiverBuilder;
pub use claim::{ClaimGuard, HandlerOutcome};
pub use pipeline::{Delivery, ReceiveOutcome};

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

impl Receiver {
    /// Starts a builder. At least one secret is required.
    pub fn builder() -> ReceiverBuilder {
        ReceiverBuilder::default()
    }

    /// The largest body accepted, in bytes. Adapters stop reading past it and
    /// answer with [`Error::BodyTooLarge`](crate::Error::BodyTooLarge).
    pub fn body_limit(&self) -> usize {
        self.inner.body_limit
    }

    /// How long a request body may take to arrive in full; past it the adapters
    /// answer `408` ([`Error::BodyTimeout`](crate::Error::BodyTimeout)) and close the connection.
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
}
