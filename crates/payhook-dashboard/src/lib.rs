//! A dashboard for payhook's durable inbox, served by the app itself: the
//! people on call see how deep the inbox is, how old its oldest pending event
//! is, what fails and why, and retry or replay events from the browser.
//!
//! This crate is the framework-neutral core: a [`DashboardRequest`] (method,
//! path, query, headers, form body) goes in, an [`http::Response`] with a
//! complete HTML page comes out. The adapters mount it:
//! `payhook::tower::axum::dashboard_router` for axum and
//! `payhook::actix::dashboard_scope` for actix-web (facade feature
//! `dashboard`).
//!
//! * **Access.** Off unless built with a secret token ([`Dashboard::new`]
//!   refuses one shorter than [`MIN_TOKEN_BYTES`]). Every page wants HTTP Basic
//!   credentials — any user name, the token as the password: the browser's
//!   own login prompt — compared in constant time; without them `401` with
//!   `WWW-Authenticate: Basic realm="payhook"`. Only the stylesheet and the
//!   refresh script (static files, the same in every build) are served
//!   without them.
//! * **Actions** (retry one event, retry every dead event, replay done events
//!   since a time) are `POST` forms only, each with a confirmation step; a post
//!   is refused (`403`) when the browser says it came from another site
//!   (`Sec-Fetch-Site`; without that header, when its `Origin` names another
//!   host), or when it lacks the page's anti-forgery token (an HMAC of the
//!   hour under the token, valid one to two hours; a page left open longer
//!   is reloaded before its forms work again).
//! * **Headers.** Every response carries a strict `Content-Security-Policy`
//!   ([`CONTENT_SECURITY_POLICY`]: no inline script or style, nothing from
//!   another origin), `X-Frame-Options: DENY`, `Cache-Control: no-store`,
//!   `X-Content-Type-Options: nosniff` and `Referrer-Policy: no-referrer`.
//! * **Escaping.** Every value that came from a request (ids, types, bodies,
//!   error texts) is written as text through one escaping function
//!   ([`html::escape`]), after the core's
//!   [`Untrusted`](payhook_core::untrusted::Untrusted) has escaped its
//!   control characters and cut it to a readable length.
//! * **Bad input** (an unknown id, a malformed filter, a page size over
//!   [`MAX_PAGE`](payhook_inbox::admin::MAX_PAGE), a query string over
//!   [`MAX_QUERY_BYTES`]) gets a `400` or `404` page saying what is wrong.
//! * The dashboard never shows the signing secret or the database URL: it
//!   holds neither, only an [`Admin`] on the inbox's database.
//! * **It never competes with deliveries.** [`Dashboard::for_inbox`] reads
//!   through a pool of its own of [`CONNECTIONS`] connections
//!   ([`Admin::with_own_pool`]), never the inbox's. Pages are read and
//!   rendered on a thread of the dashboard's own (started with its first
//!   request), never on the app's runtime workers, and
//!   [`MAX_CONCURRENT_PAGES`] at a time, so that the dashboard uses about one
//!   core at most however many pages are asked for. A page that cannot be
//!   read within [`PAGE_DEADLINE`] (waiting for its turn included; on
//!   PostgreSQL each statement is also stopped by the database then) gets
//!   `503` with `Retry-After` instead of waiting on. A confirmed action (a
//!   bulk run) is not cut short: it runs to its end, one action at a time.
//!
//! Pages, under the path the app mounts it at (say `/payhook`):
//! `/payhook/` the overview (counts by state, delivered and recovered
//! events — a recovered one the reconciler stored and no delivery of it has
//! arrived —, oldest pending event, the last hour's deliveries and attempts
//! as a chart, the backend, the latest refused events with their ids and
//! reasons; reloads itself every 10 s), `/payhook/events` (newest first, filtered by state, type,
//! source, age and id, keyset-paginated: no `OFFSET`, no count over the
//! table; the dead letters are `/payhook/events?state=dead`),
//! `/payhook/event?id=…` (one event: body, attempts, lease, its source —
//! delivered, reconciled, or reconciled at T and delivered at T2 —, its
//! differing copies, the other events of its payment intent; `/payhook/events/ID` redirects there with `303`,
//! the id percent-encoded), `/payhook/paused` (the paused types) and
//! `/payhook/bulk` (bulk actions by filter). The actions are `POST`s to
//! `/payhook/retry`, `/retry-dead`, `/replay`, `/pause`, `/resume` and
//! `/bulk`.
//!
//! ```
//! use payhook::dashboard::Dashboard;
//! use payhook::inbox::Inbox;
//! use payhook::Receiver;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! # let dir = std::env::temp_dir().join(format!("payhook-dashboard-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! # let url = format!("sqlite://{}", dir.join("inbox.db").display());
//! let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
//! let inbox = Inbox::connect(receiver, &url).await.unwrap();
//! // The token from the environment, never from the source.
//! # std::env::set_var("PAYHOOK_DASHBOARD_TOKEN", "a-long-random-token-1234");
//! let token = std::env::var("PAYHOOK_DASHBOARD_TOKEN").unwrap();
//! let dashboard = Dashboard::for_inbox(&inbox, &token).unwrap();
//! // axum:  Router::new().nest_service("/payhook", payhook::tower::axum::dashboard_router(dashboard))
//! // actix: App::new().service(payhook::actix::dashboard_scope("/payhook", dashboard))
//! # drop(dashboard);
//! # });
//! ```
//!
//! # Source map
//!
//! For contributors (ARCHITECTURE.md in the repository has the workspace's map):
//!
//! | file | what it is for |
//! |---|---|
//! | `lib.rs` | these docs, `Dashboard` (the facade), the request router: assets, access, the size limits, which page or action answers |
//! | `page_thread.rs` | the dashboard's own thread (a runtime of one worker, started with the first request) that every request is read and rendered on, and the owned copy of a request moved to it |
//! | `auth.rs` | HTTP Basic with the token (constant time), the hourly anti-forgery token, the cross-site checks |
//! | `html.rs` | the one escaping rule (`escape`; `value`/`message` = the core's `Untrusted` then `escape`), state badges, spans of time, the JSON body laid out, the page frame |
//! | `forms.rs` | what requests carry, parsed and checked: query strings (the events filters), form bodies, ages, "since" times, a path segment percent-decoded; errors as sentences quoting the value through `Untrusted` |
//! | `pages/mod.rs` | what every page needs (`Ctx`: the inbox's `Admin`, base path, form token), the error pages |
//! | `pages/overview.rs` | counts by state, delivered and recovered, oldest pending, the last hour as an SVG chart, the refused events, the bulk actions' forms |
//! | `pages/events.rs` | the events list: filters, keyset pages |
//! | `pages/event.rs` | one event: facts, retry button, attempts, the same payment intent's events, body; the redirect from `/events/ID` to it |
//! | `pages/paused.rs` | the paused event types: waiting events, resume buttons, the pause form |
//! | `actions.rs` | retry one / retry every dead / replay since / pause / resume a type: confirmation page, then the change and its report |
//! | `bulk.rs` | bulk actions by filter: the form, the confirmation page with the count (the selection carried as times, with the count's time), then the run and its report |
//! | `assets/` | the stylesheet and the refresh script, embedded |
//!
//! It renders only through `html.rs`, reads and changes the inbox only through
//! `Admin` (no SQL of its own), takes state names and their CSS classes from
//! `State` (an attempt's outcome that is not a known name is shown with class
//! `other`), and which actions an event offers from `State`'s groups.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// The paths that take an action's form, by `POST` only.
macro_rules! action_paths {
    () => {
        "/retry" | "/retry-dead" | "/replay" | "/pause" | "/resume" | "/bulk"
    };
}

