//! The PostgreSQL claim against a real database: from a window of waiting
//! events held back by their intents, it claims the first event of each
//! free intent and the events without one, and no more than it asks for.
//! Its pick checks each candidate itself (`first_of_its_intent!`): the
//! second statement would drop a candidate that is not its intent's first,
//! and the claim would come back short.

use std::collections::BTreeSet;

use payhook_core::Receiver;
use payhook_test_support::{postgres_url, unique};

use crate::model::{ClaimRequest, State};
use crate::Inbox;

/// Ten intents of twenty events each, their events interleaved in the
/// queue's due order (every intent's first event, then every intent's
/// second, …), the first events of intents 0–6 running; and ten events
/// without an intent, two of them among the first 64 waiting events (the
/// smallest window) and the rest at the queue's end. What the window may
/// give: the first events of intents 7–9 and the two events without an
/// intent in it.
async fn queue_held_back_by_intents() -> (Inbox, Vec<String>) {
    let receiver = Receiver::builder().secret("whsec_pick").build().unwrap();
    let inbox = Inbox::builder(receiver)
        .namespace(unique("pick"))
        .connect(&postgres_url())
        .await
        .unwrap_or_else(|err| panic!("cannot reach the test database: {err}"));
    let namespace = inbox.namespace().to_owned();
    let mut due = 1_000;
    let mut insert = |id: String, intent: Option<String>, created: i64, state: State| {
        due += 1;
        sqlx::query(
            "INSERT INTO payhook_inbox (namespace, event_id, event_type, intent_id, created, body, received_at, \
             state, due_at) VALUES ($1, $2, 'payment_intent.succeeded', $3, $4, '{}', $5, $6, $5)",
        )
        .bind(namespace.clone())
        .bind(id)
        .bind(intent)
        .bind(created)
        .bind(due)
        .bind(state.as_str())
    };
    for created in 0..20 {
        for intent in 0..10 {
            let state = if created == 0 && intent < 7 {
                State::Running
            } else {
                State::Pending
            };
            insert(
                format!("evt_{intent}_{created}"),
                Some(format!("pi_{intent}")),
                created,
                state,
            )
            .execute(inbox.pool())
            .await
            .unwrap();
        }
        if created == 2 || created == 4 {
            insert(format!("evt_none_{created}"), None, created, State::Pending)
                .execute(inbox.pool())
                .await
                .unwrap();
        }
    }
    for n in 0..8 {
        insert(format!("evt_late_{n}"), None, 30, State::Pending)
            .execute(inbox.pool())
            .await
            .unwrap();
    }
    let claimable = ["evt_7_0", "evt_8_0", "evt_9_0", "evt_none_2", "evt_none_4"];
    (inbox, claimable.map(str::to_owned).to_vec())
}

/// One claim of up to `limit` from the window alone (no handler free).
async fn claim(inbox: &Inbox, limit: i64) -> Vec<String> {
    let now = 10_000;
    let request = ClaimRequest {
        namespace: inbox.namespace(),
        now,
        lease_until: now + 60_000,
        token: 7,
        limit,
        needed: 0,
        requeue: None,
    };
    let result = <sqlx::Any as super::Queue>::claim(&inbox.inner.db, request)
        .await
        .unwrap();
    result
        .claimed
        .into_iter()
        .map(|claimed| claimed.event_id)
        .collect()
}

/// Puts the events a claim took back in the queue.
async fn hand_back(inbox: &Inbox, ids: &[String]) {
    for id in ids {
        sqlx::query(
            "UPDATE payhook_inbox SET state = $1, lease_token = NULL, lease_until = NULL \
             WHERE namespace = $2 AND event_id = $3",
        )
        .bind(State::Pending.as_str())
        .bind(inbox.namespace())
        .bind(id)
        .execute(inbox.pool())
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn a_claim_takes_the_first_event_of_each_free_intent_in_its_window() {
    let (inbox, claimable) = queue_held_back_by_intents().await;
    let expected: BTreeSet<String> = claimable.iter().cloned().collect();
    // Exactly what the window gives, however many more are asked for.
    for limit in [16, 5] {
        let claimed = claim(&inbox, limit).await;
        assert_eq!(
            claimed.iter().cloned().collect::<BTreeSet<_>>(),
            expected,
            "limit {limit}"
        );
        hand_back(&inbox, &claimed).await;
    }
    // A limit below what the window holds: the earliest due.
    let claimed: BTreeSet<String> = claim(&inbox, 2).await.into_iter().collect();
    let earliest: BTreeSet<String> = ["evt_7_0", "evt_8_0"].map(str::to_owned).into();
    assert_eq!(claimed, earliest);
    inbox.pool().close().await;
}
