//! Bulk actions: what they do, which events they select, what the count
//! before them and the report after them say.

use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

use crate::model::State;

/// The most ids a [`Selection`] lists: larger sets are chosen by a prefix,
/// a type or an age.
pub const MAX_BULK_IDS: usize = 1000;

/// What a bulk action does to each selected event
/// ([`Admin::bulk_run`](crate::admin::Admin::bulk_run)). Each acts only on
/// the states it names, and only on what the count saw: the events whose
/// last change of state came before the count's time
/// ([`BulkCount::as_of`]). An event that changed since — died or finished
/// after the count, was retried, replayed or handled meanwhile, or arrived
/// after it — is left alone, so the run never reaches past the count, and
/// running it again (after an interruption) changes only what the first run
/// did not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BulkAction {
    /// `dead` → `pending`, due now (one more attempt), for events dead
    /// before the count: one that died after it (also one this run
    /// retried) is left dead.
    Retry,
    /// `done` → `pending`, due now (the handler runs once more), for events
    /// done before the count: one replayed and done again is left done.
    Replay,
    /// Deletes `done` and `dead` events done or dead before the count (never
    /// waiting or running ones, nor one that finished or died after the
    /// count); their ids are forgotten, so a redelivery is handled again.
    Purge,
    /// Pauses the event types among the selected events that the count
    /// showed ([`Admin::pause`](crate::admin::Admin::pause)), each only if
    /// it still has a selected event; no event changes.
    Pause,
}

impl BulkAction {
    /// Every action, in the order the tools offer them.
    pub const ALL: &'static [BulkAction] = &[Self::Retry, Self::Replay, Self::Purge, Self::Pause];

    /// Its name, as the CLI and the dashboard take it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Replay => "replay",
            Self::Purge => "purge",
            Self::Pause => "pause",
        }
    }

    /// The states it acts on; a [`Selection::state`] outside them selects
    /// nothing and is refused. Pausing looks at events in any state.
    /// They are the states of its group, in [`State::ALL`] order: retry the
    /// [retryable](State::is_retryable) ones, replay the
    /// [replayable](State::is_replayable) ones, purge the
    /// [purgeable](State::is_purgeable) ones.
    pub fn states(self) -> &'static [State] {
        static RETRYABLE: LazyLock<Vec<State>> = LazyLock::new(|| State::members(State::is_retryable));
        static REPLAYABLE: LazyLock<Vec<State>> = LazyLock::new(|| State::members(State::is_replayable));
        static PURGEABLE: LazyLock<Vec<State>> = LazyLock::new(|| State::members(State::is_purgeable));
        match self {
            Self::Retry => &RETRYABLE,
            Self::Replay => &REPLAYABLE,
            Self::Purge => &PURGEABLE,
            Self::Pause => State::ALL,
        }
    }
}

impl fmt::Display for BulkAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BulkAction {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .copied()
            .find(|action| action.as_str() == text)
            .ok_or_else(|| "expected retry, replay, purge or pause".to_owned())
    }
}

/// Which events a bulk action selects: every field narrows; the default
/// selects every event of the action's states.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Only events in this state (one of the action's
    /// [`states`](BulkAction::states)).
    pub state: Option<State>,
    /// Only events of this type.
    pub event_type: Option<String>,
    /// Only events received at or before this time (Unix milliseconds): an
    /// "older than" age, made a time once, at the count.
    pub received_before: Option<i64>,
    /// Only events received at or after this time (Unix milliseconds).
    pub received_after: Option<i64>,
    /// Only events whose id starts with this.
    pub id_prefix: Option<String>,
    /// Only these events (at most [`MAX_BULK_IDS`]); empty means any id.
    pub ids: Vec<String>,
}

/// The most events a bulk count reads: 10 000. A selection with more is
/// counted as "more than 10 000" ([`BulkCount::more`]), so a count costs the
/// same however much history the inbox keeps (exactly counting millions of
/// done events took seconds, past the dashboard's page limit); below it,
/// every count is exact.
pub const BULK_COUNT_LIMIT: u64 = 10_000;

/// How many events a bulk action would touch
/// ([`Admin::bulk_count`](crate::admin::Admin::bulk_count)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkCount {
    /// Events selected now: exact, or [`BULK_COUNT_LIMIT`] when
    /// [`more`](Self::more) are.
    pub events: u64,
    /// The most common event types among the events counted, with their
    /// counts (at most 20, most events first; among the first
    /// [`BULK_COUNT_LIMIT`] when [`more`](Self::more)).
    pub types: Vec<(String, u64)>,
    /// The time the count was taken at (Unix milliseconds): the count
    /// selects the events whose last change of state came before it, and so
    /// does [`Admin::bulk_run`](crate::admin::Admin::bulk_run) given this
    /// count, so that the run touches only what was counted; given it again,
    /// it finishes an interrupted run.
    pub as_of: i64,
    /// The selection holds more than [`events`](Self::events) (the count
    /// stopped at [`BULK_COUNT_LIMIT`]): a run given this count acts on
    /// every event selected at [`as_of`](Self::as_of), not only that many.
    pub more: bool,
}

/// What a bulk action did ([`Admin::bulk_run`](crate::admin::Admin::bulk_run)):
/// how many events the count selected, how many the run acted on (never
/// more, unless the count stopped at its limit), and how many of the counted ones no longer qualified when the run
/// reached them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BulkReport {
    /// Events the count selected ([`BulkCount::events`]).
    pub selected: u64,
    /// Events acted on (retried, replayed or deleted; for a pause, the
    /// selected events of the types paused): at most `selected`, unless the
    /// count found [`more`](BulkCount::more).
    pub events: u64,
    /// Counted events the run left alone because they had changed since the
    /// count (died again, finished, retried, replayed, handled or purged
    /// meanwhile, by a worker, another operator or an earlier run with the
    /// same count). For a pause, those of the types the count showed.
    pub no_longer_qualified: u64,
    /// Event types newly paused ([`BulkAction::Pause`]).
    pub paused_types: Vec<String>,
    /// Batches run: each reads at most
    /// [`BULK_BATCH`](crate::admin::BULK_BATCH) keys, then changes them in one
    /// statement by key, its own short transaction.
    pub batches: u64,
    /// The longest of them, from its read to its write's commit.
    pub longest_batch: Duration,
}
