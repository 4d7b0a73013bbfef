//! An app with an inbox, its webhook route and its dashboard, served over
//! loopback by axum (or actix-web) on SQLite or PostgreSQL, for the dashboard's
//! tests.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use payhook::dashboard::Dashboard;
use payhook::inbox::{HandlerError, Inbox, Job, Workers};
use payhook::sender::EventBuilder;
use payhook::{sign, Receiver, Secret};
use payhook_test_support::postgres_url;

pub const SECRET: &str = "whsec_dashboard_tests";
pub const TOKEN: &str = "dashboard-token-for-tests-0123";

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Which database the inbox is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Db {
    Sqlite,
    Postgres,
}

/// A running app: `POST /webhooks` into the inbox, the dashboard under
/// `/payhook`. Events whose id is in `broken` fail their handler; those in
/// `held` keep their handler running until they leave it.
pub struct App {
    pub addr: SocketAddr,
    pub inbox: Inbox,
    pub broken: Arc<Mutex<HashSet<String>>>,
    pub held: Arc<Mutex<HashSet<String>>>,
    pub handled: Arc<AtomicUsize>,
    workers: Option<Workers>,
    server: tokio::task::JoinHandle<()>,
}

impl App {
    /// Starts the app on `db` in a fresh namespace (PostgreSQL) or file
    /// (SQLite); each event gets `max_attempts` attempts.
    pub async fn start(db: Db, max_attempts: u32) -> Self {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let url = match db {
            Db::Sqlite => {
                let dir = std::env::temp_dir().join(format!("payhook-dashboard-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&dir).unwrap();
                format!("sqlite://{}", dir.join("inbox.db").display())
            }
            Db::Postgres => postgres_url(),
        };
        let receiver = Receiver::builder().secret(SECRET).build().unwrap();
        let inbox = Inbox::builder(receiver)
            .namespace(format!("dash-{}-{n}-{}", std::process::id(), unix_ms()))
            .poll_interval(Duration::from_millis(20))
            .max_attempts(max_attempts)
            .backoff(Duration::from_millis(10), Duration::from_millis(20))
            .connect(&url)
            .await
            .unwrap();
        let broken: Arc<Mutex<HashSet<String>>> = Arc::default();
        let held: Arc<Mutex<HashSet<String>>> = Arc::default();
        let handled = Arc::new(AtomicUsize::new(0));
        let (failing, holding, count) = (Arc::clone(&broken), Arc::clone(&held), Arc::clone(&handled));
        let workers = inbox.start(move |job: Job| {
            let failing = failing.lock().unwrap().contains(job.event().id());
            let holding = Arc::clone(&holding);
            let count = Arc::clone(&count);
            async move {
                while holding.lock().unwrap().contains(job.event().id()) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                if failing {
                    return Err::<(), HandlerError>("the ledger refused <b>it</b>".into());
                }
                count.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        });
        let dashboard = Dashboard::for_inbox(&inbox, TOKEN).unwrap();
        let app = axum::Router::new()
            .route("/webhooks", payhook::tower::axum::inbox_route(inbox.clone()))
            .nest_service("/payhook", payhook::tower::axum::dashboard_router(dashboard));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let _ = payhook::tower::axum::serve(listener, app).await;
        });
        Self {
            addr,
            inbox,
            broken,
            held,
            handled,
            workers: Some(workers),
            server,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Delivers `event`, signed; panics unless it is acknowledged.
    pub async fn deliver(&self, event: &EventBuilder) {
        self.deliver_body(event.to_json(), event.event_id()).await;
    }

    /// Delivers `body` as it is, signed; panics unless it is acknowledged.
    pub async fn deliver_body(&self, body: String, what: &str) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        let response = reqwest::Client::new()
            .post(self.url("/webhooks"))
            .header("content-type", "application/json")
            .header(
                "x-service-signature",
                sign(body.as_bytes(), &Secret::new(SECRET).unwrap(), now),
            )
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "delivery of {what}");
    }

    /// Waits until the event is in `state` (10 s at most).
    pub async fn wait_for_state(&self, id: &str, state: &str) {
        let admin = payhook::inbox::admin::Admin::of_inbox(&self.inbox);
        for _ in 0..500 {
            if admin
                .show(id)
                .await
                .is_ok_and(|event| event.state.as_str() == state)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("event {id} did not become {state}");
    }

    pub async fn stop(mut self) {
        self.server.abort();
        if let Some(workers) = self.workers.take() {
            workers.shutdown().await;
        }
    }
}

pub fn unix_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()
}

/// The security headers every dashboard response carries.
pub fn assert_security_headers(headers: &reqwest::header::HeaderMap, what: &str) {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_else(|| panic!("{what}: no {name} header"))
            .to_owned()
    };
    assert_eq!(
        get("content-security-policy"),
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        "{what}"
    );
    assert_eq!(get("x-frame-options"), "DENY", "{what}");
    assert_eq!(get("cache-control"), "no-store", "{what}");
    assert_eq!(get("x-content-type-options"), "nosniff", "{what}");
    assert_eq!(get("referrer-policy"), "no-referrer", "{what}");
}
