//! The queue: an event's state changes after intake, each a named method
//! with its statement beside it, and the workers' batched writes.
//!
//! - [`transitions`] — `Queue`: `claim` (expired leases requeued or made
//!   dead, then due events `running` under a lease token), `renew`,
//!   `mark_done_in` (in the handler's transaction), `record_failure`; its
//!   tests of the PostgreSQL claim against a real database beside it
//!   (`transitions_tests.rs`).
//! - [`progress`] — `Progress`: the writes after a claim batched over many
//!   events (suspects' start marks and done marks, the renewal of the local
//!   queue's leases, the hand-back of events never started).
//! - [`attempts`] — `AttemptsRecord`: each ended attempt of an event.
//! - [`marks`] — the workers' two writer tasks (marks, attempts record),
//!   each writing what waits in one statement.
//!
//! The workers that drive these are in `worker`; new rows come from
//! `intake`.

pub(crate) mod attempts;
pub(crate) mod marks;
pub(crate) mod progress;
pub(crate) mod transitions;
