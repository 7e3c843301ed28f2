//! The J6 rebalance of a partition group as a transition system, driven by the engine's own
//! decision (`simba_core::rebalance::plan`) the way the runtime's group loop
//! (`job::group::round`) drives it: a member lists the group, plans its round from that
//! listing (which may be stale by the time it acts, and comes in either order), hands its
//! surplus partitions over (each handover ends later, releasing the lease and waking the other
//! member, K2) and tries free partitions with one attempt each. Nodes join with a new session,
//! and may crash (their session ends, their leases free without a release). The leases of the
//! partitions are the store's: one holder each, taken only when free. What the lease model
//! checks about leases (deadlines, tokens, late replies) is not repeated here: a crash ends the
//! session at once, and a round's attempts run one after the other without another member's
//! step in between.
//!
//! Invariants, in every reachable state: no partition is held (or being handed over) by two
//! members, nor by a member the store does not record as its holder; and from every state, once
//! nothing joins or crashes any more, members that list, plan and hand over in turn reach a
//! balanced assignment (every member at its share, every partition held once, every plan
//! `Keep`) within a few rounds (J6's convergence).

use std::collections::BTreeSet;

use simba_core::rebalance::{self, Plan};

use super::explore::{Model, Transition, Violation};

/// Number of nodes.
pub const NODES: usize = 2;

/// A deliberately broken rule of the rebalance, switched on inside the engine's core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutant {
    /// Inside `simba_core::rebalance::target`: the ceil share goes to one rank too many, so the
    /// shares add up to more than the partitions (breaks J6's convergence).
    CeilShareOffByOne,
}

/// The bounds of the rebalance model.
#[derive(Clone, Debug)]
pub struct Config {
    /// Partitions in the group (at most 8).
    pub partitions: u32,
    /// Sessions the nodes may open in one run (joins; a crash and a rejoin take one more).
    pub max_sessions: u8,
    /// Rounds of the convergence check from each state (each member lists, plans and finishes
    /// its handovers once per round).
    pub settle_rounds: usize,
    /// The broken rule, if any.
    pub mutant: Option<Mutant>,
}

impl Config {
    /// Two nodes, three partitions, three sessions (both join, one crashes and rejoins).
    pub fn small() -> Self {
        Config { partitions: 3, max_sessions: 3, settle_rounds: 6, mutant: None }
    }
}

/// The invariants of J6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invariant {
    /// No partition held or handed over by two members, nor by one the store does not record.
    NeverDoublyHeld,
    /// Without further joins and crashes, the members reach a balanced assignment.
    Converges,
}

/// One node as the group loop holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RNode {
    /// Its session, which is its member id (0: not in the group).
    pub sid: u8,
    /// The member list of its last listing, in the store's order (0: no entry), if it listed
    /// and has not planned from it yet.
    pub view: Option<[u8; NODES]>,
    /// Partitions it holds (bits).
    pub held: u8,
    /// Partitions it is handing over (bits).
    pub leaving: u8,
    /// Partitions whose release it heard and has not tried since (bits).
    pub released: u8,
}

/// A state of the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RState {
    /// The nodes.
    pub nodes: [RNode; NODES],
    /// The store's holder of each partition: node index + 1 (0: free).
    pub holder: [u8; 8],
    /// Sessions opened so far.
    pub next_sid: u8,
}

/// A step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RAction {
    /// A node opens a session and joins the group.
    Join(u8),
    /// A node crashes: its session ends, its membership and leases with it.
    Crash(u8),
    /// A node lists the group's members (the store's order, or the reverse).
    List(u8, bool),
    /// A node plans its round from its listing and carries it out.
    Round(u8),
    /// A handover of a node's partition ends: the lease is released.
    HandoverDone(u8, u8),
}

/// Behaviours the model must exercise, as bits of [`Report::observed`](super::Report).
pub mod seen {
    /// A member handed a surplus partition over.
    pub const STEP_DOWN: u64 = 1;
    /// A member won a partition whose release it had heard.
    pub const RELEASED_TAKEN: u64 = 1 << 1;
    /// A member planned from a listing the membership had changed since.
    pub const STALE_VIEW: u64 = 1 << 2;
    /// A member holding partitions crashed.
    pub const CRASH: u64 = 1 << 3;
    /// A round found a partition held by the other member.
    pub const CONTENDED: u64 = 1 << 4;
}

