//! Distributed tracing (feature `otel`): the span of each webhook request,
//! continuing the sender's W3C `traceparent`, and the trace context the
//! inbox keeps with a stored event so that each attempt joins the same trace.
//!
//! Without the feature every function here is a no-op (the spans are
//! [`Span::none`](tracing::Span::none), the context `None`), so adapters and
//! the inbox call them unconditionally and pay nothing.
//!
//! With it, the spans are ordinary `tracing` spans (target `payhook`, level
//! `INFO`) carrying OpenTelemetry's semantic-convention attributes; a
//! `tracing_opentelemetry` layer in the app's subscriber turns them into
//! OpenTelemetry spans (`payhook::otel::init` installs one that exports OTLP
//! over HTTP). Without such a layer nothing is propagated or stored.
//!
//! - [`request_span`]: one per webhook request, kind `server`, with
//!   `http.request.method`, `url.path` and, once answered,
//!   `http.response.status_code` ([`record_response`]); its parent is the
//!   sender's `traceparent` when the request carries a valid one, otherwise
//!   it starts a trace.
//! - [`messaging`]: the messaging attributes of an inline delivery, or of an
//!   inbox ingest that runs in a request span ([`is_request_span`])
//!   (`messaging.system` = [`MESSAGING_SYSTEM`], `messaging.operation.type`,
//!   `messaging.destination.name` = the namespace, `messaging.message.id` =
//!   the event id, `payhook.event.type`, `payhook.attempt`). The inbox's own
//!   ingest and attempt spans exist only for tracing and carry the same
//!   attributes as their own fields, which costs less per span than setting
//!   them afterwards.
//! - [`trace_context`] and [`continue_trace`]: the `traceparent` of a span, as
//!   the inbox stores it, and a span continuing a stored one.

use tracing::Span;

use crate::headers::Headers;

/// Whether payhook was built with feature `otel`: the spans and the stored
/// trace context exist only then.
pub const ENABLED: bool = cfg!(feature = "otel");

/// The `messaging.system` attribute of payhook's messaging spans.
pub const MESSAGING_SYSTEM: &str = "payhook";

/// The name of the spans [`request_span`] makes (target `payhook`).
pub const REQUEST_SPAN: &str = "webhook";

/// Whether `span` is one of [`request_span`]'s (and enabled): the inbox's
/// ingest then records its attributes on it instead of opening a span of
/// its own, so that a delivery through payhook's inbox routes is one span.
pub fn is_request_span(span: &Span) -> bool {
    // With `tracing`'s `log` feature a disabled span keeps its metadata:
    // only a recording one counts.
    !span.is_disabled()
        && span
            .metadata()
            .is_some_and(|metadata| metadata.target() == "payhook" && metadata.name() == REQUEST_SPAN)
}

/// What a span records about the delivery it belongs to, for [`messaging`].
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// `messaging.operation.type`: `send` for an inbox ingest, `process` for a
    /// handler run (inline, or an inbox attempt).
    pub operation: &'a str,
    /// `messaging.destination.name`: the receiver's or inbox's namespace.
    pub namespace: &'a str,
    /// `messaging.message.id`: the event id.
    pub event_id: &'a str,
    /// `payhook.event.type`: the event type.
    pub event_type: &'a str,
    /// `payhook.attempt`: the inbox attempt, 1 for the first.
    pub attempt: Option<u32>,
}

/// The span of one webhook request (name `webhook`, kind `server`), with the
/// HTTP server attributes, continuing the `traceparent` the sender sent (or
/// starting a trace). Adapters instrument the whole request with it, then
/// call [`record_response`]. `path` is the request's path (escaped in log
/// lines). [`Span::none`] without feature `otel`.
pub fn request_span(method: &str, path: &str, headers: &dyn Headers) -> Span {
    #[cfg(feature = "otel")]
    {
        otel::request_span(method, path, headers)
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = (method, path, headers);
        Span::none()
    }
}

/// Records the status the request was answered with on its
/// [`request_span`]; a 5xx marks the span as an error (a 4xx is the
/// sender's, not the server's, per the HTTP server conventions).
pub fn record_response(span: &Span, status: u16) {
    #[cfg(feature = "otel")]
    otel::record_response(span, status);
    #[cfg(not(feature = "otel"))]
    let _ = (span, status);
}

/// Sets the messaging attributes of `message` on `span`.
pub fn messaging(span: &Span, message: Message<'_>) {
    #[cfg(feature = "otel")]
    otel::messaging(span, message);
    #[cfg(not(feature = "otel"))]
    let _ = (span, message);
}

/// Marks `span` as failed, with `reason` (escaped and shortened as in log
/// lines) as the status description.
pub fn record_error(span: &Span, reason: &str) {
    #[cfg(feature = "otel")]
    otel::record_error(span, reason);
    #[cfg(not(feature = "otel"))]
    let _ = (span, reason);
}

/// The W3C `traceparent` of `span`, for the inbox to keep with the event;
/// `None` when the span belongs to no sampled OpenTelemetry trace (no
/// OpenTelemetry layer, the span disabled, or feature `otel` off).
pub fn trace_context(span: &Span) -> Option<String> {
    #[cfg(feature = "otel")]
    {
        otel::trace_context(span)
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = span;
        None
    }
}

/// Makes `span` (not yet entered) a child of the stored `traceparent`. A
/// value that does not parse is ignored: the span starts its own trace.
pub fn continue_trace(span: &Span, traceparent: &str) {
    #[cfg(feature = "otel")]
    otel::continue_trace(span, traceparent);
    #[cfg(not(feature = "otel"))]
    let _ = (span, traceparent);
}