mod actions;
mod auth;
mod bulk;
mod forms;
pub mod html;
mod page_thread;
mod pages;

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};
use payhook_inbox::admin::Admin;
use payhook_inbox::{Backend, Inbox};

/// The shortest token [`Dashboard::new`] accepts, in bytes.
pub const MIN_TOKEN_BYTES: usize = 16;

/// The longest query string served; a longer one gets `400`.
pub const MAX_QUERY_BYTES: usize = 4096;

/// The largest form body the adapters read for an action; a longer one gets
/// `413`.
pub const MAX_FORM_BYTES: usize = 8192;

/// How many connections [`Dashboard::for_inbox`]'s own pool opens at most.
pub const CONNECTIONS: u32 = 2;

/// How many pages are read and rendered at once; more wait for their turn
/// (within [`PAGE_DEADLINE`]). One: a page's statements and its rendering
/// then take turns on the dashboard's own thread, and the turn passes on
/// after a rest three times as long as the page took (at most 200 ms), so
/// that however many pages are asked for, the dashboard (with the
/// database's work for it) keeps to about a quarter of a core and leaves the rest of the
/// machine to deliveries. A page takes a millisecond
/// or two, so the line moves fast: a person alone is answered at once. An
/// action (`POST`) does not wait for a page's turn, only for another
/// action's.
pub const MAX_CONCURRENT_PAGES: usize = 1;

