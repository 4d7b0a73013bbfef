//! The framework-neutral core alone, without a server: requests in, responses
//! out, on a real SQLite inbox.

use std::time::Duration;

use base64::Engine as _;
use http::{HeaderMap, HeaderValue, Method};
use payhook_dashboard::{Dashboard, DashboardError, DashboardRequest, MAX_QUERY_BYTES};
use payhook_inbox::admin::Admin;
use payhook_inbox::Inbox;

const TOKEN: &str = "core-test-token-0123456789";

async fn inbox(name: &str) -> Inbox {
    let dir = std::env::temp_dir().join(format!("payhook-dashboard-core-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let receiver = payhook_core::Receiver::builder()
        .secret("whsec_core")
        .build()
        .unwrap();
    Inbox::connect(receiver, &format!("sqlite://{}", dir.join("inbox.db").display()))
        .await
        .unwrap()
}

fn signed_in() -> HeaderMap {
    let mut headers = HeaderMap::new();
    let credentials = base64::engine::general_purpose::STANDARD.encode(format!("anyone:{TOKEN}"));
    headers.insert(
        "authorization",
        HeaderValue::from_str(&format!("Basic {credentials}")).unwrap(),
    );
    headers
}

async fn get<DB: payhook_inbox::Backend>(
    dashboard: &Dashboard<DB>,
    base: &str,
    path: &str,
    query: Option<&str>,
) -> http::Response<String> {
    dashboard
        .handle(DashboardRequest {
            method: &Method::GET,
            base,
            path,
            query,
            headers: &signed_in(),
            body: &[],
        })
        .await
}

#[tokio::test]
async fn a_short_token_is_refused_and_the_token_never_shows() {
    let inbox = inbox("token").await;
    assert_eq!(
        Dashboard::for_inbox(&inbox, "short").unwrap_err(),
        DashboardError::WeakToken
    );
    assert!(DashboardError::WeakToken
        .to_string()
        .contains("at least 16 bytes"));
    let dashboard = Dashboard::new(Admin::of_inbox(&inbox), TOKEN).unwrap();
    let debug = format!("{dashboard:?}");
    assert!(!debug.contains(TOKEN), "{debug}");
    assert!(debug.contains("SQLite"));
}

#[tokio::test]
async fn links_follow_the_mount_path_and_the_refresh_setting() {
    let inbox = inbox("mount").await;
    let dashboard = Dashboard::for_inbox(&inbox, TOKEN).unwrap();
    // Mounted at the root: links start at `/`.
    let page = get(&dashboard, "", "/", None).await;
    assert_eq!(page.status(), 200);
    assert!(page.body().contains("href=\"/events\""));
    assert!(page.body().contains("src=\"/assets/dashboard.js\""));
    assert!(page.body().contains("data-refresh=\"10\""));
    // A trailing slash on the base is dropped.
    let page = get(&dashboard, "/ops/", "/", None).await;
    assert!(page.body().contains("href=\"/ops/events\""));
    // Without refresh, or every 30 s.
    let quiet = Dashboard::for_inbox(&inbox, TOKEN).unwrap().refresh_every(None);
    assert!(!get(&quiet, "", "/", None).await.body().contains("data-refresh"));
    let slow = Dashboard::for_inbox(&inbox, TOKEN)
        .unwrap()
        .refresh_every(Some(Duration::from_secs(30)));
    assert!(get(&slow, "", "/", None)
        .await
        .body()
        .contains("data-refresh=\"30\""));
}

#[tokio::test]
async fn methods_sizes_and_unknown_paths() {
    let inbox = inbox("methods").await;
    let dashboard = Dashboard::for_inbox(&inbox, TOKEN).unwrap();
    let headers = signed_in();
    let request = |method: &'static Method, path: &'static str| DashboardRequest {
        method,
        base: "/payhook",
        path,
        query: None,
        headers: &headers,
        body: &[],
    };
    assert_eq!(
        dashboard.handle(request(&Method::HEAD, "/events")).await.status(),
        200
    );
    let put = dashboard.handle(request(&Method::PUT, "/events")).await;
    assert_eq!(put.status(), 405);
    assert_eq!(put.headers()["allow"], "GET, HEAD");
    let get_action = dashboard.handle(request(&Method::GET, "/replay")).await;
    assert_eq!(get_action.status(), 405);
    assert_eq!(get_action.headers()["allow"], "POST");
    assert_eq!(
        dashboard.handle(request(&Method::GET, "/events/")).await.status(),
        404
    );
    let long = "a".repeat(MAX_QUERY_BYTES + 1);
    assert_eq!(
        get(&dashboard, "/payhook", "/events", Some(&long)).await.status(),
        400
    );
    let too_large = dashboard.too_large();
    assert_eq!(too_large.status(), 413);
    assert_eq!(too_large.headers()["x-frame-options"], "DENY");
    // An invalid UTF-8 query or a cursor past the end is no panic.
    assert_eq!(
        get(&dashboard, "/payhook", "/events", Some("type=%FF%FE"))
            .await
            .status(),
        200
    );
    let end = get(&dashboard, "/payhook", "/events", Some("after=0.0")).await;
    assert_eq!(end.status(), 200);
    assert!(end.body().contains("No events match."));
}

/// A page that cannot get at the database within `PAGE_DEADLINE` (here its
/// pool's only connection is held elsewhere) is answered `503` with
/// `Retry-After` then, not when the database comes back; the next page, once
/// the connection is free, is read as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_past_its_deadline_is_answered_503() {
    use payhook_inbox::sqlx::sqlite::SqlitePoolOptions;
    let inbox = inbox("deadline").await;
    let file = inbox.pool().connect_options().database_url.clone();
    let path = file.path().to_owned();
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(60))
        .connect(&format!("sqlite://{path}"))
        .await
        .unwrap();
    let admin = Admin::from_pool(pool.clone(), inbox.namespace()).await.unwrap();
    let dashboard = Dashboard::new(admin, TOKEN).unwrap();
    let held = pool.acquire().await.unwrap();
    let started = std::time::Instant::now();
    let response = get(&dashboard, "", "/events", None).await;
    let waited = started.elapsed();
    assert_eq!(response.status(), 503, "{}", response.body());
    assert_eq!(response.headers()["retry-after"], "2");
    assert!(response.body().contains("busy"), "{}", response.body());
    assert!(
        waited >= payhook_dashboard::PAGE_DEADLINE
            && waited < payhook_dashboard::PAGE_DEADLINE + Duration::from_secs(2),
        "{waited:?}"
    );
    drop(held);
    assert_eq!(get(&dashboard, "", "/events", None).await.status(), 200);
}

