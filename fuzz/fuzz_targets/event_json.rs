//! The typed event parser on arbitrary bytes (seeded with real events).
#![no_main]

use std::collections::BTreeMap;

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
    /// Filled in order, so of a repeated key the last value stays.
    #[serde(borrow, default)]
    metadata: Option<BTreeMap<String, &'a RawValue>>,
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
        // Metadata: a string value unescaped, any other value's JSON text exactly.
        let want: Vec<(String, String)> = object
            .object
            .metadata
            .unwrap_or_default()
            .into_iter()
            .map(|(key, raw)| {
                let value = match serde_json::from_str::<String>(raw.get()) {
                    Ok(text) => text,
                    Err(_) => raw.get().to_owned(),
                };
                (key, value)
            })
            .collect();
        let got: Vec<(String, String)> = pi
            .metadata
            .iter()
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        assert_eq!(got, want);
    }
    // Every other top-level field by name, the last of a repeated name, its
    // JSON text exactly as sent.
    let all: BTreeMap<String, &RawValue> = serde_json::from_slice(data).expect("an event is an object");
    let want: Vec<(&str, &str)> = all
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "id" | "type" | "data"))
        .map(|(name, raw)| (name.as_str(), raw.get()))
        .collect();
    let got: Vec<(&str, &str)> = event.fields().map(|(name, raw)| (name, raw.get())).collect();
    assert_eq!(got, want);
});
