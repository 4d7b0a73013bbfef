//! [`ExpectContinue`]: answer `413` to an oversized `Expect: 100-continue`
//! upload before telling the client to send it.

use std::future::{ready, Ready};

use actix_http::{HttpMessage, Request};
use actix_service::{Service, ServiceFactory};
use payhook_core::adapter::BodyIntake;
use payhook_core::Receiver;

use crate::intake::{ActixHeaders, PASS_THE_PEER};
use crate::reply::Rejection;

/// An actix-http expect handler that refuses a declared `Content-Length` over
/// the receiver's body limit with `413 Webhook Error: …` (and a closed
/// connection) instead of `100 Continue`, and a source outside the receiver's
/// allowlist with `403`. Other requests get `100 Continue`.
///
/// It applies one receiver's limit to every request of the server.
///
/// actix-web's `HttpServer` always answers `Expect: 100-continue` with
/// `100 Continue` before any handler or extractor runs, so the
/// [`Webhook`](crate::Webhook) extractor can only refuse an oversized body after
/// the client was invited to upload it (it still never reads it: the `413`
/// follows and the connection is closed). To refuse it first, serve the app with
/// actix-http's `HttpService` and this expect handler:
///
/// ```no_run
/// use actix_http::HttpService;
/// use actix_web::{web, App, HttpResponse};
/// use payhook::actix::{ExpectContinue, Webhook, WebhookConfig};
/// use payhook::Receiver;
///
/// async fn webhooks(webhook: Webhook) -> HttpResponse {
///     webhook.ack().await
/// }
///
/// #[actix_web::main]
/// async fn main() -> std::io::Result<()> {
///     let receiver = Receiver::builder().secret("whsec_test_secret").build().expect("valid configuration");
///     actix_server::Server::build()
///         .bind("webhooks", ("127.0.0.1", 8080), move || {
///             let app = App::new()
///                 .app_data(WebhookConfig::new(receiver.clone()))
///                 .route("/webhooks", web::post().to(webhooks));
///             HttpService::build()
///                 .expect(ExpectContinue::new(&receiver))
///                 .h1(actix_service::map_config(app, |_| actix_web::dev::AppConfig::default()))
///                 .tcp()
///         })?
///         .run()
///         .await
/// }
/// ```
#[derive(Debug, Clone)]
pub struct ExpectContinue {
    receiver: Receiver,
}

impl ExpectContinue {
    /// Refuses bodies over `receiver`'s limit.
    pub fn new(receiver: &Receiver) -> Self {
        Self {
            receiver: receiver.clone(),
        }
    }
}

impl ServiceFactory<Request> for ExpectContinue {
    type Response = Request;
    type Error = actix_web::Error;
    type Config = ();
    type Service = ExpectContinue;
    type InitError = ();
    type Future = Ready<Result<Self::Service, Self::InitError>>;

    fn new_service(&self, _: ()) -> Self::Future {
        ready(Ok(self.clone()))
    }
}

impl Service<Request> for ExpectContinue {
    type Response = Request;
    type Error = actix_web::Error;
    type Future = Ready<Result<Request, actix_web::Error>>;

    actix_service::always_ready!();

    fn call(&self, request: Request) -> Self::Future {
        let headers = ActixHeaders(request.headers());
        let peer = request.peer_addr().map(|peer| peer.ip());
        let checked = self
            .receiver
            .check_source(peer, &headers, PASS_THE_PEER)
            .and_then(|()| BodyIntake::new(&self.receiver, &headers));
        ready(match checked {
            Ok(_) => Ok(request),
            Err(refusal) => Err(Rejection::from(refusal).into()),
        })
    }
}
