//! Typed events.
//!
//! An [`Event`] is parsed from the verified raw body in one pass over it: the
//! envelope (`id`, `type`, `data`; every other top-level field kept as raw
//! JSON) and, for payment events, the payment intent read from `data` straight
//! into its typed fields, whether `type` comes before `data` or after it.
//! Parsing straight into the typed fields is what keeps amounts exact:
//! `amount` is read into a `u128` and never passes through `f64` (1 ETH is
//! 10^18 wei, so amounts beyond 2^64 are ordinary).
//!
//! Which types are typed, their aliases and the data each carries is the
//! [`CATALOGUE`] (its [`EventKind`] docs show the table): `type` is looked up
//! there once, and `data` is read into the kind's data type in the same pass.
//! When `data` comes before `type`, it is read on the catalogue's guess (a
//! payment intent). If `type` then names a kind with other data, or none, or
//! `data` does not fit, the body is read a second time keeping `data` as raw
//! JSON (for [`EventKind::Other`], or for the precise error): the second pass
//! is paid only by such events, and the result is the same as with `type`
//! first.
//!
//! Unknown fields anywhere are ignored, unknown `status` values and payment
//! methods are kept as strings, and an unknown event type is never an error.
//!
//! ```
//! use payhook::{Event, EventKind, PaymentIntentStatus};
//!
//! let body = br#"{"id":"evt_1","type":"payment.succeeded","livemode":false,
//!   "data":{"object":{"id":"pi_1","object":"payment_intent",
//!   "amount":1500000000000000000000,"currency":"eth","status":"succeeded",
//!   "payment_method_types":["ethereum"]}}}"#;
//! let event = Event::from_slice(body).unwrap();
//! assert_eq!(event.event_type(), "payment.succeeded");
//! match event.kind() {
//!     EventKind::PaymentIntentSucceeded(pi) => {
//!         assert_eq!(pi.amount, 1_500_000_000_000_000_000_000); // 1 500 ETH in wei, exact
//!         assert_eq!(pi.status, PaymentIntentStatus::Succeeded);
//!     }
//!     other => panic!("unexpected {other:?}"),
//! }
//! assert_eq!(event.field("livemode").map(|raw| raw.get()), Some("false"));
//! ```
//!
//! The module is split by concern: the catalogue of event types ([`CATALOGUE`],
//! [`EventKind`], the type names), the envelope ([`Event`] and its parse), what
//! `data` is read into (`data.rs`), the payment intent model ([`PaymentIntent`],
//! [`PaymentIntentStatus`], [`PaymentMethod`], [`Metadata`]) and payload
//! conversion ([`into_payload`], [`parse_as`]); everything is used from here.
//! In the `payhook` crate the types are at its root (`payhook::Event`), the type
//! names in `payhook::event`, and [`into_payload`], adapter plumbing, in
//! `payhook::adapter`.
//!
//! Where each part lives:
//!
//! | file | role |
//! |---|---|
//! | `event/mod.rs` | these docs and the re-exports (`Event`, `EventKind`, the type-name constants, `CATALOGUE`, `EventType`), the two payload-error helpers |
//! | `event/catalogue.rs` | **the event catalogue**: the macro `event_catalogue!` that lists every data type and every kind (type names with aliases, data, per-kind handler method, emitted or alias-only, emulator test helper, example status), `for_each_event_kind!` that expands a one-kind template per kind (the handler methods), and what the core generates from it: the constants (`event::names`), `EventKind`, `Carries`, `CATALOGUE`, the kind-to-data dispatch of the parser and of `payment_intent_id` |
//! | `event/catalogue/<module>.rs` | one file per data type of its own (none today: an entry such as `Payout in payout` under `data` declares `catalogue/payout.rs`) |
//! | `event/data.rs` | the `EventData` contract a data type keeps (read in the envelope's pass, or from raw `data`; the payment intent it names, for per-intent order), `DataField`, and its implementation for `PaymentIntent` |
//! | `event/envelope.rs` | `Event` and the one-pass parse: `id`, `type` (looked up in the catalogue once), `data` read straight into the kind's data type, other fields kept raw |
//! | `event/intent.rs` | the payment intent model: `PaymentIntent`, status, methods, metadata, exact amounts |
//! | `event/packed.rs` | the packed map behind `Metadata` and the kept top-level fields (one buffer, no per-field allocation) |
//! | `event/payload.rs` | `parse_as` and `into_payload`: a verified body into `Event`, `PaymentIntent` or the caller's type |
//!
//! The module knows no HTTP (no `http` types, status codes or headers), no
//! store, no receiver, no framework and no clock: it depends on `serde`,
//! `serde_json` and the crate's `Error` only. Adapters, the sender, the CLI and
//! the emulator depend on it, never the other way round.

