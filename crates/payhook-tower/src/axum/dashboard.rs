//! The inbox dashboard for axum: a `Router` to nest under a path of your
//! choosing.
//!
//! ```
//! use axum::Router;
//! use payhook::dashboard::Dashboard;
//! use payhook::inbox::Inbox;
//! use payhook::Receiver;
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! # let dir = std::env::temp_dir().join(format!("payhook-tower-dashboard-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! # let url = format!("sqlite://{}", dir.join("inbox.db").display());
//! let receiver = Receiver::builder().secret("whsec_test_secret").build().unwrap();
//! let inbox = Inbox::connect(receiver, &url).await.unwrap();
//! let dashboard = Dashboard::for_inbox(&inbox, "a-long-random-token-from-the-environment").unwrap();
//! let app: Router = Router::new()
//!     .route("/webhooks", payhook::tower::axum::inbox_route(inbox))
//!     .nest_service("/payhook", payhook::tower::axum::dashboard_router(dashboard));
//! # drop(app);
//! # });
//! ```

use axum::body::Body;
use axum::extract::{OriginalUri, Request};
use axum::http::Response;
use axum::Router;
use payhook_dashboard::{Dashboard, DashboardRequest, MAX_FORM_BYTES};
use payhook_inbox::Backend;

/// The dashboard as a `Router`; nest it where it should be served:
/// `Router::nest_service("/payhook", dashboard_router(dashboard))`. Its links
/// follow the path it is nested at.
pub fn dashboard_router<DB: Backend>(dashboard: Dashboard<DB>) -> Router {
    Router::new().fallback(move |request: Request| {
        let dashboard = dashboard.clone();
        async move { serve(&dashboard, request).await }
    })
}

async fn serve<DB: Backend>(dashboard: &Dashboard<DB>, request: Request) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path();
    let original = parts
        .extensions
        .get::<OriginalUri>()
        .map_or(path, |original| original.0.path());
    // The part of the original path above this router is where it is nested.
    let base = match original.strip_suffix(path) {
        Some(base) => base,
        None if path == "/" => original,
        None => "",
    };
    let base = base.trim_end_matches('/');
    let body = match axum::body::to_bytes(body, MAX_FORM_BYTES).await {
        Ok(body) => body,
        Err(_) => return dashboard.too_large().map(Body::from),
    };
    // The root of the mount is `/` here whether the request was for
    // `/payhook` or `/payhook/`.
    let path = if original.ends_with('/') || path != "/" {
        path
    } else {
        "/"
    };
    dashboard
        .handle(DashboardRequest {
            method: &parts.method,
            base,
            path,
            query: parts.uri.query(),
            headers: &parts.headers,
            body: &body,
        })
        .await
        .map(Body::from)
}
