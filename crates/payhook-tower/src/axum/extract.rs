//! The [`Webhook`] extractor, its [`WebhookRejection`], and the [`Received`] responder.

use std::fmt;

use ::axum::body::Body;
use ::axum::extract::FromRequestParts;
use ::axum::response::{IntoResponse, Response};
use http::request::Parts;
use payhook_core::event::into_payload;
use payhook_core::{Error, Event, Reply};
use serde::de::DeserializeOwned;

use crate::RawBody;

/// What a route without [`WebhookLayer`](crate::WebhookLayer) is missing, in the
/// `500 Webhook Error: server misconfigured: …` reply.
const ADD_THE_LAYER: &str =
    "add `.route_layer(WebhookLayer::new(receiver))` to its router so deliveries are verified first";

/// Extracts the verified event of the delivery (set by
/// [`WebhookLayer`](crate::WebhookLayer)), as `T`:
///
/// | `T` | what the handler gets |
/// |---|---|
/// | [`Event`] (the default) | the typed event the layer verified and parsed |
/// | [`PaymentIntent`](payhook_core::PaymentIntent) | the event's payment intent; `400` if it is not a payment event |
/// | any other `DeserializeOwned` type | the raw body parsed with [`parse_as`](payhook_core::event::parse_as); `400 Webhook Error: invalid payload: …` if it does not fit |
///
/// It reads the request extensions only, so it goes in any position, next to
/// `State`, `HeaderMap` or even a body extractor. Without the layer it answers
/// `500 Webhook Error: server misconfigured: this webhook route has no payhook
/// receiver; add `.route_layer(WebhookLayer::new(receiver))` …`.
///
/// ```
/// use payhook_tower::axum::{Received, Webhook};
/// use serde::Deserialize;
///
/// /// Just the fields this app needs; everything else in the event is ignored.
/// #[derive(Deserialize)]
/// struct Paid {
///     id: String,
///     data: PaidData,
/// }
///
/// #[derive(Deserialize)]
/// struct PaidData {
///     object: PaidIntent,
/// }
///
/// #[derive(Deserialize)]
/// struct PaidIntent {
///     id: String,
///     metadata: std::collections::HashMap<String, String>,
/// }
///
/// async fn webhook(Webhook(paid): Webhook<Paid>) -> Received {
///     let order = paid.data.object.metadata.get("order_id");
///     println!("{} paid {} for order {order:?}", paid.id, paid.data.object.id);
///     Received
/// }
/// # let _: axum::routing::MethodRouter = axum::routing::post(webhook);
/// ```
#[derive(Debug, Clone)]
pub struct Webhook<T = Event>(pub T);

impl<S, T> FromRequestParts<S> for Webhook<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send + 'static,
{
    type Rejection = WebhookRejection;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let Some(RawBody(body)) = parts.extensions.get::<RawBody>() else {
            return Err(WebhookRejection::MissingLayer);
        };
        let body = body.clone(); // `Bytes`: a reference count, not a copy
                                 // Take the layer's event rather than cloning its strings; a second
                                 // `Webhook` extractor in the same handler parses the raw body again.
        let event = parts.extensions.remove::<Event>();
        into_payload(event, &body)
            .map(Webhook)
            .map_err(WebhookRejection::InvalidPayload)
    }
}

/// Why [`Webhook`] could not produce its value.
#[derive(Debug)]
#[non_exhaustive]
pub enum WebhookRejection {
    /// The route is not behind [`WebhookLayer`](crate::WebhookLayer): a setup
    /// mistake, answered with `500 Webhook Error: server misconfigured: …`.
    MissingLayer,
    /// The verified body does not fit the requested type: `400 Webhook Error: invalid payload: …`.
    InvalidPayload(Error),
}

impl fmt::Display for WebhookRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingLayer => f.write_str(Reply::not_configured(ADD_THE_LAYER).body()),
            Self::InvalidPayload(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for WebhookRejection {}

impl IntoResponse for WebhookRejection {
    fn into_response(self) -> Response {
        match self {
            Self::MissingLayer => missing_layer(),
            Self::InvalidPayload(error) => {
                tracing::warn!(target: "payhook", reason = %error, "event does not fit the handler's type");
                Reply::error(&error).into_response::<Body>()
            }
        }
    }
}

pub(super) fn missing_layer() -> Response {
    payhook_core::adapter::not_configured(ADD_THE_LAYER).into_response::<Body>()
}

/// `200 application/json {"received":true}`: what a handler returns when it is
/// done with the event. Any 2xx marks the event done; this is the reply the
/// payment service expects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Received;

impl IntoResponse for Received {
    fn into_response(self) -> Response {
        Reply::received().into_response::<Body>()
    }
}
