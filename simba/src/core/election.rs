//! The election machine (rules K1, K3, H1-H5, L3, L6): when an election attempts, what a won
//! or lost attempt leads to, and the exact order of a handover. The shell (`election.rs`'s
//! actor) feeds it the events it waits for (a live session, an attempt's end, a release
//! heard, the clock, a command, the term lost, the task's return) and executes the commands
//! it returns, in order, awaiting each; the machine holds no term, task or channel, only the
//! phase.

use std::time::Duration;

use super::{Moment, RevokeReason, Timing};

/// What the election's status shows ([`crate::ElectionState`]); the leader status is set by the
/// shell with the term when it carries out [`Command::Elect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status<T> {
    /// Contending.
    Candidate,
    /// Out of contention until the instant (H4, L6).
    CoolingDown(T),
}

/// What the machine asks the shell to do, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command<T> {
    /// Publish the election's status.
    Status(Status<T>),
    /// Send one acquisition for the live session (K3: the only one in flight); answer with
    /// [`ElectionMachine::attempt_ended`].
    Attempt,
    /// Give the acquisition in flight up; it stays in flight until its reply or its timeout
    /// (K3), and a win it brings is released (K4).
    Abandon,
    /// Dispatch `on_elected` for the adopted term, then show the election as leader and, if it
    /// has a task, start it with the term; answer [`ElectionMachine::elect_failed`] instead if
    /// `on_elected` cannot be dispatched (L6).
    Elect,
    /// Revoke the term with `reason` and signal its task (H1, first step).
    Revoke(RevokeReason),
    /// Wait until the task returns or the session's local deadline passes, whichever first;
    /// abort it at the deadline (H1, H5). Nothing without a task (H2).
    AwaitTask,
    /// Abort the task at once (H3: the backend may already have given the lease away).
    AbortTask,
    /// Release the lease with the term's token (T7), unless the term was already lost when
    /// `Revoke` came (H3: the session shell dropped it); forget the term either way.
    Release,
    /// Deliver `on_revoked(term, reason)` (L1); after a `Revoke` that found the term already
    /// lost, with the reason it was lost with.
    DeliverRevoked(RevokeReason),
    /// Wait until every callback queued so far ran (L3).
    Flush,
    /// Answer the `step_down()` that is waiting.
    ReplyStepDown,
    /// The election ended: free its name (L4), flush the callbacks, answer the `stop()` that
    /// ended it and every command still queued, then the actor exits (L3).
    Stopped,
}

/// What an election does once a handover is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Contend,
    CoolDown(Duration),
    Stop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase<T> {
    /// Wants to attempt once a session is live.
    Candidate,
    /// An acquisition in flight.
    Attempting,
    /// K1: the next attempt at `until` (sooner on a release heard or a new session).
    Waiting {
        until: T,
    },
    /// H4, L6: out of contention until `until`.
    CoolingDown {
        until: T,
    },
    Leading,
    /// The shell executes the handover's commands, then answers `handed_over`.
    HandingOver(Then),
    Stopped,
}

/// The election machine of one started election.
#[derive(Debug, Clone)]
pub struct ElectionMachine<T> {
    timing: Timing,
    phase: Phase<T>,
}

impl<T: Moment> ElectionMachine<T> {
    /// A started election: a candidate.
    pub fn new(timing: Timing) -> Self {
        ElectionMachine { timing, phase: Phase::Candidate }
    }

    /// Whether the election waits for a live session to attempt.
    pub fn wants_session(&self) -> bool {
        self.phase == Phase::Candidate
    }

    /// Whether an acquisition is in flight.
    pub fn attempting(&self) -> bool {
        self.phase == Phase::Attempting
    }

    /// Whether the election holds a term.
    pub fn leading(&self) -> bool {
        self.phase == Phase::Leading
    }

    /// Whether a handover's commands are being executed ([`handed_over`](Self::handed_over)
    /// comes next).
    pub fn handing_over(&self) -> bool {
        matches!(self.phase, Phase::HandingOver(_))
    }

    /// Whether the election is out of contention until [`next_wakeup`](Self::next_wakeup)
    /// (H4, L6).
    pub fn cooling_down(&self) -> bool {
        matches!(self.phase, Phase::CoolingDown { .. })
    }

    /// Whether the election ended.
    pub fn stopped(&self) -> bool {
        self.phase == Phase::Stopped
    }

    /// When [`tick`](Self::tick) has something to do: the next attempt (K1) or the end of a
    /// cooldown (H4).
    pub fn next_wakeup(&self) -> Option<T> {
        match self.phase {
            Phase::Waiting { until } | Phase::CoolingDown { until } => Some(until),
            _ => None,
        }
    }

