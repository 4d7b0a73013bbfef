//! [`EventHandlers`]: one axum handler per event type, as a single handler.

use std::fmt;
use std::sync::Arc;

use ::axum::extract::Request;
use ::axum::handler::Handler;
use ::axum::response::{IntoResponse, Response};
use futures_util::future::BoxFuture;
use payhook_core::adapter::HandlerTable;
use payhook_core::Event;

use super::extract::{missing_layer, Received};

type BoxedHandler<S> = Arc<dyn Fn(Request, S) -> BoxFuture<'static, Response> + Send + Sync>;

/// Sends each verified event to the handler registered for its type, for apps
/// that prefer that to a `match` on [`EventKind`](payhook_core::EventKind).
///
/// [`on`](Self::on) takes any type string (`"payment_intent.succeeded"`,
/// `"payout.paid"`, a type payhook has never heard of); the shortcuts, one per
/// kind of the event catalogue, such as
/// [`payment_succeeded`](Self::payment_succeeded) (both spellings of the
/// success event) and [`payment_failed`](Self::payment_failed), go by kind, and
/// [`other`](Self::other) takes what nothing else does. A handler registered
/// with `on` for the exact type wins over a shortcut (the core's
/// [`HandlerTable`] rule, shared with the actix adapter).
///
/// Each handler is an ordinary axum handler: it takes any extractors
/// (`State`, [`Webhook`](super::Webhook)`<PaymentIntent>`, …) and returns any
/// response; a 2xx marks the event done, anything else releases it for a retry.
/// An event whose kind has no handler is acknowledged with
/// `200 {"received":true}`. `EventHandlers` is itself a handler: pass it to
/// `post(…)` on the route that [`WebhookLayer`](crate::WebhookLayer) covers.
///
/// ```
/// use axum::{routing::post, Router};
/// use payhook::{Event, PaymentIntent, Receiver};
/// use payhook::tower::axum::{EventHandlers, Received, Webhook};
/// use payhook::tower::WebhookLayer;
///
/// async fn paid(Webhook(intent): Webhook<PaymentIntent>) -> Received {
///     println!("{} {} received", intent.amount, intent.currency);
///     Received
/// }
///
/// async fn anything_else(Webhook(event): Webhook<Event>) -> Received {
///     println!("ignoring {}", event.event_type());
///     Received
/// }
///
/// let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
/// async fn payout(Webhook(event): Webhook<Event>) -> Received {
///     println!("payout event {}", event.id());
///     Received
/// }
///
/// let handlers = EventHandlers::new()
///     .payment_succeeded(paid)
///     .on("payout.paid", payout)
///     .other(anything_else);
/// let app: Router = Router::new()
///     .route("/webhooks", post(handlers))
///     .route_layer(WebhookLayer::new(receiver));
/// ```
pub struct EventHandlers<S = ()> {
    table: HandlerTable<BoxedHandler<S>>,
}

impl<S> EventHandlers<S>
where
    S: Clone + Send + Sync + 'static,
{
    /// No handlers yet: every event is acknowledged.
    pub fn new() -> Self {
        Self {
            table: HandlerTable::new(),
        }
    }

    /// Handles events whose `type` is exactly `event_type`, whether payhook knows
    /// the type or not. Registering the same type again replaces its handler.
    pub fn on<H, T>(mut self, event_type: impl Into<String>, handler: H) -> Self
    where
        H: Handler<T, S>,
        T: 'static,
    {
        self.table.on(event_type, boxed(handler));
        self
    }

    /// Handles every event no other handler takes (see [`Event::event_type`]).
    pub fn other<H, T>(mut self, handler: H) -> Self
    where
        H: Handler<T, S>,
        T: 'static,
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
        pub fn $handler<H, T>(mut self, handler: H) -> Self
        where
            H: Handler<T, S>,
            T: 'static,
        {
            self.table.$handler(boxed(handler));
            self
        }
    };
}

impl<S> EventHandlers<S>
where
    S: Clone + Send + Sync + 'static,
{
    payhook_core::for_each_event_kind!(kind_method);
}

fn boxed<H, T, S>(handler: H) -> BoxedHandler<S>
where
    H: Handler<T, S>,
    T: 'static,
    S: Send + 'static,
{
    Arc::new(move |request, state| Box::pin(handler.clone().call(request, state)))
}

impl<S> Handler<(), S> for EventHandlers<S>
where
    S: Clone + Send + Sync + 'static,
{
    type Future = BoxFuture<'static, Response>;

    fn call(self, request: Request, state: S) -> Self::Future {
        let Some(event) = request.extensions().get::<Event>() else {
            return Box::pin(async { missing_layer() });
        };
        let handler = self.table.handler_for(event).map(Arc::clone);
        match handler {
            Some(handler) => handler(request, state),
            None => Box::pin(async { Received.into_response() }),
        }
    }
}

impl<S> Clone for EventHandlers<S> {
    fn clone(&self) -> Self {
        Self {
            table: self.table.clone(),
        }
    }
}

impl<S> Default for EventHandlers<S>
where
    S: Clone + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<S> fmt::Debug for EventHandlers<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventHandlers")
            .field("handlers", &self.table)
            .finish()
    }
}
