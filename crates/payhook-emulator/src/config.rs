//! The emulator's settings: the signature format of its deliveries
//! ([`DeliveryScheme`]), when failed deliveries are tried again
//! ([`RetrySchedule`]), the faults injected on request ([`Faults`]), what it
//! keeps in memory ([`Limits`]), and all of them together as fixed at start.

use std::time::Duration;

use crate::StartError;

/// How deliveries are signed, and so which keys an endpoint gets.
///
/// * [`Service`](Self::Service), the default: the service's own format, one
///   `x-service-signature: t=…,v1=…` header (or the
///   [one chosen](crate::EmulatorBuilder::signature_header)); each endpoint
///   gets a `whsec_` secret.
/// * [`StandardWebhooks`](Self::StandardWebhooks): the three Standard Webhooks
///   headers, `webhook-id` (the event id, the same for every attempt and
///   resend of one event), `webhook-timestamp` and `webhook-signature`. Each
///   endpoint gets a `whsec_` secret (the base64 of 32 random bytes) and an
///   Ed25519 key pair, and every delivery carries both a `v1` item (HMAC with
///   the secret) and a `v1a` item (Ed25519), as a sender in the middle of a
///   move between the two would: a receiver configured with the `whsec_`
///   secret or with the `whpk_` public key (both in the endpoint's create and
///   roll replies) verifies it. During a roll's overlap the previous keys'
///   two items follow. The body is the event object as the API shows it
///   (`type` and `data` as Standard Webhooks' payload has them; payhook reads
///   the payment intent from `data.object`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeliveryScheme {
    /// The service's `t=…,v1=…` signature header.
    #[default]
    Service,
    /// Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature`
    /// with `v1` and `v1a` items.
    StandardWebhooks,
}

/// When failed deliveries are tried again.
///
/// The wait before attempt *n + 1* is `base × 2^(n−1)`, capped at `cap`, less
/// a random 0–20 % (jitter, from the fault seed); a `Retry-After` reply
/// header (seconds, or an HTTP-date such as `Sun, 06 Nov 1994 08:49:37 GMT`)
/// replaces it, still capped at `cap`. After `max_attempts`
/// attempts the delivery is given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySchedule {
    pub(crate) base: Duration,
    pub(crate) cap: Duration,
    pub(crate) max_attempts: u32,
    pub(crate) jitter: bool,
}

impl RetrySchedule {
    /// The test-mode schedule, the default: 1 s, 2 s, 4 s … capped at 1 min, 8 attempts.
    pub fn test() -> Self {
        Self::new(Duration::from_secs(1), Duration::from_secs(60), 8)
    }

    /// Like the live service: 1 min, 2 min, 4 min … capped at 6 h, 20 attempts
    /// (the last about 2.9 days after the first).
    pub fn service() -> Self {
        Self::new(Duration::from_secs(60), Duration::from_secs(6 * 3600), 20)
    }

    /// Any schedule, for example a fast one for tests: `new(50 ms, 1 s, 5)`.
    /// [`EmulatorBuilder::start`](crate::EmulatorBuilder::start) refuses a zero `base`, a `cap` below `base`
    /// and zero `max_attempts`.
    pub fn new(base: Duration, cap: Duration, max_attempts: u32) -> Self {
        Self {
            base,
            cap,
            max_attempts,
            jitter: true,
        }
    }

    /// Exact waits, no jitter.
    pub fn without_jitter(mut self) -> Self {
        self.jitter = false;
        self
    }

    /// How many attempts in all, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    pub(crate) fn check(&self) -> Result<(), StartError> {
        if self.base.is_zero() {
            return Err(StartError::Setting(
                "the retry schedule's base interval must not be zero".into(),
            ));
        }
        if self.cap < self.base {
            return Err(StartError::Setting(
                "the retry schedule's cap must not be below its base interval".into(),
            ));
        }
        if self.max_attempts == 0 {
            return Err(StartError::Setting(
                "the retry schedule needs at least one attempt".into(),
            ));
        }
        Ok(())
    }
}

impl Default for RetrySchedule {
    fn default() -> Self {
        Self::test()
    }
}