/// The longest rest after a page before the next page's turn.
const MAX_PAGE_REST: Duration = Duration::from_millis(200);

/// The rest after a page, as a multiple of the time the page took.
const PAGE_REST_FACTOR: u32 = 3;

/// How long a page may take, its turn and its statements included, before it
/// is answered `503`: 3 seconds.
pub const PAGE_DEADLINE: Duration = Duration::from_secs(3);

/// The start of the path `/events/ID`, which redirects to the event's page.
const EVENT_PATH_PREFIX: &str = "/events/";

/// The `Content-Security-Policy` of every response: scripts and styles from
/// the dashboard's own files only (never inline), images from itself or
/// `data:`, forms posted only to itself, never framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const STYLESHEET: &str = include_str!("assets/dashboard.css");
const SCRIPT: &str = include_str!("assets/dashboard.js");

/// Why a dashboard cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DashboardError {
    /// The token is shorter than [`MIN_TOKEN_BYTES`].
    WeakToken,
}

impl std::fmt::Display for DashboardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::WeakToken => write!(
                f,
                "the dashboard token must be at least {MIN_TOKEN_BYTES} bytes (use a random one)"
            ),
        }
    }
}

impl std::error::Error for DashboardError {}

/// The dashboard over one inbox. Cheap to clone (shared).
pub struct Dashboard<DB: Backend = payhook_inbox::sqlx::Any> {
    inner: Arc<Inner<DB>>,
}

struct Inner<DB: Backend> {
    admin: Admin<DB>,
    /// Whether an action on a namespace the database has never seen is
    /// refused: for a dashboard given its own [`Admin`], not for one on the
    /// app's own inbox ([`Dashboard::for_inbox`]), whose namespace is the
    /// inbox's by construction and may have no event yet.
    check_namespace: bool,
    secret: auth::Secret,
    refresh: Option<u32>,
    pages: Arc<tokio::sync::Semaphore>,
    actions: Arc<tokio::sync::Semaphore>,
    thread: page_thread::PageThread,
}

impl<DB: Backend> Clone for Dashboard<DB> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<DB: Backend> std::fmt::Debug for Dashboard<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Dashboard")
            .field("namespace", &self.inner.admin.namespace())
            .field("backend", &self.inner.admin.backend())
            .finish_non_exhaustive()
    }
}

/// One request, as the adapter hands it over.
#[derive(Debug, Clone, Copy)]
pub struct DashboardRequest<'a> {
    /// The method.
    pub method: &'a Method,
    /// Where the dashboard is mounted (`/payhook`; empty at the root), for
    /// its links.
    pub base: &'a str,
    /// The path below `base` (`/`, `/events`, …).
    pub path: &'a str,
    /// The query string, without `?`.
    pub query: Option<&'a str>,
    /// The request headers.
    pub headers: &'a HeaderMap,
    /// The form body of a `POST` (at most [`MAX_FORM_BYTES`]; the adapter
    /// answers a longer one with [`Dashboard::too_large`]).
    pub body: &'a [u8],
}

impl<DB: Backend> Dashboard<DB> {
    /// A dashboard on the inbox `admin` reads, behind `token`. Its actions
    /// (retry, replay, pause, resume, bulk) are refused with `400` while the
    /// database has never seen `admin`'s namespace (no event, no paused
    /// type): the page names the namespaces it has.
    ///
    /// # Errors
    /// [`DashboardError::WeakToken`] for a token shorter than
    /// [`MIN_TOKEN_BYTES`].
    pub fn new(admin: Admin<DB>, token: &str) -> Result<Self, DashboardError> {
        Self::build(admin, token, true)
    }

