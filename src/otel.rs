//! OpenTelemetry traces exported as OTLP over HTTP (feature `otel`): the one
//! line an app (and every example) writes to get them.
//!
//! With the feature, payhook's spans carry OpenTelemetry's semantic
//! conventions: each webhook request is a `server` span that continues the
//! `traceparent` the sender sent (or starts a trace), the inline delivery and
//! the inbox ingest are its children, the inbox stores the trace context with
//! the event, and every attempt — the handler's own spans included — is a
//! child in that same trace (why a child and not a link:
//! [the guide's "Tracing" section](crate::guide::production#tracing)).
//!
//! [`init`] installs the global `tracing` subscriber: log lines to stderr at
//! the level `RUST_LOG` asks for (default `info`), and, **only when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set**, an OpenTelemetry layer whose
//! spans go to that endpoint as OTLP over HTTP with protobuf bodies (the
//! exporter appends `/v1/traces`; `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME` and
//! `OTEL_RESOURCE_ATTRIBUTES` are read as the OpenTelemetry SDK reads them).
//! Unset, no OpenTelemetry layer is installed: nothing is exported, no trace
//! context is propagated or stored, and `init` disables the spans payhook
//! makes for OpenTelemetry alone ([`TRACE_SPANS`]) at their callsites, so
//! they cost what any disabled `tracing` span costs (one cached check). An
//! app with a subscriber of its own and no endpoint keeps them unless it
//! filters them out: its other layers (a log formatter at `INFO`) then see
//! them, and pay for them.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let _otel = payhook::otel::init("my-webhooks")?; // keep it: dropping it flushes the last spans
//! # Ok(()) }
//! ```
//!
//! An app with a subscriber of its own adds the layer to it instead:
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt;
//! use tracing_subscriber::util::SubscriberInitExt;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let otel = payhook::otel::Otel::from_env("my-webhooks")?;
//! tracing_subscriber::registry()
//!     .with(tracing_subscriber::fmt::layer())
//!     .with(otel.layer()) // `None` (no layer) when no endpoint is set
//!     .init();
//! # Ok(()) }
//! ```
//!
//! The layer records each span's own fields and nothing about where in
//! payhook it was made: no `code.*` location, `thread.*`, `target` or
//! busy/idle-time attributes. They describe payhook's internals rather than
//! the delivery, and each costs every span an attribute to build and
//! export. An app that wants them builds its own `tracing_opentelemetry`
//! layer and exporter.
//!
//! `https://` endpoints need a TLS backend in the exporter's HTTP client
//! (reqwest): enable one of reqwest's TLS features in the app.

use std::fmt;
use std::io::IsTerminal;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

pub use opentelemetry_otlp::ExporterBuildError;

/// The variable whose presence turns the export on.
pub const ENDPOINT_VARIABLE: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// The names of the spans (target `payhook`) made for OpenTelemetry alone:
/// each webhook request's `server` span, the inbox ingest's `producer` span
/// (made only outside payhook's inbox routes, whose request span is the
/// delivery's one span) and each attempt's `consumer` span. [`init`]
/// disables them when nothing is exported.
pub const TRACE_SPANS: [&str; 3] = [payhook_core::trace::REQUEST_SPAN, "ingest", "attempt"];

/// Whether `metadata` is one of the [`TRACE_SPANS`].
fn is_trace_span(metadata: &tracing::Metadata<'_>) -> bool {
    metadata.is_span() && metadata.target() == "payhook" && TRACE_SPANS.contains(&metadata.name())
}

/// The OTLP/HTTP trace export, when configured: hand its [`layer`](Self::layer)
/// to the app's subscriber and keep it for the life of the process. Dropping
/// it flushes the spans not yet sent and stops the exporter.
pub struct Otel {
    provider: Option<SdkTracerProvider>,
}

impl fmt::Debug for Otel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Otel")
            .field("exporting", &self.is_exporting())
            .finish()
    }
}

impl Otel {
    /// The export to `OTEL_EXPORTER_OTLP_ENDPOINT` (OTLP over HTTP,
    /// protobuf, batched on the SDK's own thread), or none when the variable
    /// is unset or empty. `service_name` is the resource's `service.name`
    /// unless `OTEL_SERVICE_NAME` names one. Also sets the W3C trace-context
    /// propagator and this provider as OpenTelemetry's globals, for the app's
    /// own outgoing calls.
    ///
    /// # Errors
    /// The exporter could not be built (an endpoint that is not a URL, an
    /// invalid `OTEL_EXPORTER_OTLP_HEADERS`).
    pub fn from_env(service_name: &str) -> Result<Self, ExporterBuildError> {
        let configured = std::env::var_os(ENDPOINT_VARIABLE).is_some_and(|endpoint| !endpoint.is_empty());
        if !configured {
            return Ok(Self { provider: None });
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .build()?;
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(service_name.to_owned());
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        opentelemetry::global::set_tracer_provider(provider.clone());
        Ok(Self {
            provider: Some(provider),
        })
    }

    /// Whether spans are exported (`OTEL_EXPORTER_OTLP_ENDPOINT` was set).
    pub fn is_exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// The `tracing` layer that turns spans into OpenTelemetry spans for
    /// this export, with each span's own fields as its attributes (see the
    /// [module docs](self)); `None` (which is a layer that does nothing)
    /// without one.
    pub fn layer<S>(&self) -> Option<OpenTelemetryLayer<S, SdkTracer>>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        let provider = self.provider.as_ref()?;
        Some(
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("payhook"))
                .with_location(false)
                .with_threads(false)
                .with_tracked_inactivity(false)
                .with_target(false),
        )
    }
}

impl Drop for Otel {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            // Flushes what the batch holds; a collector that is gone only
            // loses those spans.
            let _ = provider.shutdown();
        }
    }
}

/// Installs the global `tracing` subscriber: log lines to stderr filtered by
/// `RUST_LOG` (default `info`), plus the [`Otel`] export of
/// `OTEL_EXPORTER_OTLP_ENDPOINT` when it is set; when it is not, the
/// [`TRACE_SPANS`] are disabled, so that nothing slows down. Keep the
/// returned value until the process ends.
///
/// Log lines are coloured only when stderr is a terminal. A global
/// subscriber installed before is left in place (build yours with
/// [`Otel::layer`] instead).
///
/// # Errors
/// The exporter could not be built ([`Otel::from_env`]); nothing is
/// installed then.
pub fn init(service_name: &str) -> Result<Otel, ExporterBuildError> {
    let otel = Otel::from_env(service_name)?;
    let exporting = otel.is_exporting();
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal()),
        )
        .with(otel.layer())
        .with(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with(tracing_subscriber::filter::filter_fn(move |metadata| {
            exporting || !is_trace_span(metadata)
        }))
        .try_init();
    Ok(otel)
}
