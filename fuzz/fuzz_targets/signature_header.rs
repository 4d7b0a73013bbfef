//! The signature header parser and the verifier on arbitrary header bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use payhook_core::signature::{Signature, Verifier};
use payhook_core::{Error, FixedClock};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let parsed = Signature::parse(data);
    if let Ok(signature) = &parsed {
        for v1 in signature.v1() {
            assert_eq!(v1.len(), 64);
            assert!(v1.iter().all(u8::is_ascii_hexdigit));
        }
        // Parsing depends only on the bytes: a second parse agrees.
        let again = Signature::parse(data).expect("parsed once");
        assert_eq!(again.timestamp(), signature.timestamp());
        assert!(again.v1().eq(signature.v1()));
    }
    let verifier = Verifier::builder()
        .secret(common::SECRET)
        .clock(FixedClock::new(common::T as i64))
        .build()
        .expect("valid verifier");
    // Nobody can guess an HMAC: arbitrary bytes are never accepted for an
    // arbitrary body, and a header that does not parse fails as malformed.
    match verifier.verify_value(data, b"{}") {
        Ok(()) => panic!("forged header accepted"),
        Err(Error::MalformedHeader(_)) => assert!(parsed.is_err()),
        Err(_) => assert!(parsed.is_ok()),
    }
});
