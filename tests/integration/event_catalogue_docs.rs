//! The event type tables of README.md and PROTOCOL.md say what the event
//! catalogue says: one row per type name, in the catalogue's order. A new
//! entry in the catalogue fails this test until both tables have its rows
//! (the failure prints them).

use std::path::Path;

use payhook::event::{EventType, CATALOGUE};

/// The rows the catalogue gives, one per type name.
fn expected_rows() -> Vec<String> {
    CATALOGUE
        .iter()
        .flat_map(|entry: &EventType| {
            entry.names.iter().map(move |name| {
                format!(
                    "| `{}` | `EventKind::{}` | {} | `{}` | {} |",
                    name.name,
                    entry.kind,
                    entry.carries.noun(),
                    entry.handler,
                    if name.emitted {
                        "the service"
                    } else {
                        "Stripe-style senders"
                    }
                )
            })
        })
        .collect()
}

/// The rows naming a type (first cell in backticks) of each table whose
/// header starts with `| `type` |`, in order; `None` when there is no such
/// table.
fn table_rows(markdown: &str) -> Option<Vec<String>> {
    let mut rows = None;
    let mut in_table = false;
    for line in markdown.lines().map(str::trim) {
        if line.starts_with("| `type` |") {
            in_table = true;
            rows.get_or_insert_with(Vec::new);
            continue;
        }
        if in_table && !line.starts_with('|') {
            in_table = false;
        }
        if in_table && line.starts_with("| `") {
            rows.as_mut()?.push(line.to_owned());
        }
    }
    rows
}

#[test]
fn readme_and_protocol_tables_match_the_catalogue() {
    let expected = expected_rows();
    for file in ["README.md", "PROTOCOL.md"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        let rows = table_rows(&text).unwrap_or_else(|| panic!("{file} has no table headed | `type` |"));
        assert_eq!(
            rows,
            expected,
            "{file}'s event type table disagrees with the event catalogue; its rows should be:\n{}",
            expected.join("\n")
        );
    }
}

#[test]
fn a_table_that_differs_is_found() {
    let good = format!(
        "| `type` | kind | data | handler | sent by |\n|---|---|---|---|---|\n{}\n| anything else | x | x | x | x |\n",
        expected_rows().join("\n")
    );
    assert_eq!(table_rows(&good), Some(expected_rows()));
    let missing = good.replacen(&expected_rows()[0], "", 1);
    assert_ne!(table_rows(&missing), Some(expected_rows()));
    assert_eq!(table_rows("no table"), None);
}
