//! The dashboard's own thread: where its pages are read from the database
//! and rendered, so that the app's runtime workers stay free for deliveries.
//!
//! Reading a page (decoding its rows) and writing its HTML is CPU work; on the
//! app's runtime it would take the workers that acknowledge deliveries, and
//! on a small machine a few people reloading filtered pages would slow every
//! acknowledgement. On a runtime of one worker thread of its own the
//! dashboard uses at most about one core however many pages are asked for:
//! the others wait for their turn (within the page deadline). The thread is
//! started with the first request and stopped when the last clone of the
//! dashboard is dropped.

use std::future::Future;
use std::sync::OnceLock;

use http::{HeaderMap, Method};
use tokio::runtime::{Builder, Handle, Runtime};
use tokio::task::JoinHandle;

use crate::DashboardRequest;

/// The name of the dashboard's thread (as `top -H` and debuggers show it).
pub(crate) const THREAD_NAME: &str = "payhook-dashboard";

/// A runtime of one worker thread, started on first use.
#[derive(Default)]
pub(crate) struct PageThread {
    runtime: OnceLock<Option<Runtime>>,
}

impl PageThread {
    /// Runs `job` on the dashboard's thread (on the caller's runtime only if
    /// that thread could not be started).
    pub(crate) fn spawn<F>(&self, job: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let runtime = self.runtime.get_or_init(|| {
            Builder::new_multi_thread()
                .worker_threads(1)
                .max_blocking_threads(1)
                .thread_name(THREAD_NAME)
                .enable_all()
                .build()
                .ok()
        });
        match runtime {
            Some(runtime) => runtime.spawn(job),
            None => Handle::current().spawn(job),
        }
    }
}

impl Drop for PageThread {
    fn drop(&mut self) {
        // Without waiting: the last clone of a dashboard may be dropped in
        // async code, or on this very thread by a page still running.
        if let Some(runtime) = self.runtime.take().flatten() {
            runtime.shutdown_background();
        }
    }
}

/// A request with its own copies of what it borrowed, to move to the
/// dashboard's thread.
pub(crate) struct OwnedRequest {
    method: Method,
    base: String,
    path: String,
    query: Option<String>,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl OwnedRequest {
    pub(crate) fn new(request: &DashboardRequest<'_>) -> Self {
        Self {
            method: request.method.clone(),
            base: request.base.to_owned(),
            path: request.path.to_owned(),
            query: request.query.map(str::to_owned),
            headers: request.headers.clone(),
            body: request.body.to_vec(),
        }
    }

    pub(crate) fn request(&self) -> DashboardRequest<'_> {
        DashboardRequest {
            method: &self.method,
            base: &self.base,
            path: &self.path,
            query: self.query.as_deref(),
            headers: &self.headers,
            body: &self.body,
        }
    }
}
