//! The election machine (rules K1, K3, H1-H5, L3, L6): when an election attempts, what a won
//! or lost attempt leads to, and the exact order of a handover. The shell feeds it the events
//! it waits for (a live session, an attempt's end, a release heard, the clock, a command, the
//! term lost, the task's return) and executes the commands it returns, in order, awaiting
//! each; the machine holds no term, task or channel, only the phase.
//!
//! One machine serves elections, locks and partition workers alike ([`Contention`]), and one
//! shell drives it (the engine's contender in `simba`): a started election runs an
//! [`ElectionMachine::new`] for as long as it is started; a lock's acquisition runs an
//! [`ElectionMachine::lock`] (or [`ElectionMachine::lock_once`], the one attempt partition
//! groups make) until it wins or gives up, and its guard hands the term over with the same
//! machine's H1 commands ([`ElectionMachine::hand_over`]), which is also how a partition
//! worker is handed over.

use std::time::Duration;

use super::mutants::{Mutant, active};
use super::{Moment, RevokeReason, Timing};

/// What the election's status shows (`simba::ElectionState`); the leader status is set by the
/// shell with the term when it carries out [`Command::Elect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status<T> {
    /// Contending.
    Candidate,
    /// Out of contention until the instant (H4, L6).
    CoolingDown(T),
}

/// How long a machine contends for its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contention<T> {
    /// An election: until it is stopped; after each term it contends again (K1).
    Election,
    /// A lock's acquisition: until it wins, or until `until` when one is set (then
    /// [`Command::GiveUp`]).
    Lock {
        /// The instant the caller stops waiting (`try_acquire`'s timeout), if any.
        until: Option<T>,
    },
    /// A lock's one attempt (`try_acquire_now`, partition groups): one acquisition if a
    /// session is live now; [`Command::GiveUp`] when there is none or the attempt loses.
    Once,
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
    /// ended it and every command still queued, then the actor exits (L3). For a lock: its
    /// term was handed over; the name is free again.
    Stopped,
    /// A lock stops contending without a term: its `until` passed (an attempt in flight was
    /// abandoned first), or its one attempt found no live session or lost. Its caller gets
    /// no lock. The machine is stopped.
    GiveUp,
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
    contention: Contention<T>,
    phase: Phase<T>,
}

impl<T: Moment> ElectionMachine<T> {
    /// A started election: a candidate.
    pub fn new(timing: Timing) -> Self {
        ElectionMachine { timing, contention: Contention::Election, phase: Phase::Candidate }
    }

    /// A lock's acquisition: a candidate that contends until it wins or until `until`.
    pub fn lock(timing: Timing, until: Option<T>) -> Self {
        ElectionMachine { timing, contention: Contention::Lock { until }, phase: Phase::Candidate }
    }

    /// A lock's one attempt: a candidate that attempts once if a session is live now.
    pub fn lock_once(timing: Timing) -> Self {
        ElectionMachine { timing, contention: Contention::Once, phase: Phase::Candidate }
    }

    /// A lock's machine as its acquisition leaves it once it won: leading, ready for
    /// [`hand_over`](Self::hand_over). A held lock keeps no machine (its size, about 150
    /// bytes, would be paid by every lock held: P7 measured it), and its release builds this
    /// one; a won acquisition's machine is in this state whatever its `until` was, since a
    /// lock's handover does not read it.
    pub fn lock_leading(timing: Timing) -> Self {
        ElectionMachine { timing, contention: Contention::Lock { until: None }, phase: Phase::Leading }
    }

    /// How this machine contends.
    pub fn contention(&self) -> Contention<T> {
        self.contention
    }

    /// A lock's `until`, if it has one.
    fn give_up_at(&self) -> Option<T> {
        match self.contention {
            Contention::Lock { until } => until,
            Contention::Election | Contention::Once => None,
        }
    }

