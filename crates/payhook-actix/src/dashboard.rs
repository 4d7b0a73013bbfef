//! The inbox dashboard for actix-web: a `Scope` served under a path of your
//! choosing.
//!
//! ```
//! use actix_web::App;
//! use payhook::dashboard::Dashboard;
//! use payhook::inbox::Inbox;
//! use payhook::Receiver;
//!
//! # actix_web::rt::System::new().block_on(async {
//! # let dir = std::env::temp_dir().join(format!("payhook-actix-dashboard-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! # let url = format!("sqlite://{}", dir.join("inbox.db").display());
//! let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
//! let inbox = Inbox::connect(receiver, &url).await.unwrap();
//! let dashboard = Dashboard::for_inbox(&inbox, "a-long-random-token-from-the-environment").unwrap();
//! let app = move || {
//!     App::new()
//!         .route("/webhooks", payhook::actix::inbox_route(inbox.clone()))
//!         .service(payhook::actix::dashboard_scope("/payhook", dashboard.clone()))
//! };
//! # let _ = app;
//! # });
//! ```

use actix_web::{web, HttpRequest, HttpResponse, Scope};
use futures_util::StreamExt as _;
use payhook_dashboard::{Dashboard, DashboardRequest, MAX_FORM_BYTES};
use payhook_inbox::Backend;

/// The dashboard under `path` (`"/payhook"`): register it with
/// `App::service(dashboard_scope("/payhook", dashboard))`.
pub fn dashboard_scope<DB: Backend>(path: &str, dashboard: Dashboard<DB>) -> Scope {
    let base = path.trim_end_matches('/').to_owned();
    web::scope(&base.clone()).default_service(web::to(move |req: HttpRequest, payload: web::Payload| {
        let dashboard = dashboard.clone();
        let base = base.clone();
        async move { serve(&dashboard, &base, &req, payload).await }
    }))
}

async fn serve<DB: Backend>(
    dashboard: &Dashboard<DB>,
    base: &str,
    req: &HttpRequest,
    mut payload: web::Payload,
) -> HttpResponse {
    let mut body = Vec::new();
    while let Some(chunk) = payload.next().await {
        let Ok(chunk) = chunk else {
            return convert(dashboard.too_large());
        };
        if body.len() + chunk.len() > MAX_FORM_BYTES {
            return convert(dashboard.too_large());
        }
        body.extend_from_slice(&chunk);
    }
    let path = req.path().strip_prefix(base).unwrap_or("/");
    let path = if path.is_empty() { "/" } else { path };
    let method = http::Method::from_bytes(req.method().as_str().as_bytes()).unwrap_or(http::Method::GET);
    let mut headers = http::HeaderMap::new();
    for (name, value) in req.headers() {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name.as_str().as_bytes()),
            http::HeaderValue::from_bytes(value.as_bytes()),
        ) {
            headers.append(name, value);
        }
    }
    let query = req.query_string();
    let response = dashboard
        .handle(DashboardRequest {
            method: &method,
            base,
            path,
            query: (!query.is_empty()).then_some(query),
            headers: &headers,
            body: &body,
        })
        .await;
    convert(response)
}

fn convert(response: http::Response<String>) -> HttpResponse {
    let status = actix_web::http::StatusCode::from_u16(response.status().as_u16())
        .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
    let mut reply = HttpResponse::build(status);
    for (name, value) in response.headers() {
        reply.append_header((name.as_str(), value.as_bytes()));
    }
    reply.body(response.into_body())
}
