//! Signed deliveries over real loopback HTTP: to a real payhook receiver, with
//! retries, timeouts, `Retry-After`, a rolled secret, and every fault.

use crate::support;

use std::collections::HashSet;
use std::time::Duration;

use payhook_core::Verifier;
use payhook_emulator::{Emulator, EmulatorBuilder, Faults, RetrySchedule};
use support::{
    eventually, independent_hmac, limits, started, timestamp, unix_now, v1_items, Api, PayhookReceiver,
    RecordingReceiver, Script,
};

/// A quick schedule for tests: 100 ms, 200 ms, 400 ms … (less jitter), 6 attempts.
fn fast() -> RetrySchedule {
    RetrySchedule::new(Duration::from_millis(100), Duration::from_secs(2), 6)
}

const WAIT: Duration = Duration::from_secs(20);

/// Creates a payment intent and succeeds it through the API: one
/// `payment_intent.succeeded` event to deliver. Returns the intent's id.
async fn one_succeeded_event(api: &Api) -> String {
    let intent = api.create_intent("5", "btc").await;
    let succeeded = api.succeed(&intent).await;
    assert_eq!(succeeded.status, 200, "{}", succeeded.text);
    intent
}

/// A receiver following `script`, registered as the emulator's one endpoint
/// (for every event type), and one event for it, delivered: returns once the
/// emulator is idle (acknowledged, or given up).
async fn one_event_delivered_to(emulator: &Emulator, api: &Api, script: Script) -> RecordingReceiver {
    let receiver = RecordingReceiver::start(script).await;
    api.register(&receiver.url).await;
    one_succeeded_event(api).await;
    assert!(emulator.wait_idle(WAIT).await);
    receiver
}

/// `builder`'s emulator, driven through the library (no API client), with
/// a receiver following `script` registered as its one endpoint.
async fn emulator_delivering_to(builder: EmulatorBuilder, script: Script) -> (Emulator, RecordingReceiver) {
    let emulator = builder.start().await.expect("starts");
    let receiver = RecordingReceiver::start(script).await;
    emulator.register_endpoint(&receiver.url).expect("registered");
    (emulator, receiver)
}

/// Creates and succeeds `n` payment intents through the library: `n`
/// events to deliver.
fn succeeded_events(emulator: &Emulator, n: usize) {
    for _ in 0..n {
        let intent = emulator.create_payment_intent(1, "btc").expect("created");
        emulator.succeed_payment_intent(&intent.id).expect("succeeded");
    }
}

/// A payhook receiver whose handler takes `handler_delay`, registered
/// through the API with the secret the emulator gives it.
async fn payhook_receiver(api: &Api, handler_delay: Duration) -> PayhookReceiver {
    let (listener, url) = PayhookReceiver::bind().await;
    let (_, secret) = api.register(&url).await;
    PayhookReceiver::serve(listener, url, &secret, handler_delay)
}

