//! What the targets share: one secret, one fixed clock, and a way to run the
//! in-memory pipeline to completion without a runtime.

#![allow(dead_code)]

use std::collections::HashSet;
use std::future::Future;
use std::task::{Context, Poll, Waker};

use payhook_core::adapter::{Delivery, ReceiveOutcome};
use payhook_core::{FixedClock, MemoryStore, Receiver};

pub const SECRET: &str = "whsec_fuzz_secret";
pub const T: u64 = 1_732_264_800;
pub const HEADER: &str = "x-service-signature";

/// A receiver with a store of its own. Each input gets a new one, so what an
/// input does to the store (and so any failure) depends on that input alone
/// and reproduces from its file.
pub fn receiver() -> Receiver {
    Receiver::builder()
        .secret(SECRET)
        .clock(FixedClock::new(T as i64))
        .store(
            MemoryStore::builder()
                .capacity(16)
                .build()
                .expect("valid capacity"),
        )
        .namespace("fuzz")
        .body_limit(64 * 1024)
        .build()
        .expect("valid receiver")
}

/// What one input's deliveries have done to the store, by event id: the model
/// the receiver's replies are checked against.
#[derive(Default)]
pub struct Deliveries {
    /// Ids whose claim is held by a delivery not yet settled.
    pub in_flight: HashSet<String>,
    /// Ids completed: every later delivery is a duplicate.
    pub done: HashSet<String>,
}

impl Deliveries {
    /// Checks the receiver's answer to a genuine, valid event with this id
    /// against what happened to the id so far: handed out only when neither
    /// in flight nor done, 409 while in flight, 200 without the handler once
    /// done. Returns the delivery when one was handed out.
    pub fn receive(&mut self, id: &str, outcome: ReceiveOutcome) -> Option<Delivery> {
        match outcome {
            ReceiveOutcome::Deliver(delivery) => {
                assert_eq!(delivery.event().id(), id);
                assert!(
                    !self.done.contains(id),
                    "{id:?} delivered again after it was completed"
                );
                assert!(
                    self.in_flight.insert(id.to_owned()),
                    "{id:?} delivered twice at once"
                );
                Some(delivery)
            }
            ReceiveOutcome::Respond(reply) if self.done.contains(id) => {
                assert_eq!(reply.status(), 200, "duplicate of a done id: {}", reply.body());
                None
            }
            ReceiveOutcome::Respond(reply) if self.in_flight.contains(id) => {
                assert_eq!(reply.status(), 409, "copy of an id in flight: {}", reply.body());
                None
            }
            ReceiveOutcome::Respond(reply) => panic!(
                "a new, genuine event was not delivered: {} {}",
                reply.status(),
                reply.body()
            ),
        }
    }

    /// Settles a delivery: `how` 0 completes it, 1 releases it, 2 drops the claim.
    pub fn settle(&mut self, delivery: Delivery, how: u8) {
        let id = delivery.event().id().to_owned();
        let claim = delivery.into_claim();
        assert!(self.in_flight.remove(&id), "{id:?} settled but not in flight");
        match how % 3 {
            0 => {
                now(claim.settle(http::StatusCode::OK));
                self.done.insert(id);
            }
            1 => now(claim.settle(payhook_core::adapter::HandlerOutcome::Failed)),
            _ => drop(claim),
        }
    }
}

/// Polls once: with the in-memory store nothing in the pipeline waits.
pub fn now<F: Future>(future: F) -> F::Output {
    match std::pin::pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the in-memory pipeline returned Pending"),
    }
}
