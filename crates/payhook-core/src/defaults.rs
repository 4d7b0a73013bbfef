//! The defaults and bounds of [`ReceiverBuilder`](crate::ReceiverBuilder)'s settings.
//!
//! A setting left alone takes its `DEFAULT_…` value; [`ReceiverBuilder::build`](crate::ReceiverBuilder::build)
//! refuses a lease or retention outside [`MIN_LEASE`]..=[`MAX_DURATION`] with a
//! [`ConfigError`](crate::ConfigError). A store or an inbox that keeps the same
//! settings can use the same values, so they agree with the receiver:
//!
//! ```
//! use std::time::Duration;
//! use payhook::defaults::{DEFAULT_LEASE, MAX_DURATION, MIN_LEASE};
//!
//! // A lease read from configuration, held to what the receiver accepts.
//! let lease = Duration::from_millis(500).clamp(MIN_LEASE, MAX_DURATION);
//! assert!(lease == MIN_LEASE && lease < DEFAULT_LEASE);
//! # let receiver = payhook::Receiver::builder().secret("whsec_test").lease(lease).build();
//! # assert!(receiver.is_ok());
//! ```

use std::time::Duration;

/// The body size limit unless configured otherwise: 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;
/// How long a handled id is remembered unless configured otherwise: 7 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long an in-flight claim lasts before another delivery (or another
/// inbox worker) may take the id over, unless configured otherwise: 5 seconds.
///
/// A live process renews its claims every third of the lease while their
/// handlers run, so a handler may run far longer than this; the lease only
/// decides how soon the work of a process that stopped (killed, crashed, cut
/// off from the store) is taken up elsewhere: within seconds. The price is
/// that a process that stalls for longer than a lease (a paused VM, a stop of
/// the world, a store that does not answer its renewals) may find its event
/// taken over; its claim token then no longer matches, so it cannot mark the
/// event done or commit an inbox transaction, and the effects that go through
/// that commit happen once. Work done outside it (an HTTP call) may happen twice.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(5);
/// How long a request body may take to arrive in full unless configured
/// otherwise: 5 seconds. The payment service gives up on a reply after 10 s, so a
/// body still arriving after 5 s leaves too little time to handle it; a client
/// that stalls (or trickles) past it gets `408` and a closed connection instead
/// of holding a connection and up to a body limit of memory for as long as it likes.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a `503` reply (the dedupe store or the inbox's database
/// unavailable) asks the sender to wait before it delivers again: 5 seconds,
/// sent as `Retry-After: 5`; long enough not to add load to a store that is
/// struggling, short enough that a blip costs seconds.
pub const UNAVAILABLE_RETRY_AFTER: Duration = Duration::from_secs(5);
/// The store namespace of a receiver that keeps its own in-memory store. A
/// receiver given a store with [`ReceiverBuilder::store`](crate::ReceiverBuilder::store) or
/// [`ReceiverBuilder::shared_store`](crate::ReceiverBuilder::shared_store) must name its namespace.
pub const DEFAULT_NAMESPACE: &str = "payhook";
/// The longest lease or retention [`ReceiverBuilder::build`](crate::ReceiverBuilder::build) accepts: 100 years
/// (365-day years). Longer values, such as `Duration::MAX` meant as "forever",
/// are refused with a [`ConfigError`](crate::ConfigError) rather than overflowing a clock later.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// The shortest lease [`ReceiverBuilder::build`](crate::ReceiverBuilder::build) accepts: 1 second. The lease is
/// renewed while the handler runs, so it only needs to outlast a crashed
/// worker's silence, not the slowest handler.
pub const MIN_LEASE: Duration = Duration::from_secs(1);
