//! Feature `otel` against a real OTLP/HTTP endpoint: a receiver on loopback
//! decodes each `ExportTraceServiceRequest` (protobuf, with the
//! `opentelemetry-proto` types) that `payhook::otel` exports to
//! `OTEL_EXPORTER_OTLP_ENDPOINT`. A delivery carrying a W3C `traceparent`,
//! inline and through the inbox, leaves spans in the sender's trace: the
//! request span (child of the sender's span, and through the inbox the
//! delivery's one span), the inline delivery span, every inbox attempt and
//! the handler's own span; an ingest outside payhook's routes has a `send`
//! span of its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use payhook::inbox::sqlx;
use payhook::inbox::{HandlerError, Inbox, Job};
use payhook::sender::SignedDelivery;
use payhook::tower::axum::{Received, Webhook};
use payhook::tower::WebhookLayer;
use payhook::{sign, Event, Receiver, Secret};
use prost::Message as _;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

const SECRET: &str = "whsec_otel";

/// One exported span, as the collector received it.
#[derive(Debug, Clone)]
struct Exported {
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    name: String,
    kind: i32,
    attributes: HashMap<String, String>,
    service: Option<String>,
    trace_state: String,
}

type Spans = Arc<Mutex<Vec<Exported>>>;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(text)) => text.clone(),
        Some(Value::IntValue(number)) => number.to_string(),
        Some(Value::BoolValue(flag)) => flag.to_string(),
        Some(Value::DoubleValue(number)) => number.to_string(),
        other => format!("{other:?}"),
    }
}

/// The OTLP/HTTP endpoint: `POST /v1/traces` with a protobuf body, on its own
/// thread and runtime (the SDK's exporter thread blocks on it while the
/// test's runtime waits for the flush). Started once; its URL is put in
/// `OTEL_EXPORTER_OTLP_ENDPOINT` before any exporter is built.
fn collector() -> &'static Spans {
    static COLLECTOR: OnceLock<Spans> = OnceLock::new();
    COLLECTOR.get_or_init(|| {
        let spans: Spans = Arc::default();
        let kept = Arc::clone(&spans);
        let (bound, address) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let app = axum::Router::new().route(
                    "/v1/traces",
                    post(move |headers: axum::http::HeaderMap, body: Bytes| {
                        let kept = Arc::clone(&kept);
                        async move {
                            assert_eq!(
                                headers.get("content-type").and_then(|value| value.to_str().ok()),
                                Some("application/x-protobuf"),
                                "OTLP over HTTP with protobuf bodies"
                            );
                            let request =
                                ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf request");
                            let mut kept = kept.lock().unwrap();
                            for resource_spans in request.resource_spans {
                                let service = resource_spans.resource.as_ref().and_then(|resource| {
                                    resource
                                        .attributes
                                        .iter()
                                        .find(|attribute| attribute.key == "service.name")
                                        .map(|attribute| {
                                            text(attribute.value.as_ref().and_then(|v| v.value.as_ref()))
                                        })
                                });
                                for scope in resource_spans.scope_spans {
                                    for span in scope.spans {
                                        kept.push(Exported {
                                            trace_id: hex(&span.trace_id),
                                            span_id: hex(&span.span_id),
                                            parent_span_id: hex(&span.parent_span_id),
                                            name: span.name.clone(),
                                            kind: span.kind,
                                            attributes: span
                                                .attributes
                                                .iter()
                                                .map(|attribute| {
                                                    (
                                                        attribute.key.clone(),
                                                        text(
                                                            attribute
                                                                .value
                                                                .as_ref()
                                                                .and_then(|v| v.value.as_ref()),
                                                        ),
                                                    )
                                                })
                                                .collect(),
                                            service: service.clone(),
                                            trace_state: span.trace_state.clone(),
                                        });
                                    }
                                }
                            }
                            (
                                [("content-type", "application/x-protobuf")],
                                ExportTraceServiceResponse::default().encode_to_vec(),
                            )
                        }
                    }),
                );
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                bound.send(listener.local_addr().unwrap()).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        let address = address.recv().unwrap();
        // Set once, before any exporter reads it (every test goes through here first).
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{address}"));
        std::env::remove_var("OTEL_SERVICE_NAME");
        spans
    })
}

/// A fresh trace id and parent span id, as the sender's tracing would send them.
/// This thread's subscriber exporting to the collector as `service`, until
/// [`flush`](Exporting::flush).
struct Exporting {
    default: tracing::subscriber::DefaultGuard,
    otel: payhook::otel::Otel,
}

impl Exporting {
    /// Puts the subscriber away and drops the export, which sends what its
    /// batch holds: the collector has every span once this returns.
    fn flush(self) {
        drop(self.default);
        drop(self.otel);
    }
}

