//! Counts of events by state, and activity over time.

use crate::model::State;

/// Counts of events by state and the oldest pending one ([`Admin::stats`](crate::admin::Admin::stats)).
/// One count per [`State`], read with [`count`](Self::count) or all at once
/// with [`counts`](Self::counts): a new state needs no new field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    counts: [i64; State::ALL.len()],
    /// When the oldest pending event was received (Unix milliseconds).
    pub oldest_pending_at: Option<i64>,
    recovered: i64,
}

impl Stats {
    /// How many events are in `state`.
    pub fn count(&self, state: State) -> i64 {
        self.counts[state.index()]
    }

    /// Every state with its count, in [`State::ALL`] order.
    pub fn counts(&self) -> impl Iterator<Item = (State, i64)> + '_ {
        State::ALL.iter().map(|&state| (state, self.count(state)))
    }

    /// Every event stored, in any state.
    pub fn total(&self) -> i64 {
        self.counts.iter().sum()
    }

    /// Events the reconciler recovered: stored from the service's events
    /// list, and no delivery of them has arrived since (each one a delivery
    /// that was missed).
    pub fn recovered(&self) -> i64 {
        self.recovered
    }

    /// Events a delivery brought: stored by one, or stored by the
    /// reconciler and delivered afterwards ([`total`](Self::total) less
    /// [`recovered`](Self::recovered)).
    pub fn delivered(&self) -> i64 {
        self.total().saturating_sub(self.recovered).max(0)
    }

    /// Sets the count of recovered events.
    pub(crate) fn set_recovered(&mut self, recovered: i64) {
        self.recovered = recovered;
    }

    /// Sets the count of `state`.
    pub(crate) fn set(&mut self, state: State, count: i64) {
        self.counts[state.index()] = count;
    }
}

/// Deliveries and attempts in one interval ([`Admin::activity`](crate::admin::Admin::activity)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActivitySlot {
    /// When the interval starts (Unix milliseconds).
    pub start: i64,
    /// First deliveries in it: events acknowledged and stored.
    pub received: i64,
    /// Duplicate deliveries in it: acknowledged again, of events already
    /// stored (each counted apart from its first delivery).
    pub duplicates: i64,
    /// Attempts that ended with the event done.
    pub handled: i64,
    /// Attempts that failed (retried later, or dead).
    pub failed: i64,
}