    /// A live session is there while the election wants one: attempt (K3).
    pub fn session_live(&mut self, _now: T) -> Vec<Command<T>> {
        if self.phase != Phase::Candidate {
            return Vec::new();
        }
        self.phase = Phase::Attempting;
        vec![Command::Attempt]
    }

    /// The acquisition ended: `adopted` when it won a lease that became a term (K4 decided by
    /// the ledger). Otherwise the next attempt comes after `renew_interval / 2 + jitter`
    /// (K1; `unit` draws a uniform sample from `[0, 1)`, only when a delay is needed, so that a
    /// seeded source gives the same delays as before).
    pub fn attempt_ended(&mut self, now: T, adopted: bool, unit: impl FnOnce() -> f64) -> Vec<Command<T>> {
        if self.phase != Phase::Attempting {
            return Vec::new();
        }
        if adopted {
            self.phase = Phase::Leading;
            return vec![Command::Elect];
        }
        self.phase = Phase::Waiting { until: now + self.timing.candidate_delay(unit()) };
        Vec::new()
    }

    /// L6: `on_elected` could not be dispatched: nobody knows the term, so it is revoked and
    /// released without an `on_revoked`, and the election gives the lease up for one lease
    /// period.
    pub fn elect_failed(&mut self, _now: T) -> Vec<Command<T>> {
        if self.phase != Phase::Leading {
            return Vec::new();
        }
        self.phase = Phase::HandingOver(Then::CoolDown(self.timing.config.lease_duration()));
        vec![Command::Revoke(RevokeReason::SteppedDown), Command::Release]
    }

    /// A release of the election's lease was heard (K2), or the session changed: a waiting
    /// candidate attempts again now rather than at its retry instant.
    pub fn nudge(&mut self, _now: T) -> Vec<Command<T>> {
        if let Phase::Waiting { .. } = self.phase {
            self.phase = Phase::Candidate;
        }
        Vec::new()
    }

    /// The clock reached `now`: a retry comes due (K1) or a cooldown ends (H4).
    pub fn tick(&mut self, now: T) -> Vec<Command<T>> {
        match self.phase {
            Phase::Waiting { until } if now >= until => {
                self.phase = Phase::Candidate;
                Vec::new()
            }
            Phase::CoolingDown { until } if now >= until => {
                self.phase = Phase::Candidate;
                vec![Command::Status(Status::Candidate)]
            }
            _ => Vec::new(),
        }
    }

    /// `stop()`, or the handle and the client gone. Leading: the H1 handover with `Stopped`,
    /// then the end. Otherwise the end at once, an attempt in flight abandoned.
    pub fn stop(&mut self, _now: T) -> Vec<Command<T>> {
        match self.phase {
            Phase::Leading => {
                self.phase = Phase::HandingOver(Then::Stop);
                handover(RevokeReason::Stopped)
            }
            Phase::HandingOver(_) | Phase::Stopped => Vec::new(),
            Phase::Attempting => {
                self.phase = Phase::Stopped;
                vec![Command::Abandon, Command::Stopped]
            }
            Phase::Candidate | Phase::Waiting { .. } | Phase::CoolingDown { .. } => {
                self.phase = Phase::Stopped;
                vec![Command::Stopped]
            }
        }
    }

    /// `step_down(cooldown)` (H4). Leading: the H1 handover with `SteppedDown`, answered when
    /// done, then a cooldown from then. Cooling down: answered, nothing changes. Otherwise:
    /// an attempt in flight abandoned, answered, and a cooldown from now.
    pub fn step_down(&mut self, now: T, cooldown: Duration) -> Vec<Command<T>> {
        match self.phase {
            Phase::Leading => {
                self.phase = Phase::HandingOver(Then::CoolDown(cooldown));
                let mut out = handover(RevokeReason::SteppedDown);
                out.push(Command::ReplyStepDown);
                out
            }
            Phase::CoolingDown { .. } => vec![Command::ReplyStepDown],
            Phase::HandingOver(_) | Phase::Stopped => Vec::new(),
            Phase::Attempting | Phase::Candidate | Phase::Waiting { .. } => {
                let mut out = if self.phase == Phase::Attempting { vec![Command::Abandon] } else { Vec::new() };
                let until = now + cooldown;
                self.phase = Phase::CoolingDown { until };
                out.extend([Command::ReplyStepDown, Command::Status(Status::CoolingDown(until))]);
                out
            }
        }
    }

