//! What the targets share: one secret, one fixed clock, and a way to run the
//! in-memory pipeline to completion without a runtime.

#![allow(dead_code)]

use std::future::Future;
use std::task::{Context, Poll, Waker};

use payhook_core::{FixedClock, MemoryStore, Receiver};

pub const SECRET: &str = "whsec_fuzz_secret";
pub const T: u64 = 1_732_264_800;
pub const HEADER: &str = "x-service-signature";

pub fn receiver() -> Receiver {
    Receiver::builder()
        .secret(SECRET)
        .clock(FixedClock::new(T as i64))
        .store(
            MemoryStore::builder()
                .capacity(4096)
                .build()
                .expect("valid capacity"),
        )
        .namespace("fuzz")
        .body_limit(64 * 1024)
        .build()
        .expect("valid receiver")
}

/// Polls once: with the in-memory store nothing in the pipeline waits.
pub fn now<F: Future>(future: F) -> F::Output {
    match std::pin::pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the in-memory pipeline returned Pending"),
    }
}
