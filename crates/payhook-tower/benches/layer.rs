//! What the tower layer adds to the core pipeline, per delivery.
//!
//! Run with `cargo bench -p payhook-tower --bench layer`. Both variants get the
//! same kind of freshly signed request for a new event (signed outside the
//! timing) and end with the event marked done in a `MemoryStore`:
//!
//! * `layer/webhook_layer`: `WebhookLayer` around a `service_fn` handler,
//!   called with `oneshot` (body read under the limit, verify, parse, claim,
//!   request rebuilt with the event in its extensions, handler, complete);
//! * `layer/by_hand`: the same steps written inline against the core, as an app
//!   without the layer would: collect the body, `Receiver::receive`, run the
//!   handler, `ClaimGuard::settle`.

use std::convert::Infallible;
use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use payhook_core::adapter::ReceiveOutcome;
use payhook_core::sender::{EventBuilder, SignedDelivery};
use payhook_core::{Event, Receiver};
use payhook_tower::WebhookLayer;
use tower::{service_fn, Layer, ServiceExt};

const SECRET: &str = "whsec_bench_layer";

fn signed_request() -> Request<Full<Bytes>> {
    let event = EventBuilder::payment_intent_succeeded();
    SignedDelivery::now(event.to_json(), SECRET)
        .expect("valid secret")
        .to_request("/webhooks")
}

fn handler(event: &Event) -> Response<Full<Bytes>> {
    black_box(event.id());
    Response::new(Full::from(r#"{"received":true}"#))
}

fn bench_layer(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let receiver = Receiver::builder()
        .secret(SECRET)
        .build()
        .expect("valid receiver");
    let mut group = c.benchmark_group("layer");
    group.throughput(Throughput::Elements(1));

    let service =
        WebhookLayer::new(receiver.clone()).layer(service_fn(|request: Request<Full<Bytes>>| async move {
            let event = request.extensions().get::<Event>().expect("set by the layer");
            Ok::<_, Infallible>(handler(event))
        }));
    group.bench_function("webhook_layer", |b| {
        b.iter_batched(
            signed_request,
            |request| {
                let response = runtime
                    .block_on(service.clone().oneshot(request))
                    .expect("infallible");
                assert_eq!(response.status(), StatusCode::OK);
                response
            },
            BatchSize::SmallInput,
        );
    });

    group.bench_function("by_hand", |b| {
        b.iter_batched(
            signed_request,
            |request| {
                runtime.block_on(async {
                    let (parts, body) = request.into_parts();
                    let bytes = body.collect().await.expect("full body").to_bytes();
                    let ReceiveOutcome::Deliver(delivery) = receiver.receive(&parts.headers, bytes).await
                    else {
                        panic!("a new, valid delivery");
                    };
                    let (event, _body, claim) = delivery.into_parts();
                    let response = handler(&event);
                    claim.settle(response.status()).await;
                    assert_eq!(response.status(), StatusCode::OK);
                    response
                })
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

criterion_group!(benches, bench_layer);
criterion_main!(benches);
