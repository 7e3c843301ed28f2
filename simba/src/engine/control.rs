//! What an election's handle, its actor and the client share about a started election, and
//! the task-local that marks engine tasks (rule L5).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::Term;
use crate::events::ElectionState;

tokio::task_local! {
    /// The election whose leader task or callback is running on this task (rule L5).
    pub(crate) static IN_ELECTION: u64;
}

/// Whether the caller runs inside a leader task or callback of some election.
pub(crate) fn inside_engine_task() -> bool {
    IN_ELECTION.try_with(|_| ()).is_ok()
}

pub(crate) fn inside_election(id: u64) -> bool {
    IN_ELECTION.try_with(|v| *v == id).unwrap_or(false)
}

pub(crate) enum Cmd {
    Stop(oneshot::Sender<()>),
    StepDown(Duration, oneshot::Sender<()>),
}

/// What an election's handle and the client share about a started election.
pub(crate) struct ElectionCtl {
    pub(crate) id: u64,
    pub(crate) name: Arc<str>,
    pub(crate) cmds: mpsc::UnboundedSender<Cmd>,
    pub(crate) state: Mutex<ElectionStatus>,
}

#[derive(Clone)]
pub(crate) enum ElectionStatus {
    Candidate,
    Leader(Term),
    CoolingDown(Instant),
}

impl ElectionCtl {
    pub(crate) fn state(&self, now: Instant) -> ElectionState {
        match &*self.state.lock().unwrap_or_else(PoisonError::into_inner) {
            ElectionStatus::Candidate => ElectionState::Candidate,
            ElectionStatus::Leader(t) => ElectionState::Leader { token: t.token() },
            ElectionStatus::CoolingDown(until) => {
                ElectionState::CoolingDown { remaining: until.saturating_duration_since(now) }
            }
        }
    }

    pub(crate) fn set(&self, s: ElectionStatus) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = s;
    }
}