/// The collector's spans, and an export to it installed on this thread.
fn exporting(service: &str) -> (&'static Spans, Exporting) {
    let spans = collector(); // first: it sets the endpoint the export reads
    let otel = payhook::otel::Otel::from_env(service).unwrap();
    assert!(otel.is_exporting());
    let default = tracing::subscriber::set_default(tracing_subscriber::registry().with(otel.layer()));
    (spans, Exporting { default, otel })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An inbox on a SQLite file of its own, namespace `namespace`, polling
/// often and retrying within 20 ms.
async fn sqlite_inbox(namespace: &str) -> Inbox {
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    Inbox::builder(receiver)
        .namespace(namespace)
        .poll_interval(Duration::from_millis(20))
        .backoff(Duration::from_millis(10), Duration::from_millis(20))
        .connect(&payhook_test_support::sqlite_url(namespace))
        .await
        .unwrap()
}

/// Headers with a valid signature of `body`, made now.
fn signed_headers(body: &Bytes) -> axum::http::HeaderMap {
    SignedDelivery::now(body.clone(), SECRET).unwrap().headers()
}

/// The trace context the inbox stored with event `event_id`.
async fn stored_context(pool: &sqlx::AnyPool, event_id: &str) -> Option<String> {
    sqlx::query_scalar("SELECT trace_context FROM payhook_inbox WHERE event_id = $1")
        .bind(event_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

fn traceparent() -> (String, String, String) {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    let trace_id = format!("{:032x}", nanos ^ 0x5eed_0000_0000_0000_0000_0000_0000_0001);
    let span_id = format!("{:016x}", (nanos as u64) | 1);
    let header = format!("00-{trace_id}-{span_id}-01");
    (header, trace_id, span_id)
}

async fn deliver(url: &str, body: &str, traceparent: &str) -> u16 {
    deliver_with_state(url, body, traceparent, None).await
}

/// A delivery carrying `traceparent` and, when given, `tracestate` as raw
/// bytes (a header value may hold any byte but control characters).
async fn deliver_with_state(url: &str, body: &str, traceparent: &str, tracestate: Option<&[u8]>) -> u16 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header(
            "x-service-signature",
            sign(body.as_bytes(), &Secret::new(SECRET).unwrap(), now),
        )
        .header("traceparent", traceparent);
    if let Some(state) = tracestate {
        request = request.header(
            "tracestate",
            reqwest::header::HeaderValue::from_bytes(state).unwrap(),
        );
    }
    request
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

fn of_trace(spans: &Spans, trace_id: &str) -> Vec<Exported> {
    spans
        .lock()
        .unwrap()
        .iter()
        .filter(|span| span.trace_id == trace_id)
        .cloned()
        .collect()
}

fn named<'a>(spans: &'a [Exported], name: &str) -> Vec<&'a Exported> {
    spans.iter().filter(|span| span.name == name).collect()
}

fn one<'a>(spans: &'a [Exported], name: &str) -> &'a Exported {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one span {name:?} in {spans:#?}");
    found[0]
}

#[test]
fn an_inline_delivery_continues_the_senders_trace_through_the_handler() {
    let (spans, export) = exporting("otel-test-inline");
    let (header, trace_id, sender_span) = traceparent();

    let runtime = runtime();
    runtime.block_on(async {
        async fn handler(Webhook(event): Webhook<Event>) -> Received {
            async { tracing::info!(target: "app", id = event.id(), "handled") }
                .instrument(tracing::info_span!(target: "app", "handler_work"))
                .await;
            Received
        }
        let receiver = Receiver::builder()
            .secret(SECRET)
            .namespace("otel-inline")
            .build()
            .unwrap();
        let app = axum::Router::new()
            .route("/webhooks", post(handler))
            .route_layer(WebhookLayer::new(receiver));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        // The id carries a bidi override: a span attribute is shown in the
        // tracing backend's UI, so it is escaped like every shown value.
        let body = r#"{"id":"evt_otel_\u202einline","type":"customer.created","data":{"object":{}}}"#;
        assert_eq!(
            deliver(&format!("http://{addr}/webhooks"), body, &header).await,
            200
        );
    });
    export.flush();

    let trace = of_trace(spans, &trace_id);
    let request = one(&trace, "POST /webhooks");
    assert_eq!(
        request.parent_span_id, sender_span,
        "the request span is the sender's span's child"
    );
    assert_eq!(request.kind, SpanKind::Server as i32);
    assert_eq!(request.attributes["http.request.method"], "POST");
    assert_eq!(request.attributes["url.path"], "/webhooks");
    assert_eq!(request.attributes["http.response.status_code"], "200");
    assert_eq!(request.service.as_deref(), Some("otel-test-inline"));
    // Only the span's own fields: nothing about payhook's code or threads.
    for span in &trace {
        let internal: Vec<&String> = span
            .attributes
            .keys()
            .filter(|key| {
                key.starts_with("code.")
                    || key.starts_with("thread.")
                    || ["target", "busy_ns", "idle_ns"].contains(&key.as_str())
            })
            .collect();
        assert!(internal.is_empty(), "{}: {internal:?}", span.name);
    }
    let delivery = one(&trace, "delivery");
    assert_eq!(delivery.parent_span_id, request.span_id);
    assert_eq!(delivery.attributes["messaging.system"], "payhook");
    assert_eq!(delivery.attributes["messaging.operation.type"], "process");
    assert_eq!(
        delivery.attributes["messaging.message.id"],
        r"evt_otel_\u{202e}inline"
    );
    assert_eq!(delivery.attributes["messaging.destination.name"], "otel-inline");
    assert_eq!(delivery.attributes["payhook.event.type"], "customer.created");
    let handler = one(&trace, "handler_work");
    assert_eq!(
        handler.parent_span_id, delivery.span_id,
        "the handler runs in the delivery's span"
    );
}

