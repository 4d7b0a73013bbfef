//! `payhook reconcile`, run as the real binary against a real `payhook
//! emulate` process: events the service created and no delivery brought are
//! counted, then stored in an inbox (SQLite file and PostgreSQL, from
//! `PAYHOOK_TEST_DATABASE_URL`; the PostgreSQL test fails when it is unset)
//! or sent, signed, to a real loopback receiver; and every bad input gets
//! the exit code the command documents, without the API key ever printed.
#![cfg(feature = "inbox")]

use crate::support;

use std::path::{Path, PathBuf};

use support::{payhook_with_env, Run};
#[cfg(feature = "emulate")]
use {
    bytes::Bytes,
    payhook_core::sender::unix_now,
    payhook_core::{sign, Receiver, Secret},
    payhook_test_support::unique,
    std::collections::HashMap,
    std::time::Duration,
};

/// The key a test's emulator is started with (`--key`): the only one it takes.
const KEY: &str = "sk_test_reconcile_key_never_printed";

/// A key file holding `key`, in a fresh directory.
fn key_file(dir: &Path, key: &str) -> PathBuf {
    let path = dir.join("api-key");
    std::fs::write(&path, format!("{key}\n")).expect("write the key file");
    path
}

/// Runs `payhook reconcile ARGS` on a blocking thread (the test's runtime
/// keeps serving the receiver and the inbox meanwhile).
async fn reconcile(args: &[&str]) -> Run {
    reconcile_with_env(args, &[]).await
}

/// `payhook reconcile` from the list at `base` into the inbox at `database`,
/// with the key in `key_file`, and `extra` arguments.
async fn reconcile_into(base: &str, key_file: &std::path::Path, database: &str, extra: &[&str]) -> Run {
    let key_file = key_file.to_str().unwrap();
    let mut args = vec![
        "--api-base",
        base,
        "--api-key-file",
        key_file,
        "--database-url",
        database,
    ];
    args.extend_from_slice(extra);
    reconcile(&args).await
}

async fn reconcile_with_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut full = vec!["reconcile".to_owned()];
    full.extend(args.iter().map(|arg| (*arg).to_owned()));
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = full.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        payhook_with_env(&args, b"", &env)
    })
    .await
    .expect("the run finishes")
}

/// The count of the `N event(s)` line: the first line of stdout must hold it.
#[cfg(feature = "emulate")]
fn count_line(run: &Run) -> (usize, &str) {
    let first = run
        .stdout
        .lines()
        .next()
        .unwrap_or_else(|| panic!("no output: {run:?}"));
    let count = first
        .split_once(" event(s) ")
        .and_then(|(count, _)| count.parse().ok())
        .unwrap_or_else(|| panic!("the first line names no count: {run:?}"));
    (count, first)
}

/// The `  TYPE: COUNT` lines.
#[cfg(feature = "emulate")]
fn type_lines(run: &Run) -> Vec<&str> {
    run.stdout.lines().filter(|line| line.starts_with("  ")).collect()
}

fn assert_no_key(run: &Run) {
    assert!(
        !run.stdout.contains(KEY) && !run.stderr.contains(KEY),
        "the API key was printed: {run:?}"
    );
}

#[cfg(feature = "emulate")]
mod emulator {

    use payhook_inbox::reconcile::{ApiKey, EventsApi, EventsQuery, ListedEvent};

    /// A running `payhook emulate` with a fixed key, on a free port (the
    /// process helper of the emulate tests), and where its API is.
    pub struct Emulate {
        process: crate::emulate::Emulate,
        pub base: String,
    }

    impl Emulate {
        pub fn start(args: &[&str]) -> Self {
            let mut all = vec!["--addr", "127.0.0.1:0", "--key", super::KEY];
            all.extend_from_slice(args);
            let process = crate::emulate::Emulate::start(&all);
            let base = process.listening();
            Self { process, base }
        }

        pub fn stderr(&self) -> String {
            self.process.stderr()
        }

        async fn post(&self, path: &str) -> serde_json::Value {
            let body = if path == "/v1/payment_intents" {
                "amount=5000&currency=btc"
            } else {
                ""
            };
            let response = reqwest::Client::new()
                .post(format!("{}{path}", self.base))
                .bearer_auth(super::KEY)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body)
                .send()
                .await
                .expect("the emulator answers");
            assert_eq!(response.status().as_u16(), 200, "POST {path}");
            let text = response.text().await.expect("a body");
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
        }

