//! The states of an event, and how one attempt at it ends.

use std::fmt;
use std::str::FromStr;

/// Where an event is in its life.
///
/// Stored by name ([`as_str`](Self::as_str)); [`State::ALL`] lists every
/// state, so that tools showing counts or filters need not spell them out.
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
}
