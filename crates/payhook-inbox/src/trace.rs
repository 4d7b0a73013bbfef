//! The inbox's spans (feature `otel`): the ingest of a delivery, whose trace
//! context is stored with the event, and each attempt, which continues it.
//!
//! Each attempt's span is a **child** of the delivery's span (the request
//! span in payhook's inbox routes, the ingest span otherwise), not a new trace
//! with a link to it. A link is what OpenTelemetry's messaging conventions
//! prescribe when one consumer span processes many messages, or when the
//! consumer cannot know the producer's trace; here each attempt handles
//! exactly one event whose trace is stored beside it, and the on-call question
//! is "what happened to this delivery", which a trace viewer answers only when
//! the acknowledgement, every retry and the handler's own spans are one trace
//! under the sender's `traceparent`. The cost is a trace that lasts as long
//! as the retries (a retry hours later is a late child of a finished span),
//! which trace backends show as a gap; a parent-based sampler then also keeps
//! or drops the whole delivery together rather than its attempts one by one.
//!
//! Without feature `otel` no span is created and `NULL` is stored.

use payhook_core::trace::{self, Message};
use payhook_core::untrusted::Untrusted;
use payhook_core::Event;
use tracing::Span;

use crate::model::{Claimed, NewRow};

/// The span a delivery's ingest runs in, and the trace context its row keeps.
///
/// In payhook's inbox routes the adapter's request span is current: it is
/// the delivery's one span, so it takes the messaging attributes (operation
/// `send`), its context is stored, and no span is added (`Span::none()` is
/// returned: the store already runs in the request span). A second span per
/// delivery would double what tracing costs an ingest (BENCHMARKS.md,
/// "Tracing overhead") and say nothing the request span does not. Anywhere
/// else (an app's own route calling `Inbox::ingest`), the ingest gets a span
/// of its own, `send {namespace}` of kind `producer`, a child of whatever
/// span is current. Without feature `otel`: no span and no context.
pub(crate) fn ingest_trace(namespace: &str, row: &NewRow) -> (Span, Option<String>) {
    if !trace::ENABLED {
        return (Span::none(), None);
    }
    let current = Span::current();
    if trace::is_request_span(&current) {
        trace::messaging(
            &current,
            Message {
                operation: "send",
                namespace,
                event_id: &row.event_id,
                event_type: &row.event_type,
                attempt: None,
            },
        );
        return (Span::none(), trace::trace_context(&current));
    }
    // The messaging attributes are the span's own fields, each recorded
    // once for the log formatter and once for the exporter.
    let span = tracing::info_span!(
        target: "payhook",
        "ingest",
        otel.name = %format_args!("send {}", Untrusted::value(namespace)),
        otel.kind = "producer",
        "messaging.system" = trace::MESSAGING_SYSTEM,
        "messaging.operation.type" = "send",
        "messaging.destination.name" = namespace,
        "messaging.message.id" = %Untrusted::value(&row.event_id),
        "payhook.event.type" = %Untrusted::value(&row.event_type),
    );
    let context = trace::trace_context(&span);
    (span, context)
}

/// The span of one attempt (`process {namespace}`, kind `consumer`), a child
/// of the trace context stored with the event (a new trace when none was);
/// [`Span::none`] without feature `otel`.
pub(crate) fn attempt_span(namespace: &str, claimed: &Claimed, event: &Event, attempt: u32) -> Span {
    if !trace::ENABLED {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: "payhook",
        parent: None,
        "attempt",
        otel.name = %format_args!("process {}", Untrusted::value(namespace)),
        otel.kind = "consumer",
        "messaging.system" = trace::MESSAGING_SYSTEM,
        "messaging.operation.type" = "process",
        "messaging.destination.name" = namespace,
        "messaging.message.id" = %Untrusted::value(event.id()),
        "payhook.event.type" = %Untrusted::value(event.event_type()),
        "payhook.attempt" = attempt,
    );
    if let Some(stored) = &claimed.trace_context {
        trace::continue_trace(&span, stored);
    }
    span
}