    fn build(admin: Admin<DB>, token: &str, check_namespace: bool) -> Result<Self, DashboardError> {
        if token.len() < MIN_TOKEN_BYTES {
            return Err(DashboardError::WeakToken);
        }
        Ok(Self {
            inner: Arc::new(Inner {
                admin,
                check_namespace,
                secret: auth::Secret::new(token),
                refresh: Some(10),
                pages: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_PAGES)),
                actions: Arc::new(tokio::sync::Semaphore::new(1)),
                thread: page_thread::PageThread::default(),
            }),
        })
    }

    /// A dashboard on the inbox the app runs (its database and namespace),
    /// reading through a pool of its own of at most [`CONNECTIONS`], so that
    /// its pages never take a connection a delivery needs. Its namespace is
    /// the inbox's, so its actions are not refused while the inbox holds no
    /// event yet (a type can be paused before its first delivery).
    ///
    /// # Errors
    /// As [`Dashboard::new`].
    pub fn for_inbox(inbox: &Inbox<DB>, token: &str) -> Result<Self, DashboardError> {
        Self::build(
            Admin::of_inbox(inbox).with_own_pool(CONNECTIONS, PAGE_DEADLINE),
            token,
            false,
        )
    }

    /// How often the overview reloads itself (`None`: never; default 10 s).
    #[must_use]
    pub fn refresh_every(self, every: Option<Duration>) -> Self {
        let refresh = every.map(|every| u32::try_from(every.as_secs().max(1)).unwrap_or(u32::MAX));
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                inner.refresh = refresh;
                Self {
                    inner: Arc::new(inner),
                }
            }
            Err(inner) => Self { inner },
        }
    }

    /// The answer to a request whose body is over [`MAX_FORM_BYTES`]: `413`.
    pub fn too_large(&self) -> Response<String> {
        finish(pages::problem(
            "",
            StatusCode::PAYLOAD_TOO_LARGE,
            "The form is too large.",
        ))
    }

    /// Answers one request: a page, an asset, an action's result, or an
    /// error page. Never panics on any input. Read and rendered on the
    /// dashboard's own thread (the app's runtime workers only wait for the
    /// answer), at most [`MAX_CONCURRENT_PAGES`] at once; a page (`GET`)
    /// within [`PAGE_DEADLINE`], an action (`POST`, confirmed by a person) to
    /// its end.
    pub async fn handle(&self, request: DashboardRequest<'_>) -> Response<String> {
        let read = *request.method == Method::GET || *request.method == Method::HEAD;
        let base = request.base.trim_end_matches('/');
        let job = {
            let dashboard = self.clone();
            let request = page_thread::OwnedRequest::new(&request);
            async move {
                // Pages take turns; an action (rare, confirmed by a person,
                // run to its end) waits only for another action, so that a
                // long bulk run never keeps every page waiting.
                let turns = if read {
                    &dashboard.inner.pages
                } else {
                    &dashboard.inner.actions
                };
                let turn = Arc::clone(turns).acquire_owned().await;
                let started = Instant::now();
                let response = {
                    #[cfg(test)]
                    let _seen = tests::Seen::new();
                    dashboard.route(request.request()).await
                };
                if read {
                    // The next page's turn comes after a rest three times
                    // as long as this one took: the dashboard keeps to about
                    // a quarter of a core, however many pages are waiting (its
                    // statements also take the database's CPU, which on a
                    // shared machine is the deliveries' too).
                    let rest = started
                        .elapsed()
                        .saturating_mul(PAGE_REST_FACTOR)
                        .min(MAX_PAGE_REST);
                    tokio::spawn(async move {
                        tokio::time::sleep(rest).await;
                        drop(turn);
                    });
                }
                response
            }
        };
        let mut answer = self.inner.thread.spawn(job);
        if !read {
            // An action a person confirmed (a bulk run takes many batches)
            // runs to its end.
            return finish(answer.await.unwrap_or_else(|_| failed(base)));
        }
        match tokio::time::timeout(PAGE_DEADLINE, &mut answer).await {
            Ok(response) => finish(response.unwrap_or_else(|_| failed(base))),
            Err(_) => {
                // Its statements are stopped with it.
                answer.abort();
                let mut response = pages::problem(
                    base,
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The inbox's database is busy; this page was given up so that deliveries \
                     are not kept waiting. Try again shortly.",
                );
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
                finish(response)
            }
        }
    }

    async fn route(&self, request: DashboardRequest<'_>) -> Response<String> {
        let get = *request.method == Method::GET || *request.method == Method::HEAD;
        let base = request.base.trim_end_matches('/');
        match request.path {
            "/assets/dashboard.css" if get => return asset("text/css; charset=utf-8", STYLESHEET),
            "/assets/dashboard.js" if get => return asset("text/javascript; charset=utf-8", SCRIPT),
            _ => {}
        }
        if !self.inner.secret.authorizes(request.headers) {
            let mut response = pages::problem(
                base,
                StatusCode::UNAUTHORIZED,
                "Sign in with the dashboard token as the password.",
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"payhook\", charset=\"UTF-8\""),
            );
            return response;
        }
        if request.query.is_some_and(|query| query.len() > MAX_QUERY_BYTES) {
            return pages::problem(base, StatusCode::BAD_REQUEST, "The query string is too long.");
        }
        let ctx = pages::Ctx {
            admin: &self.inner.admin,
            base,
            csrf: self
                .inner
                .secret
                .csrf_token(payhook_core::time::now_secs().unsigned_abs() / auth::CSRF_WINDOW_SECS),
            refresh: self.inner.refresh,
        };
        let query = request.query.unwrap_or("");
        match (request.path, get) {
            ("" | "/", true) => pages::overview(&ctx).await,
            ("/events", true) => pages::events(&ctx, query).await,
            ("/event", true) => pages::event(&ctx, query).await,
            ("/paused", true) => pages::paused(&ctx).await,
            ("/bulk", true) => bulk::form_page(&ctx, query),
            ("/bulk", false) if *request.method != Method::POST => {
                method_not_allowed(base, "GET, HEAD, POST")
            }
            (action_paths!(), false) if *request.method == Method::POST => {
                if let Some(reason) = auth::cross_site(request.headers) {
                    return pages::problem(base, StatusCode::FORBIDDEN, reason);
                }
                let form = match forms::Form::parse(request.body) {
                    Ok(form) => form,
                    Err(reason) => return pages::problem(base, StatusCode::BAD_REQUEST, &reason),
                };
                if !self.inner.secret.csrf_valid(
                    form.get("csrf").unwrap_or(""),
                    payhook_core::time::now_secs().unsigned_abs(),
                ) {
                    return pages::problem(
                        base,
                        StatusCode::FORBIDDEN,
                        "The form's token is missing or out of date: reload the page and try again.",
                    );
                }
                if self.inner.check_namespace {
                    if let Some(refused) = pages::unseen_namespace(&ctx).await {
                        return refused;
                    }
                }
                if request.path == "/bulk" {
                    return bulk::action(&ctx, &form).await;
                }
                actions::action(&ctx, request.path, &form).await
            }
            ("" | "/" | "/events" | "/event" | "/paused", false) => method_not_allowed(base, "GET, HEAD"),
            // `/events/ID`, a link people type or keep: to `/event?id=ID`.
            (path, true) if path.starts_with(EVENT_PATH_PREFIX) => {
                pages::event_redirect(&ctx, &path[EVENT_PATH_PREFIX.len()..])
            }
            (path, false) if path.len() > EVENT_PATH_PREFIX.len() && path.starts_with(EVENT_PATH_PREFIX) => {
                method_not_allowed(base, "GET, HEAD")
            }
            (action_paths!(), _) => method_not_allowed(base, "POST"),
            _ => pages::problem(base, StatusCode::NOT_FOUND, "There is no such page."),
        }
    }
}

