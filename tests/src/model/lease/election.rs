//! The node's elections, driven by the engine's own machine
//! (`simba_core::election::ElectionMachine`) as the engine's contender (`engine::contender`)
//! drives it: the model feeds it the events the contender waits for (a live session, an
//! attempt's end, a new session, the clock, a step-down, the term lost, the task's return) and
//! executes the commands it returns, in order, waiting at `AwaitTask` for the task or the
//! term's deadline (H1, H5). The machine's phase is kept in the model's compact [`EPhase`]; for
//! each event the machine is rebuilt from it by replaying the core's own transitions that lead
//! there, fed the event at the node's clock now, and its phase is read back through its public
//! queries. Nothing of the election's rules (K1, K3, H1-H5) is written here: which command
//! comes when, and what the machine does next, is the core's answer.

use std::time::Duration;

use simba_core::RevokeReason;
use simba_core::election::{Command, ElectionMachine, Status};

use super::{LeaseModel, Log, slot_of};
use crate::model::clock::{NodeTime, duration};
use crate::model::config::Invariant;
use crate::model::explore::Violation;
use crate::model::state::*;

/// An event the contender feeds its machine.
type Event<'a> = &'a dyn Fn(&mut ElectionMachine<NodeTime>) -> Vec<Command<NodeTime>>;

impl LeaseModel {
    /// The engine's election machine in `phase`, rebuilt by replaying the core's transitions
    /// that lead there (jitter 0: the model's candidate delay is `renew_interval / 2`).
    pub(super) fn election_machine(&self, phase: EPhase) -> ElectionMachine<NodeTime> {
        let now = NodeTime::NOW;
        let mut m = ElectionMachine::new(self.timing);
        let lead = |m: &mut ElectionMachine<NodeTime>| {
            m.session_live(now);
            m.attempt_ended(now, true, || 0.0);
        };
        match phase {
            EPhase::Candidate => {}
            EPhase::Attempting => {
                m.session_live(now);
            }
            EPhase::Waiting(u) => {
                m.session_live(now);
                m.attempt_ended(NodeTime::at(u - self.candidate_delay_units()), false, || 0.0);
            }
            EPhase::CoolingDown(u) => {
                m.step_down(NodeTime::at(u), Duration::ZERO);
            }
            EPhase::Leading => lead(&mut m),
            EPhase::HandingOver(then) => {
                lead(&mut m);
                match then {
                    Then::Contend => m.task_returned(now),
                    Then::CoolDown(d) => m.step_down(now, duration(d)),
                    Then::Stop => m.stop(now),
                };
            }
            EPhase::Stopped => {
                m.stop(now);
            }
        }
        m
    }

    /// The candidate delay with jitter 0, in whole units.
    fn candidate_delay_units(&self) -> i16 {
        let d = self.timing.candidate_delay(0.0);
        assert_eq!(d.subsec_nanos(), 0, "the model's candidate delay is a whole number of units");
        i16::try_from(d.as_secs()).expect("the candidate delay fits in i16")
    }

    /// Feeds `event` to node `i`'s machine of name `n` (with the configuration's mutant
    /// switched on inside the core), stores the phase it reaches, and executes the commands as
    /// the contender does; then, when a handover's commands are all done, `handed_over`.
    pub(super) fn feed(
        &self,
        s: &mut State,
        i: usize,
        n: usize,
        event: Event<'_>,
        log: &mut Log,
    ) -> Option<Violation<Invariant>> {
        let mut m = self.election_machine(s.nodes[i].elect[n].phase);
        let commands = self.in_core(|| event(&mut m));
        s.nodes[i].elect[n].phase = read_phase(&m);
        self.execute(s, i, n, &commands, 0, log)
    }

    /// The list of commands of the handover that leads to `then`, asked of the core again: the
    /// machine rebuilt leading and fed the same event (the model keeps only how far the shell
    /// got in it).
    fn handover_list(&self, then: Then) -> Vec<Command<NodeTime>> {
        let mut m = self.election_machine(EPhase::Leading);
        self.in_core(|| match then {
            Then::Contend => m.task_returned(NodeTime::NOW),
            Then::CoolDown(d) => m.step_down(NodeTime::NOW, duration(d)),
            Then::Stop => m.stop(NodeTime::NOW),
        })
    }

