use std::time::Duration;

use super::*;
use crate::sender::{StandardDelivery, StandardSigner};
use crate::FixedClock;

// The specification's own example.
const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const SPEC_T: u64 = 1614265330;
const SPEC_BODY: &[u8] = br#"{"test": 2432232314}"#;
const SPEC_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

/// Another secret of 32 bytes.
const OTHER_SECRET: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn headers(id: &str, t: &str, signature: &str) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    headers.insert(WEBHOOK_ID, id.parse().unwrap());
    headers.insert(WEBHOOK_TIMESTAMP, t.parse().unwrap());
    headers.insert(WEBHOOK_SIGNATURE, signature.parse().unwrap());
    headers
}

fn scheme(builder: StandardWebhooksBuilder, now: u64) -> StandardWebhooks {
    builder.clock(FixedClock::new(now as i64)).build().unwrap()
}

fn spec_scheme(now: u64) -> StandardWebhooks {
    scheme(StandardWebhooks::builder().secret(SPEC_SECRET), now)
}

fn check(signature: &str) -> Result<(), Error> {
    spec_scheme(SPEC_T).verify_headers(&headers(SPEC_ID, "1614265330", signature), SPEC_BODY)
}

fn malformed(header: &'static str, reason: &'static str) -> Error {
    Error::InvalidHeader {
        header: http::HeaderName::from_static(header),
        reason,
    }
}

#[test]
fn the_specification_example_verifies_and_signs_byte_for_byte() {
    assert_eq!(check(SPEC_SIG), Ok(()));
    let signer = StandardSigner::new(SPEC_SECRET).unwrap();
    assert_eq!(signer.sign(SPEC_ID, SPEC_T, SPEC_BODY), SPEC_SIG);
    // The prefix may be left out, as the reference libraries allow.
    let bare = scheme(
        StandardWebhooks::builder().secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        SPEC_T,
    );
    let spec_headers = headers(SPEC_ID, "1614265330", SPEC_SIG);
    assert_eq!(bare.verify_headers(&spec_headers, SPEC_BODY), Ok(()));
}

#[test]
fn a_changed_body_id_or_timestamp_does_not_match() {
    let scheme = spec_scheme(SPEC_T);
    let changed = [
        (
            headers(SPEC_ID, "1614265330", SPEC_SIG),
            &br#"{"test": 2432232315}"#[..],
        ),
        (
            headers("msg_p5jXN8AQM9LWM0D4loKWxJel", "1614265330", SPEC_SIG),
            SPEC_BODY,
        ),
        (headers(SPEC_ID, "1614265331", SPEC_SIG), SPEC_BODY),
    ];
    for (headers, body) in changed {
        assert_eq!(
            scheme.verify_headers(&headers, body),
            Err(Error::NoSignatureMatch)
        );
    }
}

#[test]
fn a_wrong_secret_does_not_match() {
    let other = scheme(StandardWebhooks::builder().secret(OTHER_SECRET), SPEC_T);
    let spec_headers = headers(SPEC_ID, "1614265330", SPEC_SIG);
    assert_eq!(
        other.verify_headers(&spec_headers, SPEC_BODY),
        Err(Error::NoSignatureMatch)
    );
}

#[test]
fn the_timestamp_is_signed_in_plain_decimal() {
    let leading_zero = headers(SPEC_ID, "01614265330", SPEC_SIG);
    assert_eq!(
        spec_scheme(SPEC_T).verify_headers(&leading_zero, SPEC_BODY),
        Ok(())
    );
}

#[test]
fn the_tolerance_holds_both_ways_inclusively() {
    let at = |now: u64| spec_scheme(now).verify_headers(&headers(SPEC_ID, "1614265330", SPEC_SIG), SPEC_BODY);
    assert_eq!(at(SPEC_T + 300), Ok(()));
    assert_eq!(at(SPEC_T - 300), Ok(()));
    assert_eq!(
        at(SPEC_T + 301),
        Err(Error::TimestampTooOld {
            age: 301,
            tolerance: 300
        })
    );
    assert_eq!(
        at(SPEC_T - 301),
        Err(Error::TimestampInFuture {
            ahead: 301,
            tolerance: 300
        })
    );
    let narrow = StandardWebhooks::builder()
        .secret(SPEC_SECRET)
        .tolerance(Duration::from_secs(10));
    let spec_headers = headers(SPEC_ID, "1614265330", SPEC_SIG);
    assert_eq!(
        scheme(narrow, SPEC_T + 11).verify_headers(&spec_headers, SPEC_BODY),
        Err(Error::TimestampTooOld {
            age: 11,
            tolerance: 10
        })
    );
    let off = StandardWebhooks::builder()
        .secret(SPEC_SECRET)
        .disable_timestamp_check();
    assert_eq!(scheme(off, 0).verify_headers(&spec_headers, SPEC_BODY), Ok(()));
}

