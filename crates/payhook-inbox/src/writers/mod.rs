//! The inbox's batching writers: each a task that writes everything waiting
//! in its queue in one statement, so the statements per event fall as the
//! rate rises.
//!
//! - [`intake`]: new deliveries, from the inbox's intake;
//! - [`marks`]: the workers' marks (attempts starting, events done) and the
//!   attempts record.

pub(crate) mod intake;
pub(crate) mod marks;
