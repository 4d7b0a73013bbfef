//! `payhook inbox pause TYPE`, `resume TYPE`, `paused` and `bulk`, run as
//! the real binary against an inbox on a SQLite file and on PostgreSQL
//! (`PAYHOOK_TEST_DATABASE_URL`; the PostgreSQL test fails when it is unset):
//! a namespace the database has never seen is refused (exit 2), naming the
//! ones it has; every command a hint prints repeats the `--namespace`, and
//! the bulk hint, run as printed, acts on what was counted.
#![cfg(feature = "inbox")]

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use payhook_core::Receiver;
use payhook_inbox::{HandlerError, Inbox, Job};
use payhook_test_support::unique;
use support::inbox::{inbox_cli, ingest};
use support::payhook_with_env;

use crate::eventually;

const SECRET: &str = "whsec_cli_pause";
const PAUSED: &str = "payment_intent.payment_failed";

/// The command a hint prints after `prefix` (`payhook inbox …`), as the
/// arguments to run it with.
fn hinted(output: &str, prefix: &str) -> Vec<String> {
    let start = output
        .find(prefix)
        .unwrap_or_else(|| panic!("no hint {prefix:?}: {output}"))
        + prefix.len();
    let line = output[start..].lines().next().unwrap();
    line.trim_end_matches('`').split(' ').map(str::to_owned).collect()
}