#[test]
fn rotation_accepts_any_item_against_any_secret() {
    let other = StandardSigner::new(OTHER_SECRET)
        .unwrap()
        .sign(SPEC_ID, SPEC_T, SPEC_BODY);
    let both = StandardWebhooks::builder().secrets([OTHER_SECRET, SPEC_SECRET]);
    let both = scheme(both, SPEC_T);
    let third = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    for signature in [
        format!("{third} {SPEC_SIG}"),
        format!("{SPEC_SIG} {third}"),
        other.clone(),
        format!("{third}  {other}"),
    ] {
        let found = both.verify_headers(&headers(SPEC_ID, "1614265330", &signature), SPEC_BODY);
        assert_eq!(found, Ok(()), "{signature}");
    }
    assert_eq!(check(&format!("{third} {other}")), Err(Error::NoSignatureMatch));
}

#[test]
fn unknown_versions_are_ignored() {
    assert_eq!(
        check(&format!("v2,abc v1b,{} {SPEC_SIG}", &SPEC_SIG[3..])),
        Ok(())
    );
    assert_eq!(
        check(&format!("v2,{}", &SPEC_SIG[3..])),
        Err(malformed(WEBHOOK_SIGNATURE, "no well-formed v1 or v1a signature"))
    );
}

#[test]
fn more_than_the_maximum_of_items_is_refused_before_any_check() {
    let third = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    // Up to the maximum, with the genuine item last, verifies.
    let mut items = vec![third; MAX_SIGNATURE_ITEMS - 1];
    items.push(SPEC_SIG);
    assert_eq!(check(&items.join(" ")), Ok(()));
    // One more item of any version, even a genuine one, is a malformed header.
    let too_many = format!("v2,x {}", items.join(" "));
    let refused = check(&too_many).unwrap_err();
    assert_eq!(refused, malformed(WEBHOOK_SIGNATURE, "more than 8 signatures"));
    assert!(refused.to_string().contains(&MAX_SIGNATURE_ITEMS.to_string()));
    // Spaces between items are not items.
    assert_eq!(check(&format!("  {}  ", items.join("   "))), Ok(()));
}

#[test]
fn a_repeated_item_is_decoded_and_checked_once() {
    let third = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    let value = format!("{third} {SPEC_SIG} {third} {SPEC_SIG} {third}");
    let headers = headers(SPEC_ID, "1614265330", &value);
    let parts = Parts::read(&headers).unwrap();
    assert_eq!(parts.v1.as_slice().len(), 2);
    assert_eq!(check(&value), Ok(()));
}

#[test]
fn malformed_items_are_ignored_unless_nothing_is_left() {
    let bad = [
        "v1",                                               // no comma
        "v1,",                                              // empty
        "v1,not*base64*at*all*not*base64*at*all*not*b=",    // not base64
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE",   // no padding
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1A==",  // 31 bytes
        "v1a,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", // 32 bytes for v1a
        ",g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        "V1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    ];
    for item in bad {
        assert_eq!(check(&format!("{item} {SPEC_SIG}")), Ok(()), "{item}");
        assert_eq!(
            check(item),
            Err(malformed(WEBHOOK_SIGNATURE, "no well-formed v1 or v1a signature")),
            "{item}"
        );
    }
    assert_eq!(check(&format!("{} {}", bad[0], bad[2])), check(bad[1]));
}