        /// Creates a payment intent and drives it to `succeed` or `fail`:
        /// one event of the matching type.
        pub async fn pay(&self, helper: &str) {
            let intent = self.post("/v1/payment_intents").await;
            let id = intent["id"].as_str().expect("an intent id");
            self.post(&format!("/v1/test_helpers/payment_intents/{id}/{helper}"))
                .await;
        }

        /// How many delivery attempts the emulator has made of event `id`.
        pub async fn attempts(&self, id: &str) -> usize {
            let response = reqwest::Client::new()
                .get(format!("{}/v1/events/{id}/delivery_attempts", self.base))
                .bearer_auth(super::KEY)
                .send()
                .await
                .expect("the emulator answers");
            assert_eq!(response.status().as_u16(), 200, "GET the attempts of {id}");
            let text = response.text().await.expect("a body");
            let list: serde_json::Value =
                serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
            list["data"].as_array().map_or(0, Vec::len)
        }

        /// Every event of the emulator, newest first, exactly as listed.
        pub async fn events(&self, delivery_success: Option<bool>) -> Vec<ListedEvent> {
            let api = EventsApi::new(&self.base, ApiKey::new(super::KEY).unwrap()).unwrap();
            let page = api
                .page(&EventsQuery {
                    delivery_success,
                    ..EventsQuery::default()
                })
                .await
                .expect("a page of events");
            assert!(!page.has_more, "the tests create fewer than a page");
            page.events
        }
    }
}

/// Three events no delivery brought (the emulator has no endpoint), one of
/// them put in the inbox by its signed delivery: the dry run counts the other
/// two and changes nothing, `--yes` stores exactly those two as reconciled, a
/// second dry run counts none, and the app's workers handle each event once.
#[cfg(feature = "emulate")]
async fn missing_events_are_counted_then_stored(url: String, dir: &Path) {
    use payhook_inbox::admin::{Admin, Filter};
    use payhook_inbox::{HandlerError, Inbox, Job, Source};

    let emulate = emulator::Emulate::start(&[]);
    let secret = "whsec_reconcile_inbox";
    let namespace = unique("reconcile");
    let receiver = Receiver::builder().secret(secret).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(&namespace)
        .poll_interval(Duration::from_millis(20))
        .connect(&url)
        .await
        .unwrap_or_else(|err| panic!("cannot open the test inbox: {err}"));
    let admin = Admin::connect(&url, &namespace).await.unwrap();
    let key_file = key_file(dir, KEY);
    let key_file = key_file.to_str().unwrap();
    let args = [
        "--api-base",
        &emulate.base,
        "--api-key-file",
        key_file,
        "--namespace",
        &namespace,
    ];
    let env = [("PAYHOOK_DATABASE_URL", url.as_str())];

    // The service has created nothing yet.
    let empty = reconcile_with_env(&args, &env).await;
    assert_eq!(empty.code, 0, "{empty:?}");
    assert!(empty.stdout.starts_with("0 event(s) "), "{empty:?}");

    emulate.pay("succeed").await;
    emulate.pay("succeed").await;
    emulate.pay("fail").await;
    let events = emulate.events(None).await;
    assert_eq!(events.len(), 3);
    // One succeeded event arrived as a delivery.
    let delivered = events
        .iter()
        .find(|listed| listed.event.event_type() == "payment_intent.succeeded")
        .unwrap();
    let body = Bytes::from(delivered.body.clone());
    let mut headers = http::HeaderMap::new();
    let signature = sign(&body, &Secret::new(secret).unwrap(), unix_now());
    headers.insert("x-service-signature", signature.parse().unwrap());
    assert_eq!(inbox.ingest(&headers, body).await.status().as_u16(), 200);

    let dry = reconcile_with_env(&args, &env).await;
    assert_eq!(dry.code, 0, "{dry:?}");
    let (count, line) = count_line(&dry);
    assert_eq!(count, 2, "{line}");
    assert!(line.contains("not in the inbox"), "{line}");
    assert_eq!(
        type_lines(&dry),
        ["  payment_intent.failed: 1", "  payment_intent.succeeded: 1"],
        "{dry:?}"
    );
    assert!(dry.stdout.contains("run again with --yes"), "{dry:?}");
    assert_no_key(&dry);
    let stored = admin.list(&Filter::default()).await.unwrap();
    assert_eq!(stored.len(), 1, "a dry run changes nothing: {stored:?}");

    // A namespace the database never saw (a new name on every run: the
    // PostgreSQL database is shared and kept): --yes is refused, nothing stored.
    let never_seen = unique("not-the-apps");
    let elsewhere = [
        "--api-base",
        &emulate.base,
        "--api-key-file",
        key_file,
        "--namespace",
        &never_seen,
        "--yes",
    ];
    let refused = reconcile_with_env(&elsewhere, &env).await;
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused.stderr.contains("Pass the inbox's namespace"),
        "{refused:?}"
    );
    let elsewhere_admin = Admin::connect(&url, &never_seen).await.unwrap();
    assert!(
        !elsewhere_admin.namespace_seen().await.unwrap(),
        "the refused run wrote to {never_seen}"
    );

    let mut yes = args.to_vec();
    yes.push("--yes");
    let run = reconcile_with_env(&yes, &env).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(count_line(&run).0, 2, "{run:?}");
    assert!(
        run.stdout.contains("2 event(s) stored in the inbox")
            && run.stdout.contains("handled when a worker of the app runs"),
        "{run:?}"
    );
    assert_no_key(&run);
    let stored = admin.list(&Filter::default()).await.unwrap();
    let sources: HashMap<String, Source> = stored
        .iter()
        .map(|event| (event.event_id.clone(), event.source))
        .collect();
    let expected: HashMap<String, Source> = events
        .iter()
        .map(|listed| {
            let id = listed.event.id().to_owned();
            let source = if id == delivered.event.id() {
                Source::Delivered
            } else {
                Source::Reconciled
            };
            (id, source)
        })
        .collect();
    assert_eq!(sources, expected);
    for event in &stored {
        let listed = events.iter().find(|l| l.event.id() == event.event_id).unwrap();
        let shown = admin.show(&event.event_id).await.unwrap();
        assert_eq!(
            shown.body.as_deref(),
            Some(listed.body.as_str()),
            "stored as listed"
        );
    }

    let again = reconcile_with_env(&args, &env).await;
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(count_line(&again).0, 0, "{again:?}");
    assert!(again.stdout.starts_with("0 event(s) "), "{again:?}");
    assert!(type_lines(&again).is_empty(), "{again:?}");

    // The app's workers handle every event once, whatever its source.
    let handled = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&handled);
    let workers = inbox.start(move |job: Job| {
        let seen = std::sync::Arc::clone(&seen);
        async move {
            seen.lock()
                .unwrap()
                .push((job.event().id().to_owned(), job.source()));
            Ok::<(), HandlerError>(())
        }
    });
    inbox.wait_idle(Duration::from_secs(30)).await.unwrap();
    workers.shutdown().await;
    let mut handled = handled.lock().unwrap().clone();
    handled.sort_by(|a, b| a.0.cmp(&b.0));
    let mut expected: Vec<(String, Source)> = expected.into_iter().collect();
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(handled, expected);

    // `payhook inbox show`: the attempt history names each event's source.
    for (id, source) in &expected {
        let show = payhook_with_env(&["inbox", "--namespace", &namespace, "show", id], b"", &env);
        assert_eq!(show.code, 0, "{show:?}");
        let heading = match source {
            Source::Delivered => "attempt history (delivered):\n  #1 ",
            Source::Reconciled => {
                "attempt history (reconciled: no delivery arrived, the reconciler stored it):\n  #1 "
            }
        };
        assert!(show.stdout.contains(heading), "{show:?}");
    }
    drop(emulate);
}