    /// The term ended on its own (deadline, taken over, session expired; H3): the task is
    /// aborted at once and `on_revoked` delivered; the election attempts again after the
    /// candidate delay (K1; `unit` as in [`attempt_ended`](Self::attempt_ended)).
    pub fn term_lost(&mut self, now: T, reason: RevokeReason, unit: impl FnOnce() -> f64) -> Vec<Command<T>> {
        if self.phase != Phase::Leading {
            return Vec::new();
        }
        self.phase = Phase::Waiting { until: now + self.timing.candidate_delay(unit()) };
        vec![Command::AbortTask, Command::Status(Status::Candidate), Command::DeliverRevoked(reason), Command::Flush]
    }

    /// The leader task returned (or failed, or panicked): the election steps down in the H1
    /// order and attempts again after the candidate delay.
    pub fn task_returned(&mut self, _now: T) -> Vec<Command<T>> {
        if self.phase != Phase::Leading {
            return Vec::new();
        }
        self.phase = Phase::HandingOver(Then::Contend);
        handover(RevokeReason::SteppedDown)
    }

    /// The shell executed a handover's commands at `now` (`unit` as in
    /// [`attempt_ended`](Self::attempt_ended)).
    pub fn handed_over(&mut self, now: T, unit: impl FnOnce() -> f64) -> Vec<Command<T>> {
        let Phase::HandingOver(then) = self.phase else { return Vec::new() };
        match then {
            Then::Contend => {
                self.phase = Phase::Waiting { until: now + self.timing.candidate_delay(unit()) };
                Vec::new()
            }
            Then::CoolDown(d) => {
                let until = now + d;
                self.phase = Phase::CoolingDown { until };
                vec![Command::Status(Status::CoolingDown(until))]
            }
            Then::Stop => {
                self.phase = Phase::Stopped;
                vec![Command::Stopped]
            }
        }
    }
}

