//! Property tests: the signature header parser, the verifier and the event
//! parser over generated input, plus the inputs fuzzing found, kept as
//! regression tests.

use std::collections::BTreeMap;

use payhook_core::sender::EventBuilder;
use payhook_core::signature::{sign, Signature, Verifier};
use payhook_core::{Error, Event, EventKind, FixedClock, PaymentIntentStatus, Secret};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;

/// Enough cases to cover the shapes below while the whole file stays within a
/// few seconds in a debug build.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn lower_hex(len: usize) -> impl Strategy<Value = String> {
    vec(prop::sample::select(b"0123456789abcdef".to_vec()), len)
        .prop_map(|bytes| String::from_utf8(bytes).expect("ASCII"))
}

/// Header-shaped bytes: fragments a real header is made of, in any order, so
/// generated input reaches the parser's every branch rather than failing at
/// the first byte.
fn header_like() -> impl Strategy<Value = Vec<u8>> {
    let fragment = prop_oneof![
        Just(b"t=".to_vec()),
        Just(b"v1=".to_vec()),
        Just(b"v0=".to_vec()),
        Just(b",".to_vec()),
        Just(b"=".to_vec()),
        Just(b"+".to_vec()),
        Just(b" ".to_vec()),
        Just("\u{a0}".as_bytes().to_vec()),
        Just("\u{3000}".as_bytes().to_vec()),
        Just(b"\t".to_vec()),
        Just(b"t".to_vec()),
        Just(b"v1".to_vec()),
        "[0-9]{1,22}".prop_map(String::into_bytes),
        lower_hex(64).prop_map(String::into_bytes),
        (63usize..=65)
            .prop_flat_map(lower_hex)
            .prop_map(|hex| format!("v1={hex}").into_bytes()),
        lower_hex(64).prop_map(|hex| format!("v1={}", hex.to_uppercase()).into_bytes()),
        vec(any::<u8>(), 0..8),
    ];
    vec(fragment, 0..12).prop_map(|parts| parts.concat())
}

fn verifier(secret: &[u8], now: i64) -> Verifier {
    Verifier::builder()
        .secret(secret)
        .clock(FixedClock::new(now))
        .build()
        .expect("non-empty secret")
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn header_parser_never_panics_on_any_bytes(bytes in vec(any::<u8>(), 0..160)) {
        let _ = Signature::parse(&bytes);
    }

    #[test]
    fn header_parser_never_panics_on_header_shaped_bytes(bytes in header_like()) {
        if let Ok(signature) = Signature::parse(&bytes) {
            // Only well-formed candidates are kept.
            for v1 in signature.v1() {
                prop_assert_eq!(v1.len(), 64);
                prop_assert!(v1.iter().all(u8::is_ascii_hexdigit));
            }
        }
    }
}

/// The spaces both official libraries skip before the digits of `t`, and
/// (with U+0085) after them.
const LEADING_SPACES: &[char] = &[
    '\t', '\n', '\u{b}', '\u{c}', '\r', ' ', '\u{a0}', '\u{1680}', '\u{2000}', '\u{2001}', '\u{2002}',
    '\u{2003}', '\u{2004}', '\u{2005}', '\u{2006}', '\u{2007}', '\u{2008}', '\u{2009}', '\u{200a}',
    '\u{2028}', '\u{2029}', '\u{202f}', '\u{205f}', '\u{3000}',
];