#[test]
fn missing_repeated_and_malformed_headers_name_the_header() {
    let scheme = spec_scheme(SPEC_T);
    for name in [WEBHOOK_ID, WEBHOOK_TIMESTAMP, WEBHOOK_SIGNATURE] {
        let mut missing = headers(SPEC_ID, "1614265330", SPEC_SIG);
        missing.remove(name);
        let error = scheme.verify_headers(&missing, SPEC_BODY).unwrap_err();
        assert_eq!(error, Error::MissingHeader(http::HeaderName::from_static(name)));
        assert_eq!(error.to_string(), format!("missing {name} header"));
        assert_eq!(error.status(), http::StatusCode::BAD_REQUEST);
        let mut repeated = headers(SPEC_ID, "1614265330", SPEC_SIG);
        repeated.append(name, "x".parse().unwrap());
        let error = scheme.verify_headers(&repeated, SPEC_BODY).unwrap_err();
        assert_eq!(error, Error::RepeatedHeader(http::HeaderName::from_static(name)));
    }
    for t in ["", "+1614265330", "1614265330.0", " 1614265330", "-1", "1e9"] {
        let error = scheme.verify_headers(&headers(SPEC_ID, t, SPEC_SIG), SPEC_BODY);
        assert_eq!(
            error,
            Err(malformed(WEBHOOK_TIMESTAMP, "not a whole number of unix seconds")),
            "{t:?}"
        );
    }
    let error = scheme.verify_headers(&headers(SPEC_ID, "99999999999999999999", SPEC_SIG), SPEC_BODY);
    assert_eq!(
        error,
        Err(malformed(WEBHOOK_TIMESTAMP, "the timestamp is too large"))
    );
    let cases = [
        ("", "the id is empty"),
        ("msg 1", "the id has characters other than visible ASCII"),
        (&*"m".repeat(256), "the id is longer than 255 bytes"),
    ];
    for (id, reason) in cases {
        let error = scheme.verify_headers(&headers(id, "1614265330", SPEC_SIG), SPEC_BODY);
        assert_eq!(error, Err(malformed(WEBHOOK_ID, reason)), "{id:?}");
    }
    let error = scheme
        .verify_headers(&headers(SPEC_ID, "x", SPEC_SIG), SPEC_BODY)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "malformed webhook-timestamp header: not a whole number of unix seconds"
    );
}

#[test]
fn the_event_id_is_the_webhook_id_header() {
    let scheme = spec_scheme(SPEC_T);
    let spec_headers = headers(SPEC_ID, "1614265330", SPEC_SIG);
    assert_eq!(SignatureScheme::event_id(&scheme, &spec_headers), Some(SPEC_ID));
    assert_eq!(SignatureScheme::event_id(&scheme, &http::HeaderMap::new()), None);
    // The service's scheme takes the id from the body.
    let service = crate::Verifier::builder().secret("whsec_x").build().unwrap();
    assert_eq!(SignatureScheme::event_id(&service, &spec_headers), None);
}

#[test]
fn bad_keys_are_build_errors_naming_their_position_not_their_value() {
    let error = |builder: StandardWebhooksBuilder| builder.build().unwrap_err();
    let e = error(StandardWebhooks::builder().secrets([SPEC_SECRET, "whsec_%%%%"]));
    assert_eq!(
        e,
        ConfigError::InvalidKey {
            kind: "secret",
            position: 2,
            reason: "is not base64"
        }
    );
    assert_eq!(e.to_string(), "secret #2 is not base64");
    assert_eq!(
        error(StandardWebhooks::builder().secret("whsec_AAAA")).to_string(),
        "secret #1 does not decode to 24 to 64 bytes"
    );
    let long = format!("whsec_{}", "A".repeat(88)); // 66 bytes
    assert_eq!(
        error(StandardWebhooks::builder().secret(SPEC_SECRET).secret(long)).to_string(),
        "secret #2 does not decode to 24 to 64 bytes"
    );
    assert_eq!(
        error(StandardWebhooks::builder().secret("whsec_")).to_string(),
        "secret #1 is empty"
    );
    assert_eq!(
        error(StandardWebhooks::builder().secret("whpk_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")).to_string(),
        "secret #1 does not start with whsec_"
    );
    assert_eq!(error(StandardWebhooks::builder()), ConfigError::NoKey);
    // 24 and 64 bytes are the bounds.
    let ok = |len: usize| {
        let key = format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode(vec![7u8; len])
        );
        StandardWebhooks::builder().secret(key).build().is_ok()
    };
    assert_eq!((ok(23), ok(24), ok(64), ok(65)), (false, true, true, false));
}

