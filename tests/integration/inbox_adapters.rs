//! The one-line inbox routes of both adapters, on real servers over loopback
//! with real SQLite inboxes: a signed delivery is stored, acknowledged and
//! processed once; unsigned, oversized and repeated deliveries get the core's
//! replies.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use payhook::inbox::sqlx::{self, AnyPool};
use payhook::inbox::{Inbox, Job, Workers};
use payhook::{sign, Receiver, Secret};

const SECRET: &str = "whsec_inbox_adapters";
const LIMIT: usize = 4096;
/// Short, so a stalled body is cheap to test.
const BODY_TIMEOUT: Duration = Duration::from_secs(1);

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// What the handler saw: how many events, and their ids.
#[derive(Default)]
struct Handled {
    count: AtomicUsize,
    ids: Mutex<Vec<String>>,
}

async fn inbox() -> (Inbox, Workers, Arc<Handled>) {
    let dir = std::env::temp_dir().join(format!(
        "payhook-inbox-adapters-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let receiver = Receiver::builder()
        .secret(SECRET)
        .body_limit(LIMIT)
        .body_timeout(BODY_TIMEOUT)
        .build()
        .unwrap();
    let inbox = Inbox::builder(receiver)
        .poll_interval(Duration::from_millis(20))
        .connect(&format!("sqlite://{}", dir.join("inbox.db").display()))
        .await
        .unwrap();
    let handled = Arc::new(Handled::default());
    let seen = Arc::clone(&handled);
    let workers = inbox.start(move |job: Job| {
        let seen = Arc::clone(&seen);
        async move {
            seen.ids.lock().unwrap().push(job.event().id().to_owned());
            seen.count.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    });
    (inbox, workers, handled)
}

async fn post(url: &str, body: String, signed: bool) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json");
    if signed {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        request = request.header(
            "x-service-signature",
            sign(body.as_bytes(), &Secret::new(SECRET).unwrap(), now),
        );
    }
    let response = request.body(body).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// Sends `request` (headers and the start of a body) and then nothing,
/// keeping the connection open: the route must answer `408` after the body
/// timeout and close the connection, not hold it (and up to the body limit)
/// for as long as the client likes. Returns the reply and when the server
/// closed the connection.
async fn stalled(addr: std::net::SocketAddr, request: &str) -> (String, Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let sent = Instant::now();
    let mut reply = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(15), stream.read(&mut buf)).await {
            Err(_) => panic!(
                "the connection was still open 15 s after a stalled body; got {:?}",
                String::from_utf8_lossy(&reply)
            ),
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(n)) => reply.extend_from_slice(&buf[..n]),
        }
    }
    (String::from_utf8_lossy(&reply).into_owned(), sent.elapsed())
}

async fn behaves(url: &str, pool: &AnyPool, handled: &Handled) {
    let handled_ids = &handled.ids;
    let handled = &handled.count;
    let body = r#"{"id":"evt_route","type":"payment_intent.succeeded","data":{"object":{"id":"pi_r","amount":1,"currency":"btc","status":"succeeded"}}}"#;
    assert_eq!(
        post(url, body.to_owned(), true).await,
        (200, r#"{"received":true}"#.to_owned())
    );
    assert_eq!(
        post(url, body.to_owned(), true).await,
        (200, r#"{"received":true}"#.to_owned())
    );
    let (status, reply) = post(url, body.to_owned(), false).await;
    assert_eq!(status, 400);
    assert!(
        reply.starts_with("Webhook Error: missing x-service-signature"),
        "{reply}"
    );
    // Unsigned, a new id is not stored either.
    let unsigned = body.replace("evt_route", "evt_unsigned");
    assert_eq!(post(url, unsigned, false).await.0, 400);
    let (status, reply) = post(url, "x".repeat(LIMIT + 1), true).await;
    assert_eq!(status, 413, "{reply}");
    assert!(reply.starts_with("Webhook Error: "), "{reply}");
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/webhooks")
        .parse()
        .unwrap();
    let head = "POST /webhooks HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
        x-service-signature: t=1,v1=00\r\n";
    for request in [
        // 10 bytes of an announced 100.
        format!("{head}content-length: 100\r\n\r\n{{\"id\":\"evt"),
        // One 10-byte chunk of a chunked upload, then no more chunks.
        format!("{head}transfer-encoding: chunked\r\n\r\na\r\n{{\"id\":\"evt\r\n"),
    ] {
        let (reply, closed_after) = stalled(addr, &request).await;
        assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
        assert!(reply.contains("Webhook Error: "), "{reply}");
        assert!(
            closed_after < BODY_TIMEOUT + Duration::from_secs(4),
            "closed {closed_after:?} after the stalled request"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while handled.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the stored event was never processed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(handled.load(Ordering::SeqCst), 1, "processed once");
    assert_eq!(*handled_ids.lock().unwrap(), ["evt_route"]);
    let stored: Vec<String> = sqlx::query_scalar("SELECT event_id FROM payhook_inbox")
        .fetch_all(pool)
        .await
        .unwrap();
    assert_eq!(stored, ["evt_route"], "only the signed delivery is stored, once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_inbox_route() {
    let (inbox, workers, handled) = inbox().await;
    let pool = inbox.pool().clone();
    let app = axum::Router::new().route("/webhooks", payhook::tower::axum::inbox_route(inbox));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    behaves(&format!("http://{addr}/webhooks"), &pool, &handled).await;
    workers.shutdown().await;
}

#[actix_web::test]
async fn actix_inbox_route() {
    let (inbox, workers, handled) = inbox().await;
    let pool = inbox.pool().clone();
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new().route("/webhooks", payhook::actix::inbox_route(inbox.clone()))
    })
    .workers(1)
    .bind(("127.0.0.1", 0))
    .unwrap();
    let addr = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    behaves(&format!("http://{addr}/webhooks"), &pool, &handled).await;
    workers.shutdown().await;
    handle.stop(true).await;
}
