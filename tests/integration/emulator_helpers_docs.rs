//! The guide's emulator page (`docs/guide/emulator.md`) names every helper the
//! in-process emulator gives a test: each method of `Emulator` and
//! `EmulatorBuilder` in the public API listing
//! (`public-api/payhook-emulator.txt`, which CI compares with the code), and
//! each test helper of the event catalogue as its API path. A new helper fails
//! this test until the page names it.

use std::path::Path;

use payhook::event::CATALOGUE;

fn read(file: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
        .unwrap_or_else(|err| panic!("{file}: {err}"))
}

/// The method names of `type_path` (`payhook_emulator::Emulator`) in a public
/// API listing: lines `payhook_emulator::Emulator::fn name(…` or `…::async fn name(…`.
fn methods(listing: &str, type_path: &str) -> Vec<String> {
    let prefix = format!("{type_path}::");
    listing
        .lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .filter_map(|rest| {
            rest.strip_prefix("async fn ")
                .or_else(|| rest.strip_prefix("fn "))
        })
        .filter_map(|rest| rest.split_once('('))
        .map(|(name, _)| name.to_owned())
        .collect()
}

#[test]
fn the_emulator_page_names_every_emulator_helper() {
    let listing = read("public-api/payhook-emulator.txt");
    let page = read("docs/guide/emulator.md");
    let mut missing = Vec::new();
    for type_path in ["payhook_emulator::Emulator", "payhook_emulator::EmulatorBuilder"] {
        let names = methods(&listing, type_path);
        assert!(
            names.len() >= 10,
            "{type_path}: too few methods found in the listing: {names:?}"
        );
        for name in names {
            // Written as a call on the page: `name(`, `.name(` or `::name(`.
            if !["`", ".", "::"]
                .iter()
                .any(|before| page.contains(&format!("{before}{name}(")))
            {
                missing.push(format!("{type_path}::{name}"));
            }
        }
    }
    for entry in CATALOGUE {
        if let Some(helper) = &entry.test_helper {
            let path = format!("/v1/test_helpers/payment_intents/pi_…/{}", helper.path);
            if !page.contains(&path) {
                missing.push(path);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/guide/emulator.md does not name these emulator helpers: {missing:?}"
    );
}

#[test]
fn a_method_of_the_listing_is_found() {
    let listing = "payhook_emulator::Emulator::async fn shutdown(self)\n\
                   payhook_emulator::Emulator::fn fail_payment_intent(&self, id: &str) -> X\n\
                   payhook_emulator::EmulatorBuilder::fn addr(self, addr: SocketAddr) -> Self\n\
                   impl core::fmt::Debug for payhook_emulator::Emulator\n";
    assert_eq!(
        methods(listing, "payhook_emulator::Emulator"),
        ["shutdown", "fail_payment_intent"]
    );
}