#[test]
fn debug_never_shows_keys() {
    let shown = format!(
        "{:?} {:?}",
        spec_scheme(0),
        StandardWebhooks::builder().secret(SPEC_SECRET)
    );
    assert!(!shown.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), "{shown}");
    let shown = format!("{:?}", StandardSigner::new(SPEC_SECRET).unwrap());
    assert!(!shown.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), "{shown}");
}

#[test]
fn a_delivery_made_by_the_sender_verifies() {
    let delivery = StandardDelivery::at(SPEC_BODY, SPEC_ID, SPEC_SECRET, SPEC_T).unwrap();
    assert_eq!(delivery.webhook_signature, SPEC_SIG);
    assert_eq!(
        spec_scheme(SPEC_T).verify_headers(&delivery.headers(), &delivery.body),
        Ok(())
    );
}

#[cfg(feature = "ed25519")]
mod ed25519 {
    use ed25519_dalek::{Signer as _, SigningKey};

    use super::*;
    use crate::sender::{generate_standard_keypair, standard_public_key};

    const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

    fn signing_key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    fn whsk(seed: u8) -> String {
        format!("whsk_{}", B64.encode([seed; 32]))
    }

    fn whpk(seed: u8) -> String {
        format!(
            "whpk_{}",
            B64.encode(signing_key(seed).verifying_key().as_bytes())
        )
    }

    /// A `v1a` item made with `ed25519-dalek` directly over the content the
    /// specification defines, not through payhook's signer.
    fn v1a(seed: u8, id: &str, t: u64, body: &[u8]) -> String {
        let mut content = format!("{id}.{t}.").into_bytes();
        content.extend_from_slice(body);
        format!("v1a,{}", B64.encode(signing_key(seed).sign(&content).to_bytes()))
    }

    fn asymmetric(keys: &[String]) -> StandardWebhooks {
        scheme(StandardWebhooks::builder().public_keys(keys), SPEC_T)
    }

    #[test]
    fn a_genuine_v1a_verifies_and_a_wrong_key_does_not() {
        let signature = v1a(1, SPEC_ID, SPEC_T, SPEC_BODY);
        let signed = headers(SPEC_ID, "1614265330", &signature);
        assert_eq!(asymmetric(&[whpk(1)]).verify_headers(&signed, SPEC_BODY), Ok(()));
        assert_eq!(
            asymmetric(&[whpk(2)]).verify_headers(&signed, SPEC_BODY),
            Err(Error::NoSignatureMatch)
        );
        // Changed body, id or timestamp.
        let scheme = asymmetric(&[whpk(1)]);
        assert_eq!(
            scheme.verify_headers(&signed, b"{}"),
            Err(Error::NoSignatureMatch)
        );
        let other_id = headers("msg_2", "1614265330", &signature);
        assert_eq!(
            scheme.verify_headers(&other_id, SPEC_BODY),
            Err(Error::NoSignatureMatch)
        );
        let other_t = headers(SPEC_ID, "1614265331", &signature);
        assert_eq!(
            scheme.verify_headers(&other_t, SPEC_BODY),
            Err(Error::NoSignatureMatch)
        );
        // A v1a item is not checked against secrets, nor a v1 against public keys.
        let symmetric = spec_scheme(SPEC_T);
        assert_eq!(
            symmetric.verify_headers(&signed, SPEC_BODY),
            Err(Error::NoSignatureMatch)
        );
        let v1_only = headers(SPEC_ID, "1614265330", SPEC_SIG);
        assert_eq!(
            scheme.verify_headers(&v1_only, SPEC_BODY),
            Err(Error::NoSignatureMatch)
        );
    }