#[tokio::test]
async fn a_delivery_is_signed_so_payhook_and_an_independent_hmac_both_verify_it() {
    let (emulator, api) = started(Emulator::builder()).await;
    let receiver = RecordingReceiver::start(Script::default()).await;
    let (endpoint, secret) = api.register(&receiver.url).await;
    let intent = api.create_intent("1500000000000000000", "eth").await;
    let succeeded = api.succeed(&intent).await;
    assert_eq!(succeeded.status, 200);
    eventually(WAIT, "one delivery", || receiver.arrivals().len() == 1).await;
    assert!(emulator.wait_idle(WAIT).await);

    let arrival = &receiver.arrivals()[0];
    assert_eq!(arrival.content_type, "application/json");
    let event = &emulator.events()[0];
    assert_eq!(arrival.body, event.body, "the body is the event, byte for byte");
    let body_text = std::str::from_utf8(&arrival.body).expect("UTF-8");
    assert!(
        body_text.contains(r#""amount":1500000000000000000,"#),
        "{body_text}"
    );
    assert!(body_text.contains(&format!(r#""id":"{intent}""#)));
    let fetched = api.get(&format!("/v1/events/{}", event.id)).await;
    assert_eq!(fetched.text.as_bytes(), &arrival.body[..]);

    // payhook's verifier accepts it …
    let verifier = Verifier::builder().secret(&secret).build().expect("verifier");
    verifier
        .verify_value(arrival.signature.as_bytes(), &arrival.body)
        .expect("payhook verifies the delivery");
    // … and so does an HMAC computed here, independently of payhook's signer.
    let t = timestamp(&arrival.signature);
    assert!(t.abs_diff(unix_now()) < 5, "signed now");
    assert_eq!(
        v1_items(&arrival.signature),
        [independent_hmac(&secret, t, &arrival.body)]
    );
    // A different secret does not verify it.
    assert!(Verifier::builder()
        .secret("whsec_other")
        .build()
        .expect("verifier")
        .verify_value(arrival.signature.as_bytes(), &arrival.body)
        .is_err());

    // The attempt is recorded, readable through the API and the library.
    let attempts = emulator.attempts();
    assert_eq!(attempts.len(), 1);
    let attempt = &attempts[0];
    assert_eq!(
        (attempt.status, attempt.succeeded, attempt.attempt),
        (Some(200), true, 1)
    );
    assert_eq!(
        (attempt.webhook_endpoint.as_str(), attempt.event.as_str()),
        (endpoint.as_str(), event.id.as_str())
    );
    assert_eq!(attempt.signed_at, t);
    assert_eq!(attempt.response_body.as_deref(), Some(r#"{"received":true}"#));
    let listed = api
        .get(&format!("/v1/events/{}/delivery_attempts", event.id))
        .await;
    assert_eq!(listed.ids(), std::slice::from_ref(&attempt.id));
    assert_eq!(listed.json["data"][0]["status"], 200);
    assert_eq!(listed.json["data"][0]["webhook_endpoint"], endpoint.as_str());
    assert!(!listed.text.contains(&secret), "no secret in attempt records");
}

#[tokio::test]
async fn enabled_events_choose_the_endpoints() {
    let (emulator, api) = started(Emulator::builder()).await;
    let failures = RecordingReceiver::start(Script::default()).await;
    let everything = RecordingReceiver::start(Script::default()).await;
    let reply = api
        .post_form(
            "/v1/webhook_endpoints",
            &format!("url={}&enabled_events[]=payment_intent.failed", failures.url),
        )
        .await;
    assert_eq!(reply.status, 200);
    api.register(&everything.url).await;
    let paid = api.create_intent("10", "btc").await;
    api.succeed(&paid).await;
    let failed = api.create_intent("10", "btc").await;
    api.post_empty(&format!("/v1/test_helpers/payment_intents/{failed}/fail"))
        .await;
    assert!(emulator.wait_idle(WAIT).await);
    let types = |r: &RecordingReceiver| -> Vec<String> {
        let mut types: Vec<String> = r
            .arrivals()
            .iter()
            .map(|a| {
                serde_json::from_slice::<serde_json::Value>(&a.body).expect("JSON")["type"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned()
            })
            .collect();
        types.sort();
        types
    };
    assert_eq!(types(&failures), ["payment_intent.failed"]);
    assert_eq!(
        types(&everything),
        ["payment_intent.failed", "payment_intent.succeeded"]
    );
}

#[tokio::test]
async fn a_receiver_failing_three_times_gets_retries_with_growing_gaps_until_it_acknowledges() {
    let (emulator, api) = started(Emulator::builder().retry_schedule(RetrySchedule::new(
        Duration::from_millis(200),
        Duration::from_secs(5),
        6,
    )))
    .await;
    let receiver = one_event_delivered_to(&emulator, &api, Script::failing_first(3)).await;

    let arrivals = receiver.arrivals();
    assert_eq!(arrivals.len(), 4, "3 failures, then the acknowledged attempt");
    let ids: HashSet<String> = arrivals.iter().map(support::Arrival::event_id).collect();
    assert_eq!(ids.len(), 1, "the same event each time");
    let gaps: Vec<Duration> = arrivals.windows(2).map(|w| w[1].at - w[0].at).collect();
    // 200 ms, 400 ms, 800 ms less up to 20 % jitter.
    assert!(gaps[0] >= Duration::from_millis(160), "{gaps:?}");
    assert!(gaps[1] > gaps[0] && gaps[2] > gaps[1], "gaps grow: {gaps:?}");
    assert!(gaps[1] >= Duration::from_millis(320), "{gaps:?}");
    assert!(gaps[2] >= Duration::from_millis(640), "{gaps:?}");

    let attempts = emulator.attempts();
    let summary: Vec<(u32, Option<u16>, bool)> = attempts
        .iter()
        .map(|a| (a.attempt, a.status, a.succeeded))
        .collect();
    assert_eq!(
        summary,
        [
            (1, Some(500), false),
            (2, Some(500), false),
            (3, Some(500), false),
            (4, Some(200), true)
        ]
    );
    assert!(attempts[0].next_attempt_at_ms.is_some() && attempts[3].next_attempt_at_ms.is_none());
    assert_eq!(attempts[0].response_body.as_deref(), Some("database unavailable"));
    // Each attempt is signed afresh, at its own time.
    for arrival in &arrivals {
        assert!(timestamp(&arrival.signature).abs_diff(unix_now()) < 10);
    }
    let stats = emulator.stats();
    assert_eq!(
        (stats.attempts, stats.acknowledged, stats.gave_up, stats.pending),
        (4, 1, 0, 0)
    );
}

#[tokio::test]
async fn a_receiver_that_never_acknowledges_is_given_up_after_the_last_attempt() {
    let (emulator, api) = started(Emulator::builder().retry_schedule(RetrySchedule::new(
        Duration::from_millis(20),
        Duration::from_millis(50),
        4,
    )))
    .await;
    let receiver = one_event_delivered_to(&emulator, &api, Script::failing_first(usize::MAX)).await;
    assert_eq!(receiver.arrivals().len(), 4);
    let stats = emulator.stats();
    assert_eq!((stats.gave_up, stats.acknowledged), (1, 0));
}

#[tokio::test]
async fn no_reply_within_the_timeout_is_a_failed_attempt_and_is_retried() {
    let (emulator, api) = started(
        Emulator::builder()
            .retry_schedule(fast())
            .attempt_timeout(Duration::from_secs(1)),
    )
    .await;
    let receiver = one_event_delivered_to(&emulator, &api, Script::hanging_first(1)).await;
    let attempts = emulator.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0].status, None);
    let error = attempts[0].error.as_deref().unwrap_or("");
    assert!(error.contains("no reply within 1.0 s"), "{error}");
    assert!(attempts[0].duration_ms >= 990, "{attempts:?}");
    assert!((attempts[1].status, attempts[1].succeeded) == (Some(200), true));
    assert_eq!(receiver.arrivals().len(), 2);
}

/// Reads one HTTP/1 request (headers and a `content-length` body) from `socket`.
async fn read_request(socket: &mut tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = socket.read(&mut buf).await.expect("read the request");
        assert!(n > 0, "the emulator closed the connection mid-request");
        request.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().expect("a content length"));
            if request.len() >= end + 4 + length {
                return request;
            }
        }
    }
}

#[tokio::test]
async fn a_reply_whose_body_stalls_times_out_like_no_reply_and_is_retried() {
    use tokio::io::AsyncWriteExt;
    let (emulator, api) = started(
        Emulator::builder()
            .retry_schedule(fast())
            .attempt_timeout(Duration::from_secs(1)),
    )
    .await;
    // A raw receiver: the first connection gets a status line, headers and part
    // of the body, then nothing; later ones get a whole acknowledgement.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/webhooks", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let mut held = Vec::new();
        for connection in 0.. {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            read_request(&mut socket).await;
            if connection == 0 {
                let head =
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 17\r\n\r\n{\"rec";
                socket.write_all(head.as_bytes()).await.expect("write");
                held.push(socket); // open, silent
            } else {
                tokio::spawn(async move {
                    loop {
                        let reply = "HTTP/1.1 200 OK\r\ncontent-length: 17\r\n\r\n{\"received\":true}";
                        if socket.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                        read_request(&mut socket).await;
                    }
                });
            }
        }
    });
    api.register(&url).await;
    one_succeeded_event(&api).await;
    assert!(emulator.wait_idle(WAIT).await);
    let attempts = emulator.attempts();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    let first = &attempts[0];
    assert_eq!((first.status, first.succeeded), (Some(200), false), "{first:?}");
    assert_eq!(
        first.error.as_deref(),
        Some("no reply within 1.0 s (timed out reading the reply)"),
        "{first:?}"
    );
    assert_eq!(first.response_body.as_deref(), Some("{\"rec"), "{first:?}");
    assert!(first.duration_ms >= 990, "{first:?}");
    assert!(first.next_attempt_at_ms.is_some(), "{first:?}");
    let second = &attempts[1];
    assert_eq!((second.status, second.succeeded), (Some(200), true), "{second:?}");
    assert_eq!(second.response_body.as_deref(), Some("{\"received\":true}"));
}

#[tokio::test]
async fn an_unreachable_endpoint_is_a_connection_error_retried() {
    let (emulator, api) = started(Emulator::builder().retry_schedule(RetrySchedule::new(
        Duration::from_millis(20),
        Duration::from_millis(40),
        3,
    )))
    .await;
    // A port nobody listens on: bind, note it, close it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/webhooks", closed.local_addr().expect("addr"));
    drop(closed);
    api.register(&url).await;
    one_succeeded_event(&api).await;
    assert!(emulator.wait_idle(WAIT).await);
    let attempts = emulator.attempts();
    assert_eq!(attempts.len(), 3);
    assert!(attempts
        .iter()
        .all(|a| a.status.is_none() && a.error.as_deref() == Some("could not connect")));
}

/// One case of [`retry_after_is_honoured_up_to_the_schedules_cap`].
struct RetryAfterCase {
    name: &'static str,
    /// The `Retry-After` of the receiver's one failure.
    retry_after: &'static str,
    /// The schedule's cap (its backoff is 20 ms).
    cap: Duration,
    /// The gap between the two attempts: at least the first, below the second.
    gap: (Duration, Option<Duration>),
    /// The retry planned by the first attempt, in ms after it started.
    planned_ms: Option<std::ops::RangeInclusive<u64>>,
}

#[tokio::test]
async fn retry_after_is_honoured_up_to_the_schedules_cap() {
    let cases = [
        RetryAfterCase {
            name: "seconds",
            retry_after: "1",
            cap: Duration::from_secs(5),
            gap: (Duration::from_millis(950), None),
            planned_ms: None,
        },
        // Far off: the wait is the cap (1 s), not the 20 ms backoff.
        RetryAfterCase {
            name: "an HTTP date beyond the cap",
            retry_after: "Fri, 31 Dec 9999 23:59:59 GMT",
            cap: Duration::from_secs(1),
            gap: (Duration::from_millis(950), Some(Duration::from_secs(5))),
            planned_ms: Some(900..=1100),
        },
    ];
    for case in cases {
        let name = case.name;
        let (emulator, api) = started(Emulator::builder().retry_schedule(RetrySchedule::new(
            Duration::from_millis(20),
            case.cap,
            3,
        )))
        .await;
        let script = Script {
            retry_after: Some(case.retry_after),
            ..Script::failing_first(1)
        };
        let receiver = one_event_delivered_to(&emulator, &api, script).await;
        let arrivals = receiver.arrivals();
        assert_eq!(arrivals.len(), 2, "{name}");
        let gap = arrivals[1].at - arrivals[0].at;
        let (at_least, below) = case.gap;
        assert!(gap >= at_least, "{name}: Retry-After waited only {gap:?}");
        if let Some(below) = below {
            assert!(gap < below, "{name}: Retry-After waited {gap:?}");
        }
        if let Some(expected) = case.planned_ms {
            let first = &emulator.attempts()[0];
            let planned = first.next_attempt_at_ms.expect("a retry follows") - first.started_at_ms;
            assert!(expected.contains(&planned), "{name}: {planned} ms");
        }
    }
}

#[tokio::test]
async fn duplicates_and_reordering_reach_a_payhook_receiver_whose_handler_runs_once_per_event() {
    let (emulator, api) = started(
        Emulator::builder()
            .retry_schedule(fast())
            .faults(Faults::default().duplicates(1.0).reorder().seed(42)),
    )
    .await;
    // A slow handler, so concurrent copies overlap and one gets 409.
    let receiver = payhook_receiver(&api, Duration::from_millis(400)).await;

    let mut intents = Vec::new();
    for _ in 0..6 {
        let id = api.create_intent("100", "btc").await;
        api.succeed(&id).await;
        intents.push(id);
    }
    assert!(emulator.wait_idle(WAIT).await);

    let events = emulator.events();
    assert_eq!(events.len(), 6);
    let runs = receiver.runs();
    for event in &events {
        assert_eq!(
            runs.get(&event.id),
            Some(&1),
            "handler runs once for {}: {runs:?}",
            event.id
        );
    }
    assert_eq!(runs.len(), 6);
    // Every delivery was duplicated: two acknowledged deliveries per event …
    let attempts = emulator.attempts();
    let acknowledged = attempts.iter().filter(|a| a.succeeded).count();
    assert_eq!(acknowledged, 12, "{attempts:#?}");
    assert!(attempts.iter().any(|a| a.copy == 1));
    assert!(receiver.requests() >= 12);
    // … and some copies ran concurrently with the original: a 409 then a retry.
    assert!(
        attempts.iter().any(|a| a.status == Some(409)),
        "seed 42 makes concurrent copies: {attempts:#?}"
    );
    // Reordered: the handler did not see the events in creation order.
    let created: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
    assert_ne!(receiver.order(), created, "delivered out of order");
}

#[tokio::test]
async fn reorder_sends_a_window_of_deliveries_newest_first() {
    let (emulator, receiver) = emulator_delivering_to(
        Emulator::builder().faults(
            Faults::default()
                .reorder()
                .reorder_window(Duration::from_millis(500)),
        ),
        Script::default(),
    )
    .await;
    succeeded_events(&emulator, 4);
    assert!(emulator.wait_idle(WAIT).await);
    let arrived: Vec<String> = receiver
        .arrivals()
        .iter()
        .map(support::Arrival::event_id)
        .collect();
    let mut created: Vec<String> = emulator.events().iter().map(|e| e.id.clone()).collect();
    created.reverse();
    assert_eq!(arrived, created);
}

#[tokio::test]
async fn the_same_seed_gives_the_same_faults() {
    async fn pattern(seed: u64) -> Vec<(u64, u32)> {
        let (emulator, _receiver) = emulator_delivering_to(
            Emulator::builder().faults(Faults::default().duplicates(0.5).seed(seed)),
            Script::default(),
        )
        .await;
        succeeded_events(&emulator, 16);
        assert!(emulator.wait_idle(WAIT).await);
        assert_eq!(emulator.seed(), seed);
        let order: Vec<String> = emulator.events().iter().map(|e| e.id.clone()).collect();
        let mut copies: Vec<(u64, u32)> = emulator
            .attempts()
            .iter()
            .map(|a| {
                (
                    order.iter().position(|id| *id == a.event).unwrap_or(99) as u64,
                    a.copy,
                )
            })
            .collect();
        copies.sort_unstable();
        copies
    }
    let a = pattern(7).await;
    assert_eq!(a, pattern(7).await, "seed 7 twice");
    let duplicated = a.iter().filter(|(_, copy)| *copy == 1).count();
    assert!(
        (1..16).contains(&duplicated),
        "p = 0.5 duplicates some, not all: {duplicated}"
    );
    assert_ne!(a, pattern(8).await, "another seed, another pattern");
}

#[tokio::test]
async fn drop_first_loses_the_first_reply_so_the_receiver_sees_a_redelivery() {
    let (emulator, api) = started(
        Emulator::builder()
            .retry_schedule(fast())
            .faults(Faults::default().drop_first()),
    )
    .await;
    let receiver = payhook_receiver(&api, Duration::ZERO).await;
    one_succeeded_event(&api).await;
    assert!(emulator.wait_idle(WAIT).await);
    let attempts = emulator.attempts();
    assert_eq!(attempts.len(), 2);
    assert_eq!((attempts[0].status, attempts[0].succeeded), (Some(200), false));
    assert_eq!(
        attempts[0].error.as_deref(),
        Some("reply discarded by the injected fault drop-first (the receiver got the request and answered)")
    );
    assert!(attempts[1].succeeded);
    assert_eq!(receiver.requests(), 2);
    assert_eq!(
        receiver.runs().values().copied().collect::<Vec<_>>(),
        [1],
        "the redelivery is a duplicate"
    );
}

#[tokio::test]
async fn skew_signs_with_a_shifted_clock_that_a_receiver_rejects_as_stale() {
    let (emulator, api) = started(
        Emulator::builder()
            .retry_schedule(RetrySchedule::new(
                Duration::from_millis(20),
                Duration::from_millis(20),
                2,
            ))
            .faults(Faults::default().skew(-600)),
    )
    .await;
    let receiver = payhook_receiver(&api, Duration::ZERO).await;
    one_succeeded_event(&api).await;
    assert!(emulator.wait_idle(WAIT).await);
    let attempts = emulator.attempts();
    assert_eq!(attempts.len(), 2);
    for attempt in &attempts {
        assert_eq!(attempt.status, Some(400));
        assert!(attempt.signed_at.abs_diff(attempt.started_at_ms / 1000 - 600) <= 1);
        let reply = attempt.response_body.as_deref().unwrap_or("");
        assert!(
            reply.starts_with("Webhook Error: ") && reply.contains("outside the 300 s tolerance"),
            "{reply}"
        );
    }
    assert!(receiver.runs().is_empty());
}

#[tokio::test]
async fn delay_holds_each_delivery_back() {
    let (emulator, receiver) = emulator_delivering_to(
        Emulator::builder().faults(Faults::default().delay(Duration::from_millis(400))),
        Script::default(),
    )
    .await;
    let intent = emulator.create_payment_intent(1, "btc").expect("created");
    let at = std::time::Instant::now();
    emulator.succeed_payment_intent(&intent.id).expect("succeeded");
    assert!(emulator.wait_idle(WAIT).await);
    let arrivals = receiver.arrivals();
    assert_eq!(arrivals.len(), 1);
    assert!(arrivals[0].at - at >= Duration::from_millis(390));
}

#[tokio::test]
async fn during_a_roll_overlap_both_secrets_verify_the_same_delivery() {
    let (emulator, api) = started(Emulator::builder()).await;
    let receiver = RecordingReceiver::start(Script::default()).await;
    let (endpoint, old_secret) = api.register(&receiver.url).await;
    let rolled = api
        .post_json(
            &format!("/v1/webhook_endpoints/{endpoint}/roll_secret"),
            r#"{"expires_in":3600}"#,
        )
        .await;
    let new_secret = rolled.json["secret"].as_str().expect("new secret").to_owned();
    one_succeeded_event(&api).await;
    assert!(emulator.wait_idle(WAIT).await);
    let arrival = &receiver.arrivals()[0];
    let t = timestamp(&arrival.signature);
    assert_eq!(
        v1_items(&arrival.signature),
        [
            independent_hmac(&new_secret, t, &arrival.body),
            independent_hmac(&old_secret, t, &arrival.body)
        ],
        "two v1 items: the new secret's, then the old one's"
    );
    for secret in [&old_secret, &new_secret] {
        Verifier::builder()
            .secret(secret)
            .build()
            .expect("verifier")
            .verify_value(arrival.signature.as_bytes(), &arrival.body)
            .expect("each secret alone verifies the delivery");
    }
    assert_eq!(emulator.attempts()[0].signatures, 2);

    // Rolled again without an overlap: only the newest secret signs.
    let rolled = api
        .post_empty(&format!("/v1/webhook_endpoints/{endpoint}/roll_secret"))
        .await;
    let newest = rolled.json["secret"].as_str().expect("secret").to_owned();
    one_succeeded_event(&api).await;
    assert!(emulator.wait_idle(WAIT).await);
    let arrival = &receiver.arrivals()[1];
    let t = timestamp(&arrival.signature);
    assert_eq!(
        v1_items(&arrival.signature),
        [independent_hmac(&newest, t, &arrival.body)]
    );
}

#[tokio::test]
async fn a_delivery_waiting_for_a_place_on_the_wire_is_signed_with_the_secret_of_its_attempt_time() {
    // One attempt on the wire at a time; the first request hangs for the
    // attempt timeout, so the second event's delivery waits meanwhile.
    let (emulator, api) = started(
        Emulator::builder()
            .max_concurrent_attempts(1)
            .attempt_timeout(Duration::from_secs(1))
            .retry_schedule(fast()),
    )
    .await;
    let receiver = RecordingReceiver::start(Script::hanging_first(1)).await;
    let (endpoint, old_secret) = api.register(&receiver.url).await;
    let first = api.create_intent("5", "btc").await;
    api.succeed(&first).await;
    eventually(WAIT, "the first attempt is on the wire", || {
        receiver.arrivals().len() == 1
    })
    .await;
    let second = api.create_intent("6", "btc").await;
    api.succeed(&second).await;
    let waiting_event = api.get("/v1/events?limit=1").await.ids()[0].clone();
    // Rolled with no overlap while the second delivery waits for its place.
    let rolled = api
        .post_empty(&format!("/v1/webhook_endpoints/{endpoint}/roll_secret"))
        .await;
    let new_secret = rolled.json["secret"].as_str().expect("new secret").to_owned();
    assert!(emulator.wait_idle(WAIT).await);

    let arrivals = receiver.arrivals();
    let waited = arrivals
        .iter()
        .find(|arrival| arrival.event_id() == waiting_event)
        .expect("the second event arrived");
    let t = timestamp(&waited.signature);
    assert_eq!(
        v1_items(&waited.signature),
        [independent_hmac(&new_secret, t, &waited.body)],
        "signed with the secret in use when its attempt started, not when it was queued"
    );
    assert_ne!(old_secret, new_secret);
}

#[tokio::test]
async fn a_receiver_that_never_answers_cannot_grow_the_emulator_without_bound() {
    let emulator = Emulator::builder()
        .attempt_timeout(Duration::from_secs(30))
        .limits(limits(|limits| {
            limits.pending_deliveries = 5;
            limits.attempts = 3;
            limits.objects = 8;
        }))
        .start()
        .await
        .expect("starts");
    let receiver = RecordingReceiver::start(Script::hanging_first(usize::MAX)).await;
    emulator.register_endpoint(&receiver.url).expect("registered");
    let pay = || {
        let intent = emulator.create_payment_intent(1, "btc").expect("created");
        emulator.succeed_payment_intent(&intent.id).expect("succeeded");
    };
    for _ in 0..5 {
        pay();
    }
    eventually(WAIT, "five requests held open", || receiver.arrivals().len() == 5).await;
    for _ in 0..15 {
        pay();
    }
    let stats = emulator.stats();
    assert_eq!((stats.pending, stats.dropped), (5, 15), "{stats:?}");
    assert_eq!(emulator.events().len(), 8, "only the newest events are kept");
    assert_eq!(stats.events_evicted, 12);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(receiver.arrivals().len(), 5, "nothing beyond the bound was sent");
}

#[tokio::test]
async fn a_waiting_delivery_whose_event_was_evicted_is_abandoned() {
    let (emulator, receiver) = emulator_delivering_to(
        Emulator::builder()
            .faults(Faults::default().delay(Duration::from_millis(300)))
            .limits(limits(|limits| limits.objects = 2)),
        Script::default(),
    )
    .await;
    succeeded_events(&emulator, 5);
    let kept: Vec<String> = emulator.events().into_iter().map(|e| e.id).collect();
    assert_eq!(kept.len(), 2);
    assert!(emulator.wait_idle(WAIT).await);
    let stats = emulator.stats();
    assert_eq!((stats.abandoned, stats.acknowledged), (3, 2), "{stats:?}");
    let mut arrived: Vec<String> = receiver.arrivals().iter().map(|a| a.event_id()).collect();
    arrived.sort();
    let mut expected = kept;
    expected.sort();
    assert_eq!(arrived, expected, "only the kept events are delivered");
}

#[tokio::test]
async fn deleting_an_endpoint_abandons_its_pending_retries() {
    let (emulator, api) = started(Emulator::builder().retry_schedule(RetrySchedule::new(
        Duration::from_millis(300),
        Duration::from_secs(1),
        5,
    )))
    .await;
    let receiver = RecordingReceiver::start(Script::failing_first(usize::MAX)).await;
    let (endpoint, _) = api.register(&receiver.url).await;
    one_succeeded_event(&api).await;
    eventually(WAIT, "first attempt", || receiver.arrivals().len() == 1).await;
    api.delete(&format!("/v1/webhook_endpoints/{endpoint}")).await;
    assert!(emulator.wait_idle(WAIT).await);
    assert_eq!(receiver.arrivals().len(), 1);
}

#[tokio::test]
async fn shutdown_is_graceful_and_abandons_pending_retries() {
    let (emulator, receiver) = emulator_delivering_to(
        Emulator::builder().retry_schedule(RetrySchedule::new(
            Duration::from_secs(30),
            Duration::from_secs(30),
            5,
        )),
        Script::failing_first(usize::MAX),
    )
    .await;
    let intent = emulator.create_payment_intent(1, "btc").expect("created");
    emulator.succeed_payment_intent(&intent.id).expect("succeeded");
    eventually(WAIT, "first attempt", || receiver.arrivals().len() == 1).await;
    let base = emulator.base_url();
    let started = std::time::Instant::now();
    emulator.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "does not wait for the 30 s retry"
    );
    assert!(
        reqwest::get(format!("{base}/v1/events")).await.is_err(),
        "no longer listening"
    );
}

