//! What a client reports about itself: events as they happen, and snapshots on demand.

use std::time::Duration;

use crate::RevokeReason;
use crate::backend::SessionId;

/// Something that happened to a client's session or terms. Subscribe with
/// [`Simba::events`](crate::Simba::events).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// A session was opened (rule S1).
    SessionOpened {
        /// The new session.
        session: SessionId,
        /// The lifetime the backend granted.
        granted: Duration,
    },
    /// Opening a session failed; the client retries with backoff.
    SessionOpenFailed {
        /// What failed.
        error: String,
    },
    /// The backend granted less than `lease_duration`, too little for two renewals at
    /// `renew_interval`: the session renews every third of its local validity instead
    /// (rule D4). Published once per session.
    SessionLeaseShortened {
        /// The session.
        session: SessionId,
        /// The lifetime the backend granted.
        granted: Duration,
        /// The renewal period used instead of `renew_interval`.
        renew_every: Duration,
    },
    /// A renewal failed; the session is suspended until a renewal succeeds or its deadline
    /// passes.
    SessionSuspended {
        /// The session.
        session: SessionId,
        /// What failed.
        error: String,
    },
    /// A renewal succeeded after the session was suspended.
    SessionResumed {
        /// The session.
        session: SessionId,
    },
    /// The session ended; every term it held ended with the same reason.
    SessionEnded {
        /// The session.
        session: SessionId,
        /// Why it ended.
        reason: RevokeReason,
    },
    /// A term started.
    Elected {
        /// The lease.
        name: String,
        /// The term's fencing token.
        token: u64,
    },
    /// A term ended.
    Revoked {
        /// The lease.
        name: String,
        /// The term's fencing token.
        token: u64,
        /// Why it ended.
        reason: RevokeReason,
    },
    /// The client was closed.
    Closed,
}

pub use simba_core::SessionStatus;

/// The state of one election in a [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ElectionState {
    /// Contending for the lease.
    Candidate,
    /// Holding the lease with this token.
    Leader {
        /// The term's fencing token.
        token: u64,
    },
    /// Out of contention after `step_down` for this much longer.
    CoolingDown {
        /// Time left.
        remaining: Duration,
    },
}

/// One election in a [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectionSnapshot {
    /// The lease name.
    pub name: String,
    /// Its state.
    pub state: ElectionState,
}

/// One held term in a [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TermSnapshot {
    /// The lease name.
    pub name: String,
    /// The fencing token.
    pub token: u64,
    /// Time until the local deadline.
    pub remaining: Duration,
    /// Whether the term is still valid (a revoked term shows here until its release is done).
    pub valid: bool,
}

/// The state of a client at one instant (rule S5).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The session's state.
    pub status: SessionStatus,
    /// The current session, if one is open.
    pub session: Option<SessionId>,
    /// Time until the session's local deadline.
    pub time_to_deadline: Option<Duration>,
    /// Every started election, by name.
    pub elections: Vec<ElectionSnapshot>,
    /// Every held term (elections and locks), by name.
    pub terms: Vec<TermSnapshot>,
}
