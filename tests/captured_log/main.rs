//! The tests that read what payhook logs, in a test binary of their own
//! (the rest are in `tests/integration/`): they install the process's one
//! global `tracing` subscriber, [`captured`], and read every line logged in
//! the process. Each test calls [`captured`] before it makes a span or starts
//! a server: a span made before the subscriber exists is not in the lines
//! logged inside it (one run logged a failed delivery's lines without its
//! `delivery` span, so without its event id, when the subscriber came while
//! other tests were already delivering).

#[path = "../integration/support/mod.rs"]
mod support;

mod actix_worker_stores;
mod redis_replicas;

use std::sync::OnceLock;

use payhook_test_support::CapturedLog;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

/// What the process logged since [`captured`] first ran, in two logs.
pub struct Captured {
    /// Every `WARN` and `ERROR` line, of any target.
    pub warnings: CapturedLog,
    /// payhook's `ERROR` lines, each with the payhook spans it was logged in
    /// (they carry the event id).
    pub payhook_errors: CapturedLog,
}

/// Installs the global subscriber on its first call, and returns its logs.
pub fn captured() -> &'static Captured {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    CAPTURED.get_or_init(|| {
        let (warnings, payhook_errors) = (CapturedLog::default(), CapturedLog::default());
        let warnings_writer = warnings.clone();
        let warnings_layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || warnings_writer.clone())
            .with_filter(tracing::level_filters::LevelFilter::WARN);
        // payhook's spans and its ERROR lines only: the other tests of this
        // binary then pay next to nothing for this capture.
        let payhook_errors_writer = payhook_errors.clone();
        let payhook_errors_layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || payhook_errors_writer.clone())
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.target() == "payhook" && (meta.is_span() || *meta.level() == tracing::Level::ERROR)
            }));
        let subscriber = tracing_subscriber::registry()
            .with(warnings_layer)
            .with(payhook_errors_layer);
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
        Captured {
            warnings,
            payhook_errors,
        }
    })
}