/// A `t` value read as the rules say: spaces, an optional `+`, ASCII digits,
/// spaces (U+0085 too).
fn reference_timestamp(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?;
    let text = text.trim_start_matches(LEADING_SPACES);
    let text = text.trim_end_matches(|c| LEADING_SPACES.contains(&c) || c == '\u{85}');
    let digits = text.strip_prefix('+').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The header rules read as literally as possible (split on `,`, key before
/// the first `=`, value up to the next `=`), to check the parser against.
fn reference_parse(header: &[u8]) -> Option<(u64, Vec<&[u8]>)> {
    if header.is_empty() {
        return None;
    }
    let mut t = None;
    let mut v1 = Vec::new();
    for item in header.split(|&b| b == b',') {
        let mut parts = item.split(|&b| b == b'=');
        let key = parts.next()?;
        let Some(value) = parts.next() else {
            if key == b"t" || key == b"v1" {
                return None;
            }
            continue;
        };
        match key {
            b"t" => {
                let parsed = reference_timestamp(value)?;
                if t.is_some_and(|prev| prev != parsed) {
                    return None;
                }
                t = Some(parsed);
            }
            b"v1" if value.len() == 64 && value.iter().all(u8::is_ascii_hexdigit) => v1.push(value),
            _ => {}
        }
    }
    Some((t?, v1))
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn header_parser_agrees_with_the_rules_read_literally(
        // Half the headers start with a valid `t`, so the items after it decide.
        t in proptest::option::of("t=\\+?[0-9]{1,12},"),
        tail in header_like(),
    ) {
        let bytes = [t.unwrap_or_default().into_bytes(), tail].concat();
        let parsed = Signature::parse(&bytes).ok().map(|s| (s.timestamp(), s.v1().collect::<Vec<_>>()));
        prop_assert_eq!(parsed, reference_parse(&bytes));
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn well_formed_headers_round_trip(
        t in any::<u64>(),
        plus in any::<bool>(),
        zeros in 0usize..4,
        v1s in vec(lower_hex(64), 0..6),
        unknown in vec("v0=[a-z0-9]{0,10}|x-[a-z]{1,5}=[0-9]{1,3}|junk", 0..3),
    ) {
        let t_text = format!("{}{}{t}", if plus { "+" } else { "" }, "0".repeat(zeros));
        let mut items = vec![format!("t={t_text}")];
        items.extend(unknown.iter().cloned());
        items.extend(v1s.iter().map(|hex| format!("v1={hex}")));
        let header = items.join(",");

        let parsed = Signature::parse(header.as_bytes()).expect("well-formed header");
        prop_assert_eq!(parsed.timestamp(), t);
        let got: Vec<&[u8]> = parsed.v1().collect();
        let want: Vec<&[u8]> = v1s.iter().map(|hex| hex.as_bytes()).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn sign_then_verify_round_trips(
        body in vec(any::<u8>(), 0..1024),
        secret in vec(any::<u8>(), 1..80),
        t in 0u64..=i64::MAX as u64,
        skew in -300i64..=300,
    ) {
        let header = sign(&body, &Secret::new(&secret).expect("non-empty"), t);
        let now = (t as i64).saturating_add(skew);
        prop_assert_eq!(verifier(&secret, now).verify_value(header.as_bytes(), &body), Ok(()));
    }

    #[test]
    fn any_single_byte_change_in_the_body_is_rejected(
        body in vec(any::<u8>(), 1..1024),
        index in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let secret = b"whsec_property";
        let t = 1_732_264_800;
        let header = sign(&body, &Secret::new(secret).expect("non-empty"), t);
        let mut tampered = body.clone();
        tampered[index.index(body.len())] ^= flip;
        prop_assert_eq!(
            verifier(secret, t as i64).verify_value(header.as_bytes(), &tampered),
            Err(Error::NoSignatureMatch)
        );
    }

    #[test]
    fn any_single_byte_change_in_the_header_is_rejected(
        body in vec(any::<u8>(), 0..256),
        t in 1u64..4_000_000_000,
        index in any::<prop::sample::Index>(),
        replacement in any::<u8>(),
    ) {
        // Every byte of `t=…,v1=…` matters: the timestamp digits, the keys, the
        // separators and each hex digit of the signature.
        let secret = b"whsec_property";
        let header = sign(&body, &Secret::new(secret).expect("non-empty"), t);
        let mut tampered = header.clone().into_bytes();
        let at = index.index(tampered.len());
        prop_assume!(tampered[at] != replacement);
        tampered[at] = replacement;
        // A clock at the signing time: a changed timestamp cannot fail for age
        // alone, it must fail because the signature no longer matches.
        let verdict = verifier(secret, t as i64).verify_value(&tampered, &body);
        prop_assert!(verdict.is_err(), "{} accepted after byte {} changed", header, at);
    }

    #[test]
    fn another_timestamp_does_not_match(
        body in vec(any::<u8>(), 0..256),
        t in 300u64..4_000_000_000,
        delta in prop_oneof![-300i64..=-1, 1i64..=300],
        hex_index in 0usize..64,
    ) {
        let secret = b"whsec_property";
        let header = sign(&body, &Secret::new(secret).expect("non-empty"), t);
        let hex = &header[header.len() - 64..];
        let moved = t.checked_add_signed(delta).expect("in range");
        let v = verifier(secret, t as i64);
        prop_assert_eq!(
            v.verify_value(format!("t={moved},v1={hex}").as_bytes(), &body),
            Err(Error::NoSignatureMatch)
        );
        // And the signature with one hex digit changed to another hex digit.
        let mut wrong = hex.as_bytes().to_vec();
        wrong[hex_index] = if wrong[hex_index] == b'0' { b'1' } else { b'0' };
        let wrong = String::from_utf8(wrong).expect("ASCII");
        prop_assert_eq!(
            v.verify_value(format!("t={t},v1={wrong}").as_bytes(), &body),
            Err(Error::NoSignatureMatch)
        );
    }
}

/// Any JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(serde_json::Value::from),
        ".{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
            btree_map("[a-z_]{0,8}", inner, 0..6)
                .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    })
}

/// What the protocol says a parsed event holds.
#[derive(Debug)]
struct ExpectedEvent {
    id: String,
    event_type: String,
    intent: Option<ExpectedIntent>,
}

#[derive(Debug)]
struct ExpectedIntent {
    amount: u128,
    status: String,
    metadata: BTreeMap<String, String>,
    /// `None` when absent or null: never invented.
    received: Option<u128>,
    methods: Option<Vec<String>>,
}

/// The protocol's verdict on event-shaped JSON, read from the value itself
/// (a second, independent reading of SPEC's rules for the parser to agree with).
fn expected_event(value: &serde_json::Value) -> Result<ExpectedEvent, &'static str> {
    use serde_json::Value;
    let id = value["id"].as_str().ok_or("id is not a string")?;
    if id.is_empty() {
        return Err("empty id");
    }
    let event_type = value["type"].as_str().ok_or("type is not a string")?;
    let is_payment = matches!(
        event_type,
        "payment_intent.succeeded"
            | "payment.succeeded"
            | "payment_intent.failed"
            | "payment_intent.payment_failed"
    );
    let intent = if is_payment {
        let data = value["data"].as_object().ok_or("data is not an object")?;
        let pi = match data.get("object") {
            Some(Value::Object(pi)) => pi,
            None | Some(Value::Null) => return Err("no data.object"),
            Some(_) => return Err("data.object is not an object"),
        };
        let string = |key: &str| pi.get(key).and_then(Value::as_str);
        let optional = |key: &str, ok: fn(&Value) -> bool| pi.get(key).is_none_or(|v| v.is_null() || ok(v));
        string("id").ok_or("intent id")?;
        if pi
            .get("object")
            .is_some_and(|o| o.as_str() != Some("payment_intent"))
        {
            return Err("not a payment_intent");
        }
        let amount = pi.get("amount").and_then(Value::as_u64).ok_or("amount")?;
        let received = match pi.get("amount_received") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or("amount_received")?),
        };
        string("currency").ok_or("currency")?;
        let status = string("status").ok_or("status")?;
        if !optional("created", Value::is_i64) || !optional("description", Value::is_string) {
            return Err("created or description");
        }
        let metadata = match pi.get("metadata") {
            None | Some(Value::Null) => BTreeMap::new(),
            // Strings as their text, anything else as its JSON text.
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
                .collect(),
            Some(_) => return Err("metadata is not an object"),
        };
        let methods = match pi.get("payment_method_types") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .map(|m| m.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
                    .ok_or("a payment method is not a string")?,
            ),
            Some(_) => return Err("payment_method_types is not an array"),
        };
        Some(ExpectedIntent {
            amount: u128::from(amount),
            status: status.to_owned(),
            metadata,
            received: received.map(u128::from),
            methods,
        })
    } else {
        None
    };
    Ok(ExpectedEvent {
        id: id.to_owned(),
        event_type: event_type.to_owned(),
        intent,
    })
}

