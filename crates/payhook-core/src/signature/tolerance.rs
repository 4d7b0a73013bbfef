//! The replay window every timestamped scheme applies: a delivery's signing
//! time must lie within the tolerance on both sides of the receiver's clock.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
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

/// The timestamp check's settings as a signature builder collects them: the
/// tolerance and the clock, when one was given. Both built-in schemes'
/// builders hold one and get its setters from [`timestamp_setters!`].
#[derive(Default)]
pub(crate) struct TimestampCheck {
    pub(crate) tolerance: Tolerance,
    pub(crate) clock: Option<Arc<dyn Clock>>,
}

impl TimestampCheck {
    /// The tolerance and the clock to build with (the system clock unless
    /// one was given).
    pub(crate) fn into_parts(self) -> (Tolerance, Arc<dyn Clock>) {
        (
            self.tolerance,
            self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
        )
    }
}

/// The setters `tolerance`, `disable_timestamp_check` and `clock` of a
/// builder with a `timestamp: TimestampCheck` field, written once for both
/// built-in schemes. `tolerance`'s and `clock`'s docs are given by the
/// builder (each scheme words them for its own page);
/// `disable_timestamp_check`'s are the same for both. The signatures name
/// `Duration` and `Clock` as the docs show them: the invoking module imports
/// both.
macro_rules! timestamp_setters {
    (
        $(#[$tolerance_doc:meta])* tolerance;
        $(#[$clock_doc:meta])* clock;
    ) => {
        $(#[$tolerance_doc])*
        pub fn tolerance(mut self, tolerance: Duration) -> Self {
            self.timestamp.tolerance = $crate::signature::Tolerance::Within(tolerance);
            self
        }

        /// Turns the timestamp check off. Only for tests replaying old deliveries:
        /// without it a captured delivery can be replayed forever.
        pub fn disable_timestamp_check(mut self) -> Self {
            self.timestamp.tolerance = $crate::signature::Tolerance::Disabled;
            self
        }

        $(#[$clock_doc])*
        pub fn clock(mut self, clock: impl Clock) -> Self {
            self.timestamp.clock = Some(::std::sync::Arc::new(clock));
            self
        }
    };
}
pub(crate) use timestamp_setters;