/// The longest [`Faults::delay`] and [`Faults::reorder_window`].
const MAX_FAULT_DELAY: Duration = Duration::from_secs(3600);
/// The largest [`Faults::skew`], either way: 366 days.
const MAX_SKEW_SECS: u64 = 366 * 24 * 3600;

/// Faults injected into deliveries to test a receiver; all off by default.
///
/// Every random choice (which deliveries are duplicated, whether a copy is
/// concurrent, which events are undeliverable, the retry jitter) is drawn
/// from the [`seed`](Self::seed) and the order of events and endpoints, so
/// one seed and one sequence of API calls give the same faults in every run.
///
/// ```
/// use std::time::Duration;
/// use payhook::emulator::Faults;
///
/// let faults = Faults::default().duplicates(1.0).reorder().delay(Duration::from_millis(100)).seed(7);
/// assert_eq!(faults.seed_value(), Some(7));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Faults {
    pub(crate) duplicates: f64,
    pub(crate) reorder: bool,
    pub(crate) reorder_window: Duration,
    pub(crate) delay: Duration,
    pub(crate) skew_secs: i64,
    pub(crate) drop_first: bool,
    pub(crate) undeliverable: f64,
    pub(crate) seed: Option<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            duplicates: 0.0,
            reorder: false,
            reorder_window: Duration::from_millis(250),
            delay: Duration::ZERO,
            skew_secs: 0,
            drop_first: false,
            undeliverable: 0.0,
            seed: None,
        }
    }
}

impl Faults {
    /// Each delivery gets a duplicate copy with this probability (0–1): sent at
    /// the same moment as the original (concurrent) or after its first attempt,
    /// half of each. A copy is a delivery of its own, retried until acknowledged.
    pub fn duplicates(mut self, probability: f64) -> Self {
        self.duplicates = probability;
        self
    }

    /// Out-of-order delivery: deliveries queued within one window (250 ms by
    /// default) go out newest first, each first attempt ending before the next starts.
    pub fn reorder(mut self) -> Self {
        self.reorder = true;
        self
    }

    /// The window of [`reorder`](Self::reorder).
    pub fn reorder_window(mut self, window: Duration) -> Self {
        self.reorder_window = window;
        self
    }

    /// Every delivery waits this long before its first attempt.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Signs with a clock this many seconds off (negative: behind), so the
    /// signature's `t` tests the receiver's tolerance.
    pub fn skew(mut self, seconds: i64) -> Self {
        self.skew_secs = seconds;
        self
    }

    /// The first attempt of every delivery is sent but its reply is dropped, as
    /// if lost on the way back: the receiver sees the retry as a redelivery.
    pub fn drop_first(mut self) -> Self {
        self.drop_first = true;
        self
    }

    /// Each event is undeliverable with this probability (0–1), drawn from
    /// the [`seed`](Self::seed) and the event's creation order: every attempt
    /// of it to every endpoint (duplicate copies and retries included) fails
    /// without a request being sent, recorded with the error `not sent: the
    /// injected fault undeliverable fails every attempt of this event`, until
    /// the retry schedule gives up. No endpoint ever acknowledges it, so it
    /// stays `delivery_success=false` in the events list, as when an endpoint
    /// is down longer than the sender retries: only a receiver that
    /// reconciles against `GET /v1/events` finds it. A resend
    /// (`POST /v1/events/:id/resend`) is still delivered: it stands for the
    /// endpoint being back.
    ///
    /// ```
    /// use payhook::emulator::Faults;
    ///
    /// // About three events in ten never arrive; the same ones for seed 7.
    /// let faults = Faults::default().undeliverable(0.3).seed(7);
    /// # let _ = faults;
    /// ```
    pub fn undeliverable(mut self, probability: f64) -> Self {
        self.undeliverable = probability;
        self
    }

    /// The seed of every random choice; without one a random seed is used
    /// (see [`Emulator::seed`](crate::Emulator::seed) to repeat a run).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The seed set with [`seed`](Self::seed).
    pub fn seed_value(&self) -> Option<u64> {
        self.seed
    }

    /// The probability of [`duplicates`](Self::duplicates).
    pub fn duplicates_value(&self) -> f64 {
        self.duplicates
    }

    /// Whether [`reorder`](Self::reorder) is on.
    pub fn reorder_value(&self) -> bool {
        self.reorder
    }

