//! The receiver examples as users run them (`cargo run --example axum_receiver`
//! or `actix_receiver`): each in its own process on a free loopback port, fed
//! genuine, duplicate, forged and tampered deliveries over HTTP, judged by its
//! replies and by what it prints.
//!
//! Both examples keep one contract, so every case runs against both: they listen
//! on `PAYHOOK_ADDR` and take deliveries on `POST /webhooks`, verify them with
//! `PAYHOOK_SECRET` (and refuse to start without it), keep the dedupe state in
//! Redis when `PAYHOOK_REDIS_URL` is set, print `listening on http://ADDR` once
//! ready, and log one INFO line `handled <event id> <event type>` per new event,
//! never the word `handled` for a duplicate or a rejection.
//!
//! The edge cases below also run against `inbox_receiver`, which shares the
//! allowlist settings (`PAYHOOK_ALLOWED_IPS`, `PAYHOOK_TRUSTED_PROXIES`) and
//! the header timeout: a malformed entry stops it before it listens, a source
//! outside the allowlist gets `403`, and a header block trickled one line a
//! second is cut within seconds.
//!
//! The Redis case needs the Redis 7 server named by `PAYHOOK_TEST_REDIS_URL`
//! (`eval "$(.ci/start-redis)"` starts one) and fails without it.

use crate::example_process;

use std::time::Duration;

use bytes::Bytes;
use example_process::{for_each_receiver, Example};
use payhook::sender::{EventBuilder, SignedDelivery};

const RECEIVED: &str = r#"{"received":true}"#;
/// How long a line may take to be printed once the reply it goes with is in.
const LOG_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs the contract case `$case(example: &str)` against each example, as the
/// tests `$case::axum_receiver` and `$case::actix_receiver`.
macro_rules! for_each_example {
    ($case:ident) => {
        for_each_receiver!($case: axum_receiver, actix_receiver);
    };
}

for_each_example!(handles_a_new_event_once_and_logs_duplicates_and_rejections_without_handled);
async fn handles_a_new_event_once_and_logs_duplicates_and_rejections_without_handled(example: &str) {
    let secret = "whsec_example_test_from_env";
    let mut receiver = Example::start(example, &[("PAYHOOK_SECRET", secret)]);

    let event = EventBuilder::payment_intent_succeeded();
    let id = event.event_id().to_owned();
    let genuine = SignedDelivery::now(event.to_json(), secret).unwrap();
    for _ in 0..2 {
        assert_eq!(
            receiver.post(genuine.body.clone(), &genuine.signature).await,
            (200, RECEIVED.to_owned())
        );
    }
    let forged = SignedDelivery::now(event.to_json(), "whsec_forger").unwrap();
    let tampered = Bytes::from(event.to_json().replace(&id, "evt_forged"));
    // One signed with another secret, one altered after signing.
    for (body, signature) in [(forged.body, &forged.signature), (tampered, &genuine.signature)] {
        let (status, reply) = receiver.post(body, signature).await;
        assert_eq!(status, 400);
        assert!(
            reply.starts_with("Webhook Error: no signature matches"),
            "{reply}"
        );
    }

    let handled = format!("handled {id} payment_intent.succeeded");
    receiver.wait_for_line(LOG_TIMEOUT, |line| {
        line.contains(&handled) && line.contains("INFO")
    });
    receiver.wait_for_line(LOG_TIMEOUT, |line| {
        line.contains("duplicate delivery acknowledged") && line.contains(&id)
    });
    receiver.wait_for_lines(LOG_TIMEOUT, 2, |line| {
        line.contains("delivery rejected") && line.contains("no signature matches")
    });

    let lines = receiver.lines();
    let handled_lines: Vec<_> = lines.iter().filter(|line| line.contains("handled")).collect();
    assert_eq!(
        handled_lines.len(),
        1,
        "one `handled` line, for the one new event: {lines:#?}"
    );
    assert!(handled_lines[0].contains(&handled), "{lines:#?}");
    assert!(
        !lines.iter().any(|line| line.contains(secret)),
        "the secret is never printed: {lines:#?}"
    );
    assert!(
        !lines
            .iter()
            .any(|line| line.contains("PAYHOOK_SECRET is not set")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|line| line == "dedupe store: in memory"),
        "{lines:#?}"
    );
}

