//! The inbox route for axum: one line mounts it.
//!
//! ```
//! use axum::Router;
//! use payhook::inbox::{Inbox, Job};
//! use payhook::Receiver;
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! # let dir = std::env::temp_dir().join(format!("payhook-tower-inbox-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! # let url = format!("sqlite://{}", dir.join("inbox.db").display());
//! let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
//! let inbox = Inbox::connect(receiver, &url).await.unwrap(); // e.g. "sqlite://inbox.db"
//! let workers = inbox.start(|job: Job| async move {
//!     println!("processing {}", job.event().id());
//!     Ok(())
//! });
//! let app: Router = Router::new().route("/webhooks", payhook::tower::axum::inbox_route(inbox));
//! # drop(app);
//! # workers.shutdown().await;
//! # });
//! ```
//!
//! The route checks the source address first when the receiver has an
//! allowlist (`403` for a refused one, nothing stored; the peer is read as
//! for [`WebhookLayer`](crate::WebhookLayer), see [`PeerAddr`](crate::PeerAddr)),
//! then reads the body through the core's intake (size limit, body
//! timeout), then [`Inbox::ingest`] verifies, parses and stores the delivery:
//! `200 {"received":true}` once it is committed (new or repeat), `400`/`413`/`408`
//! for what fails the checks, `503` when the database is down.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, Response};
use axum::routing::{post, MethodRouter};
use payhook_core::trace;
use payhook_inbox::{Backend, Inbox};
use tracing::Instrument;

/// `POST` route that stores verified deliveries in `inbox` and acknowledges
/// them; mount it with `Router::route("/webhooks", inbox_route(inbox))`.
/// Takes an inbox on any database (`Inbox<sqlx::Postgres>`,
/// `Inbox<sqlx::Sqlite>`, or `Inbox` from a URL).
pub fn inbox_route<S, DB>(inbox: Inbox<DB>) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
    DB: Backend,
{
    post(move |request: Request| {
        let inbox = inbox.clone();
        let (parts, body) = request.into_parts();
        let peer = crate::peer::peer_ip(&parts.extensions);
        let span = trace::request_span(parts.method.as_str(), parts.uri.path(), &parts.headers);
        let recorded = span.clone();
        async move {
            let response = ingest(&inbox, peer, &parts.headers, body).await;
            trace::record_response(&recorded, response.status().as_u16());
            response
        }
        .instrument(span)
    })
}

async fn ingest<DB: Backend>(
    inbox: &Inbox<DB>,
    peer: Option<std::net::IpAddr>,
    headers: &HeaderMap,
    body: Body,
) -> Response<Body> {
    if let Err(refusal) = inbox
        .receiver()
        .check_source(peer, headers, crate::peer::PASS_THE_PEER)
    {
        return refusal.into_response();
    }
    let reply = match crate::body::read(headers, body, inbox.receiver()).await {
        Ok(bytes) => inbox.ingest(headers, bytes).await,
        Err(refusal) => refusal,
    };
    reply.into_response()
}