    /// Executes `commands` from index `from` in order for node `i`'s election of name `n`, as
    /// `Contender::execute` and `hand_over` do; an `AwaitTask` whose task still runs keeps the
    /// index of the next command for [`resume`](Self::resume).
    fn execute(
        &self,
        s: &mut State,
        i: usize,
        n: usize,
        commands: &[Command<NodeTime>],
        from: usize,
        log: &mut Log,
    ) -> Option<Violation<Invariant>> {
        let mut violation = None;
        for (k, command) in commands.iter().enumerate().skip(from) {
            match *command {
                Command::Attempt => self.begin_attempt(s, i, n, log),
                Command::Abandon => self.abandon(s, i, n, log),
                Command::Elect => {
                    if self.cfg.tasks {
                        s.nodes[i].elect[n].task = true;
                        log.note(|_| format!("n{i}: elected for {}; its task starts", name_of(n as u8)));
                    }
                }
                Command::Revoke(reason) => {
                    let node = &mut s.nodes[i];
                    if node.terms[n] != 0 {
                        node.elect[n].revoked = true;
                        node.elect[n].abort_at = node.session.map_or(0, |ss| ss.deadline);
                        log.note(|_| format!("n{i}: term {}#{} revoked ({reason:?})", name_of(n as u8), node.terms[n]));
                    }
                }
                Command::AwaitTask => {
                    let e = &mut s.nodes[i].elect[n];
                    if e.task && e.abort_at > 0 {
                        e.pending = u8::try_from(k + 1).expect("a short handover list");
                        log.note(|_| format!("n{i}: waits for the task of {} (H1)", name_of(n as u8)));
                        return violation;
                    }
                    if e.task {
                        e.task = false;
                        log.note(|_| format!("n{i}: the term's deadline passed: task aborted (H5)"));
                    }
                }
                Command::AbortTask => {
                    if std::mem::take(&mut s.nodes[i].elect[n].task) {
                        log.note(|_| format!("n{i}: task of {} aborted (H3)", name_of(n as u8)));
                    }
                }
                Command::Release => {
                    let v = self.handover_release(s, i, n, log);
                    violation = violation.or(v);
                }
                // The status, the callbacks, the replies and the end are the election's own
                // bookkeeping; the model has nothing to do for them.
                Command::Status(_)
                | Command::DeliverRevoked(_)
                | Command::Flush
                | Command::ReplyStepDown
                | Command::Stopped
                | Command::GiveUp => {}
            }
        }
        if matches!(s.nodes[i].elect[n].phase, EPhase::HandingOver(_)) {
            let v = self.feed(s, i, n, &|m| m.handed_over(NodeTime::NOW, || 0.0), log);
            violation = violation.or(v);
        }
        violation
    }

    /// The task node `i` waited for at `AwaitTask` returned or was aborted: the handover goes
    /// on with the commands after it.
    pub(super) fn resume(&self, s: &mut State, i: usize, n: usize, log: &mut Log) -> Option<Violation<Invariant>> {
        let e = &mut s.nodes[i].elect[n];
        e.task = false;
        let from = usize::from(std::mem::take(&mut e.pending));
        let EPhase::HandingOver(then) = e.phase else { return None };
        self.execute(s, i, n, &self.handover_list(then), from, log)
    }

    /// `Release` of a handover: T7 with the term's token, unless the term was lost meanwhile
    /// (H3: the session shell dropped it); the term is forgotten either way. Judged here: the
    /// term was revoked first (T7) and its task no longer runs (H1, H5).
    fn handover_release(&self, s: &mut State, i: usize, n: usize, log: &mut Log) -> Option<Violation<Invariant>> {
        let node = s.nodes[i];
        let e = node.elect[n];
        s.nodes[i].elect[n].revoked = false;
        let (Some(ss), token) = (node.session, node.terms[n]) else { return None };
        if token == 0 {
            return None;
        }
        s.nodes[i].terms[n] = 0;
        self.release_won(s, i, (ss.sid, n as u8, token), "handover (H1, T7)", log);
        let name = name_of(n as u8);
        if !e.revoked {
            return Some(Violation {
                invariant: Invariant::HandoverOrder,
                detail: format!("n{i} released {name}#{token} before revoking the term (T7)"),
            });
        }
        (e.task && e.abort_at > 0).then(|| Violation {
            invariant: Invariant::HandoverOrder,
            detail: format!("n{i} released {name}#{token} while the term's task still runs (H1, H5)"),
        })
    }

