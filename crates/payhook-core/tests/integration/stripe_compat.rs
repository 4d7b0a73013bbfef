//! payhook accepts and rejects signature headers as Stripe's official library
//! does, and signs exactly as it does.
//!
//! `data/stripe_vectors.json` holds headers judged by Stripe's Python library
//! (`data/stripe_vectors.py` regenerates it). The timestamp check is off on
//! both sides: payhook's deliberate differences there (future timestamps,
//! strict `t` forms, differing `t` items) are tested in the unit tests.

use payhook_core::signature::{sign, Verifier};
use payhook_core::Secret;
use serde_json::Value;

fn vectors() -> Value {
    serde_json::from_str(include_str!("../data/stripe_vectors.json")).expect("valid vector file")
}

#[test]
fn verdicts_match_stripes_library() {
    let vectors = vectors();
    let cases = vectors["verify"].as_array().expect("verify vectors");
    assert!(cases.len() >= 70);
    let mut disagreements = Vec::new();
    for case in cases {
        let (header, body, secret) = (
            case["header"].as_str().unwrap(),
            case["body"].as_str().unwrap(),
            case["secret"].as_str().unwrap(),
        );
        let verifier = Verifier::builder()
            .secret(secret)
            .disable_timestamp_check()
            .build()
            .unwrap();
        let ours = verifier.verify_value(header.as_bytes(), body.as_bytes());
        if ours.is_ok() != case["accepted"].as_bool().unwrap() {
            disagreements.push(format!(
                "{header:?} body {body:?} secret {secret}: payhook says {ours:?}"
            ));
        }
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}");
}

#[test]
fn signatures_match_stripes_library() {
    let vectors = vectors();
    for case in vectors["sign"].as_array().expect("sign vectors") {
        let secret = Secret::new(case["secret"].as_str().unwrap()).unwrap();
        let body = case["body"].as_str().unwrap();
        let header = sign(body.as_bytes(), &secret, case["t"].as_u64().unwrap());
        assert_eq!(header, case["header"].as_str().unwrap());
    }
}
