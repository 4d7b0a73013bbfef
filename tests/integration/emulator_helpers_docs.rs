//! The guide's emulator page (`docs/guide/emulator.md`) names every helper the
//! in-process emulator gives a test: each method of `Emulator` and
//! `EmulatorBuilder` in the public API listing
//! (`public-api/payhook-emulator.txt`, which CI compares with the code), and
//! each test helper of the event catalogue as its API path. A new helper fails
//! this test until the page names it. Its HTTP API table lists every route
//! the emulator's router (`crates/payhook-emulator/src/api/mod.rs`) serves,
//! and no other: a route added, removed or renamed on one side only fails here.

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

/// The router's source, where it declares its routes.
const ROUTER: &str = "crates/payhook-emulator/src/api/mod.rs";

/// The HTTP methods a route's method router may name (`get(…)`, `.post(…)`).
const METHODS: [&str; 7] = ["get", "post", "put", "delete", "patch", "head", "options"];

/// Each character of `text` outside string literals, with its byte offset
/// and the bracket depth before it (string literals are skipped whole).
fn outside_strings(text: &str) -> impl Iterator<Item = (usize, char, usize)> + '_ {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    text.char_indices().filter_map(move |(at, c)| {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            return None;
        }
        let before = depth;
        match c {
            '"' => in_string = true,
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        (c != '"').then_some((at, c, before))
    })
}

/// The text of a `(` … `)` group: `text` starts just after the `(`; returns
/// what comes before the matching `)`.
fn group(text: &str) -> &str {
    match outside_strings(text).find(|&(_, c, depth)| c == ')' && depth == 0) {
        Some((at, _, _)) => &text[..at],
        None => panic!(
            "{ROUTER}: no closing `)` after `{}`",
            text.chars().take(80).collect::<String>()
        ),
    }
}