/// The rebalance model.
#[derive(Clone, Debug)]
pub struct RebalanceModel {
    cfg: Config,
}

fn bits(set: &BTreeSet<u32>) -> u8 {
    set.iter().fold(0, |b, i| b | (1 << i))
}

fn set(b: u8) -> BTreeSet<u32> {
    (0..8).filter(|i| b & (1 << i) != 0).collect()
}

impl RebalanceModel {
    /// A model of `cfg`.
    pub fn new(cfg: Config) -> Self {
        assert!((1..=8).contains(&cfg.partitions), "1 to 8 partitions");
        RebalanceModel { cfg }
    }

    fn in_core<R>(&self, f: impl FnOnce() -> R) -> R {
        let core = self.cfg.mutant.map(|m| match m {
            Mutant::CeilShareOffByOne => simba_core::mutants::Mutant::CeilShareOffByOne,
        });
        simba_core::mutants::with(core, f)
    }

    /// The store's member list, in its order (by session) or reversed.
    fn members(s: &RState, reversed: bool) -> [u8; NODES] {
        let mut m = [s.nodes[0].sid, s.nodes[1].sid];
        m.sort_unstable();
        if reversed {
            m.reverse();
        }
        m
    }

    /// The engine's plan for node `i` from `view` (`job::group::round`: held, leaving, and the
    /// released hints it has not tried, minus those it holds or hands over).
    fn plan(&self, s: &mut RState, i: usize, view: [u8; NODES]) -> Plan {
        let node = &mut s.nodes[i];
        node.released &= !(node.held | node.leaving);
        let members: Vec<u8> = view.iter().copied().filter(|m| *m != 0).collect();
        let (held, leaving, released) = (set(node.held), set(node.leaving), set(node.released));
        self.in_core(|| rebalance::plan(self.cfg.partitions, &members, &node.sid, &held, &leaving, &released))
    }

    /// Node `i`'s round from `view`: the plan, then its handovers started or its attempts
    /// made (`try_acquire_now`: won if the store has no holder).
    fn round(&self, s: &mut RState, i: usize, view: [u8; NODES]) -> u64 {
        let mut o = 0;
        if view != Self::members(s, false) && view != Self::members(s, true) {
            o |= seen::STALE_VIEW;
        }
        match self.plan(s, i, view) {
            Plan::Keep => {}
            Plan::StepDown(surplus) => {
                let surplus = bits(&surplus.into_iter().collect()) & s.nodes[i].held;
                s.nodes[i].held &= !surplus;
                s.nodes[i].leaving |= surplus;
                o |= seen::STEP_DOWN;
            }
            Plan::Acquire { mut need, candidates } => {
                for p in candidates {
                    let b = 1u8 << p;
                    let hinted = s.nodes[i].released & b != 0;
                    s.nodes[i].released &= !b;
                    let slot = &mut s.holder[p as usize];
                    if *slot != 0 {
                        o |= seen::CONTENDED;
                        continue;
                    }
                    *slot = i as u8 + 1;
                    s.nodes[i].held |= b;
                    if hinted {
                        o |= seen::RELEASED_TAKEN;
                    }
                    need -= 1;
                    if need == 0 {
                        break;
                    }
                }
            }
        }
        o
    }

    /// Node `i`'s handover of partition `p` ends: released, and the other member hears it.
    fn hand_over_done(s: &mut RState, i: usize, p: u8) {
        let b = 1u8 << p;
        s.nodes[i].leaving &= !b;
        s.holder[usize::from(p)] = 0;
        let other = &mut s.nodes[1 - i];
        if other.sid != 0 {
            other.released |= b;
        }
    }

