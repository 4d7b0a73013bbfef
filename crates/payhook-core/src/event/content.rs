//! Whether two bodies under one event id say the same thing.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;

/// Whether two bodies under one event id say the same: the same `type` and the
/// same `data`, compared as JSON values — members in any order, any
/// spacing, a string's escapes decoded, numbers by their exact text (amounts
/// are exact beyond 2^64, so no float stands in for one). The envelope's own
/// fields (`id`, `created`, `livemode`, `object`, `timestamp`, …) may differ
/// between a delivery and another source's copy of the event and are not
/// compared. Bodies that are not JSON objects say the same only byte for
/// byte.
///
/// The inbox uses it on a duplicate delivery whose bytes differ from the
/// stored event's: a sender's bug, or a replayed but altered event, shows
/// as a differing duplicate; the same event serialised by another source
/// (an events list against a delivery) does not.
///
/// ```
/// use payhook::event::same_content;
///
/// let delivered = r#"{"id":"evt_1","type":"customer.created","data":{"id":"cus_1","n":1}}"#;
/// let listed = r#"{"object":"event","data":{"n":1,"id":"cus_1"},"type":"customer.created","id":"evt_1"}"#;
/// assert!(same_content(delivered, listed));
/// assert!(!same_content(delivered, &delivered.replace("\"n\":1", "\"n\":2")));
/// ```
pub fn same_content(stored: &str, copy: &str) -> bool {
    if stored == copy {
        return true;
    }
    #[derive(Deserialize)]
    struct Content<'a> {
        #[serde(borrow, rename = "type")]
        event_type: Option<&'a RawValue>,
        #[serde(borrow)]
        data: Option<&'a RawValue>,
    }
    let (Ok(a), Ok(b)) = (
        serde_json::from_str::<Content<'_>>(stored),
        serde_json::from_str::<Content<'_>>(copy),
    ) else {
        return false;
    };
    same_value(a.event_type, b.event_type) && same_value(a.data, b.data)
}

/// Two optional JSON values, equal as values.
fn same_value(a: Option<&RawValue>, b: Option<&RawValue>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => same_json(a.get(), b.get()),
        _ => false,
    }
}

/// Two JSON texts (each one valid value), equal as values. Objects and arrays
/// are compared member by member; each nesting level reads its members' text
/// once, and serde_json stops at 128 levels, so the work is bounded.
fn same_json(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim(), b.trim());
    if a == b {
        return true;
    }
    match (a.as_bytes().first(), b.as_bytes().first()) {
        (Some(b'{'), Some(b'{')) => {
            let parse = |text| serde_json::from_str::<BTreeMap<String, &RawValue>>(text);
            match (parse(a), parse(b)) {
                (Ok(a), Ok(b)) => {
                    a.len() == b.len()
                        && a.iter()
                            .zip(&b)
                            .all(|((ka, va), (kb, vb))| ka == kb && same_json(va.get(), vb.get()))
                }
                _ => false,
            }
        }
        (Some(b'['), Some(b'[')) => {
            let parse = |text| serde_json::from_str::<Vec<&RawValue>>(text);
            match (parse(a), parse(b)) {
                (Ok(a), Ok(b)) => {
                    a.len() == b.len() && a.iter().zip(&b).all(|(va, vb)| same_json(va.get(), vb.get()))
                }
                _ => false,
            }
        }
        (Some(b'"'), Some(b'"')) => {
            let parse = |text| serde_json::from_str::<String>(text);
            matches!((parse(a), parse(b)), (Ok(a), Ok(b)) if a == b)
        }
        // Numbers, `true`, `false` and `null` compare by their text.
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::same_content;

    const STORED: &str = r#"{"id":"evt_1","object":"event","type":"payment_intent.succeeded","created":1,
        "data":{"object":{"id":"pi_1","amount":340282366920938463463374607431768211455,"metadata":{"a":"x","b":[1,2]}}}}"#;

    #[test]
    fn a_copy_serialised_otherwise_same_content() {
        let reordered = r#"{ "type" : "payment_intent.succeeded", "data" : { "object" : { "metadata" : { "b" : [ 1 , 2 ] , "a" : "\u0078" },
            "amount" : 340282366920938463463374607431768211455, "id" : "pi_1" } }, "livemode": false, "id": "evt_1", "created": 2 }"#;
        assert!(same_content(STORED, reordered));
        assert!(same_content(STORED, STORED));
    }

    #[test]
    fn another_type_or_data_differs() {
        let cases = [
            STORED.replace("payment_intent.succeeded", "payment_intent.failed"),
            // The last digit of an amount beyond 2^64: no float may round it away.
            STORED.replace("211455", "211454"),
            STORED.replace(r#""a":"x""#, r#""a":"y""#),
            STORED.replace("[1,2]", "[2,1]"),
            STORED.replace(r#","b":[1,2]"#, ""),
            STORED.replace(r#""a":"x""#, r#""a":null"#),
            r#"{"id":"evt_1","type":"payment_intent.succeeded"}"#.to_owned(),
            "not json".to_owned(),
        ];
        for copy in cases {
            assert!(!same_content(STORED, &copy), "{copy}");
        }
    }
}