    /// `Attempt`: the acquisition is sent for the live session once the K3 slot is free (the
    /// engine's attempt waits for an abandoned one); [`election_timers`](Self::election_timers)
    /// sends it later otherwise.
    pub(super) fn begin_attempt(&self, s: &mut State, i: usize, n: usize, log: &mut Log) {
        let node = &mut s.nodes[i];
        if !slot_of(node.attempts[n]).may_begin() || node.terms[n] != 0 {
            return;
        }
        let Some(ss) = node.session.filter(|ss| ss.deadline > 0) else { return };
        let name = n as u8;
        node.attempts[n] =
            Some(Attempt { sid: ss.sid, expires: self.cfg.renew_interval.min(ss.deadline), detached: false });
        s.net.push(Msg { node: i as u8, body: Body::Acquire { sid: ss.sid, name }, fate: Fate::Live, age: 0 });
        log.note(|_| format!("n{i}: sends acquire({}, s{})", name_of(name), ss.sid));
    }

    /// `Abandon`: the acquisition in flight is abandoned; the engine's K3 slot
    /// (`simba_core::attempt::AttemptSlot`) keeps it in flight until its reply or timeout.
    fn abandon(&self, s: &mut State, i: usize, n: usize, log: &mut Log) {
        let Some(att) = s.nodes[i].attempts[n].filter(|a| !a.detached) else { return };
        let mut slot = slot_of(Some(att));
        self.in_core(|| slot.abandon());
        s.nodes[i].attempts[n] = match slot {
            simba_core::attempt::AttemptSlot::Free => None,
            _ => Some(Attempt { detached: slot == simba_core::attempt::AttemptSlot::Abandoned, ..att }),
        };
        let name = n as u8;
        for m in &mut s.net {
            let of_it = matches!(m.body, Body::Acquire { name: x, .. } | Body::AcqReply { name: x, .. } if x == name);
            if usize::from(m.node) == i && m.fate == Fate::Live && of_it {
                m.fate = Fate::Detached;
            }
        }
        log.note(|_| format!("n{i}: attempt for {} abandoned", name_of(name)));
    }

    /// What the contender's clock and session watches do for a running node: a due retry
    /// or cooldown ends ([`ElectionMachine::tick`]); with the engine's timers
    /// ([`Schedule::Timers`](crate::model::Schedule::Timers)) a candidate attempts once a
    /// session is live, and an attempt waiting for its K3 slot is sent once the slot is free
    /// (or ends at once when no session is live any more).
    pub(super) fn election_timers(&self, s: &mut State, i: usize, timers: bool, log: &mut Log) {
        for n in 0..self.cfg.names {
            for _ in 0..4 {
                let live = s.nodes[i].session.is_some_and(|ss| ss.deadline > 0);
                let node = &s.nodes[i];
                let unsent = node.attempts[n].is_none() && node.terms[n] == 0;
                match node.elect[n].phase {
                    EPhase::Waiting(0) | EPhase::CoolingDown(0) => {
                        self.feed(s, i, n, &|m| m.tick(NodeTime::NOW), log);
                    }
                    EPhase::Candidate if timers && live => {
                        self.feed(s, i, n, &|m| m.session_live(NodeTime::NOW), log);
                    }
                    EPhase::Attempting if timers && unsent && live => self.begin_attempt(s, i, n, log),
                    EPhase::Attempting if timers && unsent => {
                        self.feed(s, i, n, &|m| m.attempt_ended(NodeTime::NOW, false, || 0.0), log);
                    }
                    _ => break,
                }
            }
        }
    }

