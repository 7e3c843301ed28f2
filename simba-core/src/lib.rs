//! The protocol core of simba, sans I/O (ADR 0001): state plus monotonic time and events in,
//! commands out. Nothing here awaits, spawns, reads a clock or talks to a backend, so every
//! rule is tested by asserting the exact commands a sequence of events produces, and a
//! simulation or a model checker can drive the same code the engine runs.
//!
//! - [`attempt`]: the K3 attempt slot (one acquisition in flight per name, an abandoned one
//!   keeps it until its reply or its timeout).
//! - [`claim`]: the jobs store's claim rule (which slot or run-now request a claim takes, what
//!   pause does to it, and what the store writes), the one reference every store follows.
//! - [`cron`]: the one cron parser and time-zone lookup (the macros' settings).
//! - [`hash`]: the one hash the core places things with (FNV-1a, 64 bits).
//! - [`mutants`]: rule breaks the model checker switches on (`--cfg simba_mutants`, this repository's own builds only).
//! - [`policy`]: the schedule policies (J11-J14): overlap, the catch-up window, start
//!   jitter, start and end bounds.
//! - [`slots`]: the slot arithmetic of schedules (cron slots in a time zone, the fixed-rate
//!   grid, misfire gaps), the wall clock passed in.
//! - [`timing`]: the formulas of section D and K1 (deadline, renewal plan, call timeout,
//!   backoff, candidate delay), over a [`TimingConfig`].
//! - [`election`]: the election machine (K1, K3, H1-H5, L3, L6): attempts, retries, the
//!   handover order, cooldowns.
//! - [`ledger`]: the lease ledger's rules (K3, K4, T6): the released-token record, whether a
//!   won lease becomes a term, what a reconcile revokes and releases.
//! - [`rebalance`]: the J6 decision of a partition group's member in one round.
//! - [`schedules`]: schedules stored as data: the id rule, the partition of an id, the
//!   check of a spec and a payload, the fires of a spec.
//! - [`session`]: the session machine (S1-S5, D1-D5): opening, renewing, suspending and
//!   ending the client's one session.
//!
//! The async shell around it is the `simba` crate's session actor: it executes the commands
//! (backend calls with their timeouts, events, logs) and feeds the results back. Dependencies
//! run one way: handles -> engine -> core; this crate depends on no runtime, no backend and no
//! type of the crates above it.
//!
//! Time is generic ([`Moment`]): the engine passes `tokio::time::Instant` (feature `tokio`,
//! tokio's time types only), a simulation its own clock. The crate is public so that such
//! drivers can use it; its items follow the engine, not semver promises to applications, and
//! `simba` does not re-export it as a module.

use std::fmt;
use std::ops::Add;
use std::time::Duration;

pub mod attempt;
pub mod backfill;
pub mod claim;
pub mod cron;
pub mod election;
pub mod hash;
pub mod ledger;
pub mod mutants;
pub mod policy;
pub mod rebalance;
pub mod schedules;
pub mod session;
pub mod slots;
pub mod timing;

pub use session::{Close, Command, SessionMachine};
pub use timing::{RenewPlan, Timing, TimingConfig, call_timeout};

/// An instant on a monotonic clock, as the core needs it: ordered, moved forward by a
/// [`Duration`], and measured against an earlier instant.
pub trait Moment: Copy + Ord + fmt::Debug + Add<Duration, Output = Self> {
    /// The time from `earlier` to `self`, or zero when `earlier` is later.
    fn saturating_duration_since(self, earlier: Self) -> Duration;
}

#[cfg(feature = "tokio")]
impl Moment for tokio::time::Instant {
    fn saturating_duration_since(self, earlier: Self) -> Duration {
        tokio::time::Instant::saturating_duration_since(&self, earlier)
    }
}

impl Moment for std::time::Instant {
    fn saturating_duration_since(self, earlier: Self) -> Duration {
        std::time::Instant::saturating_duration_since(&self, earlier)
    }
}

/// Why a term ended (rule T6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RevokeReason {
    /// The election was stopped, the lock released or the client closed.
    Stopped,
    /// The election stepped down (`step_down`), or its leader task returned.
    SteppedDown,
    /// The session's local deadline passed with no successful renewal.
    DeadlinePassed,
    /// The backend said the session expired.
    SessionExpired,
    /// A keep-alive reply no longer listed the lease as this session's.
    TakenOver,
}

impl RevokeReason {
    /// The snake_case name metrics label a revoke with (`stepped_down`).
    pub fn as_str(self) -> &'static str {
        match self {
            RevokeReason::Stopped => "stopped",
            RevokeReason::SteppedDown => "stepped_down",
            RevokeReason::DeadlinePassed => "deadline_passed",
            RevokeReason::SessionExpired => "session_expired",
            RevokeReason::TakenOver => "taken_over",
        }
    }
}

impl fmt::Display for RevokeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RevokeReason::Stopped => "stopped",
            RevokeReason::SteppedDown => "stepped down",
            RevokeReason::DeadlinePassed => "deadline passed",
            RevokeReason::SessionExpired => "session expired",
            RevokeReason::TakenOver => "taken over",
        })
    }
}

/// The state of a client's session (rule S5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionStatus {
    /// No session yet, or opening a new one after the last ended.
    Opening,
    /// The last renewal succeeded.
    Live,
    /// The last renewal failed and the deadline has not passed yet.
    Suspended,
    /// The client was closed.
    Closed,
}
