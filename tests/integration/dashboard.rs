//! The inbox dashboard over loopback, on SQLite and PostgreSQL
//! (`PAYHOOK_TEST_DATABASE_URL`): access, the headers of every response,
//! escaping of hostile values, bad input, the actions and their
//! anti-forgery checks, keyset pagination, and the actix-web scope.

use crate::dashboard_app;

use std::collections::HashSet;

use dashboard_app::{assert_security_headers, App, Db, TOKEN};
use payhook::inbox::sqlx;
use payhook::sender::EventBuilder;
use payhook_test_support::on_every_backend;

/// Form fields or headers, as (name, value).
type Pairs<'a> = &'a [(&'a str, &'a str)];

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// GET with the token; (status, headers, body).
async fn get(app: &App, path: &str) -> (u16, reqwest::header::HeaderMap, String) {
    let response = client()
        .get(app.url(path))
        .basic_auth("oncall", Some(TOKEN))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

/// POST a form with the token, as the browser sends it from the dashboard.
async fn post(app: &App, path: &str, form: &[(&str, &str)], extra: &[(&str, &str)]) -> (u16, String) {
    let mut request = client()
        .post(app.url(path))
        .basic_auth("oncall", Some(TOKEN))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(
            form_urlencoded::Serializer::new(String::new())
                .extend_pairs(form)
                .finish(),
        );
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    assert_security_headers(response.headers(), path);
    (status, response.text().await.unwrap())
}

/// The anti-forgery token a page carries in its forms.
fn csrf_of(page: &str) -> String {
    let start = page
        .find("name=\"csrf\" value=\"")
        .expect("the page has a form token")
        + 19;
    page[start..start + 64].to_owned()
}

fn unescape(text: &str) -> String {
    text.replace("&amp;", "&")
}

async fn access_and_headers(db: Db) {
    let app = App::start(db, 3).await;
    // No credentials, wrong ones, a wrong scheme: 401 asking for Basic.
    for auth in [
        None,
        Some(("oncall", "wrong-token-wrong-token")),
        Some(("oncall", "")),
    ] {
        let mut request = client().get(app.url("/payhook/"));
        if let Some((user, password)) = auth {
            request = request.basic_auth(user, Some(password));
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), 401, "{auth:?}");
        assert_eq!(
            response.headers()["www-authenticate"].to_str().unwrap(),
            "Basic realm=\"payhook\", charset=\"UTF-8\""
        );
        assert_security_headers(response.headers(), "401");
        let body = response.text().await.unwrap();
        assert!(!body.contains(TOKEN));
    }
    let response = client()
        .get(app.url("/payhook/events"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    // Any user name with the token.
    for user in ["oncall", "", "someone-else"] {
        let response = client()
            .get(app.url("/payhook/"))
            .basic_auth(user, Some(TOKEN))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "user {user:?}");
    }
    // Every page and asset carries the headers, and the pages load their
    // script and stylesheet from the dashboard itself, never inline.
    app.deliver(&EventBuilder::payment_intent_succeeded().id("evt_headers"))
        .await;
    for path in [
        "/payhook",
        "/payhook/",
        "/payhook/events",
        "/payhook/event?id=evt_headers",
        "/payhook/assets/dashboard.js",
        "/payhook/assets/dashboard.css",
        "/payhook/nowhere",
        "/payhook/events?limit=0",
    ] {
        let (status, headers, body) = get(&app, path).await;
        assert!(matches!(status, 200 | 400 | 404), "{path}: {status}");
        assert_security_headers(&headers, path);
        if headers["content-type"].to_str().unwrap().starts_with("text/html") {
            assert!(
                body.contains("<script src=\"/payhook/assets/dashboard.js\" defer></script>"),
                "{path}"
            );
            assert_eq!(
                body.matches("<script").count(),
                1,
                "{path}: one script element, no inline one"
            );
            assert!(!body.contains(" style="), "{path}: no inline style");
            assert!(
                !body.contains(super_secret()),
                "{path}: the signing secret is never shown"
            );
            assert!(
                !body.contains("sqlite://") && !body.contains("postgres://"),
                "{path}: nor the URL"
            );
        }
    }
    let (_, headers, script) = get(&app, "/payhook/assets/dashboard.js").await;
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/javascript"));
    assert!(script.contains("location.reload"));
    // The assets are served without credentials (static files).
    let response = client()
        .get(app.url("/payhook/assets/dashboard.css"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    // The overview says what it shows.
    let (_, _, overview) = get(&app, "/payhook/").await;
    assert!(overview.contains("data-refresh=\"10\""));
    assert!(overview.contains(if db == Db::Sqlite { "SQLite" } else { "PostgreSQL" }));
    assert!(overview.contains("oldest pending event"));
    assert!(overview.contains("<svg class=\"chart\""));
    // One delivery acknowledged and handled in the last hour.
    for _ in 0..250 {
        let (_, _, overview) = get(&app, "/payhook/").await;
        if overview.contains("acknowledged 1</span>") && overview.contains("handled 1</span>") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (_, _, overview) = get(&app, "/payhook/").await;
    assert!(
        overview.contains("acknowledged 1</span>") && overview.contains("handled 1</span>"),
        "{overview}"
    );
    app.stop().await;
}

fn super_secret() -> &'static str {
    dashboard_app::SECRET
}

async fn hostile_values_render_as_text(db: Db) {
    let app = App::start(db, 1).await;
    let hostile = "<img src=x onerror=alert(1)>";
    let id = "evt_<script>alert(2)</script>";
    app.broken.lock().unwrap().insert(id.to_owned());
    app.deliver(
        &EventBuilder::other(hostile)
            .id(id)
            .data(r#"{"object":{"note":"</pre><img src=y onerror=alert(3)>"}}"#),
    )
    .await;
    app.wait_for_state(id, "dead").await;
    let (status, _, page) = get(&app, "/payhook/events").await;
    assert_eq!(status, 200);
    assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;"), "{page}");
    assert!(page.contains("evt_&lt;script&gt;alert(2)&lt;/script&gt;"));
    assert!(!page.contains("<img") && !page.contains("<script>"));
    // The handler's error text is escaped too.
    assert!(page.contains("the ledger refused &lt;b&gt;it&lt;/b&gt;"));
    let link = format!(
        "/payhook/event?id={}",
        form_urlencoded::byte_serialize(id.as_bytes()).collect::<String>()
    );
    let (status, _, page) = get(&app, &link).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(page.contains("&lt;/pre&gt;&lt;img src=y onerror=alert(3)&gt;"));
    assert!(!page.contains("<img") && !page.contains("<script>"));
    // The attempt is listed with its outcome and error.
    assert!(page.contains("<table id=\"attempts\">"), "{page}");
    assert!(page.contains("<span class=\"state dead\">dead</span>"));
    app.stop().await;
}

/// The event page's table of the other events of the same payment intent
/// shows their types through the one escaping rule: markup and quotes become
/// character references, a bidi override is written as `\u{202e}`.
async fn same_intent_table_escapes_event_types(db: Db) {
    let app = App::start(db, 3).await;
    app.deliver(
        &EventBuilder::payment_intent_succeeded()
            .id("evt_intent_first")
            .payment_intent_id("pi_hostile_sibling"),
    )
    .await;
    app.wait_for_state("evt_intent_first", "done").await;
    let hostile_type = "payment_intent.<script>alert(\"t\")</script>'\u{202e}";
    sqlx::query(
        "INSERT INTO payhook_inbox (namespace, event_id, event_type, intent_id, created, body, \
         received_at, state, attempts, due_at) VALUES ($1, $2, $3, $4, $5, $6, $7, 'done', 1, $7)",
    )
    .bind(app.inbox.namespace())
    .bind("evt_intent_second")
    .bind(hostile_type)
    .bind("pi_hostile_sibling")
    .bind(1_700_000_000i64)
    .bind("{}")
    .bind(1_700_000_000_000i64)
    .execute(app.inbox.pool())
    .await
    .unwrap();
    let (status, _, page) = get(&app, "/payhook/event?id=evt_intent_first").await;
    assert_eq!(status, 200, "{page}");
    let table = &page[page
        .find("<table id=\"intent-events\">")
        .unwrap_or_else(|| panic!("the page lists the intent's events: {page}"))..];
    let table = &table[..table.find("</table>").unwrap()];
    assert!(table.contains("evt_intent_second"), "{table}");
    assert!(
        table.contains("payment_intent.&lt;script&gt;alert(&quot;t&quot;)&lt;/script&gt;&#39;\\u{202e}"),
        "{table}"
    );
    assert!(!table.contains("<script>"), "{table}");
    assert!(!table.contains("alert(\"t\")"), "{table}");
    assert!(!table.contains('\u{202e}'), "{table}");
    assert!(!page.contains("<script>"));
    app.stop().await;
}

/// One rule for every value from a request: an id with a bidi override and a
/// line separator is escaped in the page's `<title>`, its heading and its body
/// view alike. A signed 1 MB event nested 500 000 levels deep renders a page
/// of a few hundred KiB that says the rest of the body is not shown.
async fn request_values_follow_one_rule_and_bodies_are_bounded(db: Db) {
    let app = App::start(db, 1).await;
    let id = "evt_\u{202e}gnp.exe\u{2028}x";
    let depth = 500_000;
    let body = format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","created":1,"data":{{"object":{{"id":"pi_deep","amount":5,"currency":"usd","status":"succeeded"}}}},"nested":{}{}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    );
    assert!(body.len() > 1_000_000 && body.len() <= 1024 * 1024);
    app.deliver_body(body, "the deep event").await;
    app.wait_for_state(id, "done").await;
    let link = format!(
        "/payhook/event?id={}",
        form_urlencoded::byte_serialize(id.as_bytes()).collect::<String>()
    );
    let (status, _, page) = get(&app, &link).await;
    assert_eq!(status, 200);
    assert!(page.len() < 400 * 1024, "a page of {} bytes", page.len());
    assert!(
        page.contains("<title>evt_\\u{202e}gnp.exe\\u{2028}x · payhook inbox</title>"),
        "{}",
        &page[..page.len().min(2000)]
    );
    assert!(page.contains("<h1 id=\"event-id\">evt_\\u{202e}gnp.exe\\u{2028}x</h1>"));
    // In the body view, the JSON escape of the same characters.
    assert!(page.contains("&quot;id&quot;: &quot;evt_\\u202egnp.exe\\u2028x&quot;"));
    assert!(!page.contains('\u{202e}') && !page.contains('\u{2028}'));
    assert!(page.contains("<p class=\"muted\" id=\"body-cut\">The body goes on for "));
    app.stop().await;
}

/// The dashboard reads through connections of its own: with every
/// connection of the inbox's pool taken (a burst of deliveries), its pages are
/// still read, at once.
async fn pages_read_on_their_own_connections(db: Db) {
    let app = App::start(db, 1).await;
    app.deliver(&EventBuilder::payment_intent_succeeded().id("evt_own_pool"))
        .await;
    app.wait_for_state("evt_own_pool", "done").await;
    let pool = app.inbox.pool();
    let mut taken = Vec::new();
    for _ in 0..pool.options().get_max_connections() {
        taken.push(pool.acquire().await.unwrap());
    }
    let started = std::time::Instant::now();
    for path in [
        "/payhook/",
        "/payhook/events?type=payment_intent.succeeded",
        "/payhook/event?id=evt_own_pool",
    ] {
        let (status, _, page) = get(&app, path).await;
        assert_eq!(status, 200, "{path}: {page}");
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    drop(taken);
    app.stop().await;
}

/// The overview counts every delivery it acknowledged, first deliveries and
/// duplicates apart: three deliveries of one event are "acknowledged 3, first
/// deliveries 1, duplicates 2", never "1 acknowledged" alone.
async fn overview_counts_duplicates_apart(db: Db) {
    let app = App::start(db, 1).await;
    let event = EventBuilder::payment_intent_succeeded().id("evt_thrice");
    for _ in 0..3 {
        app.deliver(&event).await;
    }
    app.wait_for_state("evt_thrice", "done").await;
    for _ in 0..500 {
        let (status, _, page) = get(&app, "/payhook/").await;
        assert_eq!(status, 200);
        if page.contains("<span id=\"duplicates\"><i class=\"duplicate\"></i>duplicates 2</span>") {
            assert!(
                page.contains("<span id=\"acknowledged\">acknowledged 3</span>"),
                "{page}"
            );
            assert!(page.contains("first deliveries 1</span>"), "{page}");
            app.stop().await;
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the overview never counted the two duplicates");
}

async fn bad_input_gets_clear_pages(db: Db) {
    let app = App::start(db, 3).await;
    let huge = format!("/payhook/events?type={}", "x".repeat(5000));
    for (path, status, says) in [
        (
            "/payhook/event?id=evt_nobody",
            404,
            "There is no event with the id",
        ),
        ("/payhook/event", 400, "Which event?"),
        ("/payhook/event?id=", 400, "Which event?"),
        (
            "/payhook/events?state=sleeping",
            400,
            "is not one of pending, running, dead, done.",
        ),
        (
            "/payhook/events?limit=100000",
            400,
            "page size must be a whole number from 1 to 500",
        ),
        ("/payhook/events?limit=-1", 400, "page size"),
        ("/payhook/events?older=yesterday", 400, "is not an age"),
        ("/payhook/events?after=12", 400, "page cursor"),
        ("/payhook/events?after=99999999999999999999.1", 400, "page cursor"),
        ("/payhook/events?state=dead&state=done", 400, "given twice"),
        (huge.as_str(), 400, "query string is too long"),
        ("/payhook/admin/secrets", 404, "no such page"),
        ("/payhook/retry", 405, "does not take that method"),
    ] {
        let (got, headers, body) = get(&app, path).await;
        assert_eq!(got, status, "{path}: {body}");
        assert!(body.contains(says), "{path}: {body}");
        assert_security_headers(&headers, path);
        assert!(!body.contains("panicked"));
    }
    // A long hostile id in a 404 is shown cut and escaped.
    let (status, _, body) = get(&app, &format!("/payhook/event?id=%3Cb%3E{}", "y".repeat(200))).await;
    assert_eq!(status, 404);
    assert!(!body.contains("<b>"));
    // POST to a page, a too-large form.
    let (status, _) = post(&app, "/payhook/events", &[], &[]).await;
    assert_eq!(status, 405);
    let big = "z".repeat(20_000);
    let (status, _) = post(&app, "/payhook/retry", &[("id", &big)], &[]).await;
    assert_eq!(status, 413);
    app.stop().await;
}

async fn actions_are_confirmed_and_refuse_forgeries(db: Db) {
    let app = App::start(db, 1).await;
    let id = "evt_dead_then_retried";
    app.broken.lock().unwrap().insert(id.to_owned());
    app.deliver(&EventBuilder::payment_intent_succeeded().id(id))
        .await;
    app.wait_for_state(id, "dead").await;
    let (_, _, page) = get(&app, &format!("/payhook/event?id={id}")).await;
    assert!(page.contains("id=\"retry\""), "a dead event has a retry button");
    let csrf = csrf_of(&page);
    let same_origin = [("sec-fetch-site", "same-origin")];
    // Forgeries: no token, a wrong one, another site, another origin.
    let forged: [(Pairs, Pairs); 5] = [
        (&[("id", id), ("confirm", "yes")], &same_origin),
        (
            &[("id", id), ("confirm", "yes"), ("csrf", &"0".repeat(64))],
            &same_origin,
        ),
        (
            &[("id", id), ("confirm", "yes"), ("csrf", &csrf)],
            &[("sec-fetch-site", "cross-site")],
        ),
        (
            &[("id", id), ("confirm", "yes"), ("csrf", &csrf)],
            &[("sec-fetch-site", "same-site")],
        ),
        (
            &[("id", id), ("confirm", "yes"), ("csrf", &csrf)],
            &[("origin", "http://attacker.example")],
        ),
    ];
    for (form, headers) in forged {
        let (status, body) = post(&app, "/payhook/retry", form, headers).await;
        assert_eq!(status, 403, "{form:?} {headers:?}: {body}");
    }
    app.wait_for_state(id, "dead").await;
    // Without `confirm`, a confirmation page; nothing changes yet.
    let origin = app.url("");
    let ours = [("sec-fetch-site", "same-origin"), ("origin", origin.as_str())];
    let (status, body) = post(&app, "/payhook/retry", &[("id", id), ("csrf", &csrf)], &ours).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("id=\"confirm\""));
    assert!(body.contains("name=\"confirm\" value=\"yes\""));
    app.wait_for_state(id, "dead").await;
    // Confirmed: the event is due now, and it is done once it works.
    app.broken.lock().unwrap().clear();
    let (status, body) = post(
        &app,
        "/payhook/retry",
        &[("id", id), ("csrf", &csrf), ("confirm", "yes")],
        &ours,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("is due now"), "{body}");
    app.wait_for_state(id, "done").await;
    // Retrying an event that is not dead is a 404 page, said plainly.
    let (status, body) = post(
        &app,
        "/payhook/retry",
        &[("id", id), ("csrf", &csrf), ("confirm", "yes")],
        &ours,
    )
    .await;
    assert_eq!(status, 404, "{body}");

    // Retry every dead event.
    let ids = ["evt_bulk_1", "evt_bulk_2"];
    app.broken
        .lock()
        .unwrap()
        .extend(ids.iter().map(|id| (*id).to_owned()));
    for id in ids {
        app.deliver(&EventBuilder::payment_intent_succeeded().id(id))
            .await;
    }
    for id in ids {
        app.wait_for_state(id, "dead").await;
    }
    let (_, _, overview) = get(&app, "/payhook/").await;
    assert!(
        overview.contains("id=\"count-dead\"><span class=\"n\">2</span>"),
        "{overview}"
    );
    let csrf = csrf_of(&overview);
    let (status, body) = post(&app, "/payhook/retry-dead", &[("csrf", &csrf)], &ours).await;
    assert_eq!(status, 200);
    assert!(body.contains("Retry every dead event (2 now)?"), "{body}");
    app.broken.lock().unwrap().clear();
    let (_, body) = post(
        &app,
        "/payhook/retry-dead",
        &[("csrf", &csrf), ("confirm", "yes")],
        &ours,
    )
    .await;
    assert!(body.contains("2 dead events made due now."), "{body}");
    for id in ids {
        app.wait_for_state(id, "done").await;
    }
    // Replay done events since a time: malformed and future times are 400.
    for since in ["last tuesday", "2999-01-01"] {
        let (status, _) = post(
            &app,
            "/payhook/replay",
            &[("csrf", &csrf), ("since", since)],
            &ours,
        )
        .await;
        assert_eq!(status, 400, "{since}");
    }
    let before = app.handled.load(std::sync::atomic::Ordering::SeqCst);
    let (status, body) = post(
        &app,
        "/payhook/replay",
        &[("csrf", &csrf), ("since", "1h"), ("confirm", "yes")],
        &ours,
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.contains("3 done events received since"), "{body}");
    for _ in 0..500 {
        if app.handled.load(std::sync::atomic::Ordering::SeqCst) == before + 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(app.handled.load(std::sync::atomic::Ordering::SeqCst), before + 3);
    app.stop().await;
}

/// A running event shows its lease; the overview counts it and the oldest
/// pending event; the event page links the other events of its intent.
async fn running_event_shows_its_lease(db: Db) {
    let app = App::start(db, 3).await;
    app.held.lock().unwrap().insert("evt_held".to_owned());
    app.deliver(
        &EventBuilder::payment_intent_succeeded()
            .id("evt_held")
            .payment_intent_id("pi_held"),
    )
    .await;
    app.wait_for_state("evt_held", "running").await;
    // A later event of the same intent waits for it: pending.
    app.deliver(
        &EventBuilder::payment_intent_succeeded()
            .id("evt_after")
            .payment_intent_id("pi_held"),
    )
    .await;
    let (_, _, page) = get(&app, "/payhook/event?id=evt_held").await;
    assert!(page.contains("<th>Lease</th><td>held until "), "{page}");
    assert!(
        page.contains("href=\"/payhook/event?id=evt_after\">evt_after</a>"),
        "{page}"
    );
    assert!(
        !page.contains("id=\"retry\""),
        "a running event has no retry button"
    );
    let (_, _, overview) = get(&app, "/payhook/").await;
    assert!(
        overview.contains("id=\"count-running\"><span class=\"n\">1</span>"),
        "{overview}"
    );
    assert!(
        overview.contains("id=\"count-pending\"><span class=\"n\">1</span>"),
        "{overview}"
    );
    let oldest = &overview[overview.find("id=\"oldest-pending\"").unwrap()..];
    assert!(
        oldest.starts_with("id=\"oldest-pending\"><span class=\"n\">0s</span>")
            || oldest.starts_with("id=\"oldest-pending\"><span class=\"n\">1s</span>"),
        "{oldest}"
    );
    let (_, _, pending) = get(&app, "/payhook/event?id=evt_after").await;
    assert!(pending.contains("<th>Due</th><td>now</td>"), "{pending}");
    app.held.lock().unwrap().clear();
    app.wait_for_state("evt_after", "done").await;
    let (_, _, page) = get(&app, "/payhook/event?id=evt_held").await;
    assert!(!page.contains("<th>Lease</th>"));
    app.stop().await;
}

/// Walks the events pages `per_page` at a time from `first`, returning the
/// ids in order.
async fn walk(app: &App, first: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut next = Some(first.to_owned());
    let mut pages = 0;
    while let Some(path) = next.take() {
        pages += 1;
        assert!(pages < 100, "the pages never end");
        let (status, _, page) = get(app, &path).await;
        assert_eq!(status, 200, "{path}: {page}");
        for row in page
            .split("<td class=\"id\"><a href=\"/payhook/event?id=")
            .skip(1)
        {
            ids.push(row[..row.find('"').unwrap()].to_owned());
        }
        if let Some(at) = page.find("id=\"next-page\" href=\"") {
            let rest = &page[at + 21..];
            next = Some(unescape(&rest[..rest.find('"').unwrap()]));
        }
    }
    ids
}

async fn keyset_pages_have_no_duplicates_or_gaps(db: Db) {
    let app = App::start(db, 3).await;
    // 3 timestamps × 41 events: most pages start and end inside a run of
    // events received in the same millisecond.
    let namespace = app.inbox.namespace().to_owned();
    let mut expected = Vec::new();
    for (t, received_at) in [1_700_000_300_000i64, 1_700_000_200_000, 1_700_000_100_000]
        .iter()
        .enumerate()
    {
        for i in 0..41 {
            let id = format!("evt_page_{t}_{i:02}");
            let state = if i % 3 == 0 { "dead" } else { "done" };
            sqlx::query(
                "INSERT INTO payhook_inbox (namespace, event_id, event_type, intent_id, created, body, \
                 received_at, state, attempts, due_at) VALUES ($1, $2, $3, NULL, $4, $5, $6, $7, 1, $6)",
            )
            .bind(namespace.as_str())
            .bind(&id)
            .bind("payment_intent.succeeded")
            .bind(received_at / 1000)
            .bind("{}")
            .bind(*received_at)
            .bind(state)
            .execute(app.inbox.pool())
            .await
            .unwrap();
            expected.push((id, state));
        }
    }
    // Newest first; within a millisecond, the later arrival first.
    let mut newest_first: Vec<String> = Vec::new();
    for chunk in expected.chunks(41) {
        newest_first.extend(chunk.iter().rev().map(|(id, _)| id.clone()));
    }
    let ids = walk(&app, "/payhook/events?limit=7").await;
    assert_eq!(ids.len(), 123);
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 123, "no duplicates");
    assert_eq!(ids, newest_first);
    // Filtered by state, the cursor keeps the filter.
    let dead = walk(&app, "/payhook/events?state=dead&limit=4").await;
    let expected_dead: Vec<String> = newest_first
        .iter()
        .filter(|id| expected.iter().any(|(e, state)| e == *id && *state == "dead"))
        .cloned()
        .collect();
    assert_eq!(dead, expected_dead);
    // Older than an age: all of these are years old; newer than an hour: none.
    assert_eq!(walk(&app, "/payhook/events?older=1d&limit=500").await.len(), 123);
    assert_eq!(walk(&app, "/payhook/events?newer=1h").await.len(), 0);
    // By type and by id.
    assert_eq!(
        walk(&app, "/payhook/events?type=payment_intent.succeeded&limit=500")
            .await
            .len(),
        123
    );
    assert_eq!(walk(&app, "/payhook/events?type=charge.refunded").await.len(), 0);
    assert_eq!(
        walk(&app, "/payhook/events?id=evt_page_1_05").await,
        ["evt_page_1_05"]
    );
    app.stop().await;
}

/// `/payhook/events/ID` through the axum router: `303` to the event's page,
/// the id percent-encoded in the `Location`, and that page is the event's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_event_path_redirects_to_the_event_page() {
    let app = App::start(Db::Sqlite, 3).await;
    app.deliver(&EventBuilder::other("order.shipped").id("evt_1"))
        .await;
    app.wait_for_state("evt_1", "done").await;
    let (status, headers, _) = get(&app, "/payhook/events/evt_1").await;
    assert_eq!(status, 303);
    assert_eq!(headers["location"], "/payhook/event?id=evt_1");
    assert_security_headers(&headers, "redirect");
    let (status, _, page) = get(&app, "/payhook/event?id=evt_1").await;
    assert_eq!(status, 200);
    assert!(page.contains("<h1 id=\"event-id\">evt_1</h1>"), "{page}");
    // An id with a space, slashes, dots and a question mark stays one query value.
    let (status, headers, _) = get(&app, "/payhook/events/evt%201%2F..%2Fx%3Fy").await;
    assert_eq!(status, 303);
    assert_eq!(headers["location"], "/payhook/event?id=evt+1%2F..%2Fx%3Fy");
    app.stop().await;
}

/// The actix-web scope: the same dashboard under a path of the app's
/// choosing, its links following that path.
#[actix_web::test]
async fn actix_scope_serves_the_dashboard_under_its_path() {
    let dir = std::env::temp_dir().join(format!("payhook-dashboard-actix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let receiver = payhook::Receiver::builder()
        .secret(dashboard_app::SECRET)
        .build()
        .unwrap();
    let inbox =
        payhook::inbox::Inbox::connect(receiver, &format!("sqlite://{}", dir.join("inbox.db").display()))
            .await
            .unwrap();
    let dashboard = payhook::dashboard::Dashboard::for_inbox(&inbox, TOKEN).unwrap();
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new()
            .route("/webhooks", payhook::actix::inbox_route(inbox.clone()))
            .service(payhook::actix::dashboard_scope("/ops/inbox", dashboard.clone()))
    })
    .workers(1)
    .bind(("127.0.0.1", 0))
    .unwrap();
    let addr = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    let url = |path: &str| format!("http://{addr}{path}");
    let response = client().get(url("/ops/inbox/")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 401);
    assert_security_headers(response.headers(), "actix 401");
    assert!(response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Basic realm=\"payhook\""));
    for path in ["/ops/inbox", "/ops/inbox/", "/ops/inbox/events"] {
        let response = client()
            .get(url(path))
            .basic_auth("x", Some(TOKEN))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
        assert_security_headers(response.headers(), path);
        let body = response.text().await.unwrap();
        assert!(
            body.contains("href=\"/ops/inbox/events\""),
            "{path}: links follow the mount path"
        );
    }
    let response = client()
        .get(url("/ops/inbox/event?id=missing"))
        .basic_auth("x", Some(TOKEN))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);
    // `/events/ID` redirects to the event's page under the scope's path.
    for (path, location) in [
        ("/ops/inbox/events/evt_1", "/ops/inbox/event?id=evt_1"),
        (
            "/ops/inbox/events/evt%201%2F..%2Fx%3Fy",
            "/ops/inbox/event?id=evt+1%2F..%2Fx%3Fy",
        ),
    ] {
        let response = client()
            .get(url(path))
            .basic_auth("x", Some(TOKEN))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 303, "{path}");
        assert_eq!(response.headers()["location"], location, "{path}");
        assert_security_headers(response.headers(), path);
    }
    let response = client()
        .post(url("/ops/inbox/retry-dead"))
        .basic_auth("x", Some(TOKEN))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("confirm=yes")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403, "no form token");
    handle.stop(true).await;
}

// Each test on both backends: `sqlite::<test>` and `postgres::<test>`.
on_every_backend!(
    sqlite: Db::Sqlite, postgres: Db::Postgres, worker_threads: 2;
    running_event_shows_its_lease,
    access_and_headers,
    hostile_values_render_as_text,
    same_intent_table_escapes_event_types,
    request_values_follow_one_rule_and_bodies_are_bounded,
    pages_read_on_their_own_connections,
    overview_counts_duplicates_apart,
    bad_input_gets_clear_pages,
    actions_are_confirmed_and_refuse_forgeries,
    keyset_pages_have_no_duplicates_or_gaps,
);
