//! The client against a server on loopback that answers badly on purpose:
//! each trust rule of the crate docs, held.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use payhook::api::{ApiError, ApiKey, Client, EventsQuery, MAX_MESSAGE_BYTES};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A server on loopback answering every request with `answer(n, head)` (`n`
/// counts requests from 0); `None` never answers. Returns its base URL and
/// its request count.
async fn serve<F>(answer: F) -> (String, Arc<AtomicUsize>)
where
    F: Fn(usize, &str) -> Option<Vec<u8>> + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let answer = Arc::new(answer);
    let counted = count.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let answer = answer.clone();
            let counted = counted.clone();
            tokio::spawn(async move {
                loop {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match socket.read(&mut byte).await {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let length = head
                        .lines()
                        .find_map(|line| {
                            line.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    let mut body = vec![0u8; length];
                    if socket.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let n = counted.fetch_add(1, Ordering::SeqCst);
                    match answer(n, &head) {
                        Some(reply) => {
                            if socket.write_all(&reply).await.is_err() {
                                return;
                            }
                        }
                        None => {
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                            return;
                        }
                    }
                }
            });
        }
    });
    (base, count)
}

fn reply(status: &str, headers: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{headers}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn client(base: &str, key: &str) -> Client {
    Client::new(base, ApiKey::new(key).unwrap()).unwrap()
}

/// Everything a caller could show or keep of an error.
fn shown(err: &ApiError) -> String {
    format!("{err} {err:?}")
}

#[tokio::test]
async fn a_redirect_is_never_followed() {
    let (elsewhere, hits) = serve(|_, _| Some(reply("200 OK", "", r#"{"has_more":false,"data":[]}"#))).await;
    let location = format!("location: {elsewhere}/v1/events\r\n");
    let (base, _) = serve(move |_, _| Some(reply("302 Found", &location, ""))).await;
    let err = client(&base, "sk_test_r")
        .page(&EventsQuery::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ApiError::BadReply(why) if why.contains("redirect")),
        "{err}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the redirect was followed");
}

#[tokio::test]
async fn a_reply_is_bounded_in_size() {
    // Announced too long, and too long without saying so (chunked).
    let (base, _) = serve(|_, _| Some(reply("200 OK", "", &"x".repeat(5000)))).await;
    let err = client(&base, "sk_test_s")
        .max_reply_bytes(4096)
        .get_json("/v1/events")
        .await
        .unwrap_err();
    assert_eq!(err, ApiError::TooLarge { limit: 4096 });
    let (base, _) = serve(|_, _| {
        let mut out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..10 {
            out.extend_from_slice(format!("400\r\n{}\r\n", "y".repeat(1024)).as_bytes());
        }
        out.extend_from_slice(b"0\r\n\r\n");
        Some(out)
    })
    .await;
    let err = client(&base, "sk_test_s")
        .max_reply_bytes(4096)
        .get_json("/v1/events")
        .await
        .unwrap_err();
    assert_eq!(err, ApiError::TooLarge { limit: 4096 });
}

#[tokio::test]
async fn a_reply_is_bounded_in_time() {
    let (base, _) = serve(|_, _| None).await;
    let started = Instant::now();
    let err = client(&base, "sk_test_t")
        .timeout(Duration::from_millis(300))
        .page(&EventsQuery::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Unreachable(_)), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_long_key_echoed_in_a_refusal_is_redacted_before_it_is_shortened() {
    let key = format!("sk_test_{}", "K".repeat(92));
    let body = format!(r#"{{"error":{{"message":"Invalid API key provided: {key} (x{key}x)"}}}}"#);
    let (base, _) = serve(move |_, _| Some(reply("401 Unauthorized", "", &body))).await;
    // The key file's line break and spaces: trimmed once, redacted as trimmed.
    let err = client(&base, &format!(" {key} \n"))
        .page(&EventsQuery::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Unauthorized { status: 401, .. }), "{err}");
    assert!(!shown(&err).contains("KKKKKKKK"), "{err}");
    assert!(err.to_string().contains("<redacted>"), "{err}");
}

#[tokio::test]
async fn a_key_echoed_in_a_typed_field_is_redacted() {
    let key = "sk_test_typed_field_echo";
    let intent =
        format!(r#"{{"id":"pi_1","amount":"{key}","currency":"btc","status":"succeeded","metadata":{{}}}}"#);
    let page = format!(r#"{{"has_more":"{key}","data":[]}}"#);
    let (base, _) = serve(move |_, head| {
        Some(reply(
            "200 OK",
            "",
            if head.contains("/v1/events") {
                &page
            } else {
                &intent
            },
        ))
    })
    .await;
    let api = client(&base, key);
    let err = api.retrieve_payment_intent("pi_1").await.unwrap_err();
    assert!(matches!(err, ApiError::BadReply(_)), "{err}");
    assert!(!shown(&err).contains(key), "{err}");
    let err = api.page(&EventsQuery::default()).await.unwrap_err();
    assert!(!shown(&err).contains(key), "{err}");
}

#[tokio::test]
async fn a_message_from_the_service_is_escaped_and_bounded() {
    let message = format!("line\n{}\u{1b}[2J", "word ".repeat(200_000));
    let body = serde_json::json!({"error": {"code": "x\ny", "message": message}}).to_string();
    let (base, _) = serve(move |_, _| Some(reply("400 Bad Request", "", &body))).await;
    let err = client(&base, "sk_test_m")
        .create_payment_intent(&payhook::api::NewPaymentIntent::new(1, "btc"))
        .await
        .unwrap_err();
    let ApiError::Refused {
        status,
        code,
        message,
        ..
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!(*status, 400);
    assert_eq!(code.as_deref(), Some(r"x\ny"));
    assert!(message.len() <= MAX_MESSAGE_BYTES, "{}", message.len());
    assert!(
        !message.contains('\n') && !message.contains('\u{1b}'),
        "{message}"
    );
}

#[tokio::test]
async fn retry_after_is_read_from_a_throttled_reply() {
    let (base, _) = serve(|_, _| Some(reply("429 Too Many Requests", "retry-after: 7\r\n", "{}"))).await;
    let err = client(&base, "sk_test_ra")
        .page(&EventsQuery::default())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ApiError::Throttled {
            status: 429,
            retry_after: Some(Duration::from_secs(7))
        }
    );
}

fn event(id: &str, created: i64) -> String {
    format!(
        r#"{{"id":"{id}","object":"event","type":"customer.created","created":{created},"data":{{"object":{{}}}}}}"#
    )
}

#[tokio::test]
async fn a_list_whose_cursor_repeats_ends_the_walk() {
    // The same page, has_more true, forever.
    let page = format!(
        r#"{{"has_more":true,"data":[{},{}]}}"#,
        event("evt_2", 100),
        event("evt_1", 100)
    );
    let (base, requests) = serve(move |_, _| Some(reply("200 OK", "", &page))).await;
    let api = client(&base, "sk_test_c");
    let mut pages = api.events(EventsQuery::default());
    assert!(pages.next().await.unwrap().is_ok());
    let err = pages.next().await.unwrap().unwrap_err();
    assert!(
        matches!(&err, ApiError::BrokenList(why) if why.contains("came back")),
        "{err}"
    );
    assert!(pages.next().await.is_none());
    assert_eq!(requests.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_list_that_does_not_move_back_in_time_ends_the_walk() {
    // Distinct cursors, each page newer than the one before.
    let (base, _) = serve(|n, _| {
        let n = n as i64;
        let page = format!(
            r#"{{"has_more":true,"data":[{}]}}"#,
            event(&format!("evt_{n}"), 100 + n)
        );
        Some(reply("200 OK", "", &page))
    })
    .await;
    let api = client(&base, "sk_test_c");
    let mut pages = api.events(EventsQuery::default());
    assert!(pages.next().await.unwrap().is_ok());
    let err = pages.next().await.unwrap().unwrap_err();
    assert!(
        matches!(&err, ApiError::BrokenList(why) if why.contains("back in time")),
        "{err}"
    );
}

#[tokio::test]
async fn only_the_window_asked_for_is_returned() {
    let page = format!(
        r#"{{"has_more":false,"data":[{},{},{}]}}"#,
        event("evt_future", 32_503_680_000),
        event("evt_in", 150),
        event("evt_zero", 0)
    );
    let (base, _) = serve(move |_, _| Some(reply("200 OK", "", &page))).await;
    let api = client(&base, "sk_test_w");
    let mut pages = api.events(EventsQuery {
        created_gte: Some(100),
        created_lt: Some(200),
        ..EventsQuery::default()
    });
    let page = pages.next().await.unwrap().unwrap();
    let ids: Vec<&str> = page.events.iter().map(|l| l.event.id()).collect();
    assert_eq!(ids, ["evt_in"]);
    assert_eq!(pages.outside(), 2);
}
