//! The dashboard's pause/resume and bulk actions over loopback, on SQLite
//! and PostgreSQL (`PAYHOOK_TEST_DATABASE_URL`): each confirmed on a second
//! page carrying the form token, refused without it, and the bulk action
//! counts first (nothing changes before the confirmation), runs over what
//! was counted (an event retried meanwhile is not counted twice), reports
//! selected, acted on and no longer qualified, and changes nothing more
//! when the confirmation is sent again.

use crate::dashboard_app;

use std::sync::atomic::Ordering;
use std::time::Duration;

use dashboard_app::{App, Db, TOKEN};
use payhook::sender::EventBuilder;
use payhook_test_support::on_every_backend;

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn get(app: &App, path: &str) -> (u16, String) {
    let response = client()
        .get(app.url(path))
        .basic_auth("oncall", Some(TOKEN))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

async fn post(app: &App, path: &str, form: &[(&str, &str)]) -> (u16, String) {
    let origin = app.url("");
    let response = client()
        .post(app.url(path))
        .basic_auth("oncall", Some(TOKEN))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("sec-fetch-site", "same-origin")
        .header("origin", origin)
        .body(
            form_urlencoded::Serializer::new(String::new())
                .extend_pairs(form)
                .finish(),
        )
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

fn csrf_of(page: &str) -> String {
    let start = page
        .find("name=\"csrf\" value=\"")
        .expect("the page has a form token")
        + 19;
    page[start..start + 64].to_owned()
}

/// The value of the hidden field `name` of a page's form.
fn hidden(page: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = page
        .find(&marker)
        .unwrap_or_else(|| panic!("no field {name}: {page}"))
        + marker.len();
    page[start..].split('"').next().unwrap().to_owned()
}

async fn pause_and_resume_are_confirmed(db: Db) {
    let app = App::start(db, 1).await;
    let paused = "payment_intent.payment_failed";
    let (_, page) = get(&app, "/payhook/paused").await;
    assert!(page.contains("id=\"paused-none\""), "{page}");
    let csrf = csrf_of(&page);

    // Without the token: refused.
    let (status, _) = post(&app, "/payhook/pause", &[("type", paused), ("confirm", "yes")]).await;
    assert_eq!(status, 403);
    // First a confirmation page; nothing paused yet.
    let (status, body) = post(&app, "/payhook/pause", &[("type", paused), ("csrf", &csrf)]).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("Pause the event type payment_intent.payment_failed?"),
        "{body}"
    );
    assert!(body.contains("name=\"confirm\" value=\"yes\""), "{body}");
    let (_, page) = get(&app, "/payhook/paused").await;
    assert!(page.contains("id=\"paused-none\""), "{page}");
    // Confirmed: paused; its deliveries are acknowledged and wait.
    let (status, body) = post(
        &app,
        "/payhook/pause",
        &[("type", paused), ("csrf", &csrf), ("confirm", "yes")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("is paused"), "{body}");
    app.deliver(&EventBuilder::payment_intent_payment_failed().id("evt_paused_dash"))
        .await;
    app.deliver(&EventBuilder::payment_intent_succeeded().id("evt_free_dash"))
        .await;
    app.wait_for_state("evt_free_dash", "done").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    app.wait_for_state("evt_paused_dash", "pending").await;
    let (_, page) = get(&app, "/payhook/paused").await;
    assert!(
        page.contains("<td>payment_intent.payment_failed</td>")
            || page.contains(">payment_intent.payment_failed</a>"),
        "{page}"
    );
    assert!(page.contains("<td>1</td>"), "one waiting: {page}");
    assert!(page.contains("action=\"/payhook/resume\""), "{page}");

    let (status, body) = post(&app, "/payhook/resume", &[("type", paused), ("csrf", &csrf)]).await;
    assert_eq!(status, 200);
    assert!(body.contains("Resume the event type"), "{body}");
    let (_, body) = post(
        &app,
        "/payhook/resume",
        &[("type", paused), ("csrf", &csrf), ("confirm", "yes")],
    )
    .await;
    assert!(body.contains("is resumed"), "{body}");
    app.wait_for_state("evt_paused_dash", "done").await;
    // A type too long is a 400 page.
    let long = "t".repeat(300);
    let (status, _) = post(
        &app,
        "/payhook/pause",
        &[("type", &long), ("csrf", &csrf), ("confirm", "yes")],
    )
    .await;
    assert_eq!(status, 400);
    app.stop().await;
}

async fn bulk_retry_counts_first_then_runs_once(db: Db) {
    let app = App::start(db, 1).await;
    let ids: Vec<String> = (0..5).map(|n| format!("evt_bulkdash{n}")).collect();
    app.broken.lock().unwrap().extend(ids.iter().cloned());
    app.broken.lock().unwrap().insert("evt_otherdead".to_owned());
    for id in &ids {
        app.deliver(&EventBuilder::payment_intent_succeeded().id(id))
            .await;
    }
    app.deliver(&EventBuilder::payment_intent_failed().id("evt_otherdead"))
        .await;
    for id in ids.iter().chain(std::iter::once(&"evt_otherdead".to_owned())) {
        app.wait_for_state(id, "dead").await;
    }
    let (status, page) = get(&app, "/payhook/bulk?action=retry&type=payment_intent.succeeded").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("value=\"payment_intent.succeeded\""),
        "the filter is prefilled: {page}"
    );
    let csrf = csrf_of(&page);
    let filter = [
        ("action", "retry"),
        ("type", "payment_intent.succeeded"),
        ("older", ""),
        ("id_prefix", "evt_bulkdash"),
        ("csrf", csrf.as_str()),
    ];
    // Without the token: refused, nothing counted or changed.
    let (status, _) = post(&app, "/payhook/bulk", &filter[..4]).await;
    assert_eq!(status, 403);
    // The count and the filter first.
    let (status, body) = post(&app, "/payhook/bulk", &filter).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(
            "Retry 5 events? Selected: state dead, type payment_intent.succeeded, id starting evt_bulkdash"
        ),
        "{body}"
    );
    assert!(
        body.contains("<td>payment_intent.succeeded</td><td>5</td>"),
        "{body}"
    );
    app.wait_for_state("evt_bulkdash0", "dead").await;
    // Confirmed: the hidden fields carry the selection, the count's time
    // and its number. Meanwhile one of the five was retried and handled:
    // it no longer qualifies.
    app.broken.lock().unwrap().clear();
    let before = app.handled.load(Ordering::SeqCst);
    payhook::inbox::Admin::of_inbox(&app.inbox)
        .retry("evt_bulkdash0")
        .await
        .unwrap();
    app.wait_for_state("evt_bulkdash0", "done").await;
    assert_eq!(hidden(&body, "counted"), "5");
    let confirm: Vec<(String, String)> = ["action", "as_of", "counted", "type", "id_prefix"]
        .iter()
        .map(|name| ((*name).to_owned(), hidden(&body, name)))
        .chain([
            ("csrf".to_owned(), csrf.clone()),
            ("confirm".to_owned(), "yes".to_owned()),
        ])
        .collect();
    let confirm: Vec<(&str, &str)> = confirm.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let (status, body) = post(&app, "/payhook/bulk", &confirm).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("4 dead event(s) made due now, in "), "{body}");
    assert!(
        body.contains(
            "Selected 5, acted on 4, 1 no longer qualified (changed since the count: died, \
             finished, retried, replayed or handled meanwhile)."
        ),
        "{body}"
    );
    for id in &ids {
        app.wait_for_state(id, "done").await;
    }
    assert_eq!(app.handled.load(Ordering::SeqCst), before + 5);
    app.wait_for_state("evt_otherdead", "dead").await;
    // Sent again (a browser resubmitting after an interruption): nothing left.
    let (_, body) = post(&app, "/payhook/bulk", &confirm).await;
    assert!(body.contains("0 dead event(s) made due now"), "{body}");
    assert!(
        body.contains("Selected 5, acted on 0, 5 no longer qualified"),
        "{body}"
    );
    // A state the action does not change: 400.
    let (status, _) = post(
        &app,
        "/payhook/bulk",
        &[("action", "purge"), ("state", "pending"), ("csrf", &csrf)],
    )
    .await;
    assert_eq!(status, 400);
    app.stop().await;
}

// Each test on both backends: `sqlite::<test>` and `postgres::<test>`.
on_every_backend!(
    sqlite: Db::Sqlite, postgres: Db::Postgres, worker_threads: 2;
    pause_and_resume_are_confirmed,
    bulk_retry_counts_first_then_runs_once,
);
