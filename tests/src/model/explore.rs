//! A purpose-built exhaustive explorer: breadth-first search over canonical states, with a
//! visited set of 64-bit state fingerprints (as TLC does) and parent links, so that the first
//! violation found comes with a shortest trace that leads to it.
//!
//! The explorer knows nothing about leases: a [`Model`] gives the initial states, the
//! successors of a state (each with the action that produced it and, optionally, a violation
//! judged on the transition itself) and the invariants of a state.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::time::{Duration, Instant};

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation<I> {
    /// Which invariant.
    pub invariant: I,
    /// What was observed, in words.
    pub detail: String,
}

/// One successor of a state.
#[derive(Clone, Debug)]
pub struct Transition<S, A, I> {
    /// The action taken.
    pub action: A,
    /// The state it leads to, already canonical.
    pub next: S,
    /// An invariant broken by the transition itself (judged over the real time it spans).
    pub violation: Option<Violation<I>>,
    /// Bits naming the behaviours this transition exercised (the model defines them); the
    /// report ORs them, so a test can show that a configuration is not vacuous.
    pub observed: u64,
}

/// A transition system that the explorer can search.
pub trait Model {
    /// A canonical state: two states that behave the same must be equal.
    type State: Clone + Eq + Hash;
    /// A step from one state to another.
    type Action: Clone + fmt::Debug;
    /// The invariants the model checks.
    type Invariant: Copy + Eq + fmt::Debug;

    /// The initial states.
    fn initial_states(&self) -> Vec<Self::State>;

    /// Appends every successor of `state` to `out`.
    fn successors(&self, state: &Self::State, out: &mut Vec<Transition<Self::State, Self::Action, Self::Invariant>>);

    /// The first invariant that `state` breaks, if any.
    fn check(&self, state: &Self::State) -> Option<Violation<Self::Invariant>>;
}

/// A path from an initial state to a violation.
#[derive(Clone, Debug)]
pub struct Counterexample<S, A, I> {
    /// The initial state the path starts from.
    pub initial: S,
    /// The actions taken, in order; the last one reaches the violation.
    pub actions: Vec<A>,
    /// The violation at the end of the path.
    pub violation: Violation<I>,
}

/// What an exploration found.
#[derive(Clone, Debug)]
pub struct Report<S, A, I> {
    /// Distinct (canonical) states reached.
    pub states: usize,
    /// Transitions generated (including those leading to states already seen).
    pub transitions: u64,
    /// Length of the longest shortest path from an initial state (BFS depth).
    pub depth: usize,
    /// Wall time of the exploration.
    pub elapsed: Duration,
    /// Whether every reachable state was explored (false when `max_states` or the depth bound
    /// cut it short).
    pub complete: bool,
    /// States found at the depth bound whose successors were not explored (0 without a depth
    /// bound, or when nothing lies beyond it).
    pub frontier: usize,
    /// The union of the `observed` bits of every transition explored.
    pub observed: u64,
    /// The first violation found, with a shortest path to it.
    pub counterexample: Option<Counterexample<S, A, I>>,
}

/// A fast 64-bit hasher used for fingerprints (a multiply-xorshift mix per word and a
/// splitmix64 finaliser). Collisions would merge two distinct states: with `n` states the
/// chance of any is about `n^2 / 2^65`, under 1e-6 for the sizes used here.
#[derive(Default, Clone, Copy)]
pub struct FpHasher(u64);

impl FpHasher {
    #[inline]
    fn mix(&mut self, v: u64) {
        let x = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 29);
    }
}

