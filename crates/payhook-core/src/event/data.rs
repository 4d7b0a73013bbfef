//! What an event's `data` is read into: the [`EventData`] contract each data
//! type of the catalogue keeps, and its implementation for [`PaymentIntent`].
//!
//! The envelope reads `data` in the same pass as the rest of the body, into the
//! data type's [`Read`](EventData::Read) form, when `type` came first (or on
//! the catalogue's guess when `data` came first); otherwise it keeps `data` as
//! raw JSON and the data type reads it from there. Both paths give the same
//! value or the same error message.

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::intent::{DataMetadataOnly, EventMetadataOnly, IntentFields};
use super::{invalid, PaymentIntent};
use crate::error::Error;

/// A type an event kind carries in `data.object`, read in the envelope's pass.
///
/// Implemented by each data type named in the catalogue's `data` list, in the
/// data type's own file.
pub(crate) trait EventData: Sized {
    /// What the envelope's single pass reads `data` into.
    type Read: DeserializeOwned;
    /// The error for an event of this data type without `data`.
    const NO_DATA: &'static str;
    /// An example `data.object`, JSON text, for the events `EventBuilder`
    /// makes of this kind (a payment intent is built field by field instead).
    const EXAMPLE_OBJECT: &'static str;

    /// The value from what the single pass read; `body` is the whole event.
    fn from_read(read: Self::Read, body: &str) -> Result<Self, Error>;

    /// The value from `data` kept as raw JSON.
    fn from_raw(data: &RawValue) -> Result<Self, Error>;

    /// The payment intent this data is, if it is one.
    fn payment_intent(&self) -> Option<&PaymentIntent> {
        None
    }

    /// The id of the payment intent this data is about, which puts its events
    /// in that intent's per-intent order in the inbox: by default the id of
    /// [`payment_intent`](Self::payment_intent). A data type of its own that
    /// names an intent (a refund's `"payment_intent": "pi_…"`) returns that id
    /// here to wait for the intent's earlier events; one that returns `None`
    /// is handled as soon as it is due.
    fn payment_intent_id(&self) -> Option<&str> {
        self.payment_intent().map(|intent| intent.id.as_str())
    }

    /// Takes the payment intent out, if this data is one.
    fn into_payment_intent(self) -> Option<PaymentIntent> {
        None
    }
}

/// How the envelope holds `data` until `type` is known. `R` is the
/// catalogue's union of the data types' [`Read`](EventData::Read) forms.
///
/// When `type` comes first (the order the service documents) and names a kind
/// of the catalogue, or when `data` comes first (the order of the service's
/// sibling format) and is read on the catalogue's guess, `data` is read
/// straight into the data type: one pass over the body instead of a scan to
/// keep it raw and a second to parse it.
// Lives on the stack for one parse and is moved once: boxing the read data
// would add an allocation to every typed event.
#[allow(clippy::large_enum_variant)]
pub(crate) enum DataField<'a, R> {
    Absent,
    Raw(&'a RawValue),
    Read(R),
}

/// `data` of a data type that serde reads alone: `{"object": T}`. Such a data
/// type's `EventData` is then `Read = Object<Self>` and these two methods.
// Kept for the next such data type: the catalogue's one data type so far, the
// payment intent, is read its own way (the unit tests' test refund uses it).
#[allow(dead_code)]
#[derive(Deserialize)]
pub(crate) struct Object<T> {
    object: Option<T>,
}

#[allow(dead_code)]
impl<T: DeserializeOwned> Object<T> {
    /// The object; `no_object` is the error when `data` has none.
    pub(crate) fn into_object(self, no_object: &'static str) -> Result<T, Error> {
        self.object.ok_or_else(|| invalid(no_object))
    }

    /// The object of `data` kept raw, with errors said as `data.object: …`.
    pub(crate) fn from_raw(data: &RawValue, no_object: &'static str) -> Result<T, Error> {
        serde_json::from_str::<Self>(data.get())
            .map_err(data_object_error)?
            .into_object(no_object)
    }
}

fn data_object_error(err: serde_json::Error) -> Error {
    Error::InvalidPayload(format!("data.object: {err}"))
}

/// The `data` of a payment event.
#[derive(Deserialize)]
pub(crate) struct IntentData {
    object: Option<IntentFields>,
}

const NO_INTENT: &str = "payment event has no data.object";

impl EventData for PaymentIntent {
    type Read = IntentData;
    const NO_DATA: &'static str = "payment event has no data";
    const EXAMPLE_OBJECT: &'static str = "";

    fn from_read(read: IntentData, body: &str) -> Result<Self, Error> {
        // The rare metadata that must be read again for its exact text is read
        // from the whole body.
        let pi = read
            .object
            .ok_or_else(|| invalid(NO_INTENT))?
            .into_intent(|| Ok(serde_json::from_str::<EventMetadataOnly>(body)?.into_metadata()))
            .map_err(data_object_error)?;
        checked(pi)
    }

    fn from_raw(data: &RawValue) -> Result<Self, Error> {
        let pi = serde_json::from_str::<IntentData>(data.get())
            .map_err(data_object_error)?
            .object
            .ok_or_else(|| invalid(NO_INTENT))?
            .into_intent(|| Ok(serde_json::from_str::<DataMetadataOnly>(data.get())?.into_metadata()))
            .map_err(data_object_error)?;
        checked(pi)
    }

    fn payment_intent(&self) -> Option<&PaymentIntent> {
        Some(self)
    }

    fn into_payment_intent(self) -> Option<PaymentIntent> {
        Some(self)
    }
}

fn checked(pi: PaymentIntent) -> Result<PaymentIntent, Error> {
    if pi.object != PaymentIntent::OBJECT {
        return Err(Error::InvalidPayload(format!(
            "data.object is a {:?}, not a payment_intent",
            pi.object
        )));
    }
    Ok(pi)
}
