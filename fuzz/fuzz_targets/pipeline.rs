//! The whole receiver pipeline on arbitrary header and body bytes.
//!
//! Input: the signature header value, a newline, then the body. Header bytes
//! that are not a valid header value are sent without the header.
#![no_main]

use std::sync::OnceLock;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use payhook_core::adapter::Outcome;
use payhook_core::Receiver;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    static RECEIVER: OnceLock<Receiver> = OnceLock::new();
    let receiver = RECEIVER.get_or_init(common::receiver);

    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let mut headers = http::HeaderMap::new();
    if let Ok(value) = http::HeaderValue::from_bytes(header) {
        headers.insert(common::HEADER, value);
    }
    let verdict = receiver.check(&headers, body);
    match common::now(receiver.receive(&headers, Bytes::copy_from_slice(body))) {
        Outcome::Deliver(delivery) => {
            let event = verdict.expect("delivered only what passes the checks");
            assert_eq!(delivery.event().id(), event.id());
            let reply = common::now(delivery.into_claim().complete());
            assert_eq!(reply.status(), 200);
        }
        Outcome::Respond(reply) => match verdict {
            // Verified and parsed, but handled before: acknowledged.
            Ok(_) => assert_eq!(reply.status(), 200, "{}", reply.body()),
            Err(error) => {
                assert_eq!(reply.status(), error.status());
                assert!(reply.body().starts_with("Webhook Error: "));
            }
        },
    }
});
