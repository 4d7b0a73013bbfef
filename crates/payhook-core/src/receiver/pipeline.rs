//! The pipeline one request goes through: the source-IP allowlist before the
//! body, then verify → parse → claim once the body is in.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tracing::Instrument;

use super::claim::ClaimGuard;
use super::{Inner, Receiver};
use crate::error::Error;
use crate::event::Event;
use crate::headers::Headers;
use crate::metrics;
use crate::reply::Reply;
use crate::source::client_address;
use crate::store::Claim;
use crate::untrusted::Untrusted;

/// What [`Receiver::receive`] decided for a request: answer at once, or hand
/// the event to the handler.
#[derive(Debug)]
#[must_use]
// Moved once per request, straight into a match: boxing the large variant would
// only add an allocation to every delivery.
#[allow(clippy::large_enum_variant)]
pub enum ReceiveOutcome {
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
        match client_address(peer, headers, &source.trusted_proxies) {
            Ok(client) if source.allowed.contains(client) => Ok(()),
            Ok(client) => Err(crate::reject::client_not_allowed(peer, client)),
            Err(forwarded) => Err(crate::reject::client_not_named(peer, &forwarded)),
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
    ) -> impl Future<Output = ReceiveOutcome> + Send + 'static {
        // Read the clock only when the completion log that reports it is wanted.
        let started = tracing::enabled!(target: "payhook", tracing::Level::INFO).then(Instant::now);
        let admitted = self.check_or_reject(headers, &body);
        let inner = Arc::clone(&self.inner);
        async move {
            match admitted {
                Err(reply) => ReceiveOutcome::Respond(reply),
                Ok(event) => claim(inner, event, body, started).await,
            }
        }
    }

    /// [`check`](Self::check), with its outcome counted in
    /// `payhook_deliveries_total` and a failure turned into its rejection:
    /// logged at `WARN` with the reason escaped, and the ready reply. The intake
    /// every delivery goes through, inline ([`receive`](Self::receive)) or into
    /// the inbox.
    ///
    /// # Errors
    /// The ready reply for a rejected delivery (`400`/`413`), already logged
    /// and counted.
    pub fn check_or_reject(&self, headers: &dyn Headers, body: &[u8]) -> Result<Event, Reply> {
        match self.check(headers, body) {
            Ok(event) => {
                metrics::verified();
                Ok(event)
            }
            Err(error) => Err(crate::reject::reject(&error)),
        }
    }

    /// Verifies the signature over the raw bytes, then parses the event, with
    /// the id the scheme takes from the headers when it has one
    /// ([`SignatureScheme::event_id`](crate::SignatureScheme::event_id), see
    /// [`Event::from_slice_with_id`]). Nothing touches the store before the
    /// signature is checked.
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
        match self.inner.scheme.event_id(headers) {
            None => Event::from_slice(body),
            Some(id) => Event::from_slice_with_id(body, id),
        }
    }
}

async fn claim(inner: Arc<Inner>, event: Event, body: Bytes, started: Option<Instant>) -> ReceiveOutcome {
    let span = tracing::info_span!(target: "payhook", "delivery", event_id = %Untrusted::value(event.id()), event_type = %Untrusted::value(event.event_type()));
    crate::trace::messaging(
        &span,
        crate::trace::Message {
            operation: "process",
            namespace: &inner.namespace,
            event_id: event.id(),
            event_type: event.event_type(),
            attempt: None,
        },
    );
    let claim_span = span.clone();
    async move {
        match inner.store.dyn_claim(&inner.namespace, event.id(), inner.lease).await {
            Ok(Claim::Claimed(token)) => {
                tracing::debug!(target: "payhook", "event claimed");
                let id = event.id().to_owned();
                let claim = ClaimGuard::new(inner, id, token, started, claim_span);
                ReceiveOutcome::Deliver(Delivery { event, body, claim })
            }
            Ok(Claim::Done) => {
                metrics::duplicate();
                tracing::info!(target: "payhook", "duplicate delivery acknowledged; the event was processed before");
                ReceiveOutcome::Respond(Reply::received())
            }
            Ok(Claim::InFlight) => {
                metrics::in_flight();
                let error = Error::InFlight(event.id().to_owned());
                tracing::info!(target: "payhook", status = 409, "delivery refused: the event is in flight elsewhere");
                ReceiveOutcome::Respond(Reply::error(&error))
            }
            Err(err) => {
                metrics::store_error();
                let error = Error::from(err);
                tracing::error!(target: "payhook", status = 503, reason = %error, "dedupe store unavailable");
                ReceiveOutcome::Respond(Reply::error(&error))
            }
        }
    }
    .instrument(span)
    .await
}
