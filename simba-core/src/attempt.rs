//! The K3 attempt slot, pure: at most one acquisition in flight per election name, and an
//! acquisition the election gave up on keeps the slot until its reply or its timeout, so that
//! its late `Won` (which is released, K4) can never release a term adopted by the next
//! attempt. The engine (`engine::attempt`) asks it before it sends an acquisition and when an
//! attempt is abandoned; the model checker drives the same type. And the first clause of K4,
//! [`answers_current_attempt`]: whether a reply answers the election's current attempt.

use super::mutants::{Mutant, active};

/// The acquisition slot of one election name (K3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum AttemptSlot {
    /// No acquisition in flight: one may start.
    #[default]
    Free,
    /// An acquisition is in flight and the election waits for its result.
    InFlight,
    /// The election gave the acquisition up (a step-down, a stop, a dropped `lock()` future)
    /// before its result came: its reply or its timeout is still to come.
    Abandoned,
}

impl AttemptSlot {
    /// Whether a new acquisition of the name may be sent now (K3: only when none is in
    /// flight, abandoned or not).
    pub fn may_begin(self) -> bool {
        self == AttemptSlot::Free
    }

    /// Takes the slot for a new acquisition; `false` (and no change) when one is in flight.
    pub fn begin(&mut self) -> bool {
        if !self.may_begin() {
            return false;
        }
        *self = AttemptSlot::InFlight;
        true
    }

    /// The election gives up the acquisition in flight before its result came. The slot
    /// stays taken ([`AttemptSlot::Abandoned`]) until [`finished`](AttemptSlot::finished):
    /// the backend may still grant the lease to it. No change unless an acquisition is in
    /// flight.
    pub fn abandon(&mut self) {
        if *self == AttemptSlot::InFlight {
            *self = if active(Mutant::AbandonFreesSlot) { AttemptSlot::Free } else { AttemptSlot::Abandoned };
        }
    }

    /// The acquisition in flight (awaited or abandoned) ended: its reply arrived or its D2
    /// timeout passed. The slot is free.
    pub fn finished(&mut self) {
        *self = AttemptSlot::Free;
    }
}

/// K4, the first clause: whether an acquisition's reply answers the election's current
/// attempt. It does only if the election still awaits that acquisition (`awaited`: it neither
/// abandoned it, K3, nor gave it up at its D2 timeout) and the session it was sent for is the
/// client's session now (`current_session`). Only such a reply may become a term, and then only
/// if [`judge_win`](super::ledger::judge_win) adopts it; a `Won` of any other is released (an
/// abandoned attempt's, whose election no longer waits, and a replaced session's). The engine
/// asks this for every acquisition result (`Shared::settle_attempt` for an awaited one,
/// `Shared::settle_abandoned` for an abandoned one; its D2 timeout cancels the call, so a
/// given-up acquisition's reply never reaches it); the model checker asks it for every reply
/// its network delivers.
pub fn answers_current_attempt(awaited: bool, current_session: bool) -> bool {
    (awaited && current_session) || active(Mutant::AdoptLateReply)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// K4: only a reply the election still awaits, for the session live now, answers the
    /// current attempt.
    #[test]
    fn k4_only_an_awaited_reply_of_the_current_session_answers() {
        assert!(answers_current_attempt(true, true));
        assert!(!answers_current_attempt(false, true), "an abandoned or timed-out attempt's reply");
        assert!(!answers_current_attempt(true, false), "a reply for a session that has ended since");
        assert!(!answers_current_attempt(false, false));
    }

    /// K4: the mutant the model checker must catch (`AdoptLateReply`) takes every reply for an
    /// answer to the current attempt, and only inside `with`.
    #[cfg(simba_mutants)]
    #[test]
    fn k4_mutant_adopt_late_reply_answers_every_reply() {
        let late = Some(Mutant::AdoptLateReply);
        for (awaited, current) in [(true, true), (false, true), (true, false), (false, false)] {
            assert!(crate::mutants::with(late, || answers_current_attempt(awaited, current)));
        }
        assert!(!answers_current_attempt(false, true), "off outside `with`");
        assert!(!crate::mutants::with(Some(Mutant::AbandonFreesSlot), || answers_current_attempt(false, true)));
    }

    /// K3: one acquisition in flight at a time; the next may start once its result came.
    #[test]
    fn k3_one_acquisition_in_flight_per_name() {
        let mut slot = AttemptSlot::default();
        assert_eq!(slot, AttemptSlot::Free);
        assert!(slot.begin());
        assert_eq!(slot, AttemptSlot::InFlight);
        assert!(!slot.may_begin());
        assert!(!slot.begin(), "a second acquisition while one is in flight");
        assert_eq!(slot, AttemptSlot::InFlight);
        slot.finished();
        assert_eq!(slot, AttemptSlot::Free);
        assert!(slot.begin());
    }

    /// K3: an abandoned acquisition keeps the slot until its reply or its timeout, so its late
    /// `Won` cannot release a term adopted by a next attempt.
    #[test]
    fn k3_abandoned_acquisition_keeps_the_slot_until_its_reply() {
        let mut slot = AttemptSlot::InFlight;
        slot.abandon();
        assert_eq!(slot, AttemptSlot::Abandoned);
        assert!(!slot.may_begin());
        assert!(!slot.begin(), "a new acquisition while the abandoned one may still win");
        slot.abandon();
        assert_eq!(slot, AttemptSlot::Abandoned, "abandoning twice changes nothing");
        slot.finished();
        assert_eq!(slot, AttemptSlot::Free);
        assert!(slot.may_begin());
    }

    /// K3: abandoning with nothing in flight changes nothing.
    #[test]
    fn k3_abandon_without_an_acquisition_is_a_no_op() {
        let mut slot = AttemptSlot::Free;
        slot.abandon();
        assert_eq!(slot, AttemptSlot::Free);
    }

    /// The mutant the model checker must catch: abandoning frees the slot at once (breaks K3).
    #[cfg(simba_mutants)]
    #[test]
    fn k3_mutant_abandon_frees_slot_frees_it_at_once() {
        let mut slot = AttemptSlot::InFlight;
        crate::mutants::with(Some(Mutant::AbandonFreesSlot), || slot.abandon());
        assert_eq!(slot, AttemptSlot::Free);
        let mut slot = AttemptSlot::InFlight;
        slot.abandon();
        assert_eq!(slot, AttemptSlot::Abandoned, "off outside `with`");
    }
}