/// H1: revoke and signal; wait for the task or the deadline; release with the token; deliver
/// `on_revoked`; wait until it ran. `reason` is the one the term ends with unless it was lost
/// meanwhile (the shell then delivers the reason it was lost with).
fn handover<T>(reason: RevokeReason) -> Vec<Command<T>> {
    vec![
        Command::Revoke(reason),
        Command::AwaitTask,
        Command::Release,
        Command::Status(Status::Candidate),
        Command::DeliverRevoked(reason),
        Command::Flush,
    ]
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::SimbaConfig;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn machine() -> (ElectionMachine<Instant>, Instant) {
        (ElectionMachine::new(Timing::new(SimbaConfig::default())), Instant::now())
    }

    fn leading() -> (ElectionMachine<Instant>, Instant) {
        let (mut m, t0) = machine();
        m.session_live(t0);
        m.attempt_ended(t0, true, || 0.0);
        (m, t0)
    }

    /// K3, K1: a candidate attempts once a session is live, one attempt at a time; a lost
    /// attempt waits `renew_interval / 2 + jitter` (2.5 s + 0.5 * 2.5 s here), sooner on a
    /// release heard (K2).
    #[test]
    fn k1_k3_attempt_then_wait_with_jitter() {
        let (mut m, t0) = machine();
        assert!(m.wants_session());
        assert_eq!(m.session_live(t0), vec![Command::Attempt]);
        assert_eq!(m.session_live(t0), vec![], "K3: one attempt in flight");
        assert_eq!(m.attempt_ended(t0, false, || 0.5), vec![]);
        assert_eq!(m.next_wakeup(), Some(t0 + ms(3_750)));
        assert_eq!(m.tick(t0 + ms(3_749)), vec![]);
        assert!(!m.wants_session());
        m.tick(t0 + ms(3_750));
        assert!(m.wants_session());
        m.session_live(t0 + ms(3_750));
        m.attempt_ended(t0 + ms(3_760), false, || 0.0);
        m.nudge(t0 + ms(3_800));
        assert_eq!(m.session_live(t0 + ms(3_800)), vec![Command::Attempt], "K2: a release heard ends the wait");
    }

    /// A won and adopted attempt leads: `on_elected` and the task, then the status.
    #[test]
    fn adopted_win_leads() {
        let (mut m, t0) = machine();
        m.session_live(t0);
        assert_eq!(m.attempt_ended(t0, true, || 0.0), vec![Command::Elect]);
        assert!(m.leading());
    }

    /// H1 for `stop()`: revoke, wait for the task (or the deadline), release with the token,
    /// `on_revoked(Stopped)`, flush, then the end (L3), which answers the stop.
    #[test]
    fn h1_stop_hands_over_in_order() {
        let (mut m, t0) = leading();
        assert_eq!(
            m.stop(t0),
            vec![
                Command::Revoke(RevokeReason::Stopped),
                Command::AwaitTask,
                Command::Release,
                Command::Status(Status::Candidate),
                Command::DeliverRevoked(RevokeReason::Stopped),
                Command::Flush,
            ]
        );
        assert!(m.handing_over());
        assert_eq!(m.stop(t0), vec![], "a second stop during the handover waits for its end");
        assert_eq!(m.handed_over(t0 + ms(10), || 0.0), vec![Command::Stopped]);
        assert!(m.stopped());
    }

    /// H1, H4 for `step_down(d)`: the same order with `SteppedDown`, the answer after the
    /// flush, and the cooldown counted from the handover's end.
    #[test]
    fn h4_step_down_hands_over_then_cools_down() {
        let (mut m, t0) = leading();
        let out = m.step_down(t0, ms(2_000));
        assert_eq!(out[0], Command::Revoke(RevokeReason::SteppedDown));
        assert_eq!(out[4], Command::DeliverRevoked(RevokeReason::SteppedDown));
        assert_eq!(out.last(), Some(&Command::ReplyStepDown));
        assert_eq!(m.handed_over(t0 + ms(300), || 0.0), vec![Command::Status(Status::CoolingDown(t0 + ms(2_300)))]);
        assert_eq!(m.session_live(t0 + ms(400)), vec![], "no attempt while cooling down");
        assert_eq!(m.step_down(t0 + ms(500), ms(9_000)), vec![Command::ReplyStepDown], "answered, nothing changes");
        assert_eq!(m.tick(t0 + ms(2_300)), vec![Command::Status(Status::Candidate)]);
        assert_eq!(m.session_live(t0 + ms(2_300)), vec![Command::Attempt]);
    }

    /// H4 while not leading: an attempt in flight is abandoned (K3 keeps it in flight until
    /// its reply), the step-down answered at once, the cooldown from now.
    #[test]
    fn h4_step_down_while_attempting() {
        let (mut m, t0) = machine();
        m.session_live(t0);
        assert_eq!(
            m.step_down(t0 + ms(5), ms(1_000)),
            vec![Command::Abandon, Command::ReplyStepDown, Command::Status(Status::CoolingDown(t0 + ms(1_005)))]
        );
        assert_eq!(m.attempt_ended(t0 + ms(6), true, || 0.0), vec![], "the abandoned attempt's end changes nothing");
    }

    /// H2 lives in the shell (no task: `AwaitTask` waits for nothing); H3: a term lost any
    /// other way aborts the task at once, delivers `on_revoked` with that reason, no release;
    /// the next attempt after the candidate delay (K1).
    #[test]
    fn h3_lost_term_does_not_wait() {
        let (mut m, t0) = leading();
        assert_eq!(
            m.term_lost(t0, RevokeReason::TakenOver, || 0.0),
            vec![
                Command::AbortTask,
                Command::Status(Status::Candidate),
                Command::DeliverRevoked(RevokeReason::TakenOver),
                Command::Flush
            ]
        );
        assert_eq!(m.next_wakeup(), Some(t0 + ms(2_500)));
        m.tick(t0 + ms(2_500));
        assert!(m.wants_session());
    }

    /// A task that returns steps down in the H1 order and attempts again after the delay.
    #[test]
    fn task_return_steps_down() {
        let (mut m, t0) = leading();
        assert_eq!(m.task_returned(t0)[0], Command::Revoke(RevokeReason::SteppedDown));
        assert_eq!(m.handed_over(t0 + ms(100), || 1.0), vec![]);
        assert_eq!(m.next_wakeup(), Some(t0 + ms(100) + ms(5_000)));
    }

    /// L6: `on_elected` undeliverable: revoked and released, no `on_revoked`, and one lease
    /// period (15 s) out of contention.
    #[test]
    fn l6_undeliverable_elected_gives_the_lease_up() {
        let (mut m, t0) = leading();
        assert_eq!(m.elect_failed(t0), vec![Command::Revoke(RevokeReason::SteppedDown), Command::Release]);
        assert_eq!(
            m.handed_over(t0 + ms(20), || 0.0),
            vec![Command::Status(Status::CoolingDown(t0 + ms(20) + Duration::from_secs(15)))]
        );
        assert_eq!(m.next_wakeup(), Some(t0 + ms(20) + Duration::from_secs(15)));
    }

    /// L3: a stop while not leading ends at once (an attempt in flight abandoned); nothing
    /// happens after.
    #[test]
    fn l3_stop_while_contending() {
        let (mut m, t0) = machine();
        m.session_live(t0);
        assert_eq!(m.stop(t0), vec![Command::Abandon, Command::Stopped]);
        assert_eq!(m.session_live(t0), vec![]);
        assert_eq!(m.step_down(t0, ms(1)), vec![]);
        let (mut m, t0) = machine();
        assert_eq!(m.stop(t0), vec![Command::Stopped]);
    }
}
