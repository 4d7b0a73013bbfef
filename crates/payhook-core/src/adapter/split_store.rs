//! The setup check for one route served by receivers with distinct in-memory
//! stores, whose dedupe would then only work per worker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::receiver::Receiver;
use crate::store::DynStore;

/// Notices one route served by receivers with distinct in-memory stores.
///
/// A receiver that keeps its own [`MemoryStore`](crate::MemoryStore) (no store
/// set on its builder) dedupes only the requests it sees itself. A framework
/// that builds the app once per worker thread (actix-web's `HttpServer::new`
/// closure) makes one receiver, hence one store, per worker when the receiver is
/// built inside that closure: a duplicate that lands on another worker runs the
/// handler again. An adapter keeps one `SplitStoreCheck` per configured
/// receiver and calls [`check`](Self::check) with the route of each request; the
/// first request of each logs a warning (target `payhook`) if the same route in
/// the same namespace is already served by another live in-memory store.
#[derive(Debug, Clone, Default)]
pub struct SplitStoreCheck {
    done: Arc<OnceLock<()>>,
}

type RouteStores = HashMap<(String, String), Weak<dyn DynStore>>;

/// At most this many routes are remembered (their patterns, not request paths).
const MAX_CHECKED_ROUTES: usize = 256;

impl SplitStoreCheck {
    /// A check not run yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks `receiver` serving `route` (the route's pattern, e.g. `/webhooks`)
    /// once; returns `true` when it warned.
    pub fn check(&self, receiver: &Receiver, route: &str) -> bool {
        let mut warned = false;
        self.done.get_or_init(|| {
            warned = record_route_store(receiver, route);
        });
        warned
    }
}

fn record_route_store(receiver: &Receiver, route: &str) -> bool {
    static ROUTES: OnceLock<Mutex<RouteStores>> = OnceLock::new();
    let Some((namespace, store)) = receiver.own_store() else {
        return false; // a store set on the builder may well be shared
    };
    let Ok(mut routes) = ROUTES.get_or_init(Mutex::default).lock() else {
        return false;
    };
    routes.retain(|_, seen| seen.strong_count() > 0);
    let key = (route.to_owned(), namespace.to_owned());
    match routes.get(&key) {
        Some(seen) if !seen.ptr_eq(&store) => {
            tracing::warn!(
                target: "payhook",
                route = %crate::untrusted::Untrusted::value(route),
                namespace = %crate::untrusted::Untrusted::value(namespace),
                "this route is served by several receivers, each with its own in-memory store, \
                 so a duplicate delivery reaching another worker runs the handler again; \
                 build the Receiver once, outside the per-worker app factory, and clone it in \
                 (or give every receiver one shared store)"
            );
            true
        }
        Some(_) => false,
        None => {
            if routes.len() < MAX_CHECKED_ROUTES {
                routes.insert(key, store);
            }
            false
        }
    }
}