#[test]
fn an_inbox_delivery_keeps_its_trace_through_every_attempt_and_the_handler() {
    let (spans, export) = exporting("otel-test-inbox");
    let (header, trace_id, sender_span) = traceparent();

    let runtime = runtime();
    let stored = runtime.block_on(async {
        let inbox = sqlite_inbox("otel-inbox").await;
        // The first attempt fails, the second succeeds: two attempts, one trace.
        let workers = inbox.start(|job: Job| async move {
            async {
                tracing::info!(target: "app", attempt = job.attempt(), "handling");
            }
            .instrument(tracing::info_span!(target: "app", "handler_work"))
            .await;
            if job.attempt() == 1 {
                return Err(HandlerError::from("the ledger is down"));
            }
            Ok(())
        });
        let pool = inbox.pool().clone();
        let app = axum::Router::new().route("/webhooks", payhook::tower::axum::inbox_route(inbox.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let body = r#"{"id":"evt_otel_inbox","type":"customer.created","data":{"object":{}}}"#;
        assert_eq!(
            deliver(&format!("http://{addr}/webhooks"), body, &header).await,
            200
        );
        inbox.wait_idle(Duration::from_secs(20)).await.unwrap();
        workers.shutdown().await;
        stored_context(&pool, "evt_otel_inbox").await
    });
    export.flush();

    let trace = of_trace(spans, &trace_id);
    // In payhook's inbox route the request span is the delivery's one span:
    // it carries the ingest's messaging attributes, and no `send` span is added.
    let request = one(&trace, "POST /webhooks");
    assert_eq!(request.parent_span_id, sender_span);
    assert_eq!(request.attributes["http.response.status_code"], "200");
    assert_eq!(request.attributes["messaging.system"], "payhook");
    assert_eq!(request.attributes["messaging.operation.type"], "send");
    assert_eq!(request.attributes["messaging.destination.name"], "otel-inbox");
    assert_eq!(request.attributes["messaging.message.id"], "evt_otel_inbox");
    assert_eq!(request.attributes["payhook.event.type"], "customer.created");
    assert!(named(&trace, "send otel-inbox").is_empty(), "{trace:#?}");
    // The row keeps the request span's context: each attempt is its child.
    let stored = stored.expect("the trace context is stored with the event");
    assert_eq!(stored, format!("00-{trace_id}-{}-01", request.span_id));
    let mut attempts = named(&trace, "process otel-inbox");
    attempts.sort_by_key(|span| span.attributes["payhook.attempt"].clone());
    assert_eq!(
        attempts.len(),
        2,
        "both attempts are in the delivery's trace: {trace:#?}"
    );
    for (number, attempt) in attempts.iter().enumerate() {
        assert_eq!(attempt.parent_span_id, request.span_id);
        assert_eq!(attempt.kind, SpanKind::Consumer as i32);
        assert_eq!(attempt.attributes["payhook.attempt"], (number + 1).to_string());
        assert_eq!(attempt.attributes["messaging.operation.type"], "process");
        assert_eq!(attempt.attributes["messaging.message.id"], "evt_otel_inbox");
        assert_eq!(attempt.attributes["payhook.event.type"], "customer.created");
    }
    let handlers = named(&trace, "handler_work");
    assert_eq!(handlers.len(), 2);
    for handler in handlers {
        assert!(
            attempts
                .iter()
                .any(|attempt| attempt.span_id == handler.parent_span_id),
            "each handler span is its attempt's child"
        );
    }
}

/// `Inbox::ingest` called by an app's own code, outside payhook's request
/// span: the ingest has a `send` span of its own, a child of the app's span,
/// and the attempt is the child of that. The event id carries a bidi
/// override, escaped in both spans as in the request span.
#[test]
fn an_ingest_outside_payhooks_routes_has_a_send_span_of_its_own() {
    let (spans, export) = exporting("otel-test-own-route");

    let runtime = runtime();
    let stored = runtime.block_on(async {
        let inbox = sqlite_inbox("otel-own").await;
        let workers = inbox.start(|_job: Job| async { Ok(()) });
        let body = Bytes::from_static(
            br#"{"id":"evt_otel_\u202eown","type":"customer.created","data":{"object":{}}}"#,
        );
        let headers = signed_headers(&body);
        let route = tracing::info_span!(target: "app", "own_route");
        let reply = route.in_scope(|| inbox.ingest(&headers, body)).await;
        assert_eq!(reply.status().as_u16(), 200);
        inbox.wait_idle(Duration::from_secs(20)).await.unwrap();
        workers.shutdown().await;
        stored_context(inbox.pool(), "evt_otel_\u{202e}own").await
    });
    export.flush();

    let trace_id = spans
        .lock()
        .unwrap()
        .iter()
        .find(|span| span.name == "own_route")
        .expect("the app's span is exported")
        .trace_id
        .clone();
    let trace = of_trace(spans, &trace_id);
    let route = one(&trace, "own_route");
    let ingest = one(&trace, "send otel-own");
    assert_eq!(ingest.parent_span_id, route.span_id);
    assert_eq!(ingest.kind, SpanKind::Producer as i32);
    assert_eq!(ingest.attributes["messaging.operation.type"], "send");
    assert_eq!(ingest.attributes["messaging.message.id"], r"evt_otel_\u{202e}own");
    let stored = stored.expect("the trace context is stored with the event");
    assert_eq!(stored, format!("00-{trace_id}-{}-01", ingest.span_id));
    let attempt = one(&trace, "process otel-own");
    assert_eq!(attempt.parent_span_id, ingest.span_id);
    assert_eq!(
        attempt.attributes["messaging.message.id"],
        r"evt_otel_\u{202e}own"
    );
}

#[test]
fn without_an_opentelemetry_layer_nothing_is_stored() {
    let runtime = runtime();
    runtime.block_on(async {
        let receiver = Receiver::builder().secret(SECRET).build().unwrap();
        let inbox = Inbox::connect(receiver, &payhook_test_support::sqlite_url("otel-off"))
            .await
            .unwrap();
        let body =
            Bytes::from_static(br#"{"id":"evt_otel_off","type":"customer.created","data":{"object":{}}}"#);
        let mut headers = signed_headers(&body);
        headers.insert("traceparent", traceparent().0.parse().unwrap());
        assert_eq!(inbox.ingest(&headers, body).await.status(), 200);
        let stored = stored_context(inbox.pool(), "evt_otel_off").await;
        assert_eq!(
            stored, None,
            "no trace context is written without an OpenTelemetry layer"
        );
    });
}

/// A `tracestate` the sender sends is kept on the request's spans when it is
/// W3C's printable ASCII; one with a bidi override in a member's value (which
/// OpenTelemetry's own parser lets through) is dropped whole, so it never
/// reaches a tracing backend's UI raw. The trace itself is continued either
/// way.
#[test]
fn a_tracestate_with_characters_w3c_forbids_is_dropped() {
    let (spans, export) = exporting("otel-test-tracestate");
    let (good_parent, good_trace, _) = traceparent();
    let (bad_parent, bad_trace, bad_sender) = traceparent();

    let runtime = runtime();
    runtime.block_on(async {
        let receiver = Receiver::builder()
            .secret(SECRET)
            .namespace("otel-tracestate")
            .build()
            .unwrap();
        let app = axum::Router::new()
            .route("/webhooks", post(|Webhook(_): Webhook<Event>| async { Received }))
            .route_layer(WebhookLayer::new(receiver));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let url = format!("http://{addr}/webhooks");
        let body =
            |id: &str| format!(r#"{{"id":"{id}","type":"customer.created","data":{{"object":{{}}}}}}"#);
        let good = deliver_with_state(
            &url,
            &body("evt_state_ok"),
            &good_parent,
            Some(b"vendor=ok,other=1"),
        )
        .await;
        assert_eq!(good, 200);
        let hostile = "vendor=ok\u{202e}gnp.exe";
        let bad = deliver_with_state(
            &url,
            &body("evt_state_bad"),
            &bad_parent,
            Some(hostile.as_bytes()),
        )
        .await;
        assert_eq!(bad, 200);
    });
    export.flush();

    let good = of_trace(spans, &good_trace);
    assert_eq!(one(&good, "POST /webhooks").trace_state, "vendor=ok,other=1");
    let bad = of_trace(spans, &bad_trace);
    let request = one(&bad, "POST /webhooks");
    assert_eq!(request.parent_span_id, bad_sender, "the trace is still continued");
    for span in &bad {
        assert_eq!(
            span.trace_state, "",
            "{}: the hostile tracestate is dropped",
            span.name
        );
    }
}