mod catalogue;
mod content;
mod data;
mod envelope;
mod intent;
mod packed;
mod payload;

#[allow(unused_imports)] // when every data type is declared outside the catalogue
pub use catalogue::data_types::*;
pub use catalogue::names::{self, *};
pub use catalogue::{Carries, EventKind, EventType, TestHelper, TypeName, CATALOGUE};
pub(crate) use catalogue::{KindIndex, KIND_COUNT};
pub use content::same_content;
pub use envelope::Event;
pub use intent::{Metadata, MetadataIter, PaymentIntent, PaymentIntentStatus, PaymentMethod};
pub use payload::{into_payload, parse_as};

use crate::error::Error;

fn invalid(message: &str) -> Error {
    Error::InvalidPayload(message.to_owned())
}

fn payload_error(err: serde_json::Error) -> Error {
    Error::InvalidPayload(err.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;
    use serde_json::value::RawValue;

    use super::*;

    fn pi_body(event_type: &str, amount: &str) -> String {
        format!(
            r#"{{"id":"evt_9","type":"{event_type}","created":1732264800,"api_version":"v1",
            "data":{{"object":{{"id":"pi_9","object":"payment_intent","amount":{amount},
            "amount_received":{amount},"currency":"eth","payment_method_types":["ethereum","lightning"],
            "status":"requires_capture","created":1732264000,"description":null,
            "metadata":{{"order":"42"}},"new_field":{{"x":[1,2]}}}},"previous_attributes":{{}}}}}}"#
        )
    }

    #[test]
    fn deserialize_matches_from_slice() {
        let body = pi_body("payment_intent.failed", "10000000000000000000000");
        let direct = Event::from_slice(body.as_bytes()).unwrap();
        let generic: Event = parse_as(body.as_bytes()).unwrap();
        assert_eq!(
            (generic.id(), generic.event_type()),
            (direct.id(), direct.event_type())
        );
        assert_eq!(generic.payment_intent(), direct.payment_intent());
        assert_eq!(generic.field("api_version").map(RawValue::get), Some(r#""v1""#));
        let err = parse_as::<Event>(br#"{"type":"x"}"#).unwrap_err();
        assert_eq!(err.to_string(), "invalid payload: event has no id");
    }

    #[test]
    fn wei_amounts_beyond_u64_stay_exact() {
        let amount = "340282366920938463463374607431768211455"; // u128::MAX
        let event = Event::from_slice(pi_body(PAYMENT_INTENT_SUCCEEDED, amount).as_bytes()).unwrap();
        let pi = event.payment_intent().unwrap();
        assert_eq!(pi.amount, u128::MAX);
        assert_eq!(pi.amount_received, Some(u128::MAX));
        let big = "18446744073709551617"; // 2^64 + 1
        let event = Event::from_slice(pi_body(PAYMENT_INTENT_FAILED, big).as_bytes()).unwrap();
        assert!(matches!(event.kind(), EventKind::PaymentIntentFailed(pi) if pi.amount == (1u128 << 64) + 1));
    }

    #[test]
    fn unknown_values_are_kept_not_errors() {
        let event = Event::from_slice(pi_body(PAYMENT_SUCCEEDED, "5").as_bytes()).unwrap();
        assert_eq!(event.event_type(), PAYMENT_SUCCEEDED);
        let pi = event.payment_intent().unwrap();
        assert_eq!(pi.status, PaymentIntentStatus::Other("requires_capture".into()));
        assert_eq!(
            pi.payment_method_types,
            Some(vec![
                PaymentMethod::Ethereum,
                PaymentMethod::Other("lightning".into())
            ])
        );
        assert_eq!(pi.metadata.get("order"), Some("42"));
        assert_eq!(pi.description, None);
        assert_eq!(event.created(), Some(1732264800));
        assert_eq!(event.field("api_version").unwrap().get(), r#""v1""#);
    }

    #[test]
    fn bad_amounts_are_payload_errors_with_a_reason() {
        for (amount, needle) in [
            ("-5", "got the negative number -5"),
            ("-0", "negative"),
            ("1.5", "got the non-integer number 1.5"),
            ("1e3", "non-integer"),
            ("2.0", "non-integer"),
            (r#""100""#, r#"got the value "100""#),
            ("null", "got the value null"),
            ("340282366920938463463374607431768211456", "larger than 2^128 - 1"), // u128::MAX + 1
        ] {
            let err = Event::from_slice(pi_body(PAYMENT_INTENT_SUCCEEDED, amount).as_bytes()).unwrap_err();
            let Error::InvalidPayload(msg) = &err else {
                panic!("{err:?}")
            };
            assert!(msg.contains(needle), "{amount}: {msg}");
        }
    }

    #[test]
    fn other_types_keep_raw_data() {
        let event = Event::from_slice(br#"{"id":"evt_2","type":"transfer.created","data":{"amount":1e400}}"#)
            .unwrap();
        let EventKind::Other { data } = event.kind() else {
            panic!()
        };
        assert_eq!(data.get(), r#"{"amount":1e400}"#);
        let event = Event::from_slice(br#"{"type":"x.y","id":"evt_3"}"#).unwrap();
        assert!(matches!(event.kind(), EventKind::Other { data } if data.get() == "null"));
    }

    #[test]
    fn envelope_errors_say_what_is_missing() {
        let msg = |body: &str| match Event::from_slice(body.as_bytes()) {
            Err(Error::InvalidPayload(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(msg("not json").contains("expected"));
        assert!(msg("[1,2]").contains("an event object"));
        assert_eq!(msg(r#"{"type":"a"}"#), "event has no id");
        assert_eq!(msg(r#"{"id":"evt_1"}"#), "event has no type");
        assert_eq!(msg(r#"{"id":"","type":"a"}"#), "event id is empty");
        assert!(msg(r#"{"id":"evt_1","id":"evt_2","type":"a"}"#).contains("duplicate field `id`"));
        assert_eq!(
            msg(r#"{"id":"evt_1","type":"payment_intent.failed"}"#),
            "payment event has no data"
        );
        assert_eq!(
            msg(r#"{"id":"evt_1","type":"payment_intent.failed","data":{}}"#),
            "payment event has no data.object"
        );
        assert!(msg(r#"{"id":"evt_1","type":"payment_intent.failed","data":{"object":{"id":"pi_1","object":"charge","amount":1,"currency":"btc","status":"succeeded"}}}"#)
            .contains("not a payment_intent"));
        assert!(msg(r#"{"id":"evt_1","type":"payment_intent.failed","data":{"object":{"id":"pi_1","currency":"btc","status":"succeeded"}}}"#)
            .contains("missing field `amount`"));
        assert!(
            msg(r#"{"id":"evt_1","type":"payment_intent.failed","data":{"object":{"id":"pi_1"#)
                .contains("EOF")
        );
    }

    /// An event outside the catalogue gives its `data` through `data()`,
    /// `data_as()` and `field("data")`; a payment event's data is typed, and
    /// those say so rather than answer with something else.
    #[test]
    fn an_untyped_events_data_is_read_the_ways_a_user_tries() {
        let event =
            Event::from_slice(br#"{"id":"evt_o","type":"kyc.check.completed","data":{"id":"chk_1","n":2}}"#)
                .unwrap();
        assert_eq!(event.data().map(RawValue::get), Some(r#"{"id":"chk_1","n":2}"#));
        assert_eq!(
            event.field("data").map(RawValue::get),
            Some(r#"{"id":"chk_1","n":2}"#)
        );
        #[derive(Deserialize)]
        struct Check {
            n: u8,
        }
        assert_eq!(event.data_as::<Check>().unwrap().n, 2);
        let wrong = event.data_as::<Vec<u8>>().unwrap_err().to_string();
        assert!(wrong.contains("data:"), "{wrong}");
        let none = Event::from_slice(br#"{"id":"evt_n","type":"kyc.check.completed"}"#).unwrap();
        assert_eq!(none.data().map(RawValue::get), Some("null"));

        let paid = Event::from_slice(
            br#"{"id":"evt_p","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","amount":1,"currency":"btc","status":"succeeded"}}}"#,
        )
        .unwrap();
        assert!(paid.data().is_none() && paid.field("data").is_none());
        let typed = paid.data_as::<serde_json::Value>().unwrap_err().to_string();
        assert!(typed.contains("typed: read it from Event::kind"), "{typed}");
    }

    /// The service documents string values, but a signed event with other
    /// values must not become a permanent 400: they are kept as JSON text.
    #[test]
    fn metadata_values_of_any_json_type_are_kept_as_text() {
        let body = r#"{"id":"evt_m","type":"payment_intent.succeeded","data":{"object":{
            "id":"pi_m","object":"payment_intent","amount":1,"currency":"btc","status":"succeeded",
            "metadata":{"order_id":42,"gift":true,"note":null,"price":1.50,"big":123456789012345678901234567890,
              "tags":["a", "b"],"nested":{"k": {"x":1}},"text":"plain","quoted":"say \"hi\"\n","digits":"42"}}}}"#;
        let event = Event::from_slice(body.as_bytes()).unwrap();
        let metadata = &event.payment_intent().unwrap().metadata;
        let expected: BTreeMap<String, String> = [
            ("order_id", "42"),
            ("gift", "true"),
            ("note", "null"),
            ("price", "1.50"),
            ("big", "123456789012345678901234567890"),
            ("tags", r#"["a", "b"]"#),
            ("nested", r#"{"k": {"x":1}}"#),
            ("text", "plain"),
            ("quoted", "say \"hi\"\n"),
            ("digits", "42"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(metadata, &expected);
        // `type` after `data` reads the intent the same way.
        let reordered = body
            .replacen(r#""type":"payment_intent.succeeded","#, "", 1)
            .replacen("}}}}", r#"}}},"type":"payment_intent.succeeded"}"#, 1);
        let event = Event::from_slice(reordered.as_bytes()).unwrap();
        assert_eq!(&event.payment_intent().unwrap().metadata, &expected);
    }

    /// `type` after `data` gives exactly what `type` before `data` gives:
    /// the same event, or the same error, for payment events, other events and
    /// invalid ones alike.
    #[test]
    fn key_order_never_changes_the_result() {
        let intent = |amount: &str, object: &str| {
            format!(
                r#"{{"object":{{"id":"pi_1","object":"{object}","amount":{amount},"currency":"btc","status":"succeeded","metadata":{{"n":1}}}}}}"#
            )
        };
        let datas = [
            intent("5", "payment_intent"),
            intent("-5", "payment_intent"),
            intent("1.5", "payment_intent"),
            intent("5", "charge"),
            r#"{"object":{"id":"pi_1"}}"#.to_owned(),
            r#"{"object":null}"#.to_owned(),
            r#"{"other":{"amount":1e400}}"#.to_owned(),
            "{}".to_owned(),
            "null".to_owned(),
            "[1,2]".to_owned(),
            r#""text""#.to_owned(),
        ];
        let types = [
            PAYMENT_INTENT_SUCCEEDED,
            PAYMENT_SUCCEEDED,
            PAYMENT_INTENT_FAILED,
            "transfer.created",
            "payment_intent.created",
        ];
        // The position in an error is counted from the start of `data` when
        // `data` was kept raw, so only the message is compared.
        let outcome = |body: &str| match Event::from_slice(body.as_bytes()) {
            Ok(event) => Ok(format!("{event:?}")),
            Err(err) => {
                let text = err.to_string();
                Err(text.split(" at line ").next().unwrap_or_default().to_owned())
            }
        };
        for data in &datas {
            for event_type in types {
                let type_first =
                    format!(r#"{{"id":"evt_1","type":"{event_type}","data":{data},"livemode":false}}"#);
                let data_first =
                    format!(r#"{{"id":"evt_1","data":{data},"livemode":false,"type":"{event_type}"}}"#);
                assert_eq!(outcome(&type_first), outcome(&data_first), "{data_first}");
            }
            let no_type = format!(r#"{{"data":{data},"id":"evt_1"}}"#);
            assert_eq!(
                outcome(&no_type),
                Err("invalid payload: event has no type".to_owned())
            );
        }
        // Valid payment events in either order, and an other event's raw data.
        let data_first = format!(
            r#"{{"data":{},"type":"payment.succeeded","id":"evt_1"}}"#,
            intent("7", "payment_intent")
        );
        let event = Event::from_slice(data_first.as_bytes()).unwrap();
        assert_eq!(event.payment_intent().map(|pi| pi.amount), Some(7));
        let event =
            Event::from_slice(br#"{"data":{"object":{"id":"tr_1"}},"type":"transfer.created","id":"evt_2"}"#)
                .unwrap();
        assert!(
            matches!(event.kind(), EventKind::Other { data } if data.get() == r#"{"object":{"id":"tr_1"}}"#)
        );
        // Syntax errors after a guessed `data` are reported as such.
        let err = Event::from_slice(
            format!(
                r#"{{"data":{},"type":"payment.succeeded""#,
                intent("7", "payment_intent")
            )
            .as_bytes(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("EOF"), "{err}");
    }

    /// A field the sender left out is `None`, never a value payhook made up;
    /// `null` reads the same as absent, and a present value is checked as ever.
    #[test]
    fn omitted_fields_are_none_not_invented() {
        let body = r#"{"id":"evt_r","type":"payment_intent.succeeded","data":{"object":{"id":"pi_r","amount":250,"currency":"btc","status":"succeeded"}}}"#;
        let pi = Event::from_slice(body.as_bytes())
            .unwrap()
            .payment_intent()
            .cloned()
            .unwrap();
        assert_eq!(pi.amount, 250);
        assert_eq!(pi.amount_received, None);
        assert_eq!(pi.payment_method_types, None);
        assert_eq!(pi.created, None);
        assert_eq!(pi.description, None);
        assert_eq!(pi.object, PaymentIntent::OBJECT);
        assert!(pi.metadata.is_empty());
        let with = |fields: &str| body.replace(r#""status""#, &format!(r#"{fields},"status""#));
        let nulls = with(r#""amount_received":null,"payment_method_types":null,"created":null"#);
        let pi = Event::from_slice(nulls.as_bytes())
            .unwrap()
            .payment_intent()
            .cloned()
            .unwrap();
        assert_eq!(
            (pi.amount_received, pi.payment_method_types, pi.created),
            (None, None, None)
        );
        let zero = with(r#""amount_received":0,"payment_method_types":[]"#);
        let pi = Event::from_slice(zero.as_bytes())
            .unwrap()
            .payment_intent()
            .cloned()
            .unwrap();
        assert_eq!(pi.amount_received, Some(0));
        assert_eq!(pi.payment_method_types, Some(vec![]));
        for bad in [
            r#""amount_received":-1"#,
            r#""amount_received":"5""#,
            r#""amount_received":1.5"#,
        ] {
            let err = Event::from_slice(with(bad).as_bytes()).unwrap_err();
            assert!(
                err.to_string().contains("amount must be a non-negative integer"),
                "{bad}: {err}"
            );
        }
        // `data` before `type` reads the same.
        let reordered = r#"{"data":{"object":{"id":"pi_r","amount":250,"currency":"btc","status":"succeeded"}},"id":"evt_r","type":"payment_intent.payment_failed"}"#;
        let event = Event::from_slice(reordered.as_bytes()).unwrap();
        assert!(matches!(event.kind(), EventKind::PaymentIntentFailed(pi) if pi.amount_received.is_none()));
        // The required fields stay required.
        for field in [
            r#""currency":"btc","#,
            r#""amount":250,"#,
            r#""status":"succeeded""#,
        ] {
            let without = body.replace(field, "").replace(",}", "}");
            let err = Event::from_slice(without.as_bytes()).unwrap_err();
            assert!(err.to_string().contains("missing field"), "{without}: {err}");
        }
    }

    /// Both names of each payment kind give that kind, in either key order,
    /// and the type stays as sent.
    #[test]
    fn aliases_give_one_kind_and_keep_the_type_as_sent() {
        for (event_type, failed) in [
            (PAYMENT_INTENT_SUCCEEDED, false),
            (PAYMENT_SUCCEEDED, false),
            (PAYMENT_INTENT_FAILED, true),
            (PAYMENT_INTENT_PAYMENT_FAILED, true),
        ] {
            let type_first = pi_body(event_type, "7");
            let data_first = format!(
                r#"{{"id":"evt_a","data":{{"object":{{"id":"pi_a","amount":7,"currency":"btc","status":"x"}}}},"type":"{event_type}"}}"#
            );
            for body in [type_first, data_first] {
                let event = Event::from_slice(body.as_bytes()).unwrap();
                assert_eq!(event.event_type(), event_type);
                match event.kind() {
                    EventKind::PaymentIntentFailed(pi) if failed => assert_eq!(pi.amount, 7),
                    EventKind::PaymentIntentSucceeded(pi) if !failed => assert_eq!(pi.amount, 7),
                    other => panic!("{event_type}: {other:?}"),
                }
            }
        }
        // A near miss is another event, not a payment.
        let event = Event::from_slice(pi_body("payment_intent.payment_failed ", "7").as_bytes()).unwrap();
        assert!(matches!(event.kind(), EventKind::Other { .. }));
    }

    #[test]
    fn custom_types_parse_from_the_same_body() {
        #[derive(Deserialize)]
        struct Mine {
            id: String,
        }
        let mine: Mine = parse_as(br#"{"id":"evt_5","type":"x"}"#).unwrap();
        assert_eq!(mine.id, "evt_5");
        assert!(matches!(parse_as::<Mine>(b"{}"), Err(Error::InvalidPayload(_))));
    }

    /// `PaymentIntent` reads its fields borrowing JSON text; from a source that
    /// cannot lend text (a reader, a `Value`) it must read the same.
    #[test]
    fn payment_intent_deserializes_from_any_serde_json_source() {
        let event =
            Event::from_slice(pi_body(PAYMENT_INTENT_FAILED, "18446744073709551617").as_bytes()).unwrap();
        let want = event.payment_intent().unwrap().clone();
        let object = r#"{"id":"pi_9","object":"payment_intent","amount":18446744073709551617,
            "amount_received":18446744073709551617,"currency":"eth","payment_method_types":["ethereum","lightning"],
            "status":"requires_capture","created":1732264000,"description":null,
            "metadata":{"order":"42"},"new_field":{"x":[1,2]}}"#;
        let from_str: PaymentIntent = serde_json::from_str(object).unwrap();
        let from_reader: PaymentIntent = serde_json::from_reader(object.as_bytes()).unwrap();
        assert_eq!(from_str, want);
        assert_eq!(from_reader, want);
        // A `Value` holds numbers as u64/f64: the wei amount beyond 2^64 is
        // already lost there, so it is left out of this one.
        let small = object.replace("18446744073709551617", "250");
        let value: serde_json::Value = serde_json::from_str(&small).unwrap();
        let from_value: PaymentIntent = serde_json::from_value(value).unwrap();
        assert_eq!(from_value, serde_json::from_str::<PaymentIntent>(&small).unwrap());
        assert_eq!(from_value.metadata.get("order"), Some("42"));
        let err = serde_json::from_str::<PaymentIntent>(
            r#"{"id":"pi_1","amount":-1,"currency":"btc","status":"x"}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("negative"), "{err}");
        // Values whose text only the exact read keeps, through the same path.
        let odd = r#"{"id":"pi_1","amount":1,"currency":"btc","status":"x",
            "metadata":{"price":1.50,"tags":["a", "b"],"big":123456789012345678901234567890,"n":-7}}"#;
        for intent in [
            serde_json::from_str::<PaymentIntent>(odd).unwrap(),
            serde_json::from_reader::<_, PaymentIntent>(odd.as_bytes()).unwrap(),
        ] {
            let got: Vec<(&str, &str)> = intent.metadata.iter().collect();
            assert_eq!(
                got,
                [
                    ("big", "123456789012345678901234567890"),
                    ("n", "-7"),
                    ("price", "1.50"),
                    ("tags", r#"["a", "b"]"#)
                ]
            );
        }
    }

    /// Metadata keys in any order, repeated keys, escaped keys and values: the
    /// map reads like a `BTreeMap` filled in the order sent.
    #[test]
    fn metadata_reads_like_a_map_in_key_order() {
        let body = r#"{"id":"evt_k","type":"payment_intent.succeeded","data":{"object":{
            "id":"pi_k","amount":1,"currency":"btc","status":"succeeded",
            "metadata":{"zeta":"3","alpha":"2","k\u00e9y":"v\"al","":"empty"}}}}"#;
        let event = Event::from_slice(body.as_bytes()).unwrap();
        let metadata = &event.payment_intent().unwrap().metadata;
        let want: BTreeMap<String, String> = [
            ("zeta", "3"),
            ("alpha", "2"),
            ("k\u{e9}y", "v\"al"),
            ("", "empty"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(metadata, &want);
        assert_eq!(metadata.get("zeta"), Some("3"));
        assert_eq!(metadata.get("k\u{e9}y"), Some("v\"al"));
        assert!(metadata.contains_key("") && !metadata.contains_key("beta"));
        assert_eq!(metadata.len(), 4);
        assert_eq!(format!("{metadata:?}"), format!("{want:?}"));
        assert_eq!(
            serde_json::to_string(metadata).unwrap(),
            serde_json::to_string(&want).unwrap()
        );
    }

    /// One rule for a key sent twice, wherever the parser reads it: the
    /// event is invalid, whichever order the keys come in and whichever path
    /// reads it (type first, data first, metadata read again exactly, a
    /// payment intent on its own). PROTOCOL.md, "One rule for repeated keys".
    #[test]
    fn a_key_sent_twice_is_refused_everywhere() {
        let refused = |body: &str| match Event::from_slice(body.as_bytes()) {
            Err(Error::InvalidPayload(message)) => message,
            other => panic!("{body}: {other:?}"),
        };
        let object = |metadata: &str| {
            format!(
                r#"{{"id":"pi_1","amount":5,"currency":"btc","status":"succeeded","metadata":{metadata}}}"#
            )
        };
        let typed = |data_object: &str, extra: &str| {
            format!(
                r#"{{"id":"evt_1","type":"payment_intent.succeeded"{extra},"data":{{"object":{data_object}}}}}"#
            )
        };
        let data_first = |data_object: &str| {
            format!(r#"{{"data":{{"object":{data_object}}},"id":"evt_1","type":"payment_intent.succeeded"}}"#)
        };
        // The envelope: id, type, data, created and any other top-level key.
        for (body, key) in [
            (r#"{"id":"evt_1","id":"evt_2","type":"a"}"#.to_owned(), "id"),
            (r#"{"id":"evt_1","type":"a","type":"b"}"#.to_owned(), "type"),
            (
                r#"{"id":"evt_1","type":"a","data":{},"data":{}}"#.to_owned(),
                "data",
            ),
            (
                r#"{"created":1,"id":"evt_1","type":"a","created":2}"#.to_owned(),
                "created",
            ),
            (typed(&object("{}"), r#","created":1,"created":1"#), "created"),
            (
                r#"{"id":"evt_1","livemode":false,"type":"a","livemode":true}"#.to_owned(),
                "livemode",
            ),
        ] {
            let message = refused(&body);
            assert!(
                message.contains(&format!("duplicate field `{key}`")),
                "{body}: {message}"
            );
        }
        // Inside data and its payment intent.
        let message = refused(&typed(
            r#"{"id":"pi_1","amount":5,"amount":6,"currency":"btc","status":"succeeded"}"#,
            "",
        ));
        assert!(message.contains("duplicate field `amount`"), "{message}");
        // Inside metadata: read in place, read again exactly (a number value),
        // with data first, sorted or not.
        for metadata in [
            r#"{"order":"1","order":"2"}"#,
            r#"{"order":"1","plan":"pro","order":"1"}"#,
            r#"{"b":"1","a":"2","b":"3"}"#,
            r#"{"order":1.5,"order":"2"}"#,
        ] {
            for body in [typed(&object(metadata), ""), data_first(&object(metadata))] {
                let message = refused(&body);
                assert!(message.contains("duplicate key `"), "{body}: {message}");
                assert!(message.contains("` in metadata"), "{body}: {message}");
            }
            let alone = serde_json::from_str::<PaymentIntent>(&object(metadata)).unwrap_err();
            assert!(alone.to_string().contains("in metadata"), "{alone}");
        }
        // A repeated key is named escaped and cut, as any request value.
        let key = format!("k\\u001b{}", "x".repeat(200));
        let message = refused(&typed(&object(&format!(r#"{{"{key}":"1","{key}":"2"}}"#)), ""));
        assert!(!message.contains('\u{1b}') && message.len() < 200, "{message}");
        // Distinct keys are fine, in any order.
        assert!(Event::from_slice(
            typed(&object(r#"{"b":"1","a":"2"}"#), r#","livemode":true,"created":1"#).as_bytes()
        )
        .is_ok());
    }

    /// The other top-level fields come back exactly as sent, by name, in name order.
    #[test]
    fn other_fields_are_kept_exactly() {
        let body = br#"{"id":"evt_f","api_version":"2024-06-20","type":"x.y",
            "request":{"id":null, "idempotency_key":"k"},"created":1732264800,"livemode":true}"#;
        let event = Event::from_slice(body).unwrap();
        let fields: Vec<(&str, &str)> = event.fields().map(|(name, raw)| (name, raw.get())).collect();
        assert_eq!(
            fields,
            [
                ("api_version", r#""2024-06-20""#),
                ("created", "1732264800"),
                ("livemode", "true"),
                ("request", r#"{"id":null, "idempotency_key":"k"}"#),
            ]
        );
        assert_eq!(
            (event.created(), event.livemode()),
            (Some(1_732_264_800), Some(true))
        );
        assert!(event.field("id").is_none() && event.field("type").is_none());
    }

    #[test]
    fn an_id_from_outside_the_body_replaces_the_body_id() {
        let body = pi_body(PAYMENT_INTENT_SUCCEEDED, "5");
        let event = Event::from_slice_with_id(body.as_bytes(), "msg_1").unwrap();
        assert_eq!(event.id(), "msg_1");
        assert_eq!(event.payment_intent().unwrap().id, "pi_9");
        assert!(event.field("id").is_none());
        // No id in the body is fine then; an empty outside id is not.
        let no_id = br#"{"type":"x.y","data":{"a":1}}"#;
        assert_eq!(Event::from_slice_with_id(no_id, "msg_2").unwrap().id(), "msg_2");
        let err = Event::from_slice_with_id(no_id, "").unwrap_err();
        assert_eq!(err, Error::InvalidPayload("event id is empty".into()));
    }

    #[test]
    fn a_bare_intent_in_data_is_read_only_with_an_outside_id() {
        let intent =
            r#"{"id":"pi_1","object":"payment_intent","amount":7,"currency":"btc","status":"succeeded"}"#;
        for body in [
            format!(r#"{{"type":"payment_intent.succeeded","timestamp":"t","data":{intent}}}"#),
            format!(r#"{{"data":{intent},"type":"payment_intent.succeeded"}}"#),
        ] {
            let event = Event::from_slice_with_id(body.as_bytes(), "msg_1").unwrap();
            assert_eq!(event.payment_intent().map(|pi| pi.amount), Some(7), "{body}");
            assert_eq!(event.field("timestamp").is_some(), body.contains("timestamp"));
            // The service's format keeps its rule: data.object or nothing.
            assert!(
                Event::from_slice(body.replace("\"type\"", "\"id\":\"evt_1\",\"type\"").as_bytes()).is_err()
            );
        }
        // Another bare object keeps the error of the data.object rule.
        let charge = r#"{"type":"payment_intent.succeeded","data":{"id":"ch_1","object":"charge"}}"#;
        let err = Event::from_slice_with_id(charge.as_bytes(), "msg_1").unwrap_err();
        let Error::InvalidPayload(message) = err else {
            panic!()
        };
        assert!(
            message.starts_with(r#"data.object: invalid type: string "charge""#),
            "{message}"
        );
    }
}
