//! Every refusal in one place: a rejected delivery is counted, logged and
//! answered here, so each intake (inline receiver, inbox, body intake, source
//! check) refuses alike, and a setup mistake (no receiver on a route, no peer
//! address for the allowlist) is logged as an error. The reply texts
//! themselves are built by [`Reply`].

use std::fmt;
use std::net::IpAddr;

use crate::error::Error;
use crate::reply::Reply;

/// The one rejection path of every intake (inline receiver, inbox, body
/// intake): counts the rejection in `payhook_deliveries_total` under its
/// reason, logs it at `WARN` (the reason's request-derived parts are escaped by
/// [`Error`]'s `Display`), and builds the `4xx` reply.
pub fn reject(error: &Error) -> Reply {
    crate::metrics::rejected(error);
    tracing::warn!(target: "payhook", status = error.status().as_u16(), reason = %error, "delivery rejected");
    Reply::error(error)
}

pub(crate) fn rejected(error: Error) -> Reply {
    reject(&error)
}

/// A rejection whose body was left unread: the connection must close after it.
pub(crate) fn refusal(error: Error) -> Reply {
    rejected(error).closing_connection()
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

/// The `403` for a client outside the source-IP allowlist, closing the
/// connection (its body is left unread).
pub(crate) fn client_not_allowed(peer: IpAddr, client: IpAddr) -> Reply {
    let error = Error::SourceNotAllowed;
    crate::metrics::rejected(&error);
    tracing::warn!(
        target: "payhook",
        status = 403,
        reason = %error,
        %peer,
        %client,
        "delivery rejected: the client address is outside the allowlist"
    );
    Reply::error(&error).closing_connection()
}

/// The `403` for forwarding headers from a trusted proxy that do not name a
/// client; `forwarded` says why, with its request text escaped.
pub(crate) fn client_not_named(peer: IpAddr, forwarded: &dyn fmt::Display) -> Reply {
    let error = Error::SourceNotAllowed;
    crate::metrics::rejected(&error);
    tracing::warn!(
        target: "payhook",
        status = 403,
        reason = %error,
        %peer,
        forwarded = %forwarded,
        "delivery rejected: the forwarding headers from a trusted proxy do not name a client"
    );
    Reply::error(&error).closing_connection()
}