/// A valid payment intent with fields of every allowed kind (metadata values
/// of any JSON type, optional fields absent or null).
fn valid_intent() -> impl Strategy<Value = serde_json::Value> {
    let optional = |v: serde_json::Value, present: u8| match present % 3 {
        0 => None,
        1 => Some(serde_json::Value::Null),
        _ => Some(v),
    };
    (
        any::<u64>(),
        "[a-z_]{1,12}",
        btree_map("[a-z_]{1,8}", json_value(), 0..5),
        vec("[a-z]{1,8}", 0..3),
        any::<[u8; 5]>(),
        json_value(),
        any::<u64>(),
    )
        .prop_map(
            move |(amount, status, metadata, methods, present, extra, received)| {
                let mut pi = serde_json::json!({
                    "id": "pi_1", "amount": amount, "currency": "eth", "status": status,
                    "unknown_field": extra,
                });
                let fields = [
                    ("object", serde_json::json!("payment_intent")),
                    (
                        "metadata",
                        serde_json::Value::Object(metadata.into_iter().collect()),
                    ),
                    ("payment_method_types", serde_json::json!(methods)),
                    ("description", serde_json::json!("text")),
                    ("amount_received", serde_json::json!(received)),
                ];
                for ((key, value), present) in fields.into_iter().zip(present) {
                    if key == "object" && present % 3 == 1 {
                        continue; // `object` may be absent, but not null
                    }
                    if let Some(value) = optional(value, present) {
                        pi[key] = value;
                    }
                }
                pi
            },
        )
}