    /// A step-down (H4, with the configuration's cooldown) or a task's return of a running
    /// node; `None` when it is not enabled. A step-down only while the election leads or has an
    /// acquisition in flight (one while waiting or cooling down only moves the next attempt,
    /// which the any-instant schedule covers); a task's return while its term leads (the
    /// election steps down) or while a handover waits for it.
    pub(super) fn election_action(
        &self,
        s: &mut State,
        a: Action,
        log: &mut Log,
    ) -> Option<Option<Violation<Invariant>>> {
        let (Action::StepDown(i, name) | Action::TaskReturns(i, name)) = a else { return None };
        let (iu, k) = (usize::from(i), usize::from(name));
        let node = s.nodes[iu];
        let phase = node.elect[k].phase;
        if let Action::StepDown(..) = a {
            let attempting = node.attempts[k].is_some_and(|a| !a.detached);
            if !(phase == EPhase::Leading || (phase == EPhase::Attempting && attempting)) {
                return None;
            }
            log.note(|_| format!("n{i}: steps down from {} (H4)", name_of(name)));
            let cooldown = duration(self.cfg.cooldown);
            return Some(self.feed(s, iu, k, &|m| m.step_down(NodeTime::NOW, cooldown), log));
        }
        if !node.elect[k].task {
            return None;
        }
        log.note(|_| format!("n{i}: the task of {} returns", name_of(name)));
        match phase {
            EPhase::Leading => {
                s.nodes[iu].elect[k].task = false;
                Some(self.feed(s, iu, k, &|m| m.task_returned(NodeTime::NOW), log))
            }
            EPhase::HandingOver(_) => Some(self.resume(s, iu, k, log)),
            _ => None,
        }
    }

    /// The term of node `i` for name `n` was lost (its session ended, or a reconcile found it
    /// taken over): the machine is told if it leads (H3); a handover under way finds the term
    /// gone at its `Release`.
    pub(super) fn term_lost(&self, s: &mut State, i: usize, n: usize, reason: RevokeReason, log: &mut Log) {
        s.nodes[i].terms[n] = 0;
        s.nodes[i].elect[n].revoked = false;
        if s.nodes[i].elect[n].phase == EPhase::Leading {
            self.feed(s, i, n, &|m| m.term_lost(NodeTime::NOW, reason, || 0.0), log);
        }
    }
}

/// The phase of `m`, read back through its public queries; a handover's continuation by
/// probing a copy with `handed_over`.
pub(super) fn read_phase(m: &ElectionMachine<NodeTime>) -> EPhase {
    let at = |t: Option<NodeTime>| t.map_or(0, |t| t.units_up().max(0));
    if m.stopped() {
        EPhase::Stopped
    } else if m.handing_over() {
        let mut probe = m.clone();
        EPhase::HandingOver(match probe.handed_over(NodeTime::NOW, || 0.0).first() {
            Some(Command::Stopped) => Then::Stop,
            Some(Command::Status(Status::CoolingDown(until))) => Then::CoolDown(until.units_up()),
            _ => Then::Contend,
        })
    } else if m.cooling_down() {
        EPhase::CoolingDown(at(m.next_wakeup()))
    } else if m.leading() {
        EPhase::Leading
    } else if m.attempting() {
        EPhase::Attempting
    } else if m.wants_session() {
        EPhase::Candidate
    } else {
        EPhase::Waiting(at(m.next_wakeup()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Config, LeaseModel};

    /// The machine rebuilt from each compact phase reads back as that phase, and the core's
    /// handover lists have the shape the model executes (one `AwaitTask`, then the release).
    #[test]
    fn every_phase_rebuilds_and_reads_back() {
        let model = LeaseModel::new(Config::election());
        let phases = [
            EPhase::Candidate,
            EPhase::Attempting,
            EPhase::Waiting(0),
            EPhase::Waiting(3),
            EPhase::CoolingDown(0),
            EPhase::CoolingDown(2),
            EPhase::Leading,
            EPhase::HandingOver(Then::Contend),
            EPhase::HandingOver(Then::CoolDown(0)),
            EPhase::HandingOver(Then::CoolDown(3)),
            EPhase::HandingOver(Then::Stop),
            EPhase::Stopped,
        ];
        for phase in phases {
            assert_eq!(read_phase(&model.election_machine(phase)), phase);
        }
        for then in [Then::Contend, Then::CoolDown(3), Then::Stop] {
            let list = model.handover_list(then);
            let wait = list.iter().position(|c| *c == Command::AwaitTask);
            let release = list.iter().position(|c| *c == Command::Release);
            assert!(wait.is_some() && wait < release, "{then:?}: {list:?}");
        }
    }
}
