//! The typed event parser on arbitrary bytes (seeded with real events).
#![no_main]

use libfuzzer_sys::fuzz_target;
use payhook_core::{Event, EventKind};
use serde_json::value::RawValue;

/// An independent reading of the fields the typed parser must agree with.
/// (Not `serde_json::Value`: it refuses numbers beyond f64's range, such as
/// `1e400`, which are valid JSON and which an event may carry in fields
/// payhook keeps raw.)
#[derive(serde::Deserialize)]
struct Head<'a> {
    id: String,
    #[serde(rename = "type")]
    event_type: String,
    #[serde(borrow)]
    data: Option<&'a RawValue>,
}

#[derive(serde::Deserialize)]
struct Data<'a> {
    #[serde(borrow)]
    object: Object<'a>,
}

#[derive(serde::Deserialize)]
struct Object<'a> {
    #[serde(borrow)]
    amount: &'a RawValue,
}

fuzz_target!(|data: &[u8]| {
    let Ok(event) = Event::from_slice(data) else {
        return;
    };
    assert!(!event.id().is_empty());
    let head: Head<'_> = serde_json::from_slice(data).expect("an event has an id and a type");
    assert_eq!(head.id, event.id());
    assert_eq!(head.event_type, event.event_type());
    if let EventKind::PaymentIntentSucceeded(pi) | EventKind::PaymentIntentFailed(pi) = event.kind() {
        // Amounts are exact: the amount's JSON text is the number's decimal digits.
        let data = head.data.expect("a payment event has data");
        let object: Data<'_> = serde_json::from_str(data.get()).expect("data.object.amount");
        let text = object.object.amount.get().trim_start_matches('0');
        let text = if text.is_empty() { "0" } else { text };
        assert_eq!(text, pi.amount.to_string());
    }
    for (name, raw) in event.fields() {
        assert!(serde_json::from_str::<&RawValue>(raw.get()).is_ok(), "{name}");
    }
});