#[cfg(feature = "emulate")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_sqlite_stores_exactly_the_missing_events() {
    let dir = support::temp_dir("reconcile-sqlite");
    let url = format!("sqlite://{}", dir.join("inbox.db").display());
    missing_events_are_counted_then_stored(url, &dir).await;
}

#[cfg(feature = "emulate")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_postgres_stores_exactly_the_missing_events() {
    let dir = support::temp_dir("reconcile-postgres");
    missing_events_are_counted_then_stored(payhook_test_support::postgres_url(), &dir).await;
}

/// Half the events are undeliverable: `--forward-to` counts exactly those,
/// refuses to call a wrong secret's 400 a success (exit 1) and an absent
/// receiver reachable (exit 3), then sends each one once, validly signed;
/// the delivered ones are not sent again.
#[cfg(feature = "emulate")]
#[test]
fn reconcile_forwards_the_undelivered_events_signed_once_each() {
    // The receiver runs on a runtime of its own, started outside the test's.
    let receiver = support::TestReceiver::start();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(forward_undelivered(&receiver));
}

#[cfg(feature = "emulate")]
async fn forward_undelivered(receiver: &support::TestReceiver) {
    let dir = support::temp_dir("reconcile-forward");
    let emulate = emulator::Emulate::start(&[
        "--forward-to",
        &receiver.url,
        "--secret",
        support::SECRET,
        "--undeliverable",
        "0.5",
        "--seed",
        "7",
    ]);
    for helper in ["succeed", "succeed", "fail", "succeed", "fail", "succeed"] {
        emulate.pay(helper).await;
    }
    let total = 6;
    // Settled: every event either acknowledged by the receiver or
    // undeliverable, which its failed attempt shows (an event not attempted
    // yet is listed unacknowledged too, though its delivery may still come).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let undelivered = loop {
        let undelivered = emulate.events(Some(false)).await;
        let acknowledged = emulate.events(Some(true)).await.len();
        let handled = receiver.handled().len();
        let mut attempted = true;
        for listed in &undelivered {
            attempted &= emulate.attempts(listed.event.id()).await > 0;
        }
        if attempted && handled + undelivered.len() == total && acknowledged == handled {
            break undelivered;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the deliverable events were never all acknowledged: {}",
            emulate.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let missed = undelivered.len();
    assert!(
        missed > 0 && missed < total,
        "seed 7 must make some but not all events undeliverable: {missed}"
    );
    let requests_before = receiver.requests();
    let mut missed_types: HashMap<String, usize> = HashMap::new();
    for listed in &undelivered {
        *missed_types
            .entry(listed.event.event_type().to_owned())
            .or_default() += 1;
    }
    let mut expected_types: Vec<String> = missed_types
        .iter()
        .map(|(event_type, count)| format!("  {event_type}: {count}"))
        .collect();
    expected_types.sort();

    let key_file = key_file(&dir, KEY);
    let secret_file = dir.join("secret");
    std::fs::write(&secret_file, format!("{}\n", support::SECRET)).unwrap();
    let wrong_secret = dir.join("wrong-secret");
    std::fs::write(&wrong_secret, "whsec_not_the_receivers\n").unwrap();
    let base = [
        "--api-base",
        &emulate.base,
        "--api-key-file",
        key_file.to_str().unwrap(),
    ];
    let with = |to: &str, secret: &Path, yes: bool| {
        let mut args: Vec<String> = base.iter().map(|arg| (*arg).to_owned()).collect();
        args.extend(["--forward-to".to_owned(), to.to_owned()]);
        args.extend(["--secret-file".to_owned(), secret.display().to_string()]);
        if yes {
            args.push("--yes".to_owned());
        }
        args
    };
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        reconcile(&args).await
    };

    let dry = run(with(&receiver.url, &secret_file, false)).await;
    assert_eq!(dry.code, 0, "{dry:?}");
    assert_eq!(count_line(&dry).0, missed, "{dry:?}");
    assert!(count_line(&dry).1.contains("delivery_success=false"), "{dry:?}");
    assert_eq!(type_lines(&dry), expected_types, "{dry:?}");
    assert!(dry.stdout.contains("nothing sent"), "{dry:?}");
    assert_eq!(receiver.requests(), requests_before, "a dry run sends nothing");

    // Nothing listens there: exit 3, before anything is sent.
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/webhooks", listener.local_addr().unwrap())
    };
    let unreachable = run(with(&dead, &secret_file, true)).await;
    assert_eq!(unreachable.code, 3, "{unreachable:?}");
    assert!(
        unreachable.stderr.contains("connection refused"),
        "{unreachable:?}"
    );
    assert!(unreachable.stderr.contains("fix --forward-to"), "{unreachable:?}");

    // The wrong secret: every reply is a 400, so exit 1; nothing is handled.
    let refused = run(with(&receiver.url, &wrong_secret, true)).await;
    assert_eq!(refused.code, 1, "{refused:?}");
    let replies: Vec<&str> = refused.stdout.lines().filter(|l| l.starts_with("evt_")).collect();
    assert_eq!(replies.len(), missed, "{refused:?}");
    assert!(
        replies.iter().all(|line| line.contains(": 400 Webhook Error: ")),
        "{refused:?}"
    );
    assert!(
        refused.stdout.contains(&format!("{missed} not 2xx")),
        "{refused:?}"
    );
    assert!(
        !refused.stdout.contains("whsec_"),
        "no secret printed: {refused:?}"
    );
    assert_eq!(receiver.handled().len(), total - missed);

    let sent = run(with(&receiver.url, &secret_file, true)).await;
    assert_eq!(sent.code, 0, "{sent:?}");
    assert_no_key(&sent);
    assert!(!sent.stdout.contains(support::SECRET), "{sent:?}");
    let replies: Vec<&str> = sent.stdout.lines().filter(|l| l.starts_with("evt_")).collect();
    assert_eq!(replies.len(), missed, "{sent:?}");
    assert!(
        replies
            .iter()
            .all(|line| line.ends_with(": 200 {\"received\":true}")),
        "{sent:?}"
    );
    assert!(
        sent.stdout
            .contains(&format!("summary: {missed} event(s) sent to "))
            && sent.stdout.contains("every reply 2xx"),
        "{sent:?}"
    );
    // Exactly the undelivered events arrived, once each and validly signed
    // (the receiver verified them): each event of the service handled once.
    assert_eq!(receiver.requests(), requests_before + 2 * missed);
    let handled = receiver.handled();
    let mut ids: Vec<&str> = handled.iter().map(|h| h.id.as_str()).collect();
    ids.sort_unstable();
    let mut all: Vec<String> = emulate
        .events(None)
        .await
        .iter()
        .map(|listed| listed.event.id().to_owned())
        .collect();
    all.sort();
    assert_eq!(ids, all, "every event handled exactly once");
    for listed in &undelivered {
        let line = replies
            .iter()
            .find(|line| line.starts_with(listed.event.id()))
            .unwrap_or_else(|| panic!("{} not sent: {sent:?}", listed.event.id()));
        assert!(line.contains(listed.event.event_type()), "{line}");
    }
    assert!(!emulate.stderr().contains(KEY));
}