impl Hasher for FpHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(w) ^ ((chunk.len() as u64) << 56));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i) | 0x100);
    }
    fn write_u16(&mut self, i: u16) {
        self.mix(u64::from(i) | 0x2_0000);
    }
    fn write_u32(&mut self, i: u32) {
        self.mix(u64::from(i) | 0x3_0000_0000);
    }
    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
    fn finish(&self) -> u64 {
        let mut z = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A hasher for maps keyed by fingerprints, which are already well mixed.
#[derive(Default, Clone, Copy)]
pub struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = i;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The fingerprint of a state.
pub fn fingerprint<S: Hash>(s: &S) -> u64 {
    let mut h = FpHasher::default();
    s.hash(&mut h);
    h.finish()
}

type Seen = HashMap<u64, u64, BuildHasherDefault<IdentityHasher>>;

/// Explores every state reachable from `model`'s initial states, breadth first, stopping at
/// the first violation or after `max_states` distinct states.
pub fn explore<M: Model>(model: &M, max_states: usize) -> Report<M::State, M::Action, M::Invariant> {
    explore_bounded(model, max_states, None)
}

/// [`explore`] with a depth bound: the states at depth `max_depth` (shortest path from an
/// initial state) are checked but their successors are not explored. The report is
/// `complete` only if no state lies beyond the bound; `frontier` counts the states left at it.
pub fn explore_bounded<M: Model>(
    model: &M,
    max_states: usize,
    max_depth: Option<usize>,
) -> Report<M::State, M::Action, M::Invariant> {
    let start = Instant::now();
    // fingerprint -> parent fingerprint (an initial state is its own parent)
    let mut seen: Seen = HashMap::default();
    let mut layer: Vec<(u64, M::State)> = Vec::new();
    let mut transitions = 0u64;
    let mut observed = 0u64;
    let initial = model.initial_states();
    let report = |seen: &Seen, transitions, depth, complete, observed, cex| Report {
        states: seen.len(),
        transitions,
        depth,
        elapsed: start.elapsed(),
        complete,
        frontier: 0,
        observed,
        counterexample: cex,
    };
    for s in &initial {
        let fp = fingerprint(s);
        if seen.insert(fp, fp).is_some() {
            continue;
        }
        if let Some(v) = model.check(s) {
            let cex = Counterexample { initial: s.clone(), actions: Vec::new(), violation: v };
            return report(&seen, 0, 0, false, 0, Some(cex));
        }
        layer.push((fp, s.clone()));
    }
    let mut depth = 0;
    let mut frontier = 0;
    let mut out = Vec::new();
    let mut next_layer = Vec::new();
    while !layer.is_empty() {
        if max_depth.is_some_and(|d| depth >= d) {
            frontier = layer.len();
            break;
        }
        // The states of the last layer within the bound are checked, not stored: nothing
        // expands them.
        let last = max_depth.is_some_and(|d| depth + 1 >= d);
        let mut found = 0;
        for (fp, s) in layer.drain(..) {
            out.clear();
            model.successors(&s, &mut out);
            for t in out.drain(..) {
                transitions += 1;
                observed |= t.observed;
                if let Some(v) = t.violation {
                    let cex = rebuild(model, &initial, &seen, fp, t.action, v);
                    return report(&seen, transitions, depth + 1, false, observed, Some(cex));
                }
                let nfp = fingerprint(&t.next);
                match seen.entry(nfp) {
                    Entry::Occupied(_) => continue,
                    Entry::Vacant(e) => {
                        e.insert(fp);
                    }
                }
                if let Some(v) = model.check(&t.next) {
                    let cex = rebuild(model, &initial, &seen, fp, t.action, v);
                    return report(&seen, transitions, depth + 1, false, observed, Some(cex));
                }
                if seen.len() >= max_states {
                    return report(&seen, transitions, depth + 1, false, observed, None);
                }
                found += 1;
                if !last {
                    next_layer.push((nfp, t.next));
                }
            }
        }
        if found > 0 {
            depth += 1;
        }
        if last {
            frontier = found;
            break;
        }
        std::mem::swap(&mut layer, &mut next_layer);
    }
    if frontier > 0 {
        let mut r = report(&seen, transitions, depth, false, observed, None);
        r.frontier = frontier;
        return r;
    }
    report(&seen, transitions, depth, true, observed, None)
}

/// Rebuilds the path to `parent` from the parent links, replays it to recover the actions,
/// and appends `last`.
fn rebuild<M: Model>(
    model: &M,
    initial: &[M::State],
    seen: &Seen,
    parent: u64,
    last: M::Action,
    violation: Violation<M::Invariant>,
) -> Counterexample<M::State, M::Action, M::Invariant> {
    let mut chain = vec![parent];
    let mut cur = parent;
    loop {
        let p = *seen.get(&cur).expect("every explored state has a parent link");
        if p == cur {
            break;
        }
        chain.push(p);
        cur = p;
    }
    chain.reverse();
    let root =
        initial.iter().find(|s| fingerprint(*s) == chain[0]).expect("the path starts at an initial state").clone();
    let mut actions = Vec::with_capacity(chain.len());
    let mut state = root.clone();
    let mut out = Vec::new();
    for want in &chain[1..] {
        out.clear();
        model.successors(&state, &mut out);
        let t = out
            .drain(..)
            .find(|t| t.violation.is_none() && fingerprint(&t.next) == *want)
            .expect("a recorded parent link is a transition of the model");
        actions.push(t.action);
        state = t.next;
    }
    actions.push(last);
    Counterexample { initial: root, actions, violation }
}