/// A dashboard given an [`Admin`] on a namespace the database has never seen
/// (no event, no paused type) shows its pages but refuses every action with
/// `400`, naming the namespaces the database has; on the inbox's own
/// namespace it asks for the confirmation as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_on_a_namespace_the_database_never_saw_is_refused() {
    let inbox = inbox("namespace").await;
    // The inbox's namespace has a paused type (and no event yet).
    Admin::of_inbox(&inbox)
        .pause("payment_intent.created")
        .await
        .unwrap();
    let url = format!("sqlite://{}", inbox.pool().connect_options().database_url.path());
    let wrong = Admin::connect(&url, "kyc").await.unwrap();
    assert!(!wrong.namespace_seen().await.unwrap());
    assert_eq!(wrong.namespaces(20).await.unwrap(), ["payhook"]);
    let right = Dashboard::new(Admin::connect(&url, "payhook").await.unwrap(), TOKEN).unwrap();
    let wrong = Dashboard::new(wrong, TOKEN).unwrap();
    let page = get(&wrong, "", "/paused", None).await;
    assert_eq!(page.status(), 200, "pages are read as usual");
    let body = page.body();
    let start = body.find("name=\"csrf\" value=\"").unwrap() + 19;
    let form = format!("type=payment_intent.succeeded&csrf={}", &body[start..start + 64]);
    let mut headers = signed_in();
    headers.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
    for (dashboard, path) in [(&wrong, "/pause"), (&wrong, "/bulk"), (&right, "/pause")] {
        let form = if path == "/bulk" {
            format!("action=retry&{form}")
        } else {
            form.clone()
        };
        let response = dashboard
            .handle(DashboardRequest {
                method: &Method::POST,
                base: "",
                path,
                query: None,
                headers: &headers,
                body: form.as_bytes(),
            })
            .await;
        if std::ptr::eq(dashboard, &right) {
            assert_eq!(response.status(), 200, "{}", response.body());
            assert!(response.body().contains("Pause the event type"));
            continue;
        }
        assert_eq!(response.status(), 400, "{path}: {}", response.body());
        assert!(
            response.body().contains(
                "the database has no event and no paused type in this dashboard&#39;s namespace &quot;kyc&quot;"
            ) && response.body().contains("It has: &quot;payhook&quot;."),
            "{}",
            response.body()
        );
    }
    assert_eq!(Admin::of_inbox(&inbox).paused().await.unwrap().len(), 1);
}

