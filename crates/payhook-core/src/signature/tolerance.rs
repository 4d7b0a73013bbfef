//! The replay window every timestamped scheme applies: a delivery's signing
//! time must lie within the tolerance on both sides of the receiver's clock.

use std::time::Duration;

use crate::clock::Clock;
use crate::error::Error;

/// The replay tolerance unless configured otherwise: 300 seconds (5 minutes)
/// on either side of the receiver's clock.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// How far a delivery's timestamp may be from the receiver's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tolerance {
    /// `|now − t|` must be at most this many whole seconds.
    Within(Duration),
    /// No timestamp check at all. Meant for tests that replay recorded deliveries;
    /// it removes the replay guard.
    Disabled,
}

impl Default for Tolerance {
    fn default() -> Self {
        Self::Within(DEFAULT_TOLERANCE)
    }
}

impl Tolerance {
    /// Checks a signing time `t` (unix seconds) against `clock`, in whole
    /// seconds and inclusively, in both directions: unlike Stripe's libraries,
    /// a timestamp far in the future is refused too. The clock is only read
    /// when the check is on.
    ///
    /// # Errors
    /// [`Error::TimestampTooOld`] or [`Error::TimestampInFuture`], with the gap
    /// and the tolerance in seconds.
    #[inline]
    pub fn check(self, t: u64, clock: &dyn Clock) -> Result<(), Error> {
        let Tolerance::Within(tolerance) = self else {
            return Ok(());
        };
        let tolerance = tolerance.as_secs();
        let now = i128::from(clock.unix_now());
        let diff = now - i128::from(t);
        let gap = u64::try_from(diff.unsigned_abs()).unwrap_or(u64::MAX);
        if gap <= tolerance {
            Ok(())
        } else if diff > 0 {
            Err(Error::TimestampTooOld { age: gap, tolerance })
        } else {
            Err(Error::TimestampInFuture {
                ahead: gap,
                tolerance,
            })
        }
    }
}
