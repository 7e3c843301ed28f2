//! The linearizability search: Wing & Gong's backtracking over the operations that may come
//! next, with Lowe's memoization of (operations linearized, model state) and the
//! P-compositionality of Horn and Kroening (one search per lease name), as Porcupine does.
//!
//! A name's history holds its acquisitions, releases and claims, and the session operations
//! (open, keep-alive, close, listing) of the sessions that touched it. Sessions are shared
//! between names, so unlike Porcupine's independent keys the projection is a necessary
//! condition, not a sufficient one: a history whose every name linearizes may still not
//! linearize as a whole (the search may pick different expiry instants for one session in two
//! names), but a name that does not linearize is a violation of the whole history.
//!
//! The search is bounded ([`Budget`]); past its bound the verdict is [`Verdict::Unknown`]
//! with the reason, never a hang.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use super::model::{Acq, Kind, LOp, State, Tolerance};
use super::record::{Call, Op, Outcome};

/// How far the search may go before it answers [`Verdict::Unknown`].
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Model steps tried, over all names.
    pub steps: u64,
    /// Wall time, over all names.
    pub time: Duration,
}

impl Default for Budget {
    fn default() -> Self {
        Budget { steps: 20_000_000, time: Duration::from_secs(60) }
    }
}

/// The checker's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every name's history is linearizable with the model.
    Linearizable,
    /// A name's history is not: what could not be placed, and the model's state there.
    Violation {
        /// The lease.
        name: String,
        /// The longest linearizable prefix and the operations around where it stops.
        detail: String,
    },
    /// The search ran out of its budget on a name.
    Unknown {
        /// The lease.
        name: String,
        /// Why.
        reason: String,
    },
}

/// A checked history: the verdict and what it cost.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The verdict.
    pub verdict: Verdict,
    /// Lease names checked.
    pub names: usize,
    /// Operations recorded.
    pub ops: usize,
    /// Of those, with an unknown outcome (errors, dropped calls, calls in flight at a kill).
    pub unknown: usize,
    /// Model steps tried.
    pub steps: u64,
    /// Time the check took.
    pub elapsed: Duration,
}

impl Checked {
    /// One line for the report.
    pub fn summary(&self) -> String {
        let what = match &self.verdict {
            Verdict::Linearizable => "linearizable".to_owned(),
            Verdict::Violation { name, .. } => format!("VIOLATION on lease `{name}`"),
            Verdict::Unknown { name, reason } => format!("unknown on lease `{name}`: {reason}"),
        };
        format!(
            "{what} ({} operations on {} lease names, {} with unknown outcome; {} model steps, {:.0} ms)",
            self.ops,
            self.names,
            self.unknown,
            self.steps,
            self.elapsed.as_secs_f64() * 1e3
        )
    }
}

/// Checks `history` against the model, name by name.
pub fn check_history(history: &[Op], tol: Tolerance, budget: Budget) -> Checked {
    let started = Instant::now();
    let parts = partitions(history);
    let unknown = history.iter().filter(|o| o.outcome == Outcome::Unknown).count();
    let mut steps = 0;
    let mut verdict = Verdict::Linearizable;
    for p in &parts {
        let left =
            Budget { steps: budget.steps.saturating_sub(steps), time: budget.time.saturating_sub(started.elapsed()) };
        let (v, n) = search(p, history, tol, left);
        steps += n;
        match v {
            Verdict::Linearizable => {}
            Verdict::Violation { .. } => {
                verdict = v;
                break;
            }
            Verdict::Unknown { .. } => {
                if verdict == Verdict::Linearizable {
                    verdict = v;
                }
            }
        }
    }
    Checked { verdict, names: parts.len(), ops: history.len(), unknown, steps, elapsed: started.elapsed() }
}

/// One name's history.
struct Part {
    name: String,
    ops: Vec<LOp>,
    sessions: Vec<String>,
    opened_inside: Vec<bool>,
}

