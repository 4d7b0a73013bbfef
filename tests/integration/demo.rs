//! The README's main job: the demo tells the whole story and its receiver
//! answers every delivery as the protocol prescribes.
//!
//! The verdict is this test's own: every row is checked here, in order, against
//! the reply and handler runs the protocol prescribes — not taken from the
//! demo's `ok` flags (which must agree).

#[path = "../../examples/demo.rs"]
mod example;

const RECEIVED: &str = r#"200 {"received":true}"#;

/// What a row's reply must be.
enum Want {
    Exact(&'static str),
    Check(&'static str, fn(&str) -> bool),
}

/// `A x 200, B x 409 (…)`: at least one 409, so the copies really overlapped.
fn burst_overlapped(reply: &str) -> bool {
    let count = |suffix: &str| -> Option<usize> {
        reply
            .split(", ")
            .find_map(|part| {
                part.strip_suffix(suffix)
                    .or_else(|| part.split_once(suffix).map(|(n, _)| n))
            })
            .and_then(|n| n.trim().parse().ok())
    };
    match (count(" x 200"), count(" x 409")) {
        (Some(ok), Some(in_flight)) => ok >= 1 && in_flight >= 1 && ok + in_flight == 20,
        _ => false,
    }
}

/// `N attempts: 2 acknowledged, 2 replies lost`: each of the two deliveries
/// (original and duplicate) lost its first reply and was acknowledged on a retry.
fn flaky_redelivered(reply: &str) -> bool {
    reply
        .strip_suffix(" attempts: 2 acknowledged, 2 replies lost")
        .and_then(|n| n.parse::<usize>().ok())
        .is_some_and(|n| n >= 4)
}

fn stale(reply: &str) -> bool {
    reply.starts_with("400 Webhook Error: timestamp is 60")
        && reply.ends_with(" s old, outside the 300 s tolerance")
}

fn ahead(reply: &str) -> bool {
    reply.starts_with("400 Webhook Error: timestamp is 59")
        || reply.starts_with("400 Webhook Error: timestamp is 60")
}

fn mismatch(reply: &str) -> bool {
    reply.starts_with("400 Webhook Error: no signature matches")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_demo_row_gets_the_prescribed_reply() {
    use Want::{Check, Exact};
    let expected: [(&str, Want, usize); 20] = [
        (
            "service API: create intent, 20 ETH in wei",
            Exact("requires_payment, amount 20000000000000000000"),
            0,
        ),
        (
            "service API: customer pays (test helper)",
            Exact("succeeded, amount_received 20000000000000000000"),
            0,
        ),
        (
            "service delivers payment_intent.succeeded",
            Exact(r#"200 {"received":true}, attempt 1"#),
            1,
        ),
        ("service API: a btc payment fails", Exact("failed"), 0),
        (
            "service delivers payment_intent.failed",
            Exact(r#"200 {"received":true}, attempt 1"#),
            1,
        ),
        (
            "flaky service: duplicates, lost replies",
            Check("N attempts: 2 acknowledged, 2 replies lost", flaky_redelivered),
            1,
        ),
        ("payment_intent.succeeded, genuine", Exact(RECEIVED), 1),
        ("the same delivery again (duplicate)", Exact(RECEIVED), 0),
        ("payment.succeeded, genuine", Exact(RECEIVED), 1),
        ("payment_intent.failed, 1.5 ETH in wei", Exact(RECEIVED), 1),
        ("customer.updated (unknown type)", Exact(RECEIVED), 1),
        (
            "tampered body (amount raised)",
            Check("400 no signature matches", mismatch),
            0,
        ),
        (
            "signed with the wrong secret",
            Check("400 no signature matches", mismatch),
            0,
        ),
        ("stale: signed 10 minutes ago", Check("400 ~600 s old", stale), 0),
        (
            "signed 10 minutes in the future",
            Check("400 ~600 s in the future", ahead),
            0,
        ),
        (
            "no signature header",
            Exact("400 Webhook Error: missing x-service-signature header"),
            0,
        ),
        (
            "2 MiB body announced (limit 1 MiB)",
            Exact("413 Webhook Error: body is larger than the 1048576-byte limit"),
            0,
        ),
        ("the genuine delivery after the forgeries", Exact(RECEIVED), 1),
        (
            "handler fails once, sender retries",
            Exact(r#"500, retry: 200 {"received":true}"#),
            2,
        ),
        (
            "20 concurrent copies of a new event",
            Check("≥ 1 x 200 and ≥ 1 x 409, 20 in all", burst_overlapped),
            1,
        ),
    ];

    let rows = example::run()
        .await
        .expect("the demo's service and receiver start");
    let sent: Vec<&str> = rows.iter().map(|row| row.sent.as_str()).collect();
    let want: Vec<&str> = expected.iter().map(|(sent, _, _)| *sent).collect();
    assert_eq!(sent, want, "exactly these rows, in this order");

    for (row, (sent, reply, runs)) in rows.iter().zip(&expected) {
        match reply {
            Exact(text) => assert_eq!(row.reply, *text, "{sent}"),
            Check(what, check) => assert!(check(&row.reply), "{sent}: {:?} is not {what}", row.reply),
        }
        assert_eq!(row.handler_runs, *runs, "{sent}: handler runs");
        assert!(row.ok, "{sent}: the demo itself must judge it ok too");
    }
}

#[test]
fn the_checks_can_fail() {
    assert!(burst_overlapped("1 x 200, 19 x 409 (in flight, retried later)"));
    assert!(!burst_overlapped("20 x 200, 0 x 409 (in flight, retried later)"));
    assert!(!burst_overlapped("1 x 200, 18 x 409 (in flight, retried later)"));
    assert!(flaky_redelivered("4 attempts: 2 acknowledged, 2 replies lost"));
    assert!(!flaky_redelivered("2 attempts: 2 acknowledged, 0 replies lost"));
    assert!(stale(
        "400 Webhook Error: timestamp is 601 s old, outside the 300 s tolerance"
    ));
    assert!(!stale("200 {\"received\":true}"));
}