/// Event-shaped JSON: the envelope keys with values of any kind, and payment
/// intents whose fields may be of the wrong kind.
fn event_like() -> impl Strategy<Value = serde_json::Value> {
    let event_type = prop_oneof![
        Just(serde_json::json!("payment_intent.succeeded")),
        Just(serde_json::json!("payment.succeeded")),
        Just(serde_json::json!("payment_intent.failed")),
        Just(serde_json::json!("payment_intent.payment_failed")),
        Just(serde_json::json!("customer.created")),
        json_value(),
    ];
    let amount = prop_oneof![
        any::<u64>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        Just(serde_json::json!(1.5)),
        json_value(),
    ];
    let received = prop_oneof![
        any::<u64>().prop_map(serde_json::Value::from),
        Just(serde_json::Value::Null),
        json_value(),
    ];
    let intent = (
        amount,
        json_value(),
        json_value(),
        json_value(),
        received,
        any::<bool>(),
    )
        .prop_map(|(amount, status, metadata, methods, received, send_received)| {
            let mut pi = serde_json::json!({
                "id": "pi_1", "object": "payment_intent", "amount": amount, "currency": "btc",
                "status": status, "metadata": metadata, "payment_method_types": methods,
            });
            if send_received {
                pi["amount_received"] = received;
            }
            pi
        });
    let data = prop_oneof![
        intent.prop_map(|pi| serde_json::json!({ "object": pi })),
        json_value()
    ];
    let data = prop_oneof![
        3 => valid_intent().prop_map(|pi| serde_json::json!({ "object": pi })),
        2 => data,
    ];
    (json_value(), event_type, data, any::<bool>(), any::<bool>()).prop_map(
        |(id, event_type, data, id_is_string, type_first)| {
            let id = if id_is_string {
                serde_json::json!("evt_1")
            } else {
                id
            };
            let mut map = serde_json::Map::new();
            if type_first {
                map.insert("type".into(), event_type.clone());
            }
            map.insert("id".into(), id);
            map.insert("data".into(), data);
            if !type_first {
                map.insert("type".into(), event_type);
            }
            serde_json::Value::Object(map)
        },
    )
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn event_parser_never_panics_on_any_bytes(bytes in vec(any::<u8>(), 0..256)) {
        let _ = Event::from_slice(&bytes);
    }

    #[test]
    fn event_parser_never_panics_on_any_json(value in json_value()) {
        let _ = Event::from_slice(value.to_string().as_bytes());
    }

    #[test]
    fn event_parser_accepts_exactly_the_valid_events(value in event_like()) {
        let text = value.to_string();
        match (Event::from_slice(text.as_bytes()), expected_event(&value)) {
            (Ok(event), Ok(expected)) => {
                prop_assert_eq!(event.id(), expected.id.as_str());
                prop_assert_eq!(event.event_type(), expected.event_type.as_str());
                match (event.kind(), expected.intent) {
                    (EventKind::PaymentIntentSucceeded(pi) | EventKind::PaymentIntentFailed(pi), Some(want)) => {
                        prop_assert_eq!(pi.amount, want.amount);
                        prop_assert_eq!(pi.status.as_str(), want.status.as_str());
                        prop_assert_eq!(&pi.metadata, &want.metadata);
                        prop_assert_eq!(pi.amount_received, want.received);
                        let methods: Option<Vec<&str>> =
                            pi.payment_method_types.as_ref().map(|m| m.iter().map(|m| m.as_str()).collect());
                        let want_methods: Option<Vec<&str>> =
                            want.methods.as_ref().map(|m| m.iter().map(String::as_str).collect());
                        prop_assert_eq!(methods, want_methods);
                    }
                    (EventKind::Other { data }, None) => prop_assert_eq!(data.get(), value["data"].to_string()),
                    (kind, want) => prop_assert!(false, "kind {:?}, expected intent {:?}", kind, want),
                }
            }
            (Err(Error::InvalidPayload(reason)), Err(why)) => prop_assert!(!reason.is_empty(), "{}", why),
            (got, want) => prop_assert!(false, "{}\nparser: {:?}\nexpected: {:?}", text, got.map(|e| e.id().to_owned()), want.map(|e| e.id)),
        }
    }

    #[test]
    fn built_events_parse_back_exactly(
        kind in 0usize..4,
        amount in any::<u128>(),
        received in any::<u128>(),
        currency in "[a-z]{3,5}",
        status in "[a-z_]{1,24}",
        description in proptest::option::of(".{0,40}"),
        metadata in btree_map(".{0,12}", ".{0,24}", 0..8),
        methods in vec("[a-z]{1,10}", 0..3),
    ) {
        let builder = match kind {
            0 => EventBuilder::payment_intent_succeeded(),
            1 => EventBuilder::payment_succeeded(),
            2 => EventBuilder::payment_intent_failed(),
            _ => EventBuilder::payment_intent_payment_failed(),
        };
        let mut builder = builder
            .amount(amount)
            .amount_received(received)
            .currency(&currency)
            .status(&status)
            .description(description.as_deref())
            .payment_method_types(methods.clone());
        for (key, value) in &metadata {
            builder = builder.metadata(key, value);
        }
        let event = Event::from_slice(builder.to_json().as_bytes()).expect("built events parse");
        prop_assert_eq!(event.id(), builder.event_id());
        let pi = event.payment_intent().expect("a payment event");
        prop_assert_eq!(pi.amount, amount);
        prop_assert_eq!(pi.amount_received, Some(received));
        prop_assert_eq!(&pi.currency, &currency);
        prop_assert_eq!(pi.status.as_str(), status.as_str());
        prop_assert_eq!(pi.status == PaymentIntentStatus::Succeeded, status == "succeeded");
        prop_assert_eq!(pi.description.as_deref(), description.as_deref());
        prop_assert_eq!(&pi.metadata, &metadata);
        let got: Vec<&str> = pi.payment_method_types.iter().flatten().map(|m| m.as_str()).collect();
        prop_assert_eq!(got, methods.iter().map(String::as_str).collect::<Vec<_>>());
        let is_success = matches!(event.kind(), EventKind::PaymentIntentSucceeded(_));
        prop_assert_eq!(is_success, kind < 2);
    }

    #[test]
    fn field_order_does_not_change_the_event(
        amount in any::<u128>(),
        metadata in btree_map("[a-z]{1,8}", "[a-z0-9 ]{0,12}", 0..6),
    ) {
        // `type` before `data` is read in one pass, `type` after `data` in two:
        // both must give the same event.
        let mut builder = EventBuilder::payment_intent_succeeded().amount(amount);
        for (key, value) in &metadata {
            builder = builder.metadata(key, value);
        }
        // Cut `data` out as raw text: going through `serde_json::Value` would
        // turn amounts beyond 2^64 into floats.
        let json = builder.to_json();
        let fields: BTreeMap<String, Box<serde_json::value::RawValue>> =
            serde_json::from_str(&json).expect("valid JSON");
        let data = fields["data"].get();
        let type_first = format!(r#"{{"id":"evt_1","type":"payment_intent.succeeded","data":{data}}}"#);
        let type_last = format!(r#"{{"id":"evt_1","data":{data},"type":"payment_intent.succeeded"}}"#);
        let a = Event::from_slice(type_first.as_bytes()).expect("parses");
        let b = Event::from_slice(type_last.as_bytes()).expect("parses");
        prop_assert_eq!(a.payment_intent(), b.payment_intent());
        prop_assert_eq!(a.payment_intent().map(|pi| pi.amount), Some(amount));
    }
}

/// Inputs found by fuzzing (`fuzz/`), kept so the behaviour they pinned down
/// stays.
mod fuzz_regressions {
    use super::*;

    /// Bytes that are not UTF-8 inside a field the parser skips (an unknown
    /// field of a payment intent) once slipped through: JSON text must be UTF-8
    /// wherever the bad bytes are.
    #[test]
    fn invalid_utf8_in_a_skipped_field_is_a_payload_error() {
        let mut body = br#"{"id":"evt_2","type":"payment.succeeded","data":{"object":{"id":"pi_1","object":"payment_intent","amount":1500000000000000000000,"currency":"eth","payment_me9xes":["e"#.to_vec();
        body.push(0x8f);
        body.extend_from_slice(br#"thereum"],"status":"succeeded","metadata":{}}}}"#);
        let err = Event::from_slice(&body).unwrap_err();
        let Error::InvalidPayload(reason) = &err else {
            panic!("{err:?}")
        };
        assert!(reason.contains("UTF-8"), "{reason}");
        // The same bytes in a field kept raw, and in an unknown event type.
        for body in [
            b"{\"id\":\"evt_1\",\"type\":\"x\",\"note\":\"\xff\"}".as_slice(),
            b"{\"id\":\"evt_1\",\"type\":\"x\",\"data\":{\"a\":\"\xc3\"}}".as_slice(),
        ] {
            assert!(matches!(Event::from_slice(body), Err(Error::InvalidPayload(_))));
        }
    }

    /// A number beyond f64's range is valid JSON: in a field payhook keeps raw
    /// it is kept as sent, never an error (`serde_json::Value` would refuse it).
    #[test]
    fn numbers_beyond_f64_in_kept_fields_are_kept_as_sent() {
        let body = br#"{"id":"evt_3","type":"payment_inztent.failed","created":173e264801,"data":{"object":{"amount":1e999}}}"#;
        let event = Event::from_slice(body).expect("valid JSON event of an unknown type");
        assert_eq!(event.field("created").map(|raw| raw.get()), Some("173e264801"));
        assert_eq!(event.created(), None);
        let EventKind::Other { data } = event.kind() else {
            panic!("an unknown type")
        };
        assert_eq!(data.get(), r#"{"object":{"amount":1e999}}"#);
        assert!(serde_json::from_slice::<serde_json::Value>(body).is_err());
    }
}

#[test]
fn metadata_keys_and_values_are_kept_exactly() {
    // Escapes and non-ASCII text survive the one-pass read.
    let metadata: BTreeMap<String, String> = [
        ("quote\"d".to_owned(), "line\nbreak".to_owned()),
        ("ключ".to_owned(), "значение ✓".to_owned()),
        ("".to_owned(), "\u{0}".to_owned()),
    ]
    .into_iter()
    .collect();
    let mut builder = EventBuilder::payment_intent_failed();
    for (key, value) in &metadata {
        builder = builder.metadata(key, value);
    }
    let event = Event::from_slice(builder.to_json().as_bytes()).expect("parses");
    assert_eq!(
        event.payment_intent().map(|pi| pi.metadata.to_map()),
        Some(metadata)
    );
}