    fn apply(&self, s: &RState, a: RAction) -> Option<(RState, u64)> {
        let mut n = *s;
        let mut o = 0;
        match a {
            RAction::Join(i) => {
                let node = &mut n.nodes[usize::from(i)];
                if node.sid != 0 || n.next_sid >= self.cfg.max_sessions {
                    return None;
                }
                n.next_sid += 1;
                *node = RNode { sid: n.next_sid, ..RNode::default() };
            }
            RAction::Crash(i) => {
                let iu = usize::from(i);
                if n.nodes[iu].sid == 0 || n.next_sid >= self.cfg.max_sessions {
                    return None;
                }
                if n.nodes[iu].held | n.nodes[iu].leaving != 0 {
                    o |= seen::CRASH;
                }
                for h in &mut n.holder {
                    if *h == i + 1 {
                        *h = 0;
                    }
                }
                n.nodes[iu] = RNode::default();
            }
            RAction::List(i, reversed) => {
                let node = n.nodes[usize::from(i)];
                if node.sid == 0 || node.view.is_some() || (reversed && n.nodes[1 - usize::from(i)].sid == 0) {
                    return None;
                }
                n.nodes[usize::from(i)].view = Some(Self::members(&n, reversed));
            }
            RAction::Round(i) => {
                let iu = usize::from(i);
                let view = n.nodes[iu].view.take()?;
                o |= self.round(&mut n, iu, view);
            }
            RAction::HandoverDone(i, p) => {
                if n.nodes[usize::from(i)].leaving & (1 << p) == 0 {
                    return None;
                }
                Self::hand_over_done(&mut n, usize::from(i), p);
            }
        }
        Some((n, o))
    }

    /// J6's convergence from `s`: with no more joins or crashes, each member in turn finishes
    /// its handovers, lists the group and plays its round; within `settle_rounds` rounds every
    /// member's plan must be `Keep` with every partition held once and nothing handed over.
    fn settles(&self, s: &RState) -> Result<(), String> {
        let mut st = *s;
        for _ in 0..self.cfg.settle_rounds {
            for i in 0..NODES {
                if st.nodes[i].sid == 0 {
                    continue;
                }
                for p in 0..8 {
                    if st.nodes[i].leaving & (1 << p) != 0 {
                        Self::hand_over_done(&mut st, i, p);
                    }
                }
                let view = Self::members(&st, false);
                st.nodes[i].view = None;
                self.round(&mut st, i, view);
            }
            if self.balanced(&st) {
                return Ok(());
            }
        }
        Err(format!(
            "after {} rounds with no join or crash: holders {:?}, nodes {:?}",
            self.cfg.settle_rounds,
            &st.holder[..self.cfg.partitions as usize],
            st.nodes
        ))
    }

    /// Every partition held by a member (free when there is none), nothing handed over, and
    /// every member's plan `Keep`.
    fn balanced(&self, st: &RState) -> bool {
        let any_member = st.nodes.iter().any(|n| n.sid != 0);
        let all = (0..self.cfg.partitions as usize).all(|p| (st.holder[p] != 0) == any_member);
        let members = Self::members(st, false);
        all && (0..NODES).all(|i| {
            let mut probe = *st;
            st.nodes[i].sid == 0 || (st.nodes[i].leaving == 0 && self.plan(&mut probe, i, members) == Plan::Keep)
        })
    }
}

impl Model for RebalanceModel {
    type State = RState;
    type Action = RAction;
    type Invariant = Invariant;

    fn initial_states(&self) -> Vec<RState> {
        vec![RState::default()]
    }

    fn successors(&self, s: &RState, out: &mut Vec<Transition<RState, RAction, Invariant>>) {
        for i in 0..NODES as u8 {
            let mut actions = vec![RAction::Join(i), RAction::Crash(i), RAction::Round(i)];
            actions.extend([false, true].map(|r| RAction::List(i, r)));
            actions.extend((0..self.cfg.partitions as u8).map(|p| RAction::HandoverDone(i, p)));
            for a in actions {
                if let Some((next, observed)) = self.apply(s, a) {
                    out.push(Transition { action: a, next, violation: None, observed });
                }
            }
        }
    }

    fn check(&self, s: &RState) -> Option<Violation<Invariant>> {
        for p in 0..self.cfg.partitions as usize {
            let b = 1u8 << p;
            let claim: Vec<usize> = (0..NODES).filter(|&i| (s.nodes[i].held | s.nodes[i].leaving) & b != 0).collect();
            let backed = claim.iter().all(|&i| usize::from(s.holder[p]) == i + 1);
            if claim.len() > 1 || !backed {
                return Some(Violation {
                    invariant: Invariant::NeverDoublyHeld,
                    detail: format!("partition {p} claimed by nodes {claim:?}, the store's holder is {}", s.holder[p]),
                });
            }
        }
        self.settles(s).err().map(|detail| Violation { invariant: Invariant::Converges, detail })
    }
}
