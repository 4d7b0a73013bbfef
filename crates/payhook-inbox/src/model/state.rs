//! The states of an event, and how one attempt at it ends.

use std::fmt;
use std::str::FromStr;

/// Where an event is in its life.
///
/// Stored by name ([`as_str`](Self::as_str)); [`State::ALL`] lists every
/// state, so that tools showing counts or filters need not spell them out.
/// The groups of states that the reads, the operator's actions and the tools
/// act on are methods ([`is_waiting`](Self::is_waiting),
/// [`is_retryable`](Self::is_retryable),
/// [`can_be_made_due`](Self::can_be_made_due),
/// [`is_replayable`](Self::is_replayable),
/// [`is_purgeable`](Self::is_purgeable)), each an exhaustive `match`: a new
/// state does not build until it is placed in every group.
///
/// Reading an event whose stored state this version does not know (a newer
/// version wrote it, or someone edited the row) is a decode error naming the
/// value (`sqlx::Error::ColumnDecode` on the `state` column, which
/// [`Admin`](crate::admin::Admin) returns as a database error): the event is
/// never shown under another state, and nothing panics. The counts by state
/// ([`Stats`](crate::admin::Stats)) leave such rows out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum State {
    /// Waiting for a worker (new, or a retry after a failed attempt).
    Pending,
    /// A worker holds it (with a lease).
    Running,
    /// Failed its last attempt; kept, not retried until told to.
    Dead,
    /// Handled; kept for the retention so repeats are recognised.
    Done,
}

impl State {
    /// Every state, in the order an operator reads them: waiting, held,
    /// needing attention, finished.
    pub const ALL: &'static [State] = &[Self::Pending, Self::Running, Self::Dead, Self::Done];

    /// The name stored in the database and shown by the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Dead => "dead",
            Self::Done => "done",
        }
    }

    /// Waiting: not finished, so it still counts in the inbox's depth (the
    /// `payhook_inbox_pending` gauge, [`Inbox::wait_idle`](crate::Inbox::wait_idle)):
    /// `pending` and `running`.
    pub const fn is_waiting(self) -> bool {
        match self {
            Self::Pending | Self::Running => true,
            Self::Dead | Self::Done => false,
        }
    }

    /// A retry gives it another attempt: `dead`. What
    /// [`Admin::retry_dead`](crate::admin::Admin::retry_dead) and
    /// [`BulkAction::Retry`](crate::admin::BulkAction::Retry) act on.
    pub const fn is_retryable(self) -> bool {
        match self {
            Self::Dead => true,
            Self::Pending | Self::Running | Self::Done => false,
        }
    }

    /// [`Admin::retry`](crate::admin::Admin::retry) makes one event in it
    /// due now: a retryable one ([`is_retryable`](Self::is_retryable)) gets
    /// another attempt, a `pending` one runs without waiting out its backoff
    /// (the dashboard's event page offers the retry for these). A `running`
    /// one is a worker's until its attempt ends.
    pub const fn can_be_made_due(self) -> bool {
        match self {
            Self::Dead | Self::Pending => true,
            Self::Running | Self::Done => false,
        }
    }

    /// A replay runs its handler once more: `done`. What
    /// [`Admin::replay_since`](crate::admin::Admin::replay_since) and
    /// [`BulkAction::Replay`](crate::admin::BulkAction::Replay) act on.
    pub const fn is_replayable(self) -> bool {
        match self {
            Self::Done => true,
            Self::Pending | Self::Running | Self::Dead => false,
        }
    }

    /// An operator's purge may delete it: finished, no worker will take it
    /// again (`done` and `dead`). What [`BulkAction::Purge`](crate::admin::BulkAction::Purge)
    /// acts on; the retention purge deletes only `done` events, whose ids
    /// the inbox keeps for deduplication.
    pub const fn is_purgeable(self) -> bool {
        match self {
            Self::Done | Self::Dead => true,
            Self::Pending | Self::Running => false,
        }
    }

    /// The state the table's indexes file it under (the generated `phase`
    /// column, migration 12): `running` counts as `pending`, both waiting for
    /// their end, so a claim (`pending` → `running`) and a lease that runs
    /// out (`running` → `pending`) change no indexed column, and PostgreSQL
    /// writes them as heap-only (HOT) updates that add no index entry. Every
    /// other state is its own phase.
    pub(crate) const fn phase(self) -> Self {
        match self {
            Self::Pending | Self::Running => Self::Pending,
            Self::Dead => Self::Dead,
            Self::Done => Self::Done,
        }
    }

    /// The states in `group`, in [`State::ALL`] order.
    pub(crate) fn members(group: fn(Self) -> bool) -> Vec<Self> {
        Self::ALL.iter().copied().filter(|&state| group(state)).collect()
    }

    /// Its place in [`State::ALL`].
    pub(crate) fn index(self) -> usize {
        Self::ALL.iter().position(|&state| state == self).unwrap_or(0)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for State {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        if let Some(&state) = Self::ALL.iter().find(|state| state.as_str() == text) {
            return Ok(state);
        }
        let mut expected = String::from("expected ");
        for (index, state) in Self::ALL.iter().enumerate() {
            if index > 0 {
                expected.push_str(if index + 1 == Self::ALL.len() {
                    " or "
                } else {
                    ", "
                });
            }
            expected.push_str(state.as_str());
        }
        Err(expected)
    }
}

/// How one attempt ended, as the attempts record stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// The handler succeeded and the event is done.
    Done,
    /// It failed; another attempt is scheduled.
    Failed,
    /// It failed its last attempt; the event is dead.
    Dead,
    /// It never ended: its process died or lost the event's lease while it
    /// ran. Recorded when a claim finds the lease run out and takes the
    /// event back (or makes it dead after its last attempt).
    Interrupted,
}

impl AttemptOutcome {
    /// The name stored in the attempts record.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Dead => "dead",
            Self::Interrupted => "interrupted",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::State;

    #[test]
    fn every_state_reads_back_from_its_name() {
        for &state in State::ALL {
            assert_eq!(state.as_str().parse::<State>(), Ok(state));
            assert_eq!(State::ALL[state.index()], state);
        }
        assert_eq!(
            "finished".parse::<State>(),
            Err("expected pending, running, dead or done".to_owned())
        );
    }

    /// The groups the reads, the operator's actions and the tools act on.
    #[test]
    fn each_group_holds_its_states() {
        use State::{Dead, Done, Pending, Running};
        assert_eq!(State::members(State::is_waiting), [Pending, Running]);
        assert_eq!(State::members(State::is_retryable), [Dead]);
        assert_eq!(State::members(State::can_be_made_due), [Pending, Dead]);
        assert_eq!(State::members(State::is_replayable), [Done]);
        assert_eq!(State::members(State::is_purgeable), [Dead, Done]);
        // Migration 12's generated column says the same.
        let phases: Vec<State> = State::ALL.iter().map(|state| state.phase()).collect();
        assert_eq!(phases, [Pending, Pending, Dead, Done]);
    }
}
