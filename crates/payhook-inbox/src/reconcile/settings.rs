//! [`Reconcile`]: the reconciler's settings, their defaults and the waits
//! they imply. Kept apart from the passes, so that the inbox's shared state
//! can hold them without knowing how a pass runs.

use std::time::Duration;

use crate::error::InboxError;

use super::{ApiKey, EventsApi};

/// How often a pass runs unless configured otherwise: 60 seconds.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
/// How much of the previous window a pass lists again unless configured
/// otherwise: 60 seconds.
pub const DEFAULT_OVERLAP: Duration = Duration::from_secs(60);
/// The shortest interval accepted: 100 milliseconds.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// The longest wait between failed passes: 10 minutes.
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);
/// The most pages one pass asks for unless configured otherwise: 1 000
/// (100 000 events).
pub const DEFAULT_MAX_PAGES: u32 = 1000;
/// The longest one pass pages for unless configured otherwise: 10 minutes.
pub const DEFAULT_MAX_PASS_TIME: Duration = Duration::from_secs(600);

/// The reconciler's settings: the service's API and how often to compare.
/// Give them to [`InboxBuilder::reconcile`](crate::InboxBuilder::reconcile).
#[derive(Debug, Clone)]
pub struct Reconcile {
    pub(super) api: EventsApi,
    pub(super) interval: Duration,
    pub(super) overlap: Duration,
    /// How old an event must be before a pass takes it: one interval.
    pub(super) settle: Duration,
    pub(super) max_pages: u32,
    pub(super) max_pass_time: Duration,
}

impl Reconcile {
    /// Reconciles with the API at `api_base` (`https://…`, or `http://` on
    /// loopback, such as the emulator's `http://127.0.0.1:12111`), using
    /// `api_key`.
    ///
    /// # Errors
    /// [`InboxError::InvalidSetting`] saying what is wrong with the base or
    /// the key (never the key itself).
    pub fn new(api_base: &str, api_key: &str) -> Result<Self, InboxError> {
        let key = ApiKey::new(api_key).map_err(InboxError::InvalidSetting)?;
        let api = EventsApi::new(api_base, key).map_err(InboxError::InvalidSetting)?;
        Ok(Self {
            api,
            interval: DEFAULT_INTERVAL,
            overlap: DEFAULT_OVERLAP,
            settle: DEFAULT_INTERVAL,
            max_pages: DEFAULT_MAX_PAGES,
            max_pass_time: DEFAULT_MAX_PASS_TIME,
        })
    }

    /// How often a pass runs (default [`DEFAULT_INTERVAL`], at least
    /// [`MIN_INTERVAL`]). Passes start one interval apart and take an event
    /// once it is one interval old, in the service's whole seconds, so a
    /// missed delivery is stored within two intervals and a second of its
    /// creation, plus the pass's own time. With the overlap it must be
    /// shorter than the inbox's retention, or the inbox is refused when it
    /// is built (a window reaching past the retention could store an event
    /// handled and purged already).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval.max(MIN_INTERVAL);
        self.settle = self.interval;
        self
    }

    /// How much of the previous window a pass lists again (default
    /// [`DEFAULT_OVERLAP`]): the longest an event may appear in the list
    /// after its `created` time, or the service's clock run ahead of this
    /// one, and still be found.
    pub fn overlap(mut self, overlap: Duration) -> Self {
        self.overlap = overlap;
        self
    }

    /// The most pages one pass asks for (default [`DEFAULT_MAX_PAGES`], at
    /// least 1). A backlog larger than a pass can page is walked in time
    /// slices, oldest first, over the following passes: the mark moves at
    /// the end of each slice, so every pass ends and the backlog completes.
    ///
    /// ```
    /// use payhook::inbox::Reconcile;
    ///
    /// let settings = Reconcile::new("http://127.0.0.1:12111", "sk_test_1").unwrap().max_pages(50);
    /// # drop(settings);
    /// ```
    pub fn max_pages(mut self, pages: u32) -> Self {
        self.max_pages = pages.max(1);
        self
    }

    /// The longest one pass pages for (default [`DEFAULT_MAX_PASS_TIME`]):
    /// checked before each request, so a pass ends within this and one
    /// request's timeout. As with [`max_pages`](Self::max_pages), the rest of
    /// the window follows in time slices. At most 100 years
    /// (`payhook_core::defaults::MAX_DURATION`), or the inbox is refused
    /// when it is built.
    ///
    /// ```
    /// use std::time::Duration;
    /// use payhook::inbox::Reconcile;
    ///
    /// let settings = Reconcile::new("http://127.0.0.1:12111", "sk_test_1")
    ///     .unwrap()
    ///     .max_pass_time(Duration::from_secs(120));
    /// # drop(settings);
    /// ```
    pub fn max_pass_time(mut self, time: Duration) -> Self {
        self.max_pass_time = time;
        self
    }

    /// Refuses settings that cannot hold beside the inbox's `retention`: an
    /// interval and overlap reaching past it (and so past any time a turn
    /// lease or a window could be written as), or a pass time beyond the
    /// durations every deadline is capped at.
    pub(crate) fn check(&self, retention: Duration) -> Result<(), InboxError> {
        if self
            .interval
            .checked_add(self.overlap)
            .is_none_or(|reach| reach >= retention)
        {
            return Err(InboxError::InvalidSetting(
                "reconcile interval and overlap must together be shorter than the retention",
            ));
        }
        if self.max_pass_time > payhook_core::defaults::MAX_DURATION {
            return Err(InboxError::InvalidSetting(
                "reconcile max pass time must be at most 100 years",
            ));
        }
        Ok(())
    }

    /// The events list this reconciles with.
    pub fn api(&self) -> &EventsApi {
        &self.api
    }

    /// How long a turn lasts without renewal: three intervals, at least 10 s.
    /// A pass renews it between pages and, while a request is in flight,
    /// every third of it, so a slow list never lets another replica take
    /// the turn while this one waits, and a crashed holder is taken over
    /// once it runs out.
    pub(super) fn turn(&self) -> Duration {
        self.interval.saturating_mul(3).max(Duration::from_secs(10))
    }

    /// The wait after `failures` failed passes in a row.
    pub(super) fn backoff(&self, failures: u32) -> Duration {
        let doubled = self
            .interval
            .checked_mul(1 << failures.saturating_sub(1).min(16))
            .unwrap_or(MAX_BACKOFF);
        doubled.min(MAX_BACKOFF).max(self.interval.min(MAX_BACKOFF))
    }
}
