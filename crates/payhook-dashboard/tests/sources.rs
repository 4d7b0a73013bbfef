//! The dashboard tells where each event came from, on SQLite and
//! PostgreSQL: a reconciled event whose delivery arrived later says so on
//! its page and in its attempt history (reconciled at T, delivered at T2),
//! the events list's badge says "reconciled, delivered later", the overview
//! counts delivered and recovered events apart and lists the refused events
//! with their ids and reasons escaped.

use std::time::Duration;

use base64::Engine as _;
use http::{HeaderMap, HeaderValue, Method};
use payhook_core::sender::unix_now;
use payhook_core::{sign, Receiver, Secret};
use payhook_dashboard::{Dashboard, DashboardRequest};
use payhook_inbox::admin::Admin;
use payhook_inbox::{Inbox, Job};
use payhook_test_support::{on_every_backend, postgres_url, sqlite_url, unique};

const TOKEN: &str = "sources-test-token-0123456789";
const SECRET: &str = "whsec_dashboard_sources";

async fn get(dashboard: &Dashboard, path: &str, query: Option<&str>) -> String {
    let mut headers = HeaderMap::new();
    let credentials = base64::engine::general_purpose::STANDARD.encode(format!("anyone:{TOKEN}"));
    headers.insert(
        "authorization",
        HeaderValue::from_str(&format!("Basic {credentials}")).unwrap(),
    );
    let response = dashboard
        .handle(DashboardRequest {
            method: &Method::GET,
            base: "",
            path,
            query,
            headers: &headers,
            body: &[],
        })
        .await;
    assert_eq!(response.status(), 200, "{}", response.body());
    response.into_body()
}

async fn deliver(inbox: &Inbox, id: &str) {
    let body = format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","created":1,"data":{{"object":{{"id":"pi_{id}","amount":5,"currency":"usd","status":"succeeded"}}}}}}"#
    );
    let mut headers = HeaderMap::new();
    let signature = sign(body.as_bytes(), &Secret::new(SECRET).unwrap(), unix_now());
    headers.insert("x-service-signature", signature.parse().unwrap());
    assert_eq!(inbox.ingest(&headers, body.into()).await.status().as_u16(), 200);
}

/// The element with `id` and what follows it, up to its end tag's name.
fn element<'a>(page: &'a str, id: &str, end: &str) -> &'a str {
    let start = page
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id}: {page}"));
    let stop = page[start..].find(end).unwrap_or_else(|| panic!("{page}"));
    &page[start..start + stop]
}

async fn sources_are_told_honestly(url: String) {
    let namespace = unique("dashboard-sources");
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(&namespace)
        .poll_interval(Duration::from_millis(20))
        .connect(&url)
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"));
    let workers = inbox.start(|_job: Job| async { Ok(()) });
    let (late, recovered, delivered) = (
        format!("evt_{namespace}_late"),
        format!("evt_{namespace}_recovered"),
        format!("evt_{namespace}_delivered"),
    );
    for id in [&late, &recovered, &delivered] {
        deliver(&inbox, id).await;
    }
    // As the reconciler stores them: the `source` column set.
    for id in [&late, &recovered] {
        payhook_inbox::sqlx::query(
            "UPDATE payhook_inbox SET source = 'reconciled' WHERE namespace = $1 AND event_id = $2",
        )
        .bind(&namespace)
        .bind(id.as_str())
        .execute(inbox.pool())
        .await
        .unwrap();
    }
    // The reconciled event's delivery arrives (again) later.
    deliver(&inbox, &late).await;
    let admin = Admin::of_inbox(&inbox);
    payhook_test_support::eventually_async(Duration::from_secs(20), "the delivery recorded", || async {
        admin.show(&late).await.unwrap().delivered_at.is_some()
    })
    .await;
    payhook_inbox::sqlx::query(
        "INSERT INTO payhook_inbox_refused \
         (namespace, refused_key, event_id, source, reason, bytes, first_at, last_at, times) \
         VALUES ($1, 'id:x', $2, 'reconciled', 'does not parse: <script>', 42, 1000, 2000, 3)",
    )
    .bind(&namespace)
    .bind("evt_<b>\u{1b}")
    .execute(inbox.pool())
    .await
    .unwrap();
    let dashboard = Dashboard::for_inbox(&inbox, TOKEN).unwrap();

    let page = get(&dashboard, "/event", Some(&format!("id={late}"))).await;
    let source = element(&page, "event-source", "</td>");
    assert!(source.contains("reconciled, delivered later"), "{source}");
    assert!(source.contains("delivered at "), "{source}");
    assert!(!page.contains("no delivery of it arrived"), "{page}");
    let history = element(&page, "attempts-source", "</p>");
    assert!(
        history.contains("Reconciled at ") && history.contains("delivered at "),
        "{history}"
    );
    assert!(!history.contains("no delivery arrived"), "{history}");
    let page = get(&dashboard, "/event", Some(&format!("id={recovered}"))).await;
    assert!(element(&page, "event-source", "</td>").contains("no delivery of it arrived"));

    let page = get(&dashboard, "/events", None).await;
    assert!(page.contains(">reconciled, delivered later</span>"), "{page}");

    let page = get(&dashboard, "/", None).await;
    let count = |id: &str| {
        let card = element(&page, id, "class=\"label\"");
        let start = card.find("<span class=\"n\">").unwrap() + "<span class=\"n\">".len();
        card[start..start + card[start..].find('<').unwrap()].to_owned()
    };
    assert_eq!(count("count-delivered"), "2", "{page}");
    assert_eq!(count("count-recovered"), "1", "{page}");
    let refused = element(&page, "refused", "</table>");
    assert!(refused.contains("evt_&lt;b&gt;\\u{1b}"), "{refused}");
    assert!(refused.contains("does not parse: &lt;script&gt;"), "{refused}");
    assert!(
        !refused.contains('\u{1b}') && !refused.contains("<script>"),
        "{refused}"
    );
    workers.shutdown().await;
}

on_every_backend! {
    sqlite: sqlite_url("payhook-dashboard-sources"), postgres: postgres_url(), worker_threads: 2;
    sources_are_told_honestly,
}
