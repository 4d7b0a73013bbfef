//! Where "now" comes from, so tests can pin it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current unix time in whole seconds.
pub trait Clock: Send + Sync + 'static {
    /// Seconds since the unix epoch.
    fn unix_now(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn unix_now(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
        }
    }
}

/// A clock that says what it is told; clones share one time.
///
/// ```
/// use payhook::{Clock, FixedClock};
///
/// let clock = FixedClock::new(1_700_000_000);
/// let view = clock.clone();
/// clock.set(1_700_000_500);
/// assert_eq!(view.unix_now(), 1_700_000_500);
/// ```
#[derive(Debug, Clone, Default)]
pub struct FixedClock(Arc<AtomicI64>);

impl FixedClock {
    /// A clock stopped at `unix_seconds`.
    pub fn new(unix_seconds: i64) -> Self {
        Self(Arc::new(AtomicI64::new(unix_seconds)))
    }

    /// Moves the clock (for every clone).
    pub fn set(&self, unix_seconds: i64) {
        self.0.store(unix_seconds, Ordering::Relaxed);
    }
}

impl Clock for FixedClock {
    fn unix_now(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}