/// The event page's attempt history says whether a delivery brought the
/// event or the reconciler did, where the attempts are listed.
#[tokio::test]
async fn the_attempt_history_names_the_events_source() {
    use payhook_core::sender::unix_now;
    use payhook_core::{sign, Secret};

    let inbox = inbox("history-source").await;
    for id in ["evt_hist_delivered", "evt_hist_reconciled"] {
        let body = format!(
            r#"{{"id":"{id}","type":"payment_intent.succeeded","created":1,"data":{{"object":{{"id":"pi_{id}","amount":5,"currency":"usd","status":"succeeded"}}}}}}"#
        );
        let mut headers = HeaderMap::new();
        let signature = sign(body.as_bytes(), &Secret::new("whsec_core").unwrap(), unix_now());
        headers.insert("x-service-signature", signature.parse().unwrap());
        assert_eq!(inbox.ingest(&headers, body.into()).await.status().as_u16(), 200);
    }
    let workers = inbox.start(|_job: payhook_inbox::Job| async { Ok::<(), payhook_inbox::HandlerError>(()) });
    inbox.wait_idle(Duration::from_secs(20)).await.unwrap();
    workers.shutdown().await;
    // As the reconciler stores it: the `source` column set.
    payhook_inbox::sqlx::query(
        "UPDATE payhook_inbox SET source = 'reconciled' WHERE event_id = 'evt_hist_reconciled'",
    )
    .execute(inbox.pool())
    .await
    .unwrap();
    let dashboard = Dashboard::for_inbox(&inbox, TOKEN).unwrap();
    let history = |page: &str| {
        let start = page.find("<h2>Attempts</h2>").unwrap_or_else(|| panic!("{page}"));
        let end = page[start..].find("</table>").unwrap_or_else(|| panic!("{page}"));
        page[start..start + end].to_owned()
    };
    let page = get(&dashboard, "", "/event", Some("id=evt_hist_reconciled")).await;
    assert_eq!(page.status(), 200);
    let shown = history(page.body());
    assert!(
        shown.contains("<p class=\"notice\" id=\"attempts-source\">Reconciled: no delivery arrived."),
        "{shown}"
    );
    assert!(shown.contains("<table id=\"attempts\">"), "{shown}");
    let page = get(&dashboard, "", "/event", Some("id=evt_hist_delivered")).await;
    let shown = history(page.body());
    assert!(
        shown.contains("id=\"attempts-source\">Delivered: a signed delivery stored this event.</p>"),
        "{shown}"
    );
    assert!(!shown.contains("Reconciled"), "{shown}");
}

/// `/events/ID` redirects (`303`) to the event's page under the same mount,
/// the id decoded from its path segment and percent-encoded again in the
/// `Location`: no character of it ends the query or leaves the mount, and a
/// body that shows it follows the one rule.
#[tokio::test]
async fn an_event_path_redirects_to_the_event_page() {
    let inbox = inbox("redirect").await;
    let dashboard = Dashboard::for_inbox(&inbox, TOKEN).unwrap();
    for (base, segment, location) in [
        ("/payhook", "evt_1", "/payhook/event?id=evt_1"),
        ("", "evt_1", "/event?id=evt_1"),
        (
            "/payhook",
            "evt%201%2F..%2Fx%3Fy",
            "/payhook/event?id=evt+1%2F..%2Fx%3Fy",
        ),
        (
            "/payhook",
            "a%0D%0ALocation:%20x%23%26id=b",
            "/payhook/event?id=a%0D%0ALocation%3A+x%23%26id%3Db",
        ),
        (
            "/payhook",
            "%3Cb%3E%E2%80%AE",
            "/payhook/event?id=%3Cb%3E%E2%80%AE",
        ),
        // A base a browser would read as another host keeps one leading slash.
        ("//evil.example", "evt_1", "/evil.example/event?id=evt_1"),
        ("/\\evil.example", "evt_1", "/evil.example/event?id=evt_1"),
    ] {
        let path = format!("/events/{segment}");
        let response = get(&dashboard, base, &path, None).await;
        assert_eq!(response.status(), 303, "{base}{path}");
        assert_eq!(response.headers()["location"], location, "{base}{path}");
        assert_eq!(response.headers()["x-frame-options"], "DENY");
        assert!(!response.body().contains("<b>"), "{}", response.body());
        assert!(!response.body().contains('\u{202e}'), "{}", response.body());
    }
    // What the link leads to: the event page, with the id decoded once.
    let page = get(&dashboard, "/payhook", "/event", Some("id=evt+1%2F..%2Fx%3Fy")).await;
    assert_eq!(page.status(), 404);
    assert!(page.body().contains("evt 1/../x?y"), "{}", page.body());
    // No id, a raw slash, bytes that are not UTF-8, an id longer than any
    // stored: no redirect.
    let long = format!("/events/{}", "e".repeat(payhook_inbox::MAX_ID_BYTES + 1));
    for path in ["/events/", "/events/a/b", "/events/%FF", long.as_str()] {
        let response = get(&dashboard, "/payhook", path, None).await;
        assert_eq!(response.status(), 404, "{path}");
        assert!(response.headers().get("location").is_none(), "{path}");
    }
    // Not without the token, and by GET or HEAD only.
    let anonymous = dashboard
        .handle(DashboardRequest {
            method: &Method::GET,
            base: "/payhook",
            path: "/events/evt_1",
            query: None,
            headers: &HeaderMap::new(),
            body: &[],
        })
        .await;
    assert_eq!(anonymous.status(), 401);
    let headers = signed_in();
    for (method, status) in [(&Method::HEAD, 303), (&Method::POST, 405)] {
        let response = dashboard
            .handle(DashboardRequest {
                method,
                base: "/payhook",
                path: "/events/evt_1",
                query: None,
                headers: &headers,
                body: &[],
            })
            .await;
        assert_eq!(response.status(), status, "{method}");
    }
}
