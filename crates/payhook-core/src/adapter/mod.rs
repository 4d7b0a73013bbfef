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
//!    parses and claims: a [`ReceiveOutcome`] is either a [`Reply`] to send at once or
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
//! [`Reply`]: crate::Reply
//! [`Reply::closes_connection`]: crate::Reply::closes_connection
//! [`Reply::handler_panicked`]: crate::Reply::handler_panicked
//!
//! ```
//! use std::convert::Infallible;
//! use std::net::IpAddr;
//! use std::task::Poll;
//!
//! use bytes::Bytes;
//! use payhook::adapter::{BodyIntake, HandlerOutcome, ReceiveOutcome};
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
//!         ReceiveOutcome::Respond(reply) => return reply,
//!         ReceiveOutcome::Deliver(delivery) => delivery,
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

mod handler_table;
mod intake;
mod split_store;

pub use crate::headers::{HeaderLookup, Headers};
pub use crate::receiver::{ClaimGuard, Delivery, HandlerOutcome, ReceiveOutcome};
pub use crate::reject::{not_configured, peer_address_unknown, reject};
pub use handler_table::HandlerTable;
pub use intake::BodyIntake;
pub use split_store::SplitStoreCheck;