for_each_example!(without_payhook_secret_it_refuses_to_start);
async fn without_payhook_secret_it_refuses_to_start(example: &str) {
    // Unset, then set but empty: neither may fall back to a secret anyone can read.
    for env in [&[][..], &[("PAYHOOK_SECRET", "")][..]] {
        let mut command = tokio::process::Command::from(example_process::command(example, env));
        command.kill_on_drop(true);
        let output = tokio::time::timeout(Duration::from_secs(30), command.output())
            .await
            .unwrap_or_else(|_| panic!("{example} kept running without a secret ({env:?})"))
            .expect("run the example");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(1),
            "stdout: {stdout}\nstderr: {stderr}"
        );
        let expected = match env {
            [] => format!("{example}: PAYHOOK_SECRET is not set: set it to the endpoint's signing secret"),
            _ => format!("{example}: PAYHOOK_SECRET is empty"),
        };
        assert!(stderr.contains(&expected), "{stderr}");
        assert!(!stdout.contains("listening on"), "{stdout}");
        for text in [&stdout, &stderr] {
            // `whsec_...` in the hint is fine; a `whsec_` with a value is a secret.
            let secret_printed = text
                .match_indices("whsec_")
                .any(|(at, _)| text[at + 6..].starts_with(|c: char| c.is_ascii_alphanumeric()));
            assert!(!secret_printed, "a secret was printed: {text}");
        }
    }
}

for_each_example!(an_unreachable_redis_url_stops_it_with_a_clear_error_that_hides_the_password);
async fn an_unreachable_redis_url_stops_it_with_a_clear_error_that_hides_the_password(example: &str) {
    // Port 1 on loopback refuses connections at once.
    let command = example_process::command(
        example,
        &[
            ("PAYHOOK_SECRET", "whsec_example_test_from_env"),
            ("PAYHOOK_REDIS_URL", "redis://:hunter2-password@127.0.0.1:1/0"),
        ],
    );
    let output = tokio::process::Command::from(command)
        .output()
        .await
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        stderr.contains("PAYHOOK_REDIS_URL: Redis unavailable"),
        "{stderr}"
    );
    assert!(!stdout.contains("listening on"), "{stdout}");
    for text in [&stdout, &stderr] {
        assert!(!text.contains("hunter2"), "the password is never printed: {text}");
    }
}

fn redis_url() -> String {
    std::env::var("PAYHOOK_TEST_REDIS_URL").unwrap_or_else(|_| {
        panic!(
            "PAYHOOK_TEST_REDIS_URL is not set: this test needs a Redis 7 server. Start one with \
             `eval \"$(.ci/start-redis)\"`, or `redis-server --port 6390 --save '' --daemonize yes` and \
             `export PAYHOOK_TEST_REDIS_URL=redis://127.0.0.1:6390/`"
        )
    })
}

for_each_example!(replicas_sharing_redis_handle_each_event_once);
async fn replicas_sharing_redis_handle_each_event_once(example: &str) {
    const SECRET: &str = "whsec_example_replicas";
    let url = redis_url();
    let env = [("PAYHOOK_SECRET", SECRET), ("PAYHOOK_REDIS_URL", url.as_str())];
    let mut first = Example::start(example, &env);
    let mut second = Example::start(example, &env);
    for replica in [&first, &second] {
        assert!(
            replica.lines().iter().any(|line| line == "dedupe store: Redis"),
            "{:#?}",
            replica.lines()
        );
    }

    let event = EventBuilder::payment_intent_succeeded();
    let signed = SignedDelivery::now(event.to_json(), SECRET).unwrap();
    assert_eq!(
        first.post(signed.body.clone(), &signed.signature).await,
        (200, RECEIVED.to_owned())
    );
    // The sender retries on the other replica: acknowledged, not handled again.
    assert_eq!(
        second.post(signed.body.clone(), &signed.signature).await,
        (200, RECEIVED.to_owned())
    );

    let handled = format!("handled {} payment_intent.succeeded", event.event_id());
    first.wait_for_line(LOG_TIMEOUT, |line| line.contains(&handled));
    second.wait_for_line(LOG_TIMEOUT, |line| {
        line.contains("duplicate delivery acknowledged") && line.contains(event.event_id())
    });
    assert!(
        !second.lines().iter().any(|line| line.contains("handled")),
        "{:#?}",
        second.lines()
    );
    for replica in [&first, &second] {
        assert!(
            !replica.lines().iter().any(|line| line.contains(&url)),
            "the Redis URL is never printed"
        );
    }
}