/// `sqlite`: the database holds this test's namespace only, so a refusal
/// names exactly it.
async fn pause_resume_and_bulk(url: String, sqlite: bool) {
    let namespace = unique("cli-pause");
    let receiver = Receiver::builder().secret(SECRET).build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(&namespace)
        .max_attempts(1)
        .poll_interval(Duration::from_millis(20))
        .connect(&url)
        .await
        .unwrap();
    let handled = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = Arc::clone(&handled);
    // Events whose id says "fail" fail their one attempt: dead.
    let workers = inbox.start(move |job: Job| {
        let seen = Arc::clone(&seen);
        async move {
            let id = job.event().id().to_owned();
            seen.lock().unwrap().push(id.clone());
            if id.contains("fail") {
                return Err(HandlerError::from("the downstream is down"));
            }
            Ok(())
        }
    });

    // A namespace the database has never seen: every change is refused,
    // exit 2, naming the namespaces it has; nothing is paused there. A read
    // says the same as a warning.
    let wrong = format!("{namespace}-typo");
    let run = inbox_cli(&url, &wrong, &["list"]);
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (0, "EVENT\tSTATE\tTYPE\tATTEMPTS\tAGE\tSOURCE\tLAST ERROR\n"),
        "{run:?}"
    );
    assert!(
        run.stderr.starts_with(&format!(
            "warning: the database has no event and no paused type in namespace {wrong}; it has"
        )),
        "{run:?}"
    );
    for args in [
        &["pause", PAUSED][..],
        &["resume", PAUSED],
        &["retry", "--dead"],
        &["bulk", "retry"],
    ] {
        let run = inbox_cli(&url, &wrong, args);
        assert_eq!(run.code, 2, "{run:?}");
        assert!(run.stderr.ends_with(" (nothing done)\n"), "{run:?}");
        assert!(
            run.stderr.contains(&format!(
                "the database has no event and no paused type in namespace {wrong}; it has"
            )),
            "{run:?}"
        );
        if sqlite {
            assert!(
                run.stderr
                    .contains("it has none yet (no event stored, no type paused)"),
                "{run:?}"
            );
        }
        assert_eq!(run.stdout, "", "{run:?}");
    }
    ingest(&inbox, SECRET, "evt_free", "payment_intent.succeeded").await;
    eventually("the other type handled", || {
        handled.lock().unwrap().contains(&"evt_free".to_owned())
    })
    .await;
    let run = inbox_cli(&url, &wrong, &["pause", PAUSED]);
    assert_eq!(run.code, 2, "{run:?}");
    if sqlite {
        assert!(
            run.stderr.contains(&format!(
                "it has: {namespace}. Pass the inbox's namespace with --namespace"
            )),
            "{run:?}"
        );
    }
    let admin = payhook_inbox::admin::Admin::connect(&url, &wrong).await.unwrap();
    assert!(admin.paused().await.unwrap().is_empty());
    assert!(!admin.namespace_seen().await.unwrap());

    // pause TYPE: stored, acknowledged, not handled; listed with its count.
    // Its hint names the namespace (given anywhere after `inbox`), and works.
    let run = payhook_with_env(
        &["inbox", "pause", PAUSED, "--namespace", &namespace],
        b"",
        &[("PAYHOOK_DATABASE_URL", &url)],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .contains(&format!("{PAUSED} paused in namespace {namespace}")),
        "{run:?}"
    );
    let resume = hinted(&run.stdout, "until `payhook ");
    assert_eq!(
        resume,
        ["inbox", "--namespace", namespace.as_str(), "resume", PAUSED],
        "{run:?}"
    );
    let run = inbox_cli(&url, &namespace, &["pause", PAUSED]);
    assert!(run.stdout.contains("was already paused"), "{run:?}");
    for n in 0..3 {
        ingest(&inbox, SECRET, &format!("evt_held{n}"), PAUSED).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let run = inbox_cli(&url, &namespace, &["paused"]);
    assert_eq!(run.code, 0, "{run:?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines[0], "TYPE\tPAUSED\tWAITING", "{run:?}");
    assert!(
        lines[1].starts_with(&format!("{PAUSED}\t")) && lines[1].ends_with("\t3"),
        "{run:?}"
    );
    assert!(!handled
        .lock()
        .unwrap()
        .iter()
        .any(|id| id.starts_with("evt_held")));

    // resume TYPE, as the hint printed it: they run.
    let resume: Vec<&str> = resume.iter().map(String::as_str).collect();
    let run = payhook_with_env(&resume, b"", &[("PAYHOOK_DATABASE_URL", &url)]);
    assert!(run.stdout.contains(&format!("{PAUSED} resumed")), "{run:?}");
    let run = inbox_cli(&url, &namespace, &["resume", PAUSED]);
    assert!(run.stdout.contains("was not paused"), "{run:?}");
    inbox.wait_idle(Duration::from_secs(20)).await.unwrap();
    assert_eq!(
        inbox_cli(&url, &namespace, &["paused"]).stdout,
        "TYPE\tPAUSED\tWAITING\n"
    );

    // bulk retry: counted first, nothing done without --yes (exit 2), then
    // done with --as-of and --yes, and a second run finds nothing.
    for n in 0..4 {
        ingest(
            &inbox,
            SECRET,
            &format!("evt_fail{n}"),
            "payment_intent.succeeded",
        )
        .await;
    }
    ingest(&inbox, SECRET, "evt_failother", PAUSED).await;
    inbox.wait_idle(Duration::from_secs(20)).await.unwrap();
    let filter = [
        "bulk",
        "retry",
        "--type",
        "payment_intent.succeeded",
        "--id-prefix",
        "evt_fail",
    ];
    let run = inbox_cli(&url, &namespace, &filter);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stdout.starts_with("retry: 4 event(s) selected: state dead, type payment_intent.succeeded, id starting evt_fail, present at "),
        "{run:?}"
    );
    assert!(run.stdout.contains("  payment_intent.succeeded\t4\n"), "{run:?}");
    // The hint: this command with its namespace, the count's time and
    // number, and --yes.
    let confirmed = hinted(&run.stdout, "to retry them: payhook ");
    assert_eq!(
        confirmed[..9],
        [
            "inbox",
            "--namespace",
            namespace.as_str(),
            "bulk",
            "retry",
            "--type",
            "payment_intent.succeeded",
            "--id-prefix",
            "evt_fail"
        ],
        "{run:?}"
    );
    assert_eq!(confirmed[9], "--as-of", "{run:?}");
    assert_eq!(confirmed[11..], ["--counted", "4", "--yes"], "{run:?}");
    assert_eq!(
        hinted(&run.stderr, "nothing done: to retry them: payhook "),
        confirmed
    );
    let before = handled.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        handled.lock().unwrap().len(),
        before,
        "nothing retried without --yes"
    );

    let confirmed: Vec<&str> = confirmed.iter().map(String::as_str).collect();
    let run = payhook_with_env(&confirmed, b"", &[("PAYHOOK_DATABASE_URL", &url)]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("4 event(s) due now, in "), "{run:?}");
    assert!(
        run.stdout
            .contains("; selected 4, acted on 4, 0 no longer qualified\n"),
        "{run:?}"
    );
    inbox.wait_idle(Duration::from_secs(20)).await.unwrap();
    let retried = handled
        .lock()
        .unwrap()
        .iter()
        .filter(|id| id.starts_with("evt_fail") && *id != "evt_failother")
        .count();
    assert_eq!(retried, 8, "each of the four ran twice");
    // They died again after the count: the same command changes nothing,
    // and says why.
    let run = payhook_with_env(&confirmed, b"", &[("PAYHOOK_DATABASE_URL", &url)]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("retry: 0 event(s) selected"), "{run:?}");
    assert!(
        run.stdout
            .contains("4 of the 4 counted no longer qualify: changed since the count\n"),
        "{run:?}"
    );
    assert!(
        run.stdout
            .contains("nothing to retry: selected 4, acted on 0, 4 no longer qualified\n"),
        "{run:?}"
    );

    // A state the action does not change is a usage error.
    let run = inbox_cli(&url, &namespace, &["bulk", "purge", "--state", "pending"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("purge acts on done and dead events only"),
        "{run:?}"
    );
    workers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_pause_resume_and_bulk() {
    let dir = std::env::temp_dir().join(unique("payhook-cli-pause"));
    std::fs::create_dir_all(&dir).unwrap();
    pause_resume_and_bulk(format!("sqlite://{}", dir.join("inbox.db").display()), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pause_resume_and_bulk() {
    pause_resume_and_bulk(payhook_test_support::postgres_url(), false).await;
}
