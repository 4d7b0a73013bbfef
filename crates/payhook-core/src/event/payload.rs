//! Payload conversion: a verified body into [`Event`], [`PaymentIntent`] or the
//! caller's own type.

use serde::de::DeserializeOwned;

use super::{payload_error, Event, PaymentIntent};
use crate::error::Error;

/// Parses a verified body into the caller's own type instead of [`Event`].
///
/// # Errors
/// [`Error::InvalidPayload`] with serde's message.
pub fn parse_as<T: DeserializeOwned>(body: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(payload_error)
}

/// Turns a verified delivery into the type a handler asked for, reusing the
/// pipeline's parse where it can, so every adapter hands out payloads alike:
///
/// | `T` | result |
/// |---|---|
/// | [`Event`] | `event` itself (parsed from `body` when `None`) |
/// | [`PaymentIntent`] | the event's payment intent; a payload error for events without one |
/// | anything else | `body` parsed with [`parse_as`] |
///
/// # Errors
/// [`Error::InvalidPayload`] saying why the body does not fit `T`.
pub fn into_payload<T: DeserializeOwned + 'static>(event: Option<Event>, body: &[u8]) -> Result<T, Error> {
    use std::any::{Any, TypeId};
    let is = |id: TypeId| TypeId::of::<T>() == id;
    if is(TypeId::of::<Event>()) || is(TypeId::of::<PaymentIntent>()) {
        let event = match event {
            Some(event) => event,
            None => Event::from_slice(body)?,
        };
        let value: Box<dyn Any> = if is(TypeId::of::<Event>()) {
            Box::new(event)
        } else {
            let event_type = event.event_type().to_owned();
            match event.into_kind().into_payment_intent() {
                Some(pi) => Box::new(pi),
                None => {
                    return Err(Error::InvalidPayload(format!(
                        "{event_type} events carry no payment intent"
                    )))
                }
            }
        };
        if let Ok(value) = value.downcast::<T>() {
            return Ok(*value);
        }
    }
    parse_as(body)
}