/// A key the service refuses (401) is a usage error naming the key file,
/// never the key.
#[cfg(feature = "emulate")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_with_a_refused_key_exits_2_without_printing_it() {
    let dir = support::temp_dir("reconcile-key");
    let emulate = emulator::Emulate::start(&[]);
    let wrong = "sk_test_wrong_key_never_printed";
    let key_file = key_file(&dir, wrong);
    let secret_file = dir.join("secret");
    std::fs::write(&secret_file, "whsec_x\n").unwrap();
    let run = reconcile(&[
        "--api-base",
        &emulate.base,
        "--api-key-file",
        key_file.to_str().unwrap(),
        "--forward-to",
        "http://127.0.0.1:9/webhooks",
        "--secret-file",
        secret_file.to_str().unwrap(),
    ])
    .await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("refused the API key"), "{run:?}");
    assert!(run.stderr.contains(key_file.to_str().unwrap()), "{run:?}");
    assert!(run.stderr.contains("401"), "{run:?}");
    assert!(
        !run.stdout.contains(wrong) && !run.stderr.contains(wrong),
        "{run:?}"
    );
    assert!(run.stdout.is_empty(), "nothing counted: {run:?}");
}

/// The service answers 503 (asking to wait 1 s): one more request after the
/// wait, then exit 1 naming the status; nothing stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_exits_1_on_a_throttled_service_after_one_retry() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let requests = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&requests);
    let app = axum::Router::new().route(
        "/v1/events",
        axum::routing::get(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async {
                (
                    http::StatusCode::SERVICE_UNAVAILABLE,
                    [("retry-after", "1")],
                    "busy",
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = support::temp_dir("reconcile-throttled");
    let key_file = key_file(&dir, KEY);
    let secret_file = dir.join("secret");
    std::fs::write(&secret_file, "whsec_x\n").unwrap();
    let run = reconcile(&[
        "--api-base",
        &base,
        "--api-key-file",
        key_file.to_str().unwrap(),
        "--forward-to",
        "http://127.0.0.1:9/webhooks",
        "--secret-file",
        secret_file.to_str().unwrap(),
    ])
    .await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("answered 503"), "{run:?}");
    assert!(run.stderr.contains("nothing was changed"), "{run:?}");
    assert_eq!(requests.load(Ordering::SeqCst), 2, "one retry, no loop");
    assert_no_key(&run);
}

/// Bad input before the service is asked: exit 2 with a clear message; a
/// service nobody answers for: exit 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_refuses_bad_input() {
    let dir = support::temp_dir("reconcile-input");
    let key_file = key_file(&dir, KEY);
    let key_file = key_file.to_str().unwrap();
    let secret_file = dir.join("secret");
    std::fs::write(&secret_file, "whsec_x\n").unwrap();
    let secret_file = secret_file.to_str().unwrap();
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let forward = [
        "--forward-to",
        "http://127.0.0.1:9/webhooks",
        "--secret-file",
        secret_file,
    ];
    let with = |extra: &[&str]| {
        let mut args = vec!["--api-key-file", key_file];
        args.extend_from_slice(extra);
        args.iter().map(|arg| (*arg).to_owned()).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        reconcile(&args).await
    };

    // Plain http:// to a host that is not loopback: the key would cross in clear.
    let mut args = vec!["--api-base", "http://api.service.example"];
    args.extend_from_slice(&forward);
    let clear = run(with(&args)).await;
    assert_eq!(clear.code, 2, "{clear:?}");
    assert!(clear.stderr.contains("except on loopback"), "{clear:?}");

    // The same from PAYHOOK_API_BASE.
    let from_env = reconcile_with_env(
        &[
            "--api-key-file",
            key_file,
            "--forward-to",
            "http://127.0.0.1:9/",
            "--secret-file",
            secret_file,
        ],
        &[("PAYHOOK_API_BASE", "http://10.0.0.1:12111")],
    )
    .await;
    assert_eq!(from_env.code, 2, "{from_env:?}");
    assert!(from_env.stderr.contains("except on loopback"), "{from_env:?}");

    // Further back than the default retention, unless --retention says so.
    let mut args = vec!["--api-base", &dead, "--since", "30d"];
    args.extend_from_slice(&forward);
    let far = run(with(&args)).await;
    assert_eq!(far.code, 2, "{far:?}");
    assert!(
        far.stderr.contains("--since 30d")
            && far.stderr.contains("retention")
            && far.stderr.contains("--retention"),
        "{far:?}"
    );
    args.extend(["--retention", "30d"]);
    let named = run(with(&args)).await;
    assert_eq!(named.code, 3, "past the check, to the absent service: {named:?}");
    let mut args = vec!["--api-base", &dead, "--since", "30d", "--retention", "14d"];
    args.extend_from_slice(&forward);
    assert_eq!(run(with(&args)).await.code, 2);

    // Both targets, or none.
    let mut args = vec!["--api-base", &dead, "--database-url", "sqlite://unused.db"];
    args.extend_from_slice(&forward);
    let both = run(with(&args)).await;
    assert_eq!(both.code, 2, "{both:?}");
    assert!(both.stderr.contains("cannot be used with"), "{both:?}");
    let none = reconcile_with_env(&["--api-base", &dead, "--api-key-file", key_file], &[]).await;
    assert_eq!(none.code, 2, "{none:?}");
    assert!(none.stderr.contains("--forward-to"), "{none:?}");
    // PAYHOOK_DATABASE_URL in the environment does not stand in the way of --forward-to.
    let mut args = vec!["--api-base", dead.as_str(), "--api-key-file", key_file];
    args.extend_from_slice(&forward);
    let env_and_forward = reconcile_with_env(&args, &[("PAYHOOK_DATABASE_URL", "sqlite://unused.db")]).await;
    assert_eq!(env_and_forward.code, 3, "{env_and_forward:?}");
    let no_secret = run(with(&[
        "--api-base",
        &dead,
        "--forward-to",
        "http://127.0.0.1:9/",
    ]))
    .await;
    assert_eq!(no_secret.code, 2, "{no_secret:?}");

    // A service nobody answers for: exit 3, nothing changed.
    let mut args = vec!["--api-base", &dead];
    args.extend_from_slice(&forward);
    let unreachable = run(with(&args)).await;
    assert_eq!(unreachable.code, 3, "{unreachable:?}");
    assert!(
        unreachable.stderr.contains("cannot reach the service")
            && unreachable.stderr.contains("nothing was changed"),
        "{unreachable:?}"
    );
    assert_no_key(&unreachable);

    // An unreadable or empty key file.
    let missing = run(vec![
        "--api-base".into(),
        dead.clone(),
        "--api-key-file".into(),
        dir.join("absent").display().to_string(),
        "--forward-to".into(),
        "http://127.0.0.1:9/".into(),
        "--secret-file".into(),
        secret_file.into(),
    ])
    .await;
    assert_eq!(missing.code, 2, "{missing:?}");
    assert!(
        missing.stderr.contains("cannot read the API key file"),
        "{missing:?}"
    );
}

/// A fresh SQLite inbox in its own directory, with a key file beside it:
/// the key file, the database URL and the inbox.
async fn empty_inbox(name: &str) -> (PathBuf, String, payhook_inbox::Inbox) {
    let dir = support::temp_dir(name);
    let key_file = key_file(&dir, KEY);
    let database = format!("sqlite://{}", dir.join("inbox.db").display());
    let receiver = payhook_core::Receiver::builder()
        .secret("whsec_reconcile")
        .build()
        .unwrap();
    let inbox = payhook_inbox::Inbox::builder(receiver)
        .connect(&database)
        .await
        .expect("an inbox");
    (key_file, database, inbox)
}

/// [`empty_inbox`] whose namespace has seen one delivery (of `body`), so
/// `--yes` takes it.
async fn inbox_with_one_delivery(name: &str, body: String) -> (PathBuf, String, payhook_inbox::Inbox) {
    let (key_file, database, inbox) = empty_inbox(name).await;
    let delivery =
        payhook_core::sender::SignedDelivery::now(bytes::Bytes::from(body), "whsec_reconcile").unwrap();
    let reply = inbox.ingest(&delivery.headers(), delivery.body).await;
    assert_eq!(reply.status().as_u16(), 200);
    (key_file, database, inbox)
}

/// Unix seconds now.
fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// One event of the service's list, `id`, created at `created` (Unix
/// seconds).
fn listed(id: &str, created: u64) -> String {
    format!(
        r#"{{"id":"{id}","object":"event","type":"customer.created","created":{created},"data":{{"object":{{}}}}}}"#
    )
}

/// A list on loopback answering `reply` to every `GET /v1/events`.
async fn hostile_list(status: http::StatusCode, reply: String) -> String {
    let app = axum::Router::new().route(
        "/v1/events",
        axum::routing::get(move || {
            let reply = reply.clone();
            async move { (status, [("content-type", "application/json")], reply) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

/// The same page with `has_more: true`, forever: the command ends within
/// 30 s with a non-zero exit, naming the broken list, and counts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_ends_on_a_list_whose_cursor_repeats() {
    let event = |id: &str| listed(id, now_secs() - 60);
    let page = format!(
        r#"{{"has_more":true,"data":[{},{}]}}"#,
        event("evt_b"),
        event("evt_a")
    );
    let base = hostile_list(http::StatusCode::OK, page).await;
    let (key_file, database, inbox) = empty_inbox("reconcile-cursor").await;
    drop(inbox);
    let started = std::time::Instant::now();
    let run = reconcile_into(&base, &key_file, &database, &[]).await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("came back"), "{run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
    assert_no_key(&run);
}

/// A list of ever new pages inside the window (distinct ids, one `created`
/// second, `has_more` always): no cursor repeats and time never moves
/// forward, so only the page bound ends the walk. The command stops after
/// `--max-pages` with a non-zero exit naming the bound, before anything is
/// stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_stops_at_max_pages_on_a_list_that_never_ends() {
    let created = now_secs() - 60;
    let served = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let app = axum::Router::new().route(
        "/v1/events",
        axum::routing::get({
            let served = std::sync::Arc::clone(&served);
            move || {
                let page = served.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async move {
                    let event = |n: u64| listed(&format!("evt_{page}_{n}"), created);
                    (
                        [("content-type", "application/json")],
                        format!(r#"{{"has_more":true,"data":[{},{}]}}"#, event(1), event(2)),
                    )
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (key_file, database, inbox) = empty_inbox("reconcile-max-pages").await;
    let run = reconcile_into(&base, &key_file, &database, &["--max-pages", "5"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("more than 5 page(s)"), "{run:?}");
    assert!(run.stderr.contains("--max-pages"), "{run:?}");
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 5, "{run:?}");
    let stored = payhook_inbox::Admin::of_inbox(&inbox).stats().await.unwrap();
    assert_eq!(stored.counts().map(|(_, n)| n).sum::<i64>(), 0, "{run:?}");
    assert_no_key(&run);
}

/// A key file whose line has spaces around the key: the key sent and the
/// key redacted are the same trimmed key, so a 401 echoing it (alone and
/// inside a longer word) prints none of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_redacts_the_trimmed_key_echoed_by_the_service() {
    let long_key = format!("sk_test_{}", "Q".repeat(92));
    let echo = serde_json::json!({"error": {"code": "api_key_unknown", "message": format!("Invalid API key {long_key} (x{long_key}x)")}});
    let base = hostile_list(http::StatusCode::UNAUTHORIZED, echo.to_string()).await;
    let dir = support::temp_dir("reconcile-trimmed");
    let key_file = dir.join("api-key");
    std::fs::write(&key_file, format!("  {long_key}  \n")).unwrap();
    let secret_file = dir.join("secret");
    std::fs::write(&secret_file, "whsec_x\n").unwrap();
    let run = reconcile(&[
        "--api-base",
        &base,
        "--api-key-file",
        key_file.to_str().unwrap(),
        "--forward-to",
        "http://127.0.0.1:9/webhooks",
        "--secret-file",
        secret_file.to_str().unwrap(),
    ])
    .await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("<redacted>"), "{run:?}");
    assert!(
        !run.stdout.contains("QQQQQQQQ") && !run.stderr.contains("QQQQQQQQ"),
        "a part of the key was printed: {run:?}"
    );
}

/// `--yes` that stops midway (the database refuses the batch holding the
/// newest of 101 missed events: a trigger of the test's raises on it) says
/// how many were stored before the error and exits non-zero; the 100 stored
/// stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_yes_stopping_midway_says_how_many_were_stored() {
    let now = now_secs();
    let event = |id: &str, age: u64| listed(id, now - age);
    // Newest first: the one the database refuses, then 100 good ones.
    let mut data = vec![event("evt_midway_refused", 10)];
    data.extend((0..100).map(|n| event(&format!("evt_midway_{n:03}"), 20 + n)));
    let page = format!(r#"{{"has_more":false,"data":[{}]}}"#, data.join(","));
    let base = hostile_list(http::StatusCode::OK, page).await;
    let (key_file, database, inbox) =
        inbox_with_one_delivery("reconcile-midway", event("evt_delivered", 30)).await;
    payhook_inbox::sqlx::query(
        "CREATE TRIGGER refuse_one BEFORE INSERT ON payhook_inbox \
         WHEN NEW.event_id = 'evt_midway_refused' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
    )
    .execute(inbox.pool())
    .await
    .unwrap();
    drop(inbox);
    let run = reconcile_into(&base, &key_file, &database, &["--yes"]).await;
    assert_ne!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .contains("100 event(s) stored in the inbox (namespace payhook) as reconciled before the error"),
        "{run:?}"
    );
    assert!(run.stdout.contains("1 not stored"), "{run:?}");
    assert!(run.stderr.contains("refused by the test"), "{run:?}");
    assert_no_key(&run);
}

/// A listed event that does not parse holds back none: the command says so
/// on stderr (its id and reason), stores the good event with `--yes`, and
/// records the refused one where the dashboard and `payhook inbox refused`
/// show it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_records_a_listed_event_that_does_not_parse_and_stores_the_rest() {
    let created = now_secs() - 60;
    let broken = format!(r#"{{"id":"evt_broken","type":7,"created":{created}}}"#);
    let refused = reconcile_refusing_one(
        "reconcile-refused",
        vec![broken, listed("evt_listed_good", created)],
        &["evt_listed_good"],
        "evt_broken",
    )
    .await;
    assert_eq!(refused.event_id.as_deref(), Some("evt_broken"), "{refused:?}");
}

/// A listed event that parses but that the inbox cannot store (its id holds
/// a NUL, written `\u0000` in the JSON) is refused and recorded like one
/// that does not parse; the events listed beside it, in the same batch, are
/// stored, and the run succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn reconcile_refuses_a_listed_event_the_inbox_cannot_store_and_stores_the_rest() {
    let created = now_secs() - 60;
    let refused = reconcile_refusing_one(
        "reconcile-unstorable",
        vec![
            listed("evt_before_nul", created),
            listed(r"evt_nul\u0000here", created),
            listed("evt_after_nul", created),
        ],
        &["evt_before_nul", "evt_after_nul"],
        "cannot be stored: invalid payload: id contains a NUL character",
    )
    .await;
    assert!(refused.reason.contains("cannot be stored"), "{refused:?}");
}

/// Reconciles a one-page list of `data` with `--yes` into an inbox holding
/// one delivery: the run succeeds, says on stderr that one listed event
/// could not be taken (with `named` in its line), stores each of `stored`,
/// records the refused one and never prints the key. The refused record.
async fn reconcile_refusing_one(
    name: &str,
    data: Vec<String>,
    stored: &[&str],
    named: &str,
) -> payhook_inbox::admin::Refused {
    let page = format!(r#"{{"has_more":false,"data":[{}]}}"#, data.join(","));
    let base = hostile_list(http::StatusCode::OK, page).await;
    let (key_file, database, inbox) =
        inbox_with_one_delivery(name, listed("evt_delivered", now_secs() - 60)).await;
    let run = reconcile_into(&base, &key_file, &database, &["--yes"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stderr.contains("1 listed event(s) could not be taken"),
        "{run:?}"
    );
    assert!(run.stderr.contains(named), "{run:?}");
    assert!(
        run.stdout
            .contains(&format!("{} event(s) stored in the inbox", stored.len())),
        "{run:?}"
    );
    assert!(run.stdout.contains("1 refused event(s) recorded"), "{run:?}");
    assert_no_key(&run);
    let admin = payhook_inbox::Admin::of_inbox(&inbox);
    for id in stored {
        assert!(admin.show(id).await.is_ok(), "{id} not stored: {run:?}");
    }
    let mut refused = admin.refused(10).await.unwrap();
    assert_eq!(refused.len(), 1, "{refused:?}");
    refused.remove(0)
}