    /// The window of [`reorder`](Self::reorder).
    pub fn reorder_window_value(&self) -> Duration {
        self.reorder_window
    }

    /// The [`delay`](Self::delay) before every first attempt.
    pub fn delay_value(&self) -> Duration {
        self.delay
    }

    /// The signing clock's [`skew`](Self::skew), in seconds.
    pub fn skew_value(&self) -> i64 {
        self.skew_secs
    }

    /// Whether [`drop_first`](Self::drop_first) is on.
    pub fn drop_first_value(&self) -> bool {
        self.drop_first
    }

    /// The probability of [`undeliverable`](Self::undeliverable).
    ///
    /// ```
    /// use std::time::Duration;
    /// use payhook::emulator::Faults;
    ///
    /// let faults = Faults::default().undeliverable(0.25).delay(Duration::from_millis(40));
    /// assert_eq!(faults.undeliverable_value(), 0.25);
    /// assert_eq!(faults.delay_value(), Duration::from_millis(40));
    /// assert!(!faults.reorder_value() && !faults.drop_first_value());
    /// ```
    pub fn undeliverable_value(&self) -> f64 {
        self.undeliverable
    }

    /// Turns [`reorder`](Self::reorder) off again, for example in the faults
    /// a running emulator is given ([`Emulator::set_faults`](crate::Emulator::set_faults)).
    ///
    /// ```
    /// use payhook::emulator::Faults;
    ///
    /// let calm = Faults::default().reorder().drop_first().no_reorder().no_drop_first();
    /// assert!(!calm.reorder_value() && !calm.drop_first_value());
    /// ```
    pub fn no_reorder(mut self) -> Self {
        self.reorder = false;
        self
    }

    /// Turns [`drop_first`](Self::drop_first) off again.
    pub fn no_drop_first(mut self) -> Self {
        self.drop_first = false;
        self
    }

    pub(crate) fn check(&self) -> Result<(), StartError> {
        if !(0.0..=1.0).contains(&self.duplicates) {
            return Err(StartError::Setting(
                "the duplicates probability must be between 0 and 1".into(),
            ));
        }
        if !(0.0..=1.0).contains(&self.undeliverable) {
            return Err(StartError::Setting(
                "the undeliverable probability must be between 0 and 1".into(),
            ));
        }
        if self.delay > MAX_FAULT_DELAY || self.reorder_window > MAX_FAULT_DELAY {
            return Err(StartError::Setting(
                "the delay and the reorder window are at most one hour".into(),
            ));
        }
        if self.reorder_window.is_zero() {
            return Err(StartError::Setting(
                "the reorder window must be longer than zero".into(),
            ));
        }
        if self.skew_secs.unsigned_abs() > MAX_SKEW_SECS {
            return Err(StartError::Setting(
                "the clock skew is at most 366 days either way".into(),
            ));
        }
        Ok(())
    }
}

/// Bounds on what the emulator keeps in memory.
///
/// Two kinds of bound hold at once: a count per kind of object, which
/// decides with ordinary objects (a payment intent with a little metadata
/// takes well under 1 KiB), and one byte budget, [`stored_bytes`](Self::stored_bytes),
/// which decides when objects are large (up to 50 metadata values of 500
/// characters make an intent of about 64 KiB, and its event twice that).
/// Whichever is reached first evicts the oldest objects of that kind.
///
/// With the defaults the worst case stays under 256 MiB of heap:
/// [`worst_case_bytes`](Self::worst_case_bytes) adds the byte budget to what
/// the count-bounded parts can take at their largest, and
/// [`Emulator::stats`](crate::Emulator::stats) reports what is kept now
/// ([`DeliveryStats::stored_bytes`](crate::DeliveryStats::stored_bytes)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Payment intents, and separately events, kept (the oldest go first). Default 10 000.
    pub objects: usize,
    /// Webhook endpoints at once (registering more is refused). Default 100.
    pub endpoints: usize,
    /// Delivery attempt records kept (the oldest go first). Default 50 000.
    pub attempts: usize,
    /// Deliveries waiting or running at once; more are dropped, counted in
    /// [`DeliveryStats::dropped`](crate::DeliveryStats::dropped) and logged. Default 10 000.
    pub pending_deliveries: usize,
    /// Idempotency keys remembered (finished ones go first). Default 10 000.
    pub idempotency_keys: usize,
    /// The largest request body; larger ones get 413. Default 64 KiB.
    pub body_bytes: usize,
    /// The estimated bytes the kept objects may take, shared out as: payment
    /// intents 3/8, events 3/8, delivery attempt records 3/16, idempotency
    /// replies 1/16. Each kind evicts its oldest to stay within its share.
    /// Default 160 MiB.
    pub stored_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            objects: 10_000,
            endpoints: 100,
            attempts: 50_000,
            pending_deliveries: 10_000,
            idempotency_keys: 10_000,
            body_bytes: 64 * 1024,
            stored_bytes: 160 * 1024 * 1024,
        }
    }
}