    #[test]
    fn the_signer_makes_what_the_verifier_accepts() {
        let signer = StandardSigner::new(&whsk(1)).unwrap();
        assert_eq!(
            signer.sign(SPEC_ID, SPEC_T, SPEC_BODY),
            v1a(1, SPEC_ID, SPEC_T, SPEC_BODY)
        );
        // The 64-byte seed‖public form signs alike; a mismatched public half is refused.
        let mut long = [1u8; 64];
        long[32..].copy_from_slice(signing_key(1).verifying_key().as_bytes());
        let long_signer = StandardSigner::new(&format!("whsk_{}", B64.encode(long))).unwrap();
        assert_eq!(
            long_signer.sign(SPEC_ID, SPEC_T, SPEC_BODY),
            signer.sign(SPEC_ID, SPEC_T, SPEC_BODY)
        );
        long[40] ^= 1;
        let refused = StandardSigner::new(&format!("whsk_{}", B64.encode(long))).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "signing key #1 has a public half that does not match its seed"
        );
        assert_eq!(standard_public_key(&whsk(1)).unwrap(), whpk(1));
        let (sk, pk) = generate_standard_keypair().unwrap();
        let (sk2, _) = generate_standard_keypair().unwrap();
        assert_ne!(sk, sk2);
        let delivery = StandardDelivery::at(SPEC_BODY, SPEC_ID, &sk, SPEC_T).unwrap();
        assert!(delivery.webhook_signature.starts_with("v1a,"));
        assert_eq!(
            asymmetric(&[pk]).verify_headers(&delivery.headers(), SPEC_BODY),
            Ok(())
        );
    }

    #[test]
    fn rotation_across_public_keys_and_items() {
        let scheme = asymmetric(&[whpk(3), whpk(1)]);
        let other = v1a(2, SPEC_ID, SPEC_T, SPEC_BODY);
        for signature in [
            format!("{other} {}", v1a(1, SPEC_ID, SPEC_T, SPEC_BODY)),
            format!("{} {other}", v1a(3, SPEC_ID, SPEC_T, SPEC_BODY)),
        ] {
            let found = scheme.verify_headers(&headers(SPEC_ID, "1614265330", &signature), SPEC_BODY);
            assert_eq!(found, Ok(()), "{signature}");
        }
        let only_other = headers(SPEC_ID, "1614265330", &other);
        assert_eq!(
            scheme.verify_headers(&only_other, SPEC_BODY),
            Err(Error::NoSignatureMatch)
        );
    }

    #[test]
    fn a_v1a_beside_a_bad_v1_verifies() {
        let both = StandardWebhooks::builder()
            .secret(SPEC_SECRET)
            .public_key(whpk(1));
        let both = scheme(both, SPEC_T);
        let bad_v1 = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
        let good_v1a = v1a(1, SPEC_ID, SPEC_T, SPEC_BODY);
        for signature in [format!("{bad_v1} {good_v1a}"), format!("v1,%% {good_v1a}")] {
            let found = both.verify_headers(&headers(SPEC_ID, "1614265330", &signature), SPEC_BODY);
            assert_eq!(found, Ok(()), "{signature}");
        }
        let alone = headers(SPEC_ID, "1614265330", bad_v1);
        assert_eq!(
            both.verify_headers(&alone, SPEC_BODY),
            Err(Error::NoSignatureMatch)
        );
        // And the other way round: a good v1 beside a forged v1a.
        let forged = format!("v1a,{}", B64.encode([9u8; 64]));
        assert_eq!(
            both.verify_headers(
                &headers(SPEC_ID, "1614265330", &format!("{forged} {SPEC_SIG}")),
                SPEC_BODY
            ),
            Ok(())
        );
    }

    #[test]
    fn the_tolerance_applies_to_v1a() {
        let signature = v1a(1, SPEC_ID, SPEC_T, SPEC_BODY);
        let late = scheme(StandardWebhooks::builder().public_key(whpk(1)), SPEC_T + 301);
        assert_eq!(
            late.verify_headers(&headers(SPEC_ID, "1614265330", &signature), SPEC_BODY),
            Err(Error::TimestampTooOld {
                age: 301,
                tolerance: 300
            })
        );
    }

    #[test]
    fn bad_public_keys_are_build_errors_naming_their_position() {
        let error = |keys: &[&str]| {
            StandardWebhooks::builder()
                .public_keys(keys)
                .build()
                .unwrap_err()
                .to_string()
        };
        let good = whpk(1);
        assert_eq!(
            error(&[&good, "whpk_AAAA"]),
            "public key #2 does not decode to 32 bytes"
        );
        assert_eq!(error(&["whpk_!!"]), "public key #1 is not base64");
        assert_eq!(error(&[&whsk(1)]), "public key #1 does not start with whpk_");
        // The identity point: a small-order (weak) key.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        let weak = format!("whpk_{}", B64.encode(identity));
        assert_eq!(
            error(&[&good, &good, &weak]),
            "public key #3 is a weak (small-order) Ed25519 key"
        );
        // Public keys alone are enough.
        assert!(StandardWebhooks::builder().public_key(good).build().is_ok());
    }
}