/// `text` split at each `split_at` outside any bracket or string literal.
fn top_level(text: &str, split_at: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    for (at, c, depth) in outside_strings(text) {
        if c == split_at && depth == 0 {
            parts.push(&text[start..at]);
            start = at + c.len_utf8();
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The methods of a method router expression (`get(a).post(b)`): the names
/// called at its top level, each checked to be an HTTP method.
fn route_methods(expression: &str) -> Vec<String> {
    top_level(expression, '.')
        .into_iter()
        .map(|call| {
            let name = call.trim().split('(').next().unwrap_or("").trim();
            assert!(
                METHODS.contains(&name),
                "{ROUTER}: `{name}` in `{}` is not an HTTP method router this test reads ({METHODS:?})",
                expression.trim()
            );
            name.to_uppercase()
        })
        .collect()
}

/// `/v1/events/{id}` as the guide writes it: `/v1/events/:id`.
fn as_written(path: &str) -> String {
    path.split('/')
        .map(
            |segment| match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(name) => format!(":{name}"),
                None => segment.to_owned(),
            },
        )
        .collect::<Vec<_>>()
        .join("/")
}

/// `line` without its `//` comment (one outside a string literal).
fn without_comment(line: &str) -> &str {
    match outside_strings(line).find(|&(at, _, _)| line[at..].starts_with("//")) {
        Some((at, _, _)) => &line[..at],
        None => line,
    }
}

/// Every `METHOD /path` the router source serves: each
/// `.route(PATH, METHOD(…).METHOD(…))`, PATH a string literal or a
/// `format!` of one with a `{}` filled in with each of `helpers` (the test
/// helper routes of the event catalogue).
fn served_routes(source: &str, helpers: &[&str]) -> Vec<String> {
    let code: String = source
        .lines()
        .map(|line| format!("{}\n", without_comment(line)))
        .collect();
    for unread in [".nest(", ".merge(", ".route_service(", ".nest_service("] {
        assert!(
            !code.contains(unread),
            "{ROUTER}: routes added with `{unread}`, which this test does not read: teach it"
        );
    }
    let mut routes = Vec::new();
    for (at, _) in code.match_indices(".route(") {
        let args = group(&code[at + ".route(".len()..]);
        // rustfmt ends a call split over lines with a comma: an empty last part.
        let parts: Vec<&str> = top_level(args, ',')
            .into_iter()
            .filter(|part| !part.trim().is_empty())
            .collect();
        let [path, methods] = parts[..] else {
            panic!("{ROUTER}: a `.route(` without two arguments: `{args}`");
        };
        let literal = path
            .split('"')
            .nth(1)
            .unwrap_or_else(|| panic!("{ROUTER}: no string literal in the route path `{path}`"));
        let paths: Vec<String> = if path.contains("format!") {
            assert!(
                literal.contains("{}"),
                "{ROUTER}: a `format!` route path without `{{}}`: `{path}`"
            );
            helpers
                .iter()
                .map(|helper| {
                    literal
                        .replace("{}", helper)
                        .replace("{{", "{")
                        .replace("}}", "}")
                })
                .collect()
        } else {
            vec![literal.to_owned()]
        };
        for method in route_methods(methods) {
            for path in &paths {
                routes.push(format!("{method} {}", as_written(path)));
            }
        }
    }
    routes
}

/// Every `METHOD /path` of the table in the guide's "The HTTP API" section:
/// the code span opening each row.
fn documented_routes(page: &str) -> Vec<String> {
    let section = page
        .split("\n## The HTTP API")
        .nth(1)
        .unwrap_or_else(|| panic!("docs/guide/emulator.md: no `## The HTTP API` section"));
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(route, _)| route.to_owned())
        .filter(|route| {
            METHODS
                .iter()
                .any(|m| route.starts_with(&format!("{} /", m.to_uppercase())))
        })
        .collect()
}

/// The routes served but not in the table, and those in the table but not served.
fn route_differences(served: &[String], documented: &[String]) -> (Vec<String>, Vec<String>) {
    let missing = served
        .iter()
        .filter(|route| !documented.contains(route))
        .cloned()
        .collect();
    let stale = documented
        .iter()
        .filter(|route| !served.contains(route))
        .cloned()
        .collect();
    (missing, stale)
}

#[test]
fn the_emulator_page_lists_exactly_the_routes_the_router_serves() {
    let helpers: Vec<&str> = CATALOGUE
        .iter()
        .filter_map(|entry| entry.test_helper.as_ref().map(|helper| helper.path))
        .collect();
    let served = served_routes(&read(ROUTER), &helpers);
    let documented = documented_routes(&read("docs/guide/emulator.md"));
    for route in [
        "GET /v1/payment_intents",
        "POST /v1/webhook_endpoints/:id/roll_secret",
    ] {
        assert!(
            served.iter().any(|r| r == route),
            "{route} not read from {ROUTER}: {served:?}"
        );
    }
    assert!(
        served.len() >= 15,
        "too few routes read from {ROUTER}: {served:?}"
    );
    assert!(
        documented.len() >= 15,
        "too few rows read from the guide's table: {documented:?}"
    );
    let (missing, stale) = route_differences(&served, &documented);
    assert!(
        missing.is_empty(),
        "docs/guide/emulator.md's HTTP API table does not list these routes the router serves: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "docs/guide/emulator.md's HTTP API table lists routes the router does not serve: {stale:?}"
    );
}

#[test]
fn a_route_missing_from_the_table_is_found() {
    let source = r#"
        for entry in EventType::emulated() {
            // Not a route: .route("/v1/commented", get(nothing))
            router = router.route(
                &format!("/v1/test_helpers/payment_intents/{{id}}/{}", helper.path),
                post(move |s, k, p, h, b| object_post(s, k, p, h, b, helper.path, op(entry))),
            );
        }
        router
            .route("/v1/things", get(list_things).post(|s, k, h, b| collection_post(s, k, h, b, "/v1/things(", op))) // a comment, with .route("/v1/no", get(x))
            .route(
                "/v1/things/{id}",
                get(get_thing).delete(delete_thing),
            )
            .fallback(unknown_route)
    "#;
    let served = served_routes(source, &["succeed", "fail"]);
    assert_eq!(
        served,
        [
            "POST /v1/test_helpers/payment_intents/:id/succeed",
            "POST /v1/test_helpers/payment_intents/:id/fail",
            "GET /v1/things",
            "POST /v1/things",
            "GET /v1/things/:id",
            "DELETE /v1/things/:id",
        ]
    );
    let page = "# Emulator\n\n## The HTTP API\n\n| method and path | does |\n|---|---|\n\
                | `GET /v1/things` | lists them |\n\
                | `POST /v1/things` | creates one |\n\
                | `GET /v1/things/:id` | retrieves one |\n\
                | `POST /v1/things/:id/archive` | archives one |\n\
                | `POST /v1/test_helpers/payment_intents/:id/succeed` | pays |\n\
                | `POST /v1/test_helpers/payment_intents/:id/fail` | fails |\n\n\
                ## Next\n\n| `GET /v1/elsewhere` | not the API table |\n";
    let documented = documented_routes(page);
    assert_eq!(documented.len(), 6, "{documented:?}");
    let (missing, stale) = route_differences(&served, &documented);
    assert_eq!(missing, ["DELETE /v1/things/:id"]);
    assert_eq!(stale, ["POST /v1/things/:id/archive"]);
}