/// The name of the history of the sessions that touched no lease: checked together, for S3
/// and their windows alone.
const LONE: &str = "(sessions without a lease)";

fn partitions(h: &[Op]) -> Vec<Part> {
    let mut by_name: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let mut by_session: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, op) in h.iter().enumerate() {
        if let Some(n) = op.call.name() {
            by_name.entry(n).or_default().push(i);
        } else if let Some(s) = op.call.session() {
            by_session.entry(s).or_default().push(i);
        } else if let Outcome::Opened { session, .. } = &op.outcome {
            by_session.entry(session).or_default().push(i);
        }
    }
    let mut groups: Vec<(&str, Vec<usize>, Vec<&str>)> = by_name
        .into_iter()
        .map(|(name, idx)| {
            let mut sessions: Vec<&str> = Vec::new();
            for &i in &idx {
                let s = h[i].call.session().unwrap_or_default();
                if !sessions.contains(&s) {
                    sessions.push(s);
                }
            }
            (name, idx, sessions)
        })
        .collect();
    let named: HashSet<&str> = groups.iter().flat_map(|g| g.2.iter().copied()).collect();
    let mut lone: Vec<&str> = by_session.keys().copied().filter(|s| !named.contains(s)).collect();
    if !lone.is_empty() {
        lone.sort_unstable();
        groups.push((LONE, Vec::new(), lone));
    }
    groups.into_iter().map(|(name, idx, sessions)| part(h, name, idx, &sessions, &by_session)).collect()
}

/// The history of `name`: its operations `idx` and those of its `sessions`.
fn part(h: &[Op], name: &str, idx: Vec<usize>, sessions: &[&str], by_session: &HashMap<&str, Vec<usize>>) -> Part {
    let number: HashMap<&str, u32> = sessions.iter().enumerate().map(|(i, s)| (*s, i as u32)).collect();
    let mut all = idx;
    for s in sessions {
        all.extend(by_session.get(s).into_iter().flatten());
    }
    let mut ops: Vec<LOp> = all.into_iter().filter_map(|i| lop(h, i, name, &number)).collect();
    let mut opened_inside = vec![false; sessions.len()];
    for o in &ops {
        if matches!(o.kind, Kind::Open { .. }) {
            opened_inside[o.sess as usize] = true;
        }
    }
    ops.sort_by_key(|o| (o.inv, o.src));
    Part { name: name.to_owned(), ops, sessions: sessions.iter().map(|s| (*s).to_owned()).collect(), opened_inside }
}

/// `h[i]` as an operation of `name`'s history; `None` for one that cannot change the state
/// and whose answer is unknown (a keep-alive, a listing, a claim, an open that never
/// answered: what they would have answered is not there to check).
fn lop(h: &[Op], i: usize, name: &str, number: &HashMap<&str, u32>) -> Option<LOp> {
    let op = &h[i];
    let session = match (&op.call, &op.outcome) {
        (Call::Open { .. }, Outcome::Opened { session, .. }) => session.as_str(),
        (c, _) => c.session()?,
    };
    let sess = *number.get(session)?;
    let unknown = op.outcome == Outcome::Unknown;
    let kind = match (&op.call, &op.outcome) {
        (Call::Open { .. }, Outcome::Opened { remaining, .. }) => Kind::Open { remaining: remaining.as_nanos() },
        (Call::KeepAlive { .. }, Outcome::Alive { remaining }) => Kind::Alive { remaining: remaining.as_nanos() },
        (Call::KeepAlive { .. }, Outcome::Expired) => Kind::KeepExpired,
        (Call::Acquire { .. }, o) => Kind::Acquire(match o {
            Outcome::Won(t) => Some(Acq::Won(*t)),
            Outcome::Held => Some(Acq::Held),
            Outcome::Expired => Some(Acq::Expired),
            _ => None,
        }),
        (Call::Release { token, .. }, o) => {
            Kind::Release { token: *token, freed: if let Outcome::Bool(b) = o { Some(*b) } else { None } }
        }
        (Call::Close { .. }, _) => Kind::Close,
        (Call::Owned { .. }, Outcome::Owned(l)) => {
            Kind::Owned { has: l.iter().find(|(n, _)| n == name).map(|(_, t)| *t) }
        }
        (Call::Claim { token, slot, .. }, Outcome::Bool(ok)) => Kind::Claim { token: *token, slot: *slot, ok: *ok },
        _ => return None,
    };
    let unknown = unknown || matches!(kind, Kind::Acquire(None) | Kind::Release { freed: None, .. });
    let ret = if unknown { u128::MAX } else { op.returned.unwrap_or(u128::MAX) };
    Some(LOp { kind, sess, inv: op.invoked, ret, src: i })
}

