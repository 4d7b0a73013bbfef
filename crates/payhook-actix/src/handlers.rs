//! Handlers settled by their result: [`acking`] wraps one handler, and
//! [`EventHandlers`] sends each event to the handler registered for its type.
//!
//! Under [`WebhookConfig`](crate::WebhookConfig) registered as app data (not
//! as a middleware), the plain [`Webhook`] extractor cannot see the response:
//! a handler must call [`Webhook::ack`]. [`acking`] takes a handler that
//! returns `Result<(), E>` instead: `Ok(())` marks the event done and answers
//! `200 {"received":true}`, an `Err` releases the claim (the sender retries) and
//! answers with the error, a panic releases it too and answers `500`
//! (`Webhook Error: the handler panicked; …`). [`EventHandlers`] settles by
//! its handlers' responses (a 2xx marks the event done), wherever its
//! `WebhookConfig` is registered.
//!
//! ```
//! use actix_web::{web, App};
//! use payhook::actix::{acking, EventHandlers, Webhook, WebhookConfig};
//! use payhook::{Event, EventKind, Receiver};
//!
//! #[derive(Clone)]
//! struct Shop;
//!
//! // Any extractors after the event, as with any actix-web handler.
//! async fn webhook(event: Event, shop: web::Data<Shop>) -> actix_web::Result<()> {
//!     if let EventKind::PaymentIntentSucceeded(intent) = event.kind() {
//!         println!("paid: {} {}", intent.amount, intent.currency); // `?` on failure releases the claim
//!     }
//!     Ok(()) // acknowledged
//! }
//!
//! // EventHandlers' handlers take the event as a `Webhook`, like any extractor.
//! async fn payout(event: Webhook, _shop: web::Data<Shop>) -> actix_web::Result<()> {
//!     println!("payout {}", event.id());
//!     Ok(())
//! }
//!
//! let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
//! let handlers = EventHandlers::new()
//!     .on("payout.paid", payout)
//!     .payment_succeeded(|event: Webhook| async move {
//!         println!("paid {}", event.id());
//!         Ok::<_, actix_web::Error>(())
//!     });
//! let app = App::new()
//!     .app_data(WebhookConfig::new(receiver))
//!     .app_data(web::Data::new(Shop))
//!     .route("/webhooks", web::post().to(acking(webhook)))
//!     .route("/payouts", web::post().to(handlers));
//! # drop(app);
//! ```

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use actix_web::{FromRequest, Handler, HttpMessage, HttpRequest, HttpResponse, Responder};
use futures_util::future::LocalBoxFuture;
use futures_util::FutureExt;
use payhook_core::adapter::{HandlerOutcome, HandlerTable};
use payhook_core::{ClaimGuard, Reply};
use serde::de::DeserializeOwned;

use crate::extract::Webhook;
use crate::reply::reply_to_response;
use crate::settle::{run_and_settle, ClaimSlot, Verified};

/// Wraps `handler` — an async function of the event (any `T` [`Webhook<T>`]
/// accepts) and up to five more extractors, returning `Result<(), E>` — into
/// an actix-web handler that acknowledges on `Ok`: `Ok(())` marks the event done
/// and answers `200 {"received":true}`, an `Err` releases the claim and answers
/// with the error, a panic releases it and answers `500`.
pub fn acking<F, Args>(handler: F) -> Acking<F, Args> {
    Acking {
        handler,
        _args: PhantomData,
    }
}

/// The handler [`acking`] makes.
pub struct Acking<F, Args> {
    handler: F,
    _args: PhantomData<fn(Args)>,
}

impl<F: Clone, Args> Clone for Acking<F, Args> {
    fn clone(&self) -> Self {
        Self {
            handler: self.handler.clone(),
            _args: PhantomData,
        }
    }
}

impl<F, Args> fmt::Debug for Acking<F, Args> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acking").finish_non_exhaustive()
    }
}