#[tokio::test]
async fn a_resend_delivers_the_same_body_signed_afresh_as_new_attempts() {
    let (emulator, api) = started(Emulator::builder().retry_schedule(fast())).await;
    let first = RecordingReceiver::start(Script::default()).await;
    let second = RecordingReceiver::start(Script::default()).await;
    let (first_id, first_secret) = api.register(&first.url).await;
    let (second_id, _) = api.register(&second.url).await;
    one_succeeded_event(&api).await;
    assert!(emulator.wait_idle(WAIT).await);
    let event = emulator.events()[0].id.clone();

    // To every endpoint that wants the event.
    let resent = api.post_empty(&format!("/v1/events/{event}/resend")).await;
    assert_eq!(resent.status, 200, "{}", resent.text);
    assert_eq!(resent.json["object"], "event_resend");
    assert_eq!(resent.json["event"], event.as_str());
    assert_eq!(resent.json["resend"], 1);
    let mut targets: Vec<&str> = resent.json["webhook_endpoints"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    targets.sort_unstable();
    let mut both = vec![first_id.as_str(), second_id.as_str()];
    both.sort_unstable();
    assert_eq!(targets, both);
    assert!(emulator.wait_idle(WAIT).await);
    assert_eq!(first.arrivals().len(), 2);
    assert_eq!(second.arrivals().len(), 2);

    // To one endpoint only, given by id.
    tokio::time::sleep(Duration::from_millis(1100)).await; // a new signing second
    let resent = api
        .post_form(
            &format!("/v1/events/{event}/resend"),
            &format!("webhook_endpoint={first_id}"),
        )
        .await;
    assert_eq!(
        (resent.status, resent.json["resend"].as_u64()),
        (200, Some(2)),
        "{}",
        resent.text
    );
    assert!(emulator.wait_idle(WAIT).await);
    let arrivals = first.arrivals();
    assert_eq!(arrivals.len(), 3);
    assert_eq!(second.arrivals().len(), 2, "the other endpoint is left alone");
    assert!(
        arrivals.iter().all(|a| a.body == arrivals[0].body),
        "the same bytes each time"
    );
    let (original, again) = (&arrivals[0].signature, &arrivals[2].signature);
    assert!(
        timestamp(again) > timestamp(original),
        "signed afresh: {original} / {again}"
    );
    let expected = independent_hmac(&first_secret, timestamp(again), &arrivals[2].body);
    assert_eq!(v1_items(again), [expected.as_str()]);

    // Recorded as new attempts, numbered by resend.
    let listed = api
        .get(&format!("/v1/events/{event}/delivery_attempts?limit=100"))
        .await;
    let mut seen: Vec<(u64, String, u64)> = listed.json["data"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|a| {
            (
                a["resend"].as_u64().expect("resend"),
                a["webhook_endpoint"].as_str().expect("endpoint").to_owned(),
                a["attempt"].as_u64().expect("attempt"),
            )
        })
        .collect();
    seen.sort();
    let mut expected = vec![
        (0, first_id.clone(), 1),
        (0, second_id.clone(), 1),
        (1, first_id.clone(), 1),
        (1, second_id.clone(), 1),
        (2, first_id.clone(), 1),
    ];
    expected.sort();
    assert_eq!(seen, expected);

    // Refusals: an unknown event, an unknown endpoint, an unknown parameter.
    let missing = api.post_empty("/v1/events/evt_missing/resend").await;
    assert_eq!((missing.status, missing.code()), (404, "resource_missing"));
    let missing = api
        .post_form(
            &format!("/v1/events/{event}/resend"),
            "webhook_endpoint=we_missing",
        )
        .await;
    assert_eq!((missing.status, missing.param()), (404, "webhook_endpoint"));
    let unknown = api
        .post_form(&format!("/v1/events/{event}/resend"), "url=http://x/")
        .await;
    assert_eq!((unknown.status, unknown.param()), (400, "url"));
    assert_eq!(first.arrivals().len(), 3, "a refused resend delivers nothing");
}

#[tokio::test]
async fn enabled_events_take_any_type_string_and_deliver_what_matches() {
    let (emulator, api) = started(Emulator::builder()).await;
    let sibling = RecordingReceiver::start(Script::default()).await;
    let succeeded = RecordingReceiver::start(Script::default()).await;
    let reply = api
        .post_json(
            "/v1/webhook_endpoints",
            &format!(
                r#"{{"url":"{}","enabled_events":["payment_intent.payment_failed","charge.refunded"]}}"#,
                sibling.url
            ),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.json["enabled_events"],
        serde_json::json!(["payment_intent.payment_failed", "charge.refunded"])
    );
    let reply = api
        .post_form(
            "/v1/webhook_endpoints",
            &format!("url={}&enabled_events[]=payment_intent.succeeded", succeeded.url),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    one_succeeded_event(&api).await;
    let failed = api.create_intent("10", "btc").await;
    api.post_empty(&format!("/v1/test_helpers/payment_intents/{failed}/fail"))
        .await;
    assert!(emulator.wait_idle(WAIT).await);
    assert_eq!(sibling.arrivals().len(), 0, "no emitted type matches");
    assert_eq!(succeeded.arrivals().len(), 1);

    let long = "x".repeat(256);
    for (events, why) in [
        (format!(r#"["{long}"]"#), "1 to 255 characters"),
        (
            r#"["payment_intent.succeeded","bad\u0007"]"#.to_owned(),
            "control characters",
        ),
        (r#"[""]"#.to_owned(), "1 to 255 characters"),
        (
            format!("[{}]", vec![r#""a""#; 101].join(",")),
            "at most 100 event types",
        ),
    ] {
        let reply = api
            .post_json(
                "/v1/webhook_endpoints",
                &format!(r#"{{"url":"http://127.0.0.1:9/","enabled_events":{events}}}"#),
            )
            .await;
        assert_eq!((reply.status, reply.param()), (400, "enabled_events"), "{events}");
        assert!(reply.message().contains(why), "{}", reply.message());
        assert!(!reply.message().contains('\u{7}'), "escaped: {}", reply.message());
    }
}

#[tokio::test]
async fn a_real_failure_under_drop_first_keeps_its_own_cause() {
    let (emulator, api) = started(
        Emulator::builder()
            .retry_schedule(RetrySchedule::new(
                Duration::from_millis(20),
                Duration::from_millis(20),
                2,
            ))
            .faults(Faults::default().drop_first()),
    )
    .await;
    // Nothing listens there: the receiver is down, not dropped by the fault.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/webhooks", closed.local_addr().expect("addr"));
    drop(closed);
    api.register(&url).await;
    one_succeeded_event(&api).await;
    assert!(emulator.wait_idle(WAIT).await);
    let attempts = emulator.attempts();
    assert_eq!(attempts.len(), 2);
    for attempt in &attempts {
        assert_eq!(attempt.error.as_deref(), Some("could not connect"), "{attempt:?}");
        assert_eq!(attempt.status, None);
    }
}

#[tokio::test]
async fn the_library_resends_like_the_api() {
    let (emulator, api) = started(Emulator::builder()).await;
    let receiver = RecordingReceiver::start(Script::default()).await;
    let (endpoint, _) = api.register(&receiver.url).await;
    one_succeeded_event(&api).await;
    assert!(emulator.wait_idle(WAIT).await);
    let event = emulator.events()[0].id.clone();
    assert_eq!(emulator.resend_event(&event, None), Ok(1));
    assert_eq!(emulator.resend_event(&event, Some(&endpoint)), Ok(2));
    assert!(emulator.wait_idle(WAIT).await);
    assert_eq!(receiver.arrivals().len(), 3);
    let mut resends: Vec<u64> = emulator.attempts().iter().map(|a| a.resend).collect();
    resends.sort_unstable();
    assert_eq!(resends, [0, 1, 2]);
    let missing = emulator.resend_event("evt_missing", None).unwrap_err();
    assert_eq!((missing.status, missing.param.as_deref()), (404, Some("id")));
    let missing = emulator.resend_event(&event, Some("we_missing")).unwrap_err();
    assert_eq!(
        (missing.status, missing.param.as_deref()),
        (404, Some("webhook_endpoint"))
    );
}

/// The ids `GET /v1/events?delivery_success=…` lists (one page of up to 100).
async fn listed(api: &Api, delivery_success: bool) -> Vec<String> {
    let reply = api
        .get(&format!(
            "/v1/events?delivery_success={delivery_success}&limit=100"
        ))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.ids()
}

#[tokio::test]
async fn delivery_success_turns_true_once_one_endpoint_acknowledges() {
    // Attempt 1 fails at both endpoints; 2 s later the first acknowledges its
    // retry, the second fails again and is given up.
    let (emulator, api) = started(Emulator::builder().retry_schedule(
        RetrySchedule::new(Duration::from_secs(2), Duration::from_secs(2), 2).without_jitter(),
    ))
    .await;
    let recovering = RecordingReceiver::start(Script::failing_first(1)).await;
    let down = RecordingReceiver::start(Script::failing_first(usize::MAX)).await;
    api.register(&recovering.url).await;
    api.register(&down.url).await;
    one_succeeded_event(&api).await;
    let event = emulator.events()[0].id.clone();
    eventually(WAIT, "both first attempts failed", || {
        emulator.attempts().len() == 2
    })
    .await;
    assert!(emulator.attempts().iter().all(|a| !a.succeeded));
    assert_eq!(
        listed(&api, false).await,
        std::slice::from_ref(&event),
        "not acknowledged yet"
    );
    assert!(listed(&api, true).await.is_empty());
    assert!(!emulator.events()[0].delivery_success());

    assert!(emulator.wait_idle(WAIT).await);
    let stats = emulator.stats();
    assert_eq!(
        (stats.acknowledged, stats.gave_up),
        (1, 1),
        "one endpoint is enough"
    );
    assert_eq!(recovering.arrivals().len(), 2);
    assert_eq!(listed(&api, true).await, [event]);
    assert!(listed(&api, false).await.is_empty());
    assert!(emulator.events()[0].delivery_success());
}

#[tokio::test]
async fn an_undeliverable_event_never_reaches_the_receiver_and_stays_undelivered() {
    let (emulator, api) = started(
        Emulator::builder()
            .retry_schedule(RetrySchedule::new(
                Duration::from_millis(20),
                Duration::from_millis(50),
                3,
            ))
            .faults(Faults::default().undeliverable(1.0).duplicates(1.0).seed(1)),
    )
    .await;
    let receiver = RecordingReceiver::start(Script::default()).await;
    let payhook = payhook_receiver(&api, Duration::ZERO).await;
    api.register(&receiver.url).await;
    one_succeeded_event(&api).await;
    one_succeeded_event(&api).await;
    assert!(emulator.wait_idle(WAIT).await);

    assert!(receiver.arrivals().is_empty(), "no request was sent");
    assert_eq!(payhook.requests(), 0, "no request was sent");
    // 2 events × 2 endpoints × 2 copies (the duplicate fault) × 3 attempts,
    // each failed by the fault without a status.
    let attempts = emulator.attempts();
    assert_eq!(attempts.len(), 24);
    for attempt in &attempts {
        assert_eq!((attempt.status, attempt.succeeded), (None, false), "{attempt:?}");
        assert_eq!(
            attempt.error.as_deref(),
            Some("not sent: the injected fault undeliverable fails every attempt of this event (the receiver got no request)")
        );
    }
    assert_eq!(emulator.stats().gave_up, 8);
    let ids: Vec<String> = emulator.events().iter().rev().map(|e| e.id.clone()).collect();
    assert_eq!(listed(&api, false).await, ids, "what a reconciler finds");
    assert!(listed(&api, true).await.is_empty());

    // A resend stands for the endpoint being back: it gets through.
    emulator.resend_event(&ids[0], None).expect("resent");
    assert!(emulator.wait_idle(WAIT).await);
    assert_eq!(payhook.runs().get(&ids[0]), Some(&1));
    assert_eq!(listed(&api, true).await, [ids[0].clone()]);
    assert_eq!(listed(&api, false).await, [ids[1].clone()]);
}

#[tokio::test]
async fn the_same_seed_makes_the_same_share_of_events_undeliverable() {
    /// The creation positions of the events `delivery_success=false` lists
    /// once every delivery is over, and the events the receiver got.
    async fn undelivered(seed: u64) -> (Vec<usize>, HashSet<String>, Vec<String>) {
        let (emulator, api) = started(
            Emulator::builder()
                .retry_schedule(RetrySchedule::new(
                    Duration::from_millis(10),
                    Duration::from_millis(10),
                    2,
                ))
                .faults(Faults::default().undeliverable(0.3).seed(seed)),
        )
        .await;
        let receiver = RecordingReceiver::start(Script::default()).await;
        api.register(&receiver.url).await;
        succeeded_events(&emulator, 40);
        assert!(emulator.wait_idle(WAIT).await);
        let order: Vec<String> = emulator.events().iter().map(|e| e.id.clone()).collect();
        let mut positions: Vec<usize> = listed(&api, false)
            .await
            .iter()
            .map(|id| order.iter().position(|o| o == id).expect("a kept event"))
            .collect();
        positions.sort_unstable();
        let arrived = receiver
            .arrivals()
            .iter()
            .map(support::Arrival::event_id)
            .collect();
        (positions, arrived, order)
    }
    let (picked, arrived, order) = undelivered(2).await;
    assert!((8..=16).contains(&picked.len()), "about 30 % of 40: {picked:?}");
    // Exactly the others reached the receiver.
    let expected: HashSet<String> = order
        .iter()
        .enumerate()
        .filter(|(i, _)| !picked.contains(i))
        .map(|(_, id)| id.clone())
        .collect();
    assert_eq!(arrived, expected);
    assert_eq!(undelivered(2).await.0, picked, "seed 2 twice: the same events");
    assert_ne!(undelivered(4).await.0, picked, "another seed, other events");
}
