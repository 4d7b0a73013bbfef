//! Arbitrary bodies signed with the receiver's secret, so the fuzzer gets past
//! the verifier and exercises the event parser and the store.
//!
//! The first byte is a script for how a genuine event's deliveries go: each
//! pair of bits settles one delivery (complete, release, or drop the claim),
//! and a copy of the delivery arrives while it is in flight. Every reply is
//! checked against a record of which ids were delivered, are in flight and
//! are done: a broken dedupe (a second run of the handler, a lost claim, a
//! duplicate that is not acknowledged) fails the target.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use payhook_core::adapter::ReceiveOutcome;
use payhook_core::{sign, Event, Secret};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let receiver = common::receiver();
    let Some((&script, body)) = data.split_first() else {
        return;
    };

    let secret = Secret::new(common::SECRET).expect("non-empty secret");
    let mut headers = http::HeaderMap::new();
    let signature = sign(body, &secret, common::T);
    headers.insert(common::HEADER, signature.parse().expect("ASCII header"));
    let receive = || common::now(receiver.receive(&headers, Bytes::copy_from_slice(body)));

    let parsed = Event::from_slice(body);
    let too_large = body.len() > receiver.body_limit();
    let event = match (parsed, too_large) {
        (Ok(event), false) => event,
        (parsed, _) => {
            // Refused before the store: the same answer every time.
            for _ in 0..2 {
                let ReceiveOutcome::Respond(reply) = receive() else {
                    panic!("an invalid or oversized body was delivered");
                };
                let expected = if too_large { 413 } else { 400 };
                assert_eq!(reply.status(), expected, "{}", reply.body());
                assert!(reply.body().starts_with("Webhook Error: "));
            }
            assert!(too_large || parsed.is_err());
            return;
        }
    };
    let id = event.id();
    let mut deliveries = common::Deliveries::default();
    // Up to four rounds: a delivery, a concurrent copy, then the settling the
    // script says; after a completion every copy is a duplicate.
    for round in 0..4 {
        let how = script >> (2 * round);
        match deliveries.receive(id, receive()) {
            Some(delivery) => {
                assert!(deliveries.receive(id, receive()).is_none(), "concurrent copy");
                deliveries.settle(delivery, how);
            }
            None => assert!(deliveries.done.contains(id)),
        }
    }
});