/// Doubly linked lists of the operations not yet linearized, in invocation order: one of
/// those with a known outcome (head `n`), one of the others (head `n + 1`). Removal and
/// reinsertion in reverse order are O(1) (dancing links).
struct Lists {
    next: Vec<usize>,
    prev: Vec<usize>,
}

impl Lists {
    fn new(ops: &[LOp]) -> Lists {
        let n = ops.len();
        let mut l = Lists { next: vec![0; n + 2], prev: vec![0; n + 2] };
        for head in [n, n + 1] {
            let mut last = head;
            for (i, o) in ops.iter().enumerate() {
                if o.known() == (head == n) {
                    l.next[last] = i;
                    l.prev[i] = last;
                    last = i;
                }
            }
            l.next[last] = head;
            l.prev[head] = last;
        }
        l
    }

    fn lift(&mut self, i: usize) {
        let (p, n) = (self.prev[i], self.next[i]);
        self.next[p] = n;
        self.prev[n] = p;
    }

    fn unlift(&mut self, i: usize) {
        let (p, n) = (self.prev[i], self.next[i]);
        self.next[p] = i;
        self.prev[n] = i;
    }
}

/// Deterministic pseudo-random keys for the set of linearized operations (Zobrist hashing:
/// two independent 64-bit keys per operation, XORed in and out).
fn keys(i: usize) -> (u64, u64) {
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    (mix(i as u64 * 2), mix(i as u64 * 2 + 1))
}

fn hash_state(s: &State) -> u64 {
    let mut h = DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// Where the search got furthest: how many known operations it placed, the one it could not
/// place next, and the model's state there.
struct Furthest {
    placed: usize,
    stuck: usize,
    state: State,
}

struct Search<'a> {
    part: &'a Part,
    tol: Tolerance,
    lists: Lists,
    /// The known operations not yet linearized, by completion.
    rets: BTreeSet<(u128, usize)>,
    stack: Vec<(usize, State)>,
    state: State,
    set: (u64, u64),
    seen: HashSet<(u64, u64, u64)>,
    steps: u64,
    furthest: Option<Furthest>,
}

impl Search<'_> {
    /// Tries to linearize `i` next; true if it did.
    fn try_op(&mut self, i: usize) -> bool {
        let op = &self.part.ops[i];
        let Some(next) = self.state.step(op, self.tol) else { return false };
        let (a, b) = keys(i);
        let set = (self.set.0 ^ a, self.set.1 ^ b);
        if !self.seen.insert((set.0, set.1, hash_state(&next))) {
            return false;
        }
        self.stack.push((i, std::mem::replace(&mut self.state, next)));
        self.set = set;
        self.lists.lift(i);
        if op.known() {
            self.rets.remove(&(op.ret, i));
        }
        true
    }

    /// Undoes the last linearization; returns the operation, or `None` at the bottom.
    fn undo(&mut self) -> Option<usize> {
        let (i, prev) = self.stack.pop()?;
        let op = &self.part.ops[i];
        self.state = prev;
        let (a, b) = keys(i);
        self.set = (self.set.0 ^ a, self.set.1 ^ b);
        self.lists.unlift(i);
        if op.known() {
            self.rets.insert((op.ret, i));
        }
        Some(i)
    }

    fn note_stuck(&mut self) {
        let placed = self.part.ops.iter().filter(|o| o.known()).count() - self.rets.len();
        if self.furthest.as_ref().is_none_or(|f| placed > f.placed)
            && let Some(&(_, stuck)) = self.rets.first()
        {
            self.furthest = Some(Furthest { placed, stuck, state: self.state.clone() });
        }
    }
}

