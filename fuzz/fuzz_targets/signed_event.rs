//! Arbitrary bodies signed with the receiver's secret, so the fuzzer gets past
//! the verifier and exercises the event parser and the store.
//!
//! The first byte picks how the handler ends (complete, release, or drop), so
//! each path that settles a claim is reached.
#![no_main]

use std::sync::OnceLock;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use payhook_core::adapter::Outcome;
use payhook_core::{sign, Event, Receiver, Secret};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    static RECEIVER: OnceLock<Receiver> = OnceLock::new();
    let receiver = RECEIVER.get_or_init(common::receiver);
    let Some((&how, body)) = data.split_first() else {
        return;
    };

    let secret = Secret::new(common::SECRET).expect("non-empty secret");
    let mut headers = http::HeaderMap::new();
    let signature = sign(body, &secret, common::T);
    headers.insert(common::HEADER, signature.parse().expect("ASCII header"));

    let parsed = Event::from_slice(body);
    let too_large = body.len() > receiver.body_limit();
    match common::now(receiver.receive(&headers, Bytes::copy_from_slice(body))) {
        Outcome::Deliver(delivery) => {
            let event = parsed.expect("delivered events parse");
            assert_eq!(delivery.event().id(), event.id());
            let claim = delivery.into_claim();
            match how % 3 {
                0 => assert_eq!(common::now(claim.complete()).status(), 200),
                1 => common::now(claim.release()),
                _ => drop(claim),
            }
        }
        Outcome::Respond(reply) => {
            if too_large {
                assert_eq!(reply.status(), 413);
            } else if parsed.is_ok() {
                // A genuine event is refused only as a duplicate (already done).
                assert_eq!(reply.status(), 200, "{}", reply.body());
            } else {
                assert_eq!(reply.status(), 400, "{}", reply.body());
                assert!(reply.body().starts_with("Webhook Error: "));
            }
        }
    }
});
