//! Handlers whose `Ok` acknowledges: [`acking`] wraps one handler, and
//! [`EventHandlers`] sends each event to the handler registered for its type.
//!
//! With the plain [`Webhook`] extractor a handler must call
//! [`Webhook::ack`]; one that answers `200` without it leaves the event
//! unhandled (delivered again). These wrappers take handlers that return
//! `Result<(), E>` instead: `Ok(())` marks the event done and answers
//! `200 {"received":true}`, an `Err` releases the claim (the sender retries) and
//! answers with the error, a panic releases it too and answers `500`
//! (`Webhook Error: the handler panicked; …`).
//!
//! ```
//! use actix_web::{web, App};
//! use payhook::actix::{acking, EventHandlers, WebhookConfig};
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
//! async fn payout(event: Event) -> actix_web::Result<()> {
//!     println!("payout {}", event.id());
//!     Ok(())
//! }
//!
//! let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
//! let handlers = EventHandlers::new()
//!     .on("payout.paid", payout)
//!     .payment_succeeded(|event: Event| async move {
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

use actix_web::{FromRequest, Handler, HttpResponse};
use futures_util::future::LocalBoxFuture;
use futures_util::FutureExt;
use payhook_core::adapter::{HandlerOutcome, HandlerTable};
use payhook_core::{ClaimGuard, Event, Reply};
use serde::de::DeserializeOwned;

use crate::extract::{reply_to_response, Webhook};

/// Wraps `handler` — an async function of the event (any `T` [`Webhook<T>`]
/// accepts) and up to five more extractors, returning `Result<(), E>` — into
/// an actix-web handler that acknowledges on `Ok` (see the [module docs](self)).
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
        Ok(Ok(())) => Ok(reply_to_response(claim.complete().await)),
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

type BoxedHandler = Arc<dyn Fn(Event) -> LocalBoxFuture<'static, Result<(), actix_web::Error>> + Send + Sync>;

/// Sends each verified event to the handler registered for its type, and
/// acknowledges when that handler returns `Ok` (see the [module docs](self)).
///
/// Each handler is an async function (or closure) of the [`Event`] returning
/// `Result<(), E>` with `E: Into<actix_web::Error>`; it captures what it needs
/// (clone your state into it). [`on`](Self::on) takes any type string;
/// [`payment_succeeded`](Self::payment_succeeded) (both spellings of the success
/// event) and [`payment_failed`](Self::payment_failed) go by kind, and an exact
/// type registered with `on` wins over them; [`other`](Self::other) takes what
/// nothing else does. An event nothing takes is acknowledged with
/// `200 {"received":true}`. Pass it to `web::post().to(…)` on a route with a
/// [`WebhookConfig`](crate::WebhookConfig).
#[derive(Clone, Default)]
pub struct EventHandlers {
    table: HandlerTable<BoxedHandler>,
}

fn boxed<F, Fut, E>(handler: F) -> BoxedHandler
where
    F: Fn(Event) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + 'static,
    E: Into<actix_web::Error> + 'static,
{
    Arc::new(move |event| {
        let handled = handler(event);
        Box::pin(async move { handled.await.map_err(Into::into) })
    })
}

impl EventHandlers {
    /// No handlers yet: every event is acknowledged.
    pub fn new() -> Self {
        Self::default()
    }

    /// Handles events whose `type` is exactly `event_type`, whether payhook knows
    /// the type or not. Registering the same type again replaces its handler.
    pub fn on<F, Fut, E>(mut self, event_type: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<actix_web::Error> + 'static,
    {
        self.table.on(event_type, boxed(handler));
        self
    }

    /// Handles `payment_intent.succeeded` and `payment.succeeded`.
    pub fn payment_succeeded<F, Fut, E>(mut self, handler: F) -> Self
    where
        F: Fn(Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<actix_web::Error> + 'static,
    {
        self.table.payment_succeeded(boxed(handler));
        self
    }

    /// Handles `payment_intent.failed` and its sibling-format name
    /// `payment_intent.payment_failed`.
    pub fn payment_failed<F, Fut, E>(mut self, handler: F) -> Self
    where
        F: Fn(Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<actix_web::Error> + 'static,
    {
        self.table.payment_failed(boxed(handler));
        self
    }

    /// Handles every event no other handler takes.
    pub fn other<F, Fut, E>(mut self, handler: F) -> Self
    where
        F: Fn(Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<actix_web::Error> + 'static,
    {
        self.table.other(boxed(handler));
        self
    }
}

impl Handler<(Webhook,)> for EventHandlers {
    type Output = Result<HttpResponse, actix_web::Error>;
    type Future = LocalBoxFuture<'static, Self::Output>;

    fn call(&self, (webhook,): (Webhook,)) -> Self::Future {
        let handler = self.table.handler_for(webhook.event()).cloned();
        let (event, _body, claim) = webhook.into_parts();
        Box::pin(async move {
            match handler {
                Some(handler) => settle_by(claim, handler(event)).await,
                None => Ok(reply_to_response(claim.complete().await)),
            }
        })
    }
}

impl fmt::Debug for EventHandlers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventHandlers")
            .field("handlers", &self.table)
            .finish()
    }
}
