//! `WebhookService` as a plain tower service: a `service_fn` inner service
//! with `Full<Bytes>` bodies (and a streaming test body), no axum and no server.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use payhook_core::sender::{EventBuilder, SignedDelivery};
use payhook_core::{Event, Receiver};
use payhook_tower::{RawBody, WebhookLayer};
use tower::util::BoxCloneService;
use tower::{service_fn, Layer, Service, ServiceExt};

const SECRET: &str = "whsec_tower_service_test";
const LIMIT: usize = 4096;

fn layer() -> WebhookLayer {
    let receiver = Receiver::builder()
        .secret(SECRET)
        .body_limit(LIMIT)
        .build()
        .unwrap();
    WebhookLayer::new(receiver)
}

async fn text(response: Response<Full<Bytes>>) -> (StatusCode, String) {
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

fn signed(event: &EventBuilder) -> SignedDelivery {
    SignedDelivery::now(event.to_json(), SECRET).unwrap()
}

fn request(delivery: &SignedDelivery) -> Request<Full<Bytes>> {
    delivery.to_request("/webhooks")
}

#[tokio::test]
async fn new_events_reach_the_inner_service_with_event_raw_body_and_readable_body() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let service = layer().layer(service_fn(move |request: Request<Full<Bytes>>| {
        let seen = Arc::clone(&seen);
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            let event = request
                .extensions()
                .get::<Event>()
                .cloned()
                .expect("event extension");
            let RawBody(raw) = request
                .extensions()
                .get::<RawBody>()
                .cloned()
                .expect("raw body extension");
            let body = request.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(
                body, raw,
                "the inner service reads the same bytes that were signed"
            );
            let reply = format!("{} {}", event.id(), event.event_type());
            Ok::<_, Infallible>(Response::new(Full::from(reply)))
        }
    }));

    let event = EventBuilder::payment_intent_failed();
    let delivery = signed(&event);
    let (status, body) = text(service.clone().oneshot(request(&delivery)).await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(body, format!("{} payment_intent.failed", event.event_id()));

    // A duplicate is acknowledged by the layer itself.
    let (status, body) = text(service.clone().oneshot(request(&delivery)).await.unwrap()).await;
    assert_eq!((status.as_u16(), body.as_str()), (200, r#"{"received":true}"#));

    // A tampered body is rejected by the layer itself.
    let tampered = delivery
        .to_request("/webhooks")
        .map(|_| Full::from(event.to_json().replace("pi_", "px_")));
    let (status, body) = text(service.oneshot(tampered).await.unwrap()).await;
    assert_eq!(status, 400);
    assert!(body.starts_with("Webhook Error: no signature matches"), "{body}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

type Inner = BoxCloneService<Request<Full<Bytes>>, Response<Full<Bytes>>, &'static str>;

/// An inner service whose first call does `first` and later calls answer 200.
fn flaky<F, Fut>(first: F) -> (Inner, Arc<AtomicUsize>)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<Response<Full<Bytes>>, &'static str>> + Send + 'static,
{
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let service = service_fn(move |_request: Request<Full<Bytes>>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let first = first.clone();
        async move {
            if n == 0 {
                first().await
            } else {
                Ok(Response::new(Full::from("ok")))
            }
        }
    });
    (BoxCloneService::new(service), calls)
}

async fn assert_retry_is_handled<S>(service: S, delivery: &SignedDelivery, calls: &AtomicUsize)
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>>,
    S::Error: std::fmt::Debug,
{
    let response = service.oneshot(request(delivery)).await.unwrap();
    assert_eq!(
        response.status(),
        200,
        "the claim was released, so the retry is handled"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn non_2xx_from_the_inner_service_releases_the_claim() {
    let (inner, calls) = flaky(|| async {
        let mut response = Response::new(Full::from("try later"));
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        Ok(response)
    });
    let service = layer().layer(inner);
    let delivery = signed(&EventBuilder::payment_intent_succeeded());
    let response = service.clone().oneshot(request(&delivery)).await.unwrap();
    assert_eq!(
        response.status(),
        503,
        "the inner service's own status is passed on"
    );
    assert_retry_is_handled(service, &delivery, &calls).await;
}

#[tokio::test]
async fn an_inner_service_error_is_passed_on_and_releases_the_claim() {
    let (inner, calls) = flaky(|| async { Err("database down") });
    let service = layer().layer(inner);
    let delivery = signed(&EventBuilder::payment_intent_succeeded());
    let error = service.clone().oneshot(request(&delivery)).await.unwrap_err();
    assert_eq!(error, "database down");
    assert_retry_is_handled(service, &delivery, &calls).await;
}

#[tokio::test]
async fn a_panicking_inner_service_gets_a_500_and_releases_the_claim() {
    let (inner, calls) = flaky(|| async { panic!("inner service panics on purpose") });
    let service = layer().layer(inner);
    let delivery = signed(&EventBuilder::payment_intent_succeeded());
    let (status, body) = text(service.clone().oneshot(request(&delivery)).await.unwrap()).await;
    assert_eq!(
        (status.as_u16(), body.as_str()),
        (
            500,
            "Webhook Error: the handler panicked; the event was not acknowledged and will be delivered again"
        )
    );
    assert_retry_is_handled(service, &delivery, &calls).await;
}

#[tokio::test]
async fn dropping_the_response_future_releases_the_claim() {
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let started_tx = Arc::new(std::sync::Mutex::new(Some(started_tx)));
    let (inner, calls) = flaky(move || {
        let started_tx = Arc::clone(&started_tx);
        async move {
            if let Some(tx) = started_tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
            std::future::pending().await
        }
    });
    let service = layer().layer(inner);
    let delivery = signed(&EventBuilder::payment_intent_succeeded());
    let in_flight = tokio::spawn(service.clone().oneshot(request(&delivery)));
    started_rx.await.unwrap();

    // While the first delivery runs, a second one is refused, not run twice.
    let response = service.clone().oneshot(request(&delivery)).await.unwrap();
    assert_eq!(response.status(), 409);

    in_flight.abort(); // the client went away
    let _ = in_flight.await;
    assert_retry_is_handled(service, &delivery, &calls).await;
}

/// A streaming request body: hands out its frames one by one and counts how
/// many were read, so tests can see where reading stopped.
struct Chunks {
    frames: VecDeque<Result<Bytes, std::io::Error>>,
    read: Arc<AtomicUsize>,
}

impl Chunks {
    fn new(frames: impl IntoIterator<Item = Result<Bytes, std::io::Error>>) -> (Self, Arc<AtomicUsize>) {
        let read = Arc::new(AtomicUsize::new(0));
        let body = Self {
            frames: frames.into_iter().collect(),
            read: Arc::clone(&read),
        };
        (body, read)
    }
}

impl From<Bytes> for Chunks {
    fn from(bytes: Bytes) -> Self {
        Self::new([Ok(bytes)]).0
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let frame = self.frames.pop_front();
        if frame.is_some() {
            self.read.fetch_add(1, Ordering::SeqCst);
        }
        Poll::Ready(frame.map(|frame| frame.map(Frame::data)))
    }
}

fn never_called(
) -> impl Service<Request<Chunks>, Response = Response<Full<Bytes>>, Error = Infallible, Future: Send>
       + Clone
       + Send
       + 'static {
    service_fn(|_request: Request<Chunks>| async { panic!("the inner service must not be called") })
}

fn chunked_request(delivery: &SignedDelivery, body: Chunks) -> Request<Chunks> {
    delivery.to_request("/webhooks").map(|_| body)
}

#[tokio::test]
async fn a_declared_length_over_the_limit_is_413_before_reading() {
    let delivery = signed(&EventBuilder::payment_intent_succeeded());
    let (body, read) = Chunks::new(std::iter::repeat_with(|| Ok(Bytes::from(vec![b' '; 1024]))).take(64));
    let mut request = chunked_request(&delivery, body);
    request
        .headers_mut()
        .insert(http::header::CONTENT_LENGTH, (64 * 1024).into());
    let (status, body) = text(layer().layer(never_called()).oneshot(request).await.unwrap()).await;
    assert_eq!(status, 413);
    assert_eq!(
        body,
        format!("Webhook Error: body is larger than the {LIMIT}-byte limit")
    );
    assert_eq!(read.load(Ordering::SeqCst), 0, "nothing is read");
}

#[tokio::test]
async fn a_chunked_body_is_read_only_until_it_passes_the_limit() {
    let delivery = signed(&EventBuilder::payment_intent_succeeded());
    let (body, read) = Chunks::new(std::iter::repeat_with(|| Ok(Bytes::from(vec![b' '; 1024]))).take(64));
    let response = layer()
        .layer(never_called())
        .oneshot(chunked_request(&delivery, body))
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let read = read.load(Ordering::SeqCst);
    assert!(
        read <= LIMIT / 1024 + 1,
        "read {read} chunks of 1 KiB past a 4 KiB limit"
    );
}

#[tokio::test]
async fn a_body_that_breaks_off_is_400() {
    let delivery = signed(&EventBuilder::payment_intent_succeeded());
    let (body, _) = Chunks::new([
        Ok(delivery.body.slice(..10)),
        Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed mid-body",
        )),
    ]);
    let (status, body) = text(
        layer()
            .layer(never_called())
            .oneshot(chunked_request(&delivery, body))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        body,
        "Webhook Error: could not read the request body: connection closed mid-body"
    );
}

#[tokio::test]
async fn a_chunked_body_within_the_limit_is_verified_whole() {
    let event = EventBuilder::payment_intent_succeeded();
    let delivery = signed(&event);
    let pieces = delivery
        .body
        .chunks(7)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect::<Vec<_>>();
    let (body, _) = Chunks::new(pieces);
    let service = layer().layer(service_fn(|request: Request<Chunks>| async move {
        let id = request.extensions().get::<Event>().unwrap().id().to_owned();
        Ok::<_, Infallible>(Response::new(Full::<Bytes>::from(id)))
    }));
    let request = chunked_request(&delivery, body);
    let (status, body) = text(service.oneshot(request).await.unwrap()).await;
    assert_eq!((status.as_u16(), body.as_str()), (200, event.event_id()));
}

#[tokio::test]
async fn a_plain_tower_server_passes_the_peer_as_peer_addr_for_the_allowlist() {
    let receiver = Receiver::builder()
        .secret(SECRET)
        .allowed_networks(["192.0.2.0/24"])
        .build()
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let service = WebhookLayer::new(receiver).layer(service_fn(move |_: Request<Full<Bytes>>| {
        seen.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(Response::new(Full::from(r#"{"received":true}"#))) }
    }));
    let from = |peer: Option<&str>| {
        let mut request = request(&signed(&EventBuilder::payment_intent_succeeded()));
        if let Some(peer) = peer {
            request
                .extensions_mut()
                .insert(payhook_tower::PeerAddr(peer.parse().unwrap()));
        }
        request
    };
    let (status, _) = text(
        service
            .clone()
            .oneshot(from(Some("192.0.2.9:4000")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let response = service
        .clone()
        .oneshot(from(Some("[2001:db8::1]:4000")))
        .await
        .unwrap();
    assert_eq!(
        response.headers()["connection"],
        "close",
        "the unread body closes the connection"
    );
    assert_eq!(
        text(response).await,
        (
            StatusCode::FORBIDDEN,
            "Webhook Error: the source address is not allowed to deliver to this endpoint".to_owned()
        )
    );
    // No peer at all: the configuration 500 naming the extension, never an allow.
    let (status, body) = text(service.oneshot(from(None)).await.unwrap()).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body.contains("payhook::tower::PeerAddr"), "{body}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the inner service ran for the allowed peer only"
    );
}