/// Wing & Gong over one name's history. Candidates are the operations invoked before the
/// earliest completion among the known operations not yet placed: first those with a known
/// outcome, in invocation order, then those with an unknown one (which are placed only where
/// they change the state).
fn search(part: &Part, history: &[Op], tol: Tolerance, budget: Budget) -> (Verdict, u64) {
    let n = part.ops.len();
    let deadline = Instant::now() + budget.time;
    let rets = part.ops.iter().enumerate().filter(|(_, o)| o.known()).map(|(i, o)| (o.ret, i)).collect();
    let mut s = Search {
        part,
        tol,
        lists: Lists::new(&part.ops),
        rets,
        stack: Vec::new(),
        state: State::initial(&part.opened_inside),
        set: (0, 0),
        seen: HashSet::new(),
        steps: 0,
        furthest: None,
    };
    let mut cursor = s.lists.next[n];
    loop {
        let Some(&(min_ret, _)) = s.rets.first() else { return (Verdict::Linearizable, s.steps) };
        let mut placed = false;
        while cursor != n + 1 {
            if cursor == n || part.ops[cursor].inv > min_ret {
                // The end of the known list, or past the window: on to the unknown ones, in
                // invocation order too.
                if cursor == n || part.ops[cursor].known() {
                    cursor = s.lists.next[n + 1];
                    continue;
                }
                break;
            }
            s.steps += 1;
            if s.steps > budget.steps || (s.steps.is_multiple_of(4096) && Instant::now() > deadline) {
                let reason = format!(
                    "the search's budget ({} steps, {:?}) ran out after {} steps with {} of {} operations placed",
                    budget.steps,
                    budget.time,
                    s.steps,
                    s.stack.len(),
                    n
                );
                return (Verdict::Unknown { name: part.name.clone(), reason }, s.steps);
            }
            if s.try_op(cursor) {
                placed = true;
                break;
            }
            cursor = s.lists.next[cursor];
        }
        if placed {
            cursor = s.lists.next[n];
            continue;
        }
        s.note_stuck();
        match s.undo() {
            Some(i) => cursor = s.lists.next[i],
            None => {
                let detail = explain(part, history, s.furthest.as_ref());
                return (Verdict::Violation { name: part.name.clone(), detail }, s.steps);
            }
        }
    }
}

/// The longest linearizable prefix, the first operation that cannot follow it, the model's
/// state there, and the operations of the name around it.
fn explain(part: &Part, history: &[Op], f: Option<&Furthest>) -> String {
    let Some(f) = f else { return "no operation can come first".into() };
    let t0 = history.iter().map(|o| o.invoked).min().unwrap_or(0);
    let ms = |t: u128| if t == u128::MAX { "?".to_owned() } else { format!("{:.1}", (t - t0) as f64 / 1e6) };
    let line = |o: &LOp| {
        let h = &history[o.src];
        format!("  [{} .. {} ms] {:?} -> {:?}", ms(o.inv), ms(o.ret), h.call, h.outcome)
    };
    let stuck = &part.ops[f.stuck];
    let known = part.ops.iter().filter(|o| o.known()).count();
    let mut out = format!(
        "{} of {known} operations with a known outcome linearize; the first that cannot follow them:\n{}\nthe model there: {}\nthe operations of `{}` from 3 s before it:\n",
        f.placed,
        line(stuck),
        f.state.describe(&part.sessions),
        part.name
    );
    let from = stuck.inv.saturating_sub(3_000_000_000);
    for o in part.ops.iter().filter(|o| o.inv >= from && o.inv <= stuck.ret.min(stuck.inv + 1_000_000_000)).take(40) {
        out.push_str(&line(o));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;
