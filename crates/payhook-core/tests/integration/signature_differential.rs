//! payhook's verifier against Stripe's official verifiers on thousands of
//! header variants.
//!
//! `data/signature_differential.json` holds each header with the verdicts of the
//! npm `stripe` and PyPI `stripe` packages (pinned versions, named in the file)
//! and the expected verdict: theirs where they agree, except that a timestamp
//! further in the future than the tolerance is refused (the protocol's one
//! deliberate difference), and the protocol's strict reading where they
//! disagree. `data/differential/regenerate.sh` rebuilds the file; this test
//! needs neither node nor Python.

use std::time::Duration;

use payhook_core::{FixedClock, Verifier};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    time: i64,
    tolerance: u64,
    bodies: Vec<String>,
    secrets: Vec<String>,
    libraries: serde_json::Value,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    header: String,
    body: usize,
    secret: usize,
    node: bool,
    python: bool,
    expected: bool,
}

fn fixture() -> Fixture {
    serde_json::from_str(include_str!("../data/signature_differential.json")).expect("valid fixture")
}

/// The header as a log would show it: escaped, and cut short.
fn shown(header: &str) -> String {
    let escaped = header.escape_debug().to_string();
    match escaped.char_indices().nth(160) {
        Some((cut, _)) => format!("{}… ({} chars)", &escaped[..cut], header.chars().count()),
        None => escaped,
    }
}

#[test]
fn payhook_agrees_with_both_official_verifiers() {
    let fixture = fixture();
    let verifiers: Vec<Verifier> = fixture
        .secrets
        .iter()
        .map(|secret| {
            Verifier::builder()
                .secret(secret.as_str())
                .tolerance(Duration::from_secs(fixture.tolerance))
                .clock(FixedClock::new(fixture.time))
                .build()
                .expect("valid verifier")
        })
        .collect();
    let mut wrong = Vec::new();
    for case in &fixture.cases {
        let body = fixture.bodies[case.body].as_bytes();
        let accepted = verifiers[case.secret]
            .verify_value(case.header.as_bytes(), body)
            .is_ok();
        if accepted != case.expected {
            wrong.push(format!(
                "  payhook {} (node {}, python {}, expected {}): {}",
                verdict(accepted),
                verdict(case.node),
                verdict(case.python),
                verdict(case.expected),
                shown(&case.header)
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} headers judged differently from the expected verdict (libraries {}):\n{}",
        wrong.len(),
        fixture.cases.len(),
        fixture.libraries,
        wrong[..wrong.len().min(40)].join("\n")
    );
}

fn verdict(accepted: bool) -> &'static str {
    if accepted {
        "accepts"
    } else {
        "rejects"
    }
}

/// The fixture exercises what it is for: thousands of cases, both verdicts,
/// and headers on which the two libraries disagree.
#[test]
fn the_fixture_covers_agreement_and_disagreement() {
    let fixture = fixture();
    let cases = &fixture.cases;
    assert!(cases.len() >= 2000, "{} cases", cases.len());
    let count = |f: &dyn Fn(&Case) -> bool| cases.iter().filter(|c| f(c)).count();
    assert!(
        count(&|c| c.node && c.python && c.expected) >= 300,
        "too few accepted headers"
    );
    assert!(
        count(&|c| !c.node && !c.python) >= 300,
        "too few rejected headers"
    );
    assert!(count(&|c| c.node != c.python) >= 100, "too few disagreements");
    assert!(
        count(&|c| c.node != c.python && c.expected) >= 10,
        "disagreements where the protocol accepts"
    );
    assert!(
        count(&|c| !c.header.is_ascii()) >= 100,
        "too few non-ASCII headers"
    );
    assert!(
        count(&|c| c.header.len() > 2000) >= 5,
        "too few very long headers"
    );
    assert!(
        fixture.bodies.iter().any(|b| !b.is_ascii()),
        "a body with non-ASCII text"
    );
}
