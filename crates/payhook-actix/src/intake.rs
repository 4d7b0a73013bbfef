//! The actix side of the core's intake: actix-web's header map seen through
//! the core's `Headers`, and reading one delivery's body (source check, limit,
//! timeout) into a `Bytes`.

use std::net::SocketAddr;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::http::header::HeaderMap;
use bytes::Bytes;
use futures_util::Stream;
use payhook_core::adapter::{BodyIntake, HeaderLookup, Headers};
use payhook_core::Receiver;

use crate::reply::Rejection;

/// actix-web 4's header map (on `http` 0.2) seen through the core's [`Headers`].
pub(crate) struct ActixHeaders<'a>(pub(crate) &'a HeaderMap);

impl Headers for ActixHeaders<'_> {
    fn lookup(&self, name: &str) -> HeaderLookup<'_> {
        HeaderLookup::from_values(self.0.get_all(name).map(|value| value.as_bytes()))
    }

    fn values(&self, name: &str) -> Option<Vec<&[u8]>> {
        Some(self.0.get_all(name).map(|value| value.as_bytes()).collect())
    }
}

/// What a server must do to pass the peer address, in the `500` reply (actix-web
/// knows the peer of every TCP connection; only a test request lacks one).
pub(crate) const PASS_THE_PEER: &str = "serve the app over TCP (HttpServer::bind), or give test requests \
    an address with TestRequest::peer_addr";

/// Checks the source address (when the receiver has an allowlist; `peer` is
/// `HttpRequest::peer_addr`), then reads a delivery's body through the core's
/// intake (declared length, limit, body timeout). A refusal that closes the connection (a stalled or
/// oversized body) keeps the unread rest of the payload in the [`Rejection`],
/// so that actix-web closes the connection after the reply instead of
/// draining a body that may never end.
pub(crate) async fn read_body(
    receiver: &Receiver,
    peer: Option<SocketAddr>,
    headers: &ActixHeaders<'_>,
    mut payload: Payload,
) -> Result<Bytes, Rejection> {
    let checked = receiver
        .check_source(peer.map(|peer| peer.ip()), headers, PASS_THE_PEER)
        .and_then(|()| BodyIntake::new(receiver, headers));
    let read = match checked {
        Ok(intake) => intake.read(|cx| Pin::new(&mut payload).poll_next(cx)).await,
        Err(refusal) => Err(refusal),
    };
    match read {
        Ok(body) => Ok(body),
        Err(refusal) if refusal.closes_connection() => Err(Rejection::with_unread(refusal, payload)),
        Err(refusal) => Err(Rejection::from(refusal)),
    }
}
