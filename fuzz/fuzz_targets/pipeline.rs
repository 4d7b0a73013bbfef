//! The whole receiver pipeline on arbitrary header and body bytes.
//!
//! Input: the signature header value, a newline, then the body. Header bytes
//! that are not a valid header value are sent without the header. Each input
//! is delivered three times against a record of delivered ids: a delivery that
//! passes the checks is handed out once, a copy while it is in flight gets
//! 409, and once it is completed every copy is a 200 duplicate.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use payhook_core::adapter::ReceiveOutcome;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let receiver = common::receiver();

    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let mut headers = http::HeaderMap::new();
    if let Ok(value) = http::HeaderValue::from_bytes(header) {
        headers.insert(common::HEADER, value);
    }
    let receive = || common::now(receiver.receive(&headers, Bytes::copy_from_slice(body)));
    match receiver.check(&headers, body) {
        Ok(event) => {
            let mut deliveries = common::Deliveries::default();
            let delivery = deliveries
                .receive(event.id(), receive())
                .expect("a verified event is handed out");
            assert!(deliveries.receive(event.id(), receive()).is_none());
            deliveries.settle(delivery, 0);
            assert!(deliveries.receive(event.id(), receive()).is_none());
        }
        Err(error) => {
            // Refused before the store, the same way each time.
            for _ in 0..2 {
                let ReceiveOutcome::Respond(reply) = receive() else {
                    panic!("delivered what fails the checks: {error}");
                };
                assert_eq!(reply.status(), error.status());
                assert!(reply.body().starts_with("Webhook Error: "));
            }
        }
    }
});