for_each_example!(a_signed_event_id_with_a_newline_and_esc_stays_on_its_own_log_line);
async fn a_signed_event_id_with_a_newline_and_esc_stays_on_its_own_log_line(example: &str) {
    let secret = "whsec_example_test_from_env";
    let mut receiver = Example::start(example, &[("PAYHOOK_SECRET", secret)]);
    let id = "evt_x\nFORGED INFO payhook: handled evt_fake payment_intent.succeeded\u{1b}[2J";
    let event = EventBuilder::payment_intent_succeeded().id(id);
    let signed = SignedDelivery::now(event.to_json(), secret).unwrap();
    assert_eq!(
        receiver.post(signed.body.clone(), &signed.signature).await,
        (200, RECEIVED.to_owned())
    );
    assert_eq!(
        receiver.post(signed.body, &signed.signature).await,
        (200, RECEIVED.to_owned())
    );
    let escaped = r"evt_x\nFORGED INFO payhook: handled evt_fake payment_intent.succ";
    receiver.wait_for_line(LOG_TIMEOUT, |line| {
        line.contains("handled") && line.contains(escaped)
    });
    receiver.wait_for_line(LOG_TIMEOUT, |line| {
        line.contains("duplicate delivery acknowledged") && line.contains(escaped)
    });
    let lines = receiver.lines();
    assert!(
        !lines.iter().any(|line| line.starts_with("FORGED")),
        "a forged line: {lines:#?}"
    );
    assert!(
        !lines.iter().any(|line| line.contains('\u{1b}')),
        "a raw ESC: {lines:#?}"
    );
}

/// `env` plus, for `inbox_receiver`, a database of its own.
fn with_database(example: &str, env: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    static DATABASES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut env: Vec<_> = env
        .iter()
        .map(|(name, value)| (*name, (*value).to_owned()))
        .collect();
    if example == "inbox_receiver" {
        let dir = std::env::temp_dir().join(format!(
            "payhook-example-edges-{}-{}",
            std::process::id(),
            DATABASES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        env.push((
            "PAYHOOK_DATABASE_URL",
            format!("sqlite://{}", dir.join("inbox.db").display()),
        ));
    }
    env
}

fn borrowed<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(name, value)| (*name, value.as_str())).collect()
}

for_each_receiver!(a_malformed_allowlist_entry_stops_it_naming_the_variable_and_entry);
async fn a_malformed_allowlist_entry_stops_it_naming_the_variable_and_entry(example: &str) {
    for (variable, value, expected) in [
        (
            "PAYHOOK_ALLOWED_IPS",
            "127.0.0.1, 10.0.0.0/33",
            r#"PAYHOOK_ALLOWED_IPS: "10.0.0.0/33": the prefix length is over 32"#,
        ),
        (
            "PAYHOOK_TRUSTED_PROXIES",
            "10.0.0.1/8",
            r#"PAYHOOK_TRUSTED_PROXIES: "10.0.0.1/8": bits are set past the prefix length"#,
        ),
    ] {
        let env = with_database(
            example,
            &[
                ("PAYHOOK_SECRET", "whsec_example_test_from_env"),
                ("PAYHOOK_ALLOWED_IPS", "127.0.0.1"),
                (variable, value),
            ],
        );
        let mut command = tokio::process::Command::from(example_process::command(example, &borrowed(&env)));
        command.kill_on_drop(true);
        let output = tokio::time::timeout(Duration::from_secs(30), command.output())
            .await
            .unwrap_or_else(|_| panic!("{example} kept running with {variable}={value:?}"))
            .expect("run the example");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(1),
            "stdout: {stdout}\nstderr: {stderr}"
        );
        assert!(stderr.contains(&format!("{example}: {expected}")), "{stderr}");
        assert!(!stdout.contains("listening on"), "{stdout}");
    }
}