    /// The machine stops contending without a term ([`Command::GiveUp`]).
    fn give_up(&mut self) -> Vec<Command<T>> {
        let abandon = self.phase == Phase::Attempting;
        self.phase = Phase::Stopped;
        if abandon { vec![Command::Abandon, Command::GiveUp] } else { vec![Command::GiveUp] }
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

    /// When [`tick`](Self::tick) has something to do: the next attempt (K1), the end of a
    /// cooldown (H4), or a lock's `until` while it waits for a session or an attempt.
    pub fn next_wakeup(&self) -> Option<T> {
        match self.phase {
            Phase::Waiting { until } | Phase::CoolingDown { until } => Some(until),
            Phase::Candidate | Phase::Attempting => self.give_up_at(),
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

    /// A lock's one attempt found no live session: it gives up. Nothing for an election or a
    /// waiting lock (they wait for a session).
    pub fn no_session(&mut self, _now: T) -> Vec<Command<T>> {
        if self.phase != Phase::Candidate || self.contention != Contention::Once {
            return Vec::new();
        }
        self.give_up()
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
        // The attempt ended: nothing is left to abandon if the lock gives up now.
        self.phase = Phase::Candidate;
        match self.contention {
            Contention::Once => self.give_up(),
            Contention::Lock { until: Some(until) } if now >= until => self.give_up(),
            Contention::Lock { until } => {
                let retry_at = now + self.timing.candidate_delay(unit());
                self.phase = Phase::Waiting { until: until.map_or(retry_at, |u| retry_at.min(u)) };
                Vec::new()
            }
            Contention::Election => {
                self.phase = Phase::Waiting { until: now + self.timing.candidate_delay(unit()) };
                Vec::new()
            }
        }
    }

    /// L6: `on_elected` could not be dispatched: nobody knows the term, so it is revoked and
    /// released without an `on_revoked`, and the election gives the lease up for one lease
    /// period.
    pub fn elect_failed(&mut self, _now: T) -> Vec<Command<T>> {
        if self.phase != Phase::Leading {
            return Vec::new();
        }
        self.phase = Phase::HandingOver(Then::CoolDown(self.timing.config.lease_duration));
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

    /// The clock reached `now`: a retry comes due (K1), a cooldown ends (H4), or a lock's
    /// `until` passed before it won (an attempt in flight is abandoned: K3 keeps it in flight
    /// until its reply, and a win it brings is released, K4).
    pub fn tick(&mut self, now: T) -> Vec<Command<T>> {
        if let Some(until) = self.give_up_at()
            && now >= until
            && matches!(self.phase, Phase::Candidate | Phase::Attempting | Phase::Waiting { .. })
        {
            return self.give_up();
        }
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
    pub fn stop(&mut self, now: T) -> Vec<Command<T>> {
        match self.phase {
            Phase::Leading => self.hand_over(now, RevokeReason::Stopped),
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

    /// Hands the term over in the H1 order with `reason` and ends the machine once done
    /// ([`handed_over`](Self::handed_over) answers [`Command::Stopped`]): a lock's release
    /// (`Stopped`), a partition handed over or whose worker returned (`SteppedDown`). Nothing
    /// when not leading. An election's `stop()` is this with `Stopped`.
    pub fn hand_over(&mut self, _now: T, reason: RevokeReason) -> Vec<Command<T>> {
        if self.phase != Phase::Leading {
            return Vec::new();
        }
        self.phase = Phase::HandingOver(Then::Stop);
        handover(reason)
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
    let mut list = vec![
        Command::Revoke(reason),
        Command::AwaitTask,
        Command::Release,
        Command::Status(Status::Candidate),
        Command::DeliverRevoked(reason),
        Command::Flush,
    ];
    if active(Mutant::ReleaseBeforeTask) {
        list.swap(1, 2);
    }
    list
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::TimingConfig;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn machine() -> (ElectionMachine<Instant>, Instant) {
        (ElectionMachine::new(Timing::new(TimingConfig::default())), Instant::now())
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

    fn lock_until(until: Option<Duration>) -> (ElectionMachine<Instant>, Instant) {
        let t0 = Instant::now();
        (ElectionMachine::lock(Timing::new(TimingConfig::default()), until.map(|d| t0 + d)), t0)
    }

    /// K1, K3 for a lock: the same attempts and candidate delay as an election, the retry cut
    /// at the lock's `until`; at `until` it gives up, abandoning an attempt in flight (K3 keeps
    /// it in flight until its reply; a win it brings is released, K4).
    #[test]
    fn k1_k3_lock_contends_until_its_deadline() {
        let (mut m, t0) = lock_until(Some(ms(3_000)));
        assert_eq!(m.contention(), Contention::Lock { until: Some(t0 + ms(3_000)) });
        assert_eq!(m.next_wakeup(), Some(t0 + ms(3_000)), "waiting for a session ends at until");
        assert_eq!(m.session_live(t0), vec![Command::Attempt]);
        assert_eq!(m.next_wakeup(), Some(t0 + ms(3_000)), "an attempt in flight ends at until");
        assert_eq!(m.attempt_ended(t0 + ms(10), false, || 0.0), vec![]);
        assert_eq!(m.next_wakeup(), Some(t0 + ms(2_510)), "K1: renew/2 after the lost attempt");
        assert_eq!(m.tick(t0 + ms(2_510)), vec![]);
        assert_eq!(m.session_live(t0 + ms(2_510)), vec![Command::Attempt]);
        assert_eq!(m.attempt_ended(t0 + ms(2_520), false, || 1.0), vec![]);
        assert_eq!(m.next_wakeup(), Some(t0 + ms(3_000)), "the retry is cut at until");
        assert_eq!(m.tick(t0 + ms(3_000)), vec![Command::GiveUp]);
        assert!(m.stopped());
        // At until with an attempt in flight: abandoned, then given up.
        let (mut m, t0) = lock_until(Some(ms(100)));
        m.session_live(t0);
        assert_eq!(m.tick(t0 + ms(99)), vec![]);
        assert_eq!(m.tick(t0 + ms(100)), vec![Command::Abandon, Command::GiveUp]);
        assert_eq!(m.attempt_ended(t0 + ms(101), true, || 0.0), vec![], "the abandoned attempt changes nothing");
        // A lost attempt that ends at or after until gives up at once.
        let (mut m, t0) = lock_until(Some(ms(100)));
        m.session_live(t0);
        assert_eq!(m.attempt_ended(t0 + ms(100), false, || 0.0), vec![Command::GiveUp]);
        // Without until: it waits and retries for as long as it takes; K2 ends a wait.
        let (mut m, t0) = lock_until(None);
        assert_eq!(m.next_wakeup(), None);
        m.session_live(t0);
        m.attempt_ended(t0, false, || 0.0);
        assert_eq!(m.tick(t0 + Duration::from_secs(3600)), vec![]);
        m.session_live(t0);
        m.attempt_ended(t0, false, || 0.0);
        m.nudge(t0 + ms(1));
        assert_eq!(m.session_live(t0 + ms(1)), vec![Command::Attempt], "K2: a release heard ends the wait");
        assert_eq!(m.attempt_ended(t0 + ms(2), true, || 0.0), vec![Command::Elect]);
        assert!(m.leading());
    }

    /// A lock's one attempt (partition groups): no live session or a lost attempt gives up at
    /// once, never waits; a win leads.
    #[test]
    fn k3_lock_once_attempts_once() {
        let timing = Timing::new(TimingConfig::default());
        let t0 = Instant::now();
        let mut m = ElectionMachine::lock_once(timing);
        assert_eq!(m.no_session(t0), vec![Command::GiveUp]);
        let mut m = ElectionMachine::lock_once(timing);
        assert_eq!(m.session_live(t0), vec![Command::Attempt]);
        assert_eq!(m.next_wakeup(), None, "no deadline: the attempt ends with its reply or D2 timeout");
        assert_eq!(m.attempt_ended(t0, false, || 0.0), vec![Command::GiveUp]);
        let mut m = ElectionMachine::lock_once(timing);
        m.session_live(t0);
        assert_eq!(m.attempt_ended(t0, true, || 0.0), vec![Command::Elect]);
        // An election or a waiting lock waits for a session instead.
        let (mut e, _) = machine();
        assert_eq!(e.no_session(t0), vec![]);
        let (mut l, _) = lock_until(None);
        assert_eq!(l.no_session(t0), vec![]);
    }

    /// H1, H2 for a lock's release and a partition's handover: the election's handover order
    /// with the reason given, then the end; nothing when not leading.
    #[test]
    fn h1_lock_hands_over_in_the_election_order() {
        let (mut m, t0) = lock_until(None);
        assert_eq!(m.hand_over(t0, RevokeReason::Stopped), vec![], "not leading");
        m.session_live(t0);
        m.attempt_ended(t0, true, || 0.0);
        let (mut e, _) = leading();
        assert_eq!(m.hand_over(t0, RevokeReason::Stopped), e.stop(t0), "the same H1 list as an election's stop");
        assert_eq!(m.handed_over(t0 + ms(1), || 0.0), vec![Command::Stopped]);
        let mut p = ElectionMachine::lock_once(Timing::new(TimingConfig::default()));
        p.session_live(t0);
        p.attempt_ended(t0, true, || 0.0);
        assert_eq!(
            p.hand_over(t0, RevokeReason::SteppedDown),
            vec![
                Command::Revoke(RevokeReason::SteppedDown),
                Command::AwaitTask,
                Command::Release,
                Command::Status(Status::Candidate),
                Command::DeliverRevoked(RevokeReason::SteppedDown),
                Command::Flush,
            ]
        );
        assert_eq!(p.hand_over(t0, RevokeReason::Stopped), vec![], "once");
        assert_eq!(p.handed_over(t0, || 0.0), vec![Command::Stopped]);
        assert!(p.stopped());
    }

    /// A held lock's release rebuilds its machine (`lock_leading`): the same handover, for every
    /// reason, as the machine its acquisition left leading, whatever that acquisition's `until`.
    #[test]
    fn h1_a_lock_rebuilt_leading_hands_over_as_its_acquisition_would() {
        let t0 = Instant::now();
        for until in [None, Some(t0 + ms(3_000))] {
            for reason in [RevokeReason::Stopped, RevokeReason::SteppedDown] {
                let mut won = ElectionMachine::lock(Timing::new(TimingConfig::default()), until);
                won.session_live(t0);
                assert_eq!(won.attempt_ended(t0, true, || 0.0), vec![Command::Elect]);
                let mut rebuilt = ElectionMachine::lock_leading(Timing::new(TimingConfig::default()));
                assert!(rebuilt.leading());
                assert_eq!(rebuilt.hand_over(t0, reason), won.hand_over(t0, reason), "{until:?} {reason:?}");
                assert_eq!(rebuilt.handed_over(t0, || 0.0), won.handed_over(t0, || 0.0));
                assert!(rebuilt.stopped() && won.stopped());
            }
        }
    }

    /// Every way a led term ends, from the machine's lists: how many `on_revoked` it delivers,
    /// and where its `Revoke` and `Release` are.
    fn endings() -> Vec<(&'static str, Vec<Command<Instant>>)> {
        let mut out = Vec::new();
        let (mut m, t0) = leading();
        out.push(("stop", m.stop(t0)));
        let (mut m, t0) = leading();
        out.push(("step_down", m.step_down(t0, ms(1_000))));
        let (mut m, t0) = leading();
        out.push(("task_returned", m.task_returned(t0)));
        let (mut m, t0) = leading();
        out.push(("term_lost", m.term_lost(t0, RevokeReason::SessionExpired, || 0.0)));
        let (mut m, t0) = leading();
        out.push(("hand_over", m.hand_over(t0, RevokeReason::SteppedDown)));
        out
    }

    /// T7: in every handover the term is revoked before its lease is released (and a term
    /// lost on its own is not released by the election at all: H3).
    #[test]
    fn t7_revoke_before_release_in_every_ending() {
        for (how, cmds) in endings() {
            let revoke = cmds.iter().position(|c| matches!(c, Command::Revoke(_)));
            let release = cmds.iter().position(|c| *c == Command::Release);
            match (revoke, release) {
                (Some(a), Some(b)) => assert!(a < b, "{how}: {cmds:?}"),
                (_, None) => assert_eq!(how, "term_lost", "only a lost term is not released: {cmds:?}"),
                (None, Some(_)) => panic!("{how}: released without a revoke: {cmds:?}"),
            }
        }
        let (mut m, t0) = leading();
        let l6 = m.elect_failed(t0);
        assert_eq!(l6, vec![Command::Revoke(RevokeReason::SteppedDown), Command::Release], "L6 too");
    }

    /// L1: every term that was elected (`Elect`) gets exactly one `on_revoked`, whichever way
    /// it ends, and after the task was waited for or aborted (H1, H3); L6's undeliverable term
    /// gets none.
    #[test]
    fn l1_every_elected_term_gets_exactly_one_revoked() {
        for (how, cmds) in endings() {
            let delivered = cmds.iter().filter(|c| matches!(c, Command::DeliverRevoked(_))).count();
            assert_eq!(delivered, 1, "{how}: {cmds:?}");
            let task = cmds.iter().position(|c| matches!(c, Command::AwaitTask | Command::AbortTask));
            let revoked = cmds.iter().position(|c| matches!(c, Command::DeliverRevoked(_)));
            assert!(task < revoked, "{how}: the task first: {cmds:?}");
        }
        let (mut m, t0) = leading();
        let l6 = m.elect_failed(t0);
        assert!(!l6.iter().any(|c| matches!(c, Command::DeliverRevoked(_))), "L6: none for an undeliverable term");
    }
    /// The mutant the model checker must catch: the H1 list releases before it waits for the
    /// task (breaks H1, H5).
    #[cfg(simba_mutants)]
    #[test]
    fn h1_mutant_release_before_task_releases_first() {
        let (mut m, t0) = leading();
        let out = crate::mutants::with(Some(Mutant::ReleaseBeforeTask), || m.step_down(t0, ms(0)));
        assert_eq!(&out[..3], &[Command::Revoke(RevokeReason::SteppedDown), Command::Release, Command::AwaitTask]);
        let (mut m, t0) = leading();
        assert_eq!(m.step_down(t0, ms(0))[1], Command::AwaitTask, "off outside `with`");
    }
}
