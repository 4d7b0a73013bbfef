//! What the inbox records for an operator, captured once per test binary:
//! its metrics through a Prometheus recorder, its log lines through a
//! subscriber (both process-wide, installed by the first test that reads
//! them). Every test that reads them has its own namespace and event ids, so
//! tests running at once read only their own series and lines.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use payhook_test_support::{prometheus_samples, CapturedLog};

/// The process's metrics and `payhook` log lines (at `DEBUG` and above).
pub struct Telemetry {
    pub prometheus: PrometheusHandle,
    pub log: CapturedLog,
}

/// Installs the recorder and the subscriber on the first call. A test calls
/// it before it makes its inbox, whose metrics and spans then reach them.
pub fn telemetry() -> &'static Telemetry {
    static TELEMETRY: OnceLock<Telemetry> = OnceLock::new();
    TELEMETRY.get_or_init(|| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let prometheus = recorder.handle();
        metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");
        let log = CapturedLog::default();
        let sink = log.clone();
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("payhook=debug"))
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .try_init()
            .expect("the only subscriber of this test binary");
        Telemetry { prometheus, log }
    })
}

/// The sample of metric `name` for `namespace` in a Prometheus text
/// rendering, if rendered.
pub fn namespace_sample(text: &str, name: &str, namespace: &str) -> Option<f64> {
    prometheus_samples(text, name)
        .get(&format!("namespace=\"{namespace}\""))
        .copied()
}