for_each_receiver!(the_allowlist_from_the_environment_refuses_other_sources);
async fn the_allowlist_from_the_environment_refuses_other_sources(example: &str) {
    let secret = "whsec_example_test_from_env";
    let env = with_database(
        example,
        &[
            ("PAYHOOK_SECRET", secret),
            ("PAYHOOK_ALLOWED_IPS", " 127.0.0.2 , 198.51.100.0/24 "),
            ("PAYHOOK_TRUSTED_PROXIES", "127.0.0.3"),
        ],
    );
    let receiver = Example::start(example, &borrowed(&env));
    let deliver = |from: [u8; 4], forwarded_for: Option<&'static str>| {
        let url = receiver.url();
        async move {
            let signed =
                SignedDelivery::now(EventBuilder::payment_intent_succeeded().to_json(), secret).unwrap();
            let client = reqwest::Client::builder()
                .local_address(std::net::IpAddr::from(from))
                .build()
                .unwrap();
            let mut request = client
                .post(url)
                .header("x-service-signature", &signed.signature)
                .body(signed.body);
            if let Some(forwarded_for) = forwarded_for {
                request = request.header("x-forwarded-for", forwarded_for);
            }
            let response = request.send().await.expect("the example answers");
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let refused = (
        403,
        "Webhook Error: the source address is not allowed to deliver to this endpoint".to_owned(),
    );
    assert_eq!(deliver([127, 0, 0, 2], None).await, (200, RECEIVED.to_owned()));
    assert_eq!(deliver([127, 0, 0, 1], None).await, refused);
    assert_eq!(
        deliver([127, 0, 0, 1], Some("198.51.100.7")).await,
        refused,
        "untrusted peer"
    );
    assert_eq!(
        deliver([127, 0, 0, 3], Some("198.51.100.7")).await,
        (200, RECEIVED.to_owned()),
        "through the trusted proxy"
    );
    assert_eq!(
        deliver([127, 0, 0, 3], Some("198.51.100.7, 192.0.2.1")).await,
        refused,
        "a spoofed hop left of the real client"
    );
}

/// Opens two connections: one sends a request line and then one header line a
/// second, never finishing its header block; the other sends nothing. Returns
/// how long the server kept each open.
async fn trickle_and_idle(addr: std::net::SocketAddr) -> (Duration, Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const GIVE_UP: Duration = Duration::from_secs(20);
    let trickle = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let started = std::time::Instant::now();
        stream
            .write_all(b"POST /webhooks HTTP/1.1\r\nhost: 127.0.0.1\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        for line in 0.. {
            assert!(
                started.elapsed() < GIVE_UP,
                "a trickling header block held its connection for {GIVE_UP:?}"
            );
            tokio::select! {
                read = stream.read(&mut buf) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {} // a 408 before the close
                },
                () = tokio::time::sleep(Duration::from_secs(1)) => {
                    if stream.write_all(format!("x-trickle-{line}: a\r\n").as_bytes()).await.is_err() {
                        break;
                    }
                }
            }
        }
        started.elapsed()
    };
    let idle = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let started = std::time::Instant::now();
        let mut buf = [0u8; 1024];
        loop {
            match tokio::time::timeout(GIVE_UP, stream.read(&mut buf)).await {
                Err(_) => panic!("an idle connection was held for {GIVE_UP:?}"),
                Ok(Ok(0) | Err(_)) => break,
                Ok(Ok(_)) => {}
            }
        }
        started.elapsed()
    };
    tokio::join!(trickle, idle)
}

for_each_receiver!(a_trickling_header_block_is_cut_within_seconds);
async fn a_trickling_header_block_is_cut_within_seconds(example: &str) {
    let env = with_database(example, &[("PAYHOOK_SECRET", "whsec_example_test_from_env")]);
    let receiver = Example::start(example, &borrowed(&env));
    let (trickled, idle) = trickle_and_idle(receiver.addr).await;
    // The examples' header timeout is 5 s; a little more for a busy machine.
    for (what, held) in [("trickling", trickled), ("idle", idle)] {
        assert!(
            held >= Duration::from_secs(3) && held < Duration::from_secs(9),
            "{example} held a {what} connection for {held:?}"
        );
    }
    // Still serving after cutting them.
    let signed = SignedDelivery::now(
        EventBuilder::payment_intent_succeeded().to_json(),
        "whsec_example_test_from_env",
    )
    .unwrap();
    assert_eq!(
        receiver.post(signed.body, &signed.signature).await,
        (200, RECEIVED.to_owned())
    );
}