/// Runs the handler's future, then settles the claim: `Ok` acknowledges, `Err`
/// releases, a panic releases and answers `500` ([`Reply::handler_panicked`]).
/// A dropped request drops the claim, which releases it.
async fn settle_by<E>(
    claim: ClaimGuard,
    handled: impl Future<Output = Result<(), E>>,
) -> Result<HttpResponse, actix_web::Error>
where
    E: Into<actix_web::Error>,
{
    match AssertUnwindSafe(handled).catch_unwind().await {
        Ok(Ok(())) => {
            claim.settle(http::StatusCode::OK).await;
            Ok(reply_to_response(Reply::received()))
        }
        Ok(Err(error)) => {
            claim.settle(HandlerOutcome::Failed).await;
            Err(error.into())
        }
        Err(_panic) => {
            claim.settle(HandlerOutcome::Panicked).await;
            Ok(reply_to_response(Reply::handler_panicked()))
        }
    }
}

macro_rules! acking_handler ({ $($param:ident)* } => {
    impl<F, Fut, E, T, $($param,)*> Handler<(Webhook<T>, $($param,)*)> for Acking<F, (T, $($param,)*)>
    where
        F: Fn(T, $($param,)*) -> Fut + Clone + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<actix_web::Error> + 'static,
        T: DeserializeOwned + 'static,
        $($param: FromRequest + 'static,)*
    {
        type Output = Result<HttpResponse, actix_web::Error>;
        type Future = LocalBoxFuture<'static, Self::Output>;

        #[allow(non_snake_case)]
        fn call(&self, (webhook, $($param,)*): (Webhook<T>, $($param,)*)) -> Self::Future {
            let (event, _body, claim) = webhook.into_parts();
            let handled = (self.handler)(event, $($param,)*);
            Box::pin(settle_by(claim, handled))
        }
    }
});

acking_handler! {}
acking_handler! { A }
acking_handler! { A B }
acking_handler! { A B C }
acking_handler! { A B C D }
acking_handler! { A B C D G }

type BoxedHandler = Arc<dyn Fn(HttpRequest) -> LocalBoxFuture<'static, HttpResponse> + Send + Sync>;

/// Sends each verified event to the handler registered for its type; the
/// handler's response settles the event, as in the axum adapter.
///
/// Each handler is an ordinary actix-web handler: an async function (or
/// closure) taking any extractors — [`Webhook`]`<T>` for the event (as
/// [`Event`](payhook_core::Event) or any `T` a `Webhook` accepts), `web::Data`, `HttpRequest`,
/// `web::Query`, … — and returning any `Responder`. A 2xx marks the event done
/// (a 2xx without a body, such as `Ok(())`, is sent as
/// `200 {"received":true}`); any other status, an `Err` or a panic releases it
/// for the sender's retry (a panic is answered with `500`). A handler that
/// settles the claim itself ([`Webhook::ack`], [`Webhook::release`]) keeps its
/// own response.
///
/// [`on`](Self::on) takes any type string; one method per kind of the event
/// catalogue, such as [`payment_succeeded`](Self::payment_succeeded) (both
/// spellings of the success event) and [`payment_failed`](Self::payment_failed),
/// goes by kind, and an exact type registered with `on` wins over them; [`other`](Self::other) takes what
/// nothing else does. An event nothing takes is acknowledged with
/// `200 {"received":true}`. Pass it to `web::post().to(…)` on a route with a
/// [`WebhookConfig`](crate::WebhookConfig).
///
/// ```
/// use actix_web::{web, App, HttpResponse};
/// use payhook::actix::{EventHandlers, Webhook, WebhookConfig};
/// use payhook::{PaymentIntent, Receiver};
///
/// struct Shop;
///
/// async fn paid(intent: Webhook<PaymentIntent>, _shop: web::Data<Shop>) -> HttpResponse {
///     println!("{} {} received", intent.amount, intent.currency);
///     HttpResponse::Ok().finish() // sent as 200 {"received":true}, and the event is done
/// }
///
/// let handlers = EventHandlers::new()
///     .payment_succeeded(paid)
///     .on("payout.paid", |event: Webhook| async move {
///         println!("payout {}", event.id());
///         Ok::<_, actix_web::Error>(()) // an Err would release the event for a retry
///     });
/// let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
/// let app = App::new()
///     .app_data(web::Data::new(Shop))
///     .app_data(WebhookConfig::new(receiver))
///     .route("/webhooks", web::post().to(handlers));
/// # drop(app);
/// ```
#[derive(Clone, Default)]
pub struct EventHandlers {
    table: HandlerTable<BoxedHandler>,
}

fn boxed<F, Args>(handler: F) -> BoxedHandler
where
    F: Handler<Args> + Send + Sync,
    Args: FromRequest + 'static,
    F::Output: Responder + 'static,
{
    Arc::new(move |req: HttpRequest| {
        let handler = handler.clone();
        Box::pin(async move {
            // The body was read by the Webhook extractor already: extractors
            // here see the request's head, and `Webhook` the verified delivery.
            let args = match Args::extract(&req).await {
                Ok(args) => args,
                Err(error) => return HttpResponse::from_error(error.into()),
            };
            handler.call(args).await.respond_to(&req).map_into_boxed_body()
        })
    })
}

impl EventHandlers {
    /// No handlers yet: every event is acknowledged.
    pub fn new() -> Self {
        Self::default()
    }

    /// Handles events whose `type` is exactly `event_type`, whether payhook knows
    /// the type or not. Registering the same type again replaces its handler.
    pub fn on<F, Args>(mut self, event_type: impl Into<String>, handler: F) -> Self
    where
        F: Handler<Args> + Send + Sync,
        Args: FromRequest + 'static,
        F::Output: Responder + 'static,
    {
        self.table.on(event_type, boxed(handler));
        self
    }

    /// Handles every event no other handler takes.
    pub fn other<F, Args>(mut self, handler: F) -> Self
    where
        F: Handler<Args> + Send + Sync,
        Args: FromRequest + 'static,
        F::Output: Responder + 'static,
    {
        self.table.other(boxed(handler));
        self
    }
}

/// The method of one kind of the event catalogue (`payment_succeeded`, …),
/// expanded for every kind by the core's `for_each_event_kind!`, so a kind
/// added to the catalogue needs no change here.
macro_rules! kind_method {
    ($Variant:ident => $handler:ident [ $($name:literal)+ ]) => {
        #[doc = concat!("Handles the [`", stringify!($Variant), "`](payhook_core::EventKind::", stringify!($Variant), ") kind: ")]
        #[doc = concat!($("`", $name, "` ",)+ "(every name the event catalogue gives it).")]
        pub fn $handler<F, Args>(mut self, handler: F) -> Self
        where
            F: Handler<Args> + Send + Sync,
            Args: FromRequest + 'static,
            F::Output: Responder + 'static,
        {
            self.table.$handler(boxed(handler));
            self
        }
    };
}

impl EventHandlers {
    payhook_core::for_each_event_kind!(kind_method);
}

impl Handler<(HttpRequest, Webhook)> for EventHandlers {
    type Output = HttpResponse;
    type Future = LocalBoxFuture<'static, Self::Output>;

    fn call(&self, (req, webhook): (HttpRequest, Webhook)) -> Self::Future {
        let handler = self.table.handler_for(webhook.event()).cloned();
        let (event, body, claim) = webhook.into_parts();
        let Some(handler) = handler else {
            return Box::pin(async move {
                claim.settle(http::StatusCode::OK).await;
                reply_to_response(Reply::received())
            });
        };
        // The picked handler's `Webhook` extractor finds the verified delivery
        // and its claim here.
        let slot = ClaimSlot::default();
        slot.put(claim);
        req.extensions_mut().insert(slot.clone());
        req.extensions_mut().insert(Verified { event, body });
        Box::pin(run_and_settle(slot, handler(req)))
    }
}

impl fmt::Debug for EventHandlers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventHandlers")
            .field("handlers", &self.table)
            .finish()
    }
}