/// The shares of [`Limits::stored_bytes`].
pub(crate) struct Budget {
    pub intents: usize,
    pub events: usize,
    pub attempts: usize,
    pub idempotency: usize,
}

/// The most one webhook endpoint takes: its URL (2 048 bytes, held as a URL
/// and a request target), up to 100 event types of 255 characters, a
/// 5 000-character description (up to 4 bytes each), and the rest.
const ENDPOINT_MAX_BYTES: usize = 2 * 2048 + 100 * (255 * 4 + 40) + 5000 * 4 + 1024;
/// The most one waiting delivery takes (its queue entries, timer and counters;
/// the event body is shared with the kept event).
const PENDING_DELIVERY_MAX_BYTES: usize = 512;

impl Limits {
    pub(crate) fn budget(&self) -> Budget {
        let eighth = self.stored_bytes / 8;
        let sixteenth = self.stored_bytes / 16;
        Budget {
            intents: 3 * eighth,
            events: 3 * eighth,
            attempts: 3 * sixteenth,
            idempotency: sixteenth,
        }
    }

    /// The most heap, in bytes, that the emulator's kept state can take with
    /// these limits: [`stored_bytes`](Self::stored_bytes), plus every
    /// endpoint at its largest (about 128 KiB each) and every pending
    /// delivery (512 bytes each). With the defaults, about 177 MiB. Requests
    /// being read (each at most [`body_bytes`](Self::body_bytes)) and the
    /// process itself come on top.
    ///
    /// ```
    /// let limits = payhook::emulator::Limits::default();
    /// assert!(limits.worst_case_bytes() < 256 * 1024 * 1024);
    /// ```
    pub fn worst_case_bytes(&self) -> u64 {
        let total = self
            .stored_bytes
            .saturating_add(self.endpoints.saturating_mul(ENDPOINT_MAX_BYTES))
            .saturating_add(self.pending_deliveries.saturating_mul(PENDING_DELIVERY_MAX_BYTES));
        u64::try_from(total).unwrap_or(u64::MAX)
    }
}

/// Settings, fixed at start but for the faults, which the API and
/// [`Emulator::set_faults`](crate::Emulator::set_faults) change while it runs.
pub(crate) struct Config {
    pub fixed_key: Option<String>,
    pub retry: RetrySchedule,
    pub attempt_timeout: Duration,
    /// Read at each decision (a clone: a few words), so a change applies to
    /// the next attempt of every delivery, retries of earlier events included.
    pub faults: std::sync::RwLock<Faults>,
    pub limits: Limits,
    pub api_latency: Duration,
    pub signature_header: http::HeaderName,
    pub scheme: DeliveryScheme,
}

impl Config {
    /// The faults in force now.
    pub fn faults(&self) -> Faults {
        self.faults.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts `faults` in force for every attempt from now on.
    pub fn set_faults(&self, faults: Faults) {
        *self.faults.write().unwrap_or_else(|e| e.into_inner()) = faults;
    }
}

// By hand: the fixed API key is a secret and stays out of Debug output.
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("fixed_key", &self.fixed_key.as_ref().map(|_| "<redacted>"))
            .field("retry", &self.retry)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("faults", &self.faults)
            .field("limits", &self.limits)
            .field("api_latency", &self.api_latency)
            .field("signature_header", &self.signature_header)
            .field("scheme", &self.scheme)
            .finish()
    }
}