/// The answer when a page's task ended without one (it panicked).
fn failed(base: &str) -> Response<String> {
    pages::problem(
        base,
        StatusCode::INTERNAL_SERVER_ERROR,
        "This page could not be made; try again.",
    )
}

fn method_not_allowed(base: &str, allow: &'static str) -> Response<String> {
    let mut response = pages::problem(
        base,
        StatusCode::METHOD_NOT_ALLOWED,
        "This page does not take that method.",
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

fn asset(content_type: &'static str, text: &'static str) -> Response<String> {
    let mut response = Response::new(text.to_owned());
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The headers every response carries.
fn finish(mut response: Response<String>) -> Response<String> {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers
        .entry(header::CONTENT_TYPE)
        .or_insert(HeaderValue::from_static("text/html; charset=utf-8"));
    response
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use super::*;

    static RUNNING: AtomicUsize = AtomicUsize::new(0);
    static MOST_AT_ONCE: AtomicUsize = AtomicUsize::new(0);
    static THREADS: Mutex<Vec<Option<String>>> = Mutex::new(Vec::new());
    static SPANS: Mutex<Vec<(Instant, Instant)>> = Mutex::new(Vec::new());

    /// A page being made: where, when, and how many with it.
    pub(crate) struct Seen(Instant);

    impl Seen {
        pub(crate) fn new() -> Self {
            let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
            MOST_AT_ONCE.fetch_max(now, Ordering::SeqCst);
            let name = std::thread::current().name().map(str::to_owned);
            THREADS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(name);
            Self(Instant::now())
        }
    }

    impl Drop for Seen {
        fn drop(&mut self) {
            RUNNING.fetch_sub(1, Ordering::SeqCst);
            SPANS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((self.0, Instant::now()));
        }
    }

    /// Many pages asked for at once from the app's runtime are made on the
    /// dashboard's thread, never more than `MAX_CONCURRENT_PAGES` at once,
    /// with a rest after each, and every one is answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pages_are_made_on_the_dashboard_thread_a_few_at_once() {
        let dir = std::env::temp_dir().join(format!("payhook-dashboard-thread-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let receiver = payhook_core::Receiver::builder()
            .secret("whsec_thread")
            .build()
            .unwrap();
        let url = format!("sqlite://{}", dir.join("inbox.db").display());
        let inbox = Inbox::connect(receiver, &url).await.unwrap();
        let token = "thread-test-token-0123456789";
        let dashboard = Dashboard::for_inbox(&inbox, token).unwrap();
        let mut headers = HeaderMap::new();
        let credentials = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("anyone:{token}"),
        );
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {credentials}")).unwrap(),
        );
        let mut loads = tokio::task::JoinSet::new();
        for n in 0..40 {
            let (dashboard, headers) = (dashboard.clone(), headers.clone());
            loads.spawn(async move {
                let (path, query) = if n % 2 == 0 {
                    ("/events", Some("type=charge.succeeded"))
                } else {
                    ("/", None)
                };
                dashboard
                    .handle(DashboardRequest {
                        method: &Method::GET,
                        base: "/payhook",
                        path,
                        query,
                        headers: &headers,
                        body: &[],
                    })
                    .await
                    .status()
            });
        }
        while let Some(status) = loads.join_next().await {
            assert_eq!(status.unwrap(), StatusCode::OK);
        }
        let threads = THREADS.lock().unwrap().clone();
        assert_eq!(threads.len(), 40);
        assert!(
            threads
                .iter()
                .all(|name| name.as_deref() == Some(page_thread::THREAD_NAME)),
            "{threads:?}"
        );
        let most = MOST_AT_ONCE.load(Ordering::SeqCst);
        assert!((1..=MAX_CONCURRENT_PAGES).contains(&most), "{most} pages at once");
        // One at a time, each turn passed on after a rest three times as long
        // as the page took.
        let mut spans = SPANS.lock().unwrap().clone();
        spans.sort();
        for pair in spans.windows(2) {
            let ((start, end), (next, _)) = (pair[0], pair[1]);
            assert!(
                next.duration_since(end) >= (end.duration_since(start) * PAGE_REST_FACTOR).min(MAX_PAGE_REST),
                "a page {:?} long, the next {:?} after it",
                end.duration_since(start),
                next.duration_since(end)
            );
        }
        drop(dashboard);
        let _ = std::fs::remove_dir_all(dir);
    }
}
