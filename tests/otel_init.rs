//! `payhook::otel::init` without `OTEL_EXPORTER_OTLP_ENDPOINT`: nothing is
//! exported and the spans made for OpenTelemetry alone
//! (`payhook::otel::TRACE_SPANS`) are disabled at their callsites, so they
//! cost what a disabled span costs; payhook's other spans and log lines at
//! `INFO` stay. (Its own test binary: `init` installs the process's global
//! subscriber.)

#[test]
fn without_an_endpoint_init_disables_the_spans_made_for_opentelemetry() {
    std::env::remove_var(payhook::otel::ENDPOINT_VARIABLE);
    std::env::remove_var("RUST_LOG");
    let otel = payhook::otel::init("payhook-test").unwrap();
    assert!(!otel.is_exporting());
    assert!(tracing::info_span!(target: "payhook", "webhook").is_disabled());
    assert!(tracing::info_span!(target: "payhook", "ingest").is_disabled());
    assert!(tracing::info_span!(target: "payhook", "attempt").is_disabled());
    // The delivery span exists without the feature: it stays for the logs.
    assert!(!tracing::info_span!(target: "payhook", "delivery").is_disabled());
    assert!(tracing::enabled!(target: "payhook", tracing::Level::INFO));
}
