//! The inbox route for actix-web: one line mounts it.
//!
//! ```
//! use actix_web::App;
//! use payhook::inbox::{Inbox, Job};
//! use payhook::Receiver;
//!
//! # actix_web::rt::System::new().block_on(async {
//! # let dir = std::env::temp_dir().join(format!("payhook-actix-inbox-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! # let url = format!("sqlite://{}", dir.join("inbox.db").display());
//! let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
//! let inbox = Inbox::connect(receiver, &url).await.unwrap(); // e.g. "sqlite://inbox.db"
//! let workers = inbox.start(|job: Job| async move {
//!     println!("processing {}", job.event().id());
//!     Ok(())
//! });
//! let app = move || App::new().route("/webhooks", payhook::actix::inbox_route(inbox.clone()));
//! # let _ = app;
//! # workers.shutdown().await;
//! # });
//! ```
//!
//! The route checks the source address first when the receiver has an
//! allowlist (`403` for a refused one, nothing stored), then reads the body
//! through the core's intake (size limit, body
//! timeout), then [`Inbox::ingest`] verifies, parses and stores the delivery:
//! `200 {"received":true}` once it is committed (new or repeat), `400`/`413`/`408`
//! for what fails the checks, `503` when the database is down.

use actix_web::{web, HttpRequest, HttpResponse, ResponseError, Route};
use payhook_core::trace;
use payhook_inbox::{Backend, Inbox};
use tracing::Instrument;

use crate::intake::{read_body, ActixHeaders};
use crate::reply::reply_to_response;

/// `POST` route that stores verified deliveries in `inbox` and acknowledges
/// them; mount it with `App::route("/webhooks", inbox_route(inbox))`.
/// Takes an inbox on any database (`Inbox<sqlx::Postgres>`,
/// `Inbox<sqlx::Sqlite>`, or `Inbox` from a URL).
pub fn inbox_route<DB: Backend>(inbox: Inbox<DB>) -> Route {
    web::post().to(move |req: HttpRequest, payload: web::Payload| {
        let inbox = inbox.clone();
        let span = trace::request_span(req.method().as_str(), req.path(), &ActixHeaders(req.headers()));
        let recorded = span.clone();
        async move {
            let response = ingest(&inbox, &req, payload).await;
            trace::record_response(&recorded, response.status().as_u16());
            response
        }
        .instrument(span)
    })
}

async fn ingest<DB: Backend>(inbox: &Inbox<DB>, req: &HttpRequest, payload: web::Payload) -> HttpResponse {
    let headers = ActixHeaders(req.headers());
    match read_body(inbox.receiver(), req.peer_addr(), &headers, payload.into_inner()).await {
        Ok(body) => reply_to_response(inbox.ingest(&headers, body).await),
        Err(refusal) => refusal.error_response(),
    }
}