#[cfg(feature = "otel")]
mod otel {
    use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
    use opentelemetry::trace::{Status, TraceContextExt};
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use super::Message;
    use crate::headers::{HeaderLookup, Headers};
    use crate::untrusted::Untrusted;

    const TRACEPARENT: &str = "traceparent";
    const TRACESTATE: &str = "tracestate";

    /// The request headers as the propagator reads them: `traceparent` and
    /// `tracestate` when present once and valid UTF-8, and a `tracestate`
    /// only when it is made of the characters W3C allows in one.
    struct HeaderCarrier<'a>(&'a dyn Headers);

    impl Extractor for HeaderCarrier<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            let key = key.to_ascii_lowercase();
            match self.0.lookup(&key) {
                HeaderLookup::Once(value) if key == TRACESTATE && !is_w3c_tracestate(value) => None,
                HeaderLookup::Once(value) => std::str::from_utf8(value).ok(),
                HeaderLookup::Missing | HeaderLookup::Repeated => None,
            }
        }

        fn keys(&self) -> Vec<&str> {
            vec![TRACEPARENT, TRACESTATE]
        }
    }

    /// Whether a `tracestate` value holds only what W3C Trace Context allows:
    /// printable ASCII, spaces and tabs. The propagator checks only for `,`
    /// and `=` inside a member, so a control or bidi character would reach
    /// every exported span's trace state raw; such a header is dropped whole,
    /// as an invalid `traceparent` is.
    fn is_w3c_tracestate(value: &[u8]) -> bool {
        value.iter().all(|&b| matches!(b, b' '..=b'~' | b'\t'))
    }

    /// One stored `traceparent`, as the propagator reads it.
    struct Stored<'a>(&'a str);

    impl Extractor for Stored<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            (key == TRACEPARENT).then_some(self.0)
        }

        fn keys(&self) -> Vec<&str> {
            vec![TRACEPARENT]
        }
    }

    /// Keeps the `traceparent` the propagator writes.
    #[derive(Default)]
    struct Capture(Option<String>);

    impl Injector for Capture {
        fn set(&mut self, key: &str, value: String) {
            if key == TRACEPARENT {
                self.0 = Some(value);
            }
        }
    }

    pub(super) fn request_span(method: &str, path: &str, headers: &dyn Headers) -> Span {
        let span = tracing::info_span!(
            target: "payhook",
            super::REQUEST_SPAN,
            otel.name = %format_args!("{method} {}", Untrusted::value(path)),
            otel.kind = "server",
            otel.status_code = tracing::field::Empty,
            http.request.method = %Untrusted::value(method),
            url.path = %Untrusted::value(path),
            http.response.status_code = tracing::field::Empty,
        );
        if span.is_disabled() {
            return span;
        }
        if matches!(headers.lookup(TRACEPARENT), HeaderLookup::Once(_)) {
            let parent = TraceContextPropagator::new().extract(&HeaderCarrier(headers));
            // No OpenTelemetry layer: nothing to continue.
            let _ = span.set_parent(parent);
        }
        span
    }

    pub(super) fn record_response(span: &Span, status: u16) {
        span.record("http.response.status_code", status);
        if status >= 500 {
            span.record("otel.status_code", "error");
        }
    }

    pub(super) fn messaging(span: &Span, message: Message<'_>) {
        if span.is_disabled() {
            return;
        }
        span.set_attribute("messaging.system", super::MESSAGING_SYSTEM);
        span.set_attribute("messaging.operation.type", message.operation.to_owned());
        span.set_attribute("messaging.destination.name", message.namespace.to_owned());
        // Request values, shown in the tracing backend's UI: the same rule
        // as every other place they are shown.
        span.set_attribute(
            "messaging.message.id",
            Untrusted::value(message.event_id).to_string(),
        );
        span.set_attribute(
            "payhook.event.type",
            Untrusted::value(message.event_type).to_string(),
        );
        if let Some(attempt) = message.attempt {
            span.set_attribute("payhook.attempt", i64::from(attempt));
        }
    }

    pub(super) fn record_error(span: &Span, reason: &str) {
        if !span.is_disabled() {
            span.set_status(Status::error(Untrusted::message(reason).to_string()));
        }
    }

    pub(super) fn trace_context(span: &Span) -> Option<String> {
        if span.is_disabled() {
            return None;
        }
        let context = span.context();
        if !context.span().span_context().is_valid() {
            return None;
        }
        let mut capture = Capture::default();
        TraceContextPropagator::new().inject_context(&context, &mut capture);
        capture.0
    }

    pub(super) fn continue_trace(span: &Span, traceparent: &str) {
        if span.is_disabled() {
            return;
        }
        let parent = TraceContextPropagator::new().extract(&Stored(traceparent));
        if parent.span().span_context().is_valid() {
            let _ = span.set_parent(parent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_enabled_payhook_request_span_is_one() {
        use tracing_subscriber::layer::SubscriberExt;

        let named = || tracing::info_span!(target: "payhook", "webhook");
        // Disabled by a filter, as `payhook::otel::init` does without an
        // endpoint: not a request span (with `tracing`'s `log` feature on,
        // a disabled span still carries its name and target).
        let filtered =
            tracing_subscriber::registry().with(tracing_subscriber::filter::filter_fn(|metadata| {
                metadata.name() != REQUEST_SPAN
            }));
        tracing::subscriber::with_default(filtered, || {
            assert!(named().is_disabled());
            assert!(!is_request_span(&named()));
        });
        let _default = tracing::subscriber::set_default(tracing_subscriber::registry());
        assert!(is_request_span(&named()));
        assert!(!is_request_span(&tracing::info_span!(target: "app", "webhook")));
        assert!(!is_request_span(
            &tracing::info_span!(target: "payhook", "delivery")
        ));
        assert!(!is_request_span(&Span::none()));
    }
}
