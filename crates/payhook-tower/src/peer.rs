//! [`PeerAddr`]: where the tower layer finds the connection's peer address.

use std::net::{IpAddr, SocketAddr};

/// The connection's peer address, for a receiver with a source-IP allowlist
/// ([`ReceiverBuilder::allowed_networks`](payhook_core::ReceiverBuilder::allowed_networks)).
///
/// [`WebhookService`](crate::WebhookService) and the inbox route read the peer
/// from the request extensions, in this order:
///
/// 1. `axum::extract::ConnectInfo<SocketAddr>` (feature `axum`), which axum sets
///    when the app is served with
///    `app.into_make_service_with_connect_info::<SocketAddr>()` — and which
///    [`axum::serve`](crate::axum::serve) sets for you;
/// 2. `PeerAddr`, for any other tower/hyper server: insert it into each
///    request's extensions from the address your accept loop got.
///
/// Hyper itself does not record the peer, so a plain hyper server must do
/// step 2. With an allowlist and neither extension present, the request is
/// answered `500 Webhook Error: server misconfigured: …` naming this fix —
/// never let in unchecked. Without an allowlist the peer is not needed.
///
/// ```
/// use std::net::SocketAddr;
/// use payhook::tower::PeerAddr;
///
/// // In a hyper accept loop: `let (stream, peer) = listener.accept().await?;`, then
/// // for each request of that connection:
/// # let peer: SocketAddr = "192.0.2.1:50000".parse().unwrap();
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(PeerAddr(peer));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// What a server must do to pass the peer address, in the `500` reply.
pub(crate) const PASS_THE_PEER: &str = "serve the app with \
    `into_make_service_with_connect_info::<SocketAddr>()` or `payhook::tower::axum::serve`, \
    or insert a `payhook::tower::PeerAddr` into each request's extensions";

/// The peer address the server left in `extensions`, if any.
pub(crate) fn peer_ip(extensions: &http::Extensions) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(::axum::extract::ConnectInfo(addr)) =
        extensions.get::<::axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(addr.ip());
    }
    extensions.get::<PeerAddr>().map(|PeerAddr(addr)| addr.ip())
}
