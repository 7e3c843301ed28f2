//! The lease protocol as a transition system: two nodes, one backend, one or two lease names,
//! a network that delays, reorders and loses messages, clocks whose rates differ within
//! `drift`, pauses and crashes. See `docs/adr/0006-protocol-model.md`.
//!
//! # Time
//!
//! Real time advances in ticks ([`Action::Tick`]). Each clock (the backend's and each node's
//! monotonic clock) advances by its own integer rate per tick. Every timestamp in the state is
//! stored *relative to its owner's clock now* (a node's deadline is "this many node-clock units
//! from now", a backend session's expiry "this many backend-clock units from now"), so the
//! absolute clock readings never enter the state: no rule depends on them, and the state space
//! is finite without a horizon on real time. The counterexample printer rebuilds the absolute
//! readings by summing the rates of the ticks along the trace.
//!
//! Actions happen at integer instants; between two instants nothing changes but the clocks.
//! The invariants are judged at every state (an instant) and, for the durable-session
//! property, over the open interval a tick spans, where a backend session may expire between
//! two instants while the node still believes it live.
//!
//! # Bounds
//!
//! Session ids and fencing tokens are absolute counters, bounded by `max_sessions` and
//! `max_tokens`: the backend refuses to open one session more or to grant one token more (the
//! request stays in the network), which cuts those traces. Every trace within these bounds is
//! explored, whatever its length.

mod election;
mod render;
mod steps;

use std::fmt::Write as _;

use simba_core::attempt::{AttemptSlot, answers_current_attempt};
use simba_core::session::{Phase, SessionMachine, SessionParts};
use simba_core::{RevokeReason, Timing};

use super::bag::Bag;
use super::clock::{NodeTime, UNIT, duration, timing};
use super::config::{Config, Invariant, MAX_NAMES, Mutant, NODES, RateMode, Schedule};
use super::explore::{Model, Transition, Violation, fingerprint};
use super::state::*;

/// Narration of a step, used only when printing a counterexample.
struct Log {
    /// Absolute clocks now `(backend, node 0, node 1)`.
    clocks: [i64; 3],
    /// Real ticks so far.
    now: u64,
    lines: Option<Vec<String>>,
}

impl Log {
    fn off() -> Self {
        Log { clocks: [0; 3], now: 0, lines: None }
    }

    fn on(&self) -> bool {
        self.lines.is_some()
    }

    fn note(&mut self, f: impl FnOnce(&[i64; 3]) -> String) {
        if let Some(l) = &mut self.lines {
            l.push(f(&self.clocks));
        }
    }

    /// Absolute reading of node `i`'s clock at relative time `rel`.
    fn node_at(c: &[i64; 3], i: usize, rel: i16) -> i64 {
        c[1 + i] + i64::from(rel)
    }
}

/// The lease protocol model.
#[derive(Clone, Debug)]
pub struct LeaseModel {
    cfg: Config,
    triples: Vec<[i16; 3]>,
    /// The engine's timing rules for `cfg` (D1, D4), which the node's session machine uses.
    timing: Timing,
    /// Whether a node keeps the replies of acquisitions it gave up on (at their D2 timeout, a
    /// crash) to read them: only when the engine's K4 rule
    /// ([`answers_current_attempt`]) could take such a reply for an answer to the current
    /// attempt. With the correct rule it never does (and the engine's timeout cancels the
    /// call, so it never sees one), so they are dropped at once, which is the same as reading
    /// and ignoring them and keeps the state space as it was.
    reads_given_up: bool,
}

impl LeaseModel {
    /// A model of `cfg`.
    ///
    /// # Panics
    ///
    /// If `cfg` breaks a rule of [`Config::validate`].
    pub fn new(cfg: Config) -> Self {
        if let Err(e) = cfg.validate() {
            panic!("invalid model configuration: {e}");
        }
        let triples = cfg.rate_triples();
        let timing = timing(&cfg);
        let mut model = LeaseModel { cfg, triples, timing, reads_given_up: false };
        model.reads_given_up = model.in_core(|| answers_current_attempt(false, true));
        model
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    fn is(&self, m: Mutant) -> bool {
        self.cfg.mutant == Some(m)
    }

    /// Runs engine code (`simba_core`) with this configuration's mutant switched on inside
    /// the core: every mutant is the core's but [`Mutant::ReleaseWithoutToken`], the modelled
    /// backend's.
    fn in_core<R>(&self, f: impl FnOnce() -> R) -> R {
        let core = match self.cfg.mutant {
            Some(Mutant::PruneReleasedInFlight) => Some(simba_core::mutants::Mutant::PruneReleasedInFlight),
            Some(Mutant::AdoptReleasedToken) => Some(simba_core::mutants::Mutant::AdoptReleasedToken),
            Some(Mutant::ReconcileStaleSnapshot) => Some(simba_core::mutants::Mutant::ReconcileStaleSnapshot),
            Some(Mutant::AbandonFreesSlot) => Some(simba_core::mutants::Mutant::AbandonFreesSlot),
            Some(Mutant::DeadlineFromArrival) => Some(simba_core::mutants::Mutant::DeadlineFromArrival),
            Some(Mutant::IgnoreDrift) => Some(simba_core::mutants::Mutant::IgnoreDrift),
            Some(Mutant::AdoptLateReply) => Some(simba_core::mutants::Mutant::AdoptLateReply),
            Some(Mutant::ReleaseBeforeTask) => Some(simba_core::mutants::Mutant::ReleaseBeforeTask),
            Some(Mutant::ReleaseWithoutToken) | None => None,
        };
        simba_core::mutants::with(core, f)
    }

    /// D1 without `sent_at`, as the engine computes it (`simba_core::Timing::local_validity`,
    /// rounded up to whole units like every deadline, see [`NodeTime::units_up`]): for the
    /// printed traces only.
    fn validity(&self, remaining: i16) -> i16 {
        let v = self.in_core(|| self.timing.local_validity(duration(remaining)));
        (NodeTime::NOW + v).units_up()
    }

    /// The engine's session machine (`simba_core::session::SessionMachine`) in `phase`,
    /// rebuilt from the model's compact state to take one event (see [`SessionParts`]).
    fn machine(&self, phase: Phase<NodeTime>) -> SessionMachine<NodeTime> {
        SessionMachine::from_parts(self.timing, SessionParts { phase, open_backoff: UNIT, epoch: 0 })
    }

    /// The floor below which a relative `sent` no longer changes any outcome.
    fn sent_floor(&self) -> i16 {
        -(self.cfg.lease + 1)
    }

    fn push_reply(&self, s: &mut State, node: u8, body: Body, fate: Fate) {
        let keep_dropped = self.reads_given_up && matches!(body, Body::AcqReply { .. });
        if fate != Fate::Dropped || keep_dropped {
            s.net.push(Msg { node, body, fate, age: 0 });
        }
    }

    /// Marks the call of node `i` selected by `pred` as given up: its request is `Dropped`,
    /// its reply is removed (nobody reads it).
    fn drop_calls(&self, s: &mut State, i: usize, pred: impl Fn(&Msg) -> bool) {
        let keep_dropped_acq = self.reads_given_up;
        s.net.retain_mut(|m| {
            if usize::from(m.node) != i || m.fate == Fate::Dropped || !pred(m) {
                return true;
            }
            if m.body.is_request() {
                m.fate = Fate::Dropped;
                if let Body::KeepAlive { held, .. } = &mut m.body {
                    *held = [0; MAX_NAMES];
                }
                true
            } else if keep_dropped_acq && matches!(m.body, Body::AcqReply { .. }) {
                m.fate = Fate::Dropped;
                true
            } else {
                false
            }
        });
    }

    /// Ends node `i`'s session: terms revoked, keep-alive given up; after a passed deadline the
    /// session is closed on the backend (the engine's `close_in_background`).
    fn end_session(&self, s: &mut State, i: usize, why: &'static str, log: &mut Log) {
        let Some(ss) = s.nodes[i].session.take() else { return };
        let revoked: Vec<(u8, u8)> =
            (0..self.cfg.names).filter(|n| s.nodes[i].terms[*n] != 0).map(|n| (n as u8, s.nodes[i].terms[n])).collect();
        let reason = if why == "DeadlinePassed" { RevokeReason::DeadlinePassed } else { RevokeReason::SessionExpired };
        for n in 0..self.cfg.names {
            self.term_lost(s, i, n, reason, log);
        }
        self.drop_calls(s, i, |m| matches!(m.body, Body::KeepAlive { .. } | Body::Alive { .. } | Body::Expired));
        let close = why == "DeadlinePassed";
        if close {
            s.net.push(Msg { node: i as u8, body: Body::Close { sid: ss.sid }, fate: Fate::Live, age: 0 });
        }
        log.note(|_| {
            let mut l = format!("n{i}: session s{} ends ({why})", ss.sid);
            for (n, t) in &revoked {
                let _ = write!(l, "; term {}#{t} revoked", name_of(*n));
            }
            if close {
                let _ = write!(l, "; close(s{}) sent", ss.sid);
            }
            l
        });
    }

    /// Releases what a won acquisition of node `i` brought (T7, K4).
    fn release_won(&self, s: &mut State, i: usize, (sid, name, token): (u8, u8, u8), why: &str, log: &mut Log) {
        let n = usize::from(name);
        if let Some(ss) = &mut s.nodes[i].session
            && ss.sid == sid
        {
            if token >= ss.released[n] {
                ss.acked[n] = false;
            }
            ss.released[n] = ss.released[n].max(token);
        }
        s.net.push(Msg { node: i as u8, body: Body::Release { sid, name, token }, fate: Fate::Live, age: 0 });
        log.note(|_| format!("n{i}: {why}: sends release({}, s{sid}, token {token})", name_of(name)));
    }

    /// Adopts `token` as node `i`'s term of `name`; checks the node's tokens increase.
    fn adopt(&self, s: &mut State, i: usize, name: u8, token: u8, log: &mut Log) -> Option<Violation<Invariant>> {
        let n = usize::from(name);
        let node = &mut s.nodes[i];
        node.terms[n] = token;
        let prev = node.max_adopted[n];
        node.max_adopted[n] = prev.max(token);
        let deadline = node.session.map_or(0, |ss| ss.deadline);
        log.note(|c| {
            format!(
                "n{i}: adopts term {}#{token} (valid while n{i} clock < {})",
                name_of(name),
                Log::node_at(c, i, deadline)
            )
        });
        (token <= prev).then(|| Violation {
            invariant: Invariant::TokenMonotonicity,
            detail: format!("n{i} adopted token {token} of lease {} after token {prev}", name_of(name)),
        })
    }

    /// A node sends a request: opens a session, renews it, or acquires a name; `None` when
    /// its rules do not allow it now.
    fn send(&self, n: &mut State, a: Action, log: &mut Log) -> bool {
        let names = self.cfg.names;
        let paused = [n.nodes[0].paused > 0, n.nodes[1].paused > 0];
        let rates = n.rates;
        let running = |i: u8| usize::from(i) < NODES && !paused[usize::from(i)];
        match a {
            Action::Open(i) => {
                let node = &mut n.nodes[usize::from(i)];
                if !running(i) || node.session.is_some() || node.opening.is_some() {
                    return false;
                }
                node.opening = Some(Call { sent: 0, expires: self.cfg.renew_interval });
                n.net.push(Msg { node: i, body: Body::Open, fate: Fate::Live, age: 0 });
                log.note(|c| format!("n{i}: sends open-session (sent at n{i}={})", c[1 + usize::from(i)]));
            }
            Action::KeepAlive(i) => {
                let node = &mut n.nodes[usize::from(i)];
                let terms = node.terms;
                if !running(i) {
                    return false;
                }
                let timers = self.cfg.schedule == Schedule::Timers;
                // Actions happen at whole ticks: the renewal timer fires at the last instant
                // before its due time would pass, not at the first one after (which could come
                // after the deadline when a tick is long compared with the slack between
                // renew_interval and the local validity).
                let next_step = match self.cfg.rate_mode {
                    RateMode::Fixed => rates[1 + usize::from(i)],
                    RateMode::PerTick => self.cfg.rates.iter().copied().max().unwrap_or(1),
                };
                let Some(ss) = node
                    .session
                    .as_mut()
                    .filter(|ss| ss.deadline > 0 && ss.ka.is_none() && (!timers || ss.renew_at < next_step))
                else {
                    return false;
                };
                let sid = ss.sid;
                ss.ka = Some(Call { sent: 0, expires: self.cfg.renew_interval.min(ss.deadline) });
                ss.ka_held = terms;
                n.net.push(Msg { node: i, body: Body::KeepAlive { sid, held: terms }, fate: Fate::Live, age: 0 });
                log.note(|c| format!("n{i}: sends keep-alive(s{sid}) at n{i}={}", c[1 + usize::from(i)]));
            }
            Action::Acquire(i, name) => {
                // Any instant: the election's retry comes due now (or a release heard, K2,
                // ends its wait), and it attempts if its machine says so.
                let (iu, k) = (usize::from(i), usize::from(name));
                let live = n.nodes.get(iu).is_some_and(|node| node.session.is_some_and(|ss| ss.deadline > 0));
                if !running(i) || k >= names || !live {
                    return false;
                }
                let before = n.nodes[iu].attempts[k];
                match n.nodes[iu].elect[k].phase {
                    EPhase::Waiting(_) => {
                        self.feed(n, iu, k, &|m| m.nudge(NodeTime::NOW), log);
                        self.feed(n, iu, k, &|m| m.session_live(NodeTime::NOW), log);
                    }
                    EPhase::Candidate => {
                        self.feed(n, iu, k, &|m| m.session_live(NodeTime::NOW), log);
                    }
                    EPhase::Attempting if before.is_none() => self.begin_attempt(n, iu, k, log),
                    _ => return false,
                }
                if n.nodes[iu].attempts[k] == before {
                    return false;
                }
            }
            _ => return false,
        }
        true
    }

    /// [`apply_raw`](Self::apply_raw), then the symmetry reduction (see
    /// [`symmetric`](Self::symmetric)).
    fn apply(&self, s: &State, a: Action) -> Option<(State, Option<Violation<Invariant>>)> {
        let (n, v) = self.apply_raw(s, a, &mut Log::off())?;
        Some((self.symmetric(n), v))
    }

    /// The representative of `s` among its symmetric images. The two nodes are
    /// interchangeable once their rates are swapped too ([`Config::node_symmetry`]): of a
    /// state and its node mirror, the one whose node 0 (with its rate) orders first stands for
    /// both, and on a tie the one whose network orders first. With two lease names
    /// ([`Config::name_symmetry`]) the names are interchangeable too (nothing in the protocol
    /// tells `a` from `b`): of the node representatives of `s` and of `s` with its names
    /// swapped, the one with the smaller fingerprint stands for all four.
    pub(crate) fn symmetric(&self, s: State) -> State {
        let s = self.node_symmetric(s);
        if !self.names_symmetric() {
            return s;
        }
        let t = self.node_symmetric(self.permute(&s, Perm { nodes: false, names: true }));
        if fingerprint(&t) < fingerprint(&s) { t } else { s }
    }

    fn names_symmetric(&self) -> bool {
        self.cfg.names == 2 && self.cfg.name_symmetry
    }

    fn node_symmetric(&self, s: State) -> State {
        if !self.cfg.node_symmetry {
            return s;
        }
        let a = (s.rates[1], s.nodes[0]);
        let b = (s.rates[2], s.nodes[1]);
        match a.cmp(&b) {
            std::cmp::Ordering::Less => s,
            std::cmp::Ordering::Greater => self.mirror(&s),
            std::cmp::Ordering::Equal => {
                let m = self.mirror(&s);
                if m.net < s.net { m } else { s }
            }
        }
    }

    /// The permutation that takes `s` to its representative ([`symmetric`](Self::symmetric)).
    pub(crate) fn symmetry_of(&self, s: &State) -> Perm {
        let rep = self.symmetric(*s);
        let mut canonical = *s;
        self.canon(&mut canonical);
        for p in Perm::ALL {
            if self.permute(&canonical, p) == rep {
                return p;
            }
        }
        unreachable!("the representative of a state is one of its symmetric images")
    }

    /// [`Schedule::Timers`]: every running node sends what its rules and timers allow.
    fn eager_sends(&self, s: &mut State, log: &mut Log) {
        for i in 0..NODES as u8 {
            self.send(s, Action::Open(i), log);
            self.send(s, Action::KeepAlive(i), log);
            if s.nodes[usize::from(i)].paused == 0 {
                self.election_timers(s, usize::from(i), true, log);
            }
        }
    }

    /// `s` with the nodes swapped.
    fn mirror(&self, s: &State) -> State {
        self.permute(s, Perm { nodes: true, names: false })
    }

    /// `s` with the nodes and/or the lease names swapped as `p` says, in canonical form.
    pub(crate) fn permute(&self, s: &State, p: Perm) -> State {
        let mut m = *s;
        if p.nodes {
            m.nodes.swap(0, 1);
            m.rates.swap(1, 2);
        }
        if p.names {
            m.leases.swap(0, 1);
            m.granted.swap(0, 1);
            for node in &mut m.nodes {
                node.attempts.swap(0, 1);
                node.terms.swap(0, 1);
                node.elect.swap(0, 1);
                node.max_adopted.swap(0, 1);
                if let Some(ss) = &mut node.session {
                    ss.ka_held.swap(0, 1);
                    ss.released.swap(0, 1);
                    ss.acked.swap(0, 1);
                }
            }
        }
        for msg in &mut m.net {
            *msg = permute_msg(*msg, p);
        }
        self.canon(&mut m);
        m
    }

    /// `a` with the nodes and/or the names swapped as `p` says.
    pub(crate) fn permute_action(a: Action, p: Perm) -> Action {
        let o = |i: u8| if p.nodes { 1 - i } else { i };
        let k = |n: u8| if p.names { 1 - n } else { n };
        match a {
            Action::Tick(r, keep) => Action::Tick(
                if p.nodes { [r[0], r[2], r[1]] } else { r },
                match keep {
                    Straggle::One(m) => Straggle::One(permute_msg(m, p)),
                    keep => keep,
                },
            ),
            Action::Open(i) => Action::Open(o(i)),
            Action::KeepAlive(i) => Action::KeepAlive(o(i)),
            Action::Acquire(i, n) => Action::Acquire(o(i), k(n)),
            Action::StepDown(i, n) => Action::StepDown(o(i), k(n)),
            Action::TaskReturns(i, n) => Action::TaskReturns(o(i), k(n)),
            Action::Pause(i, t) => Action::Pause(o(i), t),
            Action::Crash(i) => Action::Crash(o(i)),
            Action::NodeReceives(m) => Action::NodeReceives(permute_msg(m, p)),
            Action::BackendReceives(m) => Action::BackendReceives(permute_msg(m, p)),
        }
    }

    /// Applies `a` to `s`: the successor and any violation of the transition, or `None` when
    /// `a` is not enabled in `s`.
    fn apply_raw(&self, s: &State, a: Action, log: &mut Log) -> Option<(State, Option<Violation<Invariant>>)> {
        let mut n = *s;
        let names = self.cfg.names;
        let running = |i: u8| usize::from(i) < NODES && s.nodes[usize::from(i)].paused == 0;
        let v = match a {
            Action::Tick(r, k) => self.tick(&mut n, r, k, log),
            Action::Open(_) | Action::KeepAlive(_) | Action::Acquire(..) => {
                if self.cfg.schedule == Schedule::Timers || !self.send(&mut n, a, log) {
                    return None;
                }
                None
            }
            Action::StepDown(i, name) | Action::TaskReturns(i, name) => {
                if !running(i) || usize::from(name) >= names {
                    return None;
                }
                self.election_action(&mut n, a, log)?
            }
            Action::Pause(i, ticks) => {
                if !running(i) || ticks == 0 || ticks > self.cfg.max_pause {
                    return None;
                }
                n.nodes[usize::from(i)].paused = ticks;
                log.note(|_| format!("n{i}: pauses for {ticks} tick(s)"));
                None
            }
            Action::Crash(i) => {
                if n.crashes >= self.cfg.max_crashes || usize::from(i) >= NODES {
                    return None;
                }
                n.crashes += 1;
                let iu = usize::from(i);
                let ghost = n.nodes[iu].max_adopted;
                n.nodes[iu] = Node { max_adopted: ghost, ..Node::default() };
                n.net.retain_mut(|m| {
                    if usize::from(m.node) != iu {
                        return true;
                    }
                    if !m.body.is_request() {
                        return false;
                    }
                    if matches!(m.body, Body::Open | Body::KeepAlive { .. } | Body::Acquire { .. }) {
                        m.fate = Fate::Dropped;
                        if let Body::KeepAlive { held, .. } = &mut m.body {
                            *held = [0; MAX_NAMES];
                        }
                    }
                    true
                });
                log.note(|_| format!("n{i}: crashes and restarts (memory lost; its backend sessions live on)"));
                None
            }
            Action::NodeReceives(m) => {
                let i = usize::from(m.node);
                if m.body.is_request() || !running(m.node) || !n.take_msg(&m) {
                    return None;
                }
                self.node_receives(&mut n, i, m, log)
            }
            Action::BackendReceives(m) => {
                if !m.body.is_request() || !n.take_msg(&m) {
                    return None;
                }
                self.backend_receives(&mut n, m, log)?
            }
        };
        if self.cfg.schedule == Schedule::Timers {
            self.eager_sends(&mut n, log);
        } else {
            for i in 0..NODES {
                if n.nodes[i].paused == 0 {
                    self.election_timers(&mut n, i, false, log);
                }
            }
        }
        self.canon(&mut n);
        Some((n, v))
    }

    /// Canonical form: the network is sorted, and identical `Release` and `Close` messages are
    /// one (both are idempotent: once a `(session, token)` pair no longer holds a lease it never
    /// does again, and a closed session stays closed), which keeps the network finite.
    ///
    /// It also forgets what can no longer matter, which keeps equivalent states equal:
    /// - a `Release` that does not name the lease's current holder and token is a no-op now
    ///   and forever (tokens only grow), and a `Close` of a dead session is a no-op: both are
    ///   removed (with [`Config::release_acks`], a release is kept while its acknowledgement
    ///   could reach its session, and an acknowledgement while it can: a node never returns
    ///   to a session it left) (under [`Mutant::ReleaseWithoutToken`], whose releases ignore the token and
    ///   are not idempotent, only those of dead sessions are removed, and none is merged);
    /// - a node's ghost `max_adopted` and its session's `released` only ever meet tokens that
    ///   could still be adopted: those of `Won` replies in flight and of the lease record
    ///   (its token if held, the next one if free). Below all of them, their value is
    ///   indistinguishable from 0, and set to 0.
    fn canon(&self, s: &mut State) {
        let leases = s.leases;
        let sessions = s.sessions;
        let live = |sid: u8| sessions.iter().any(|(x, _)| *x == sid);
        let ignore_token = self.is(Mutant::ReleaseWithoutToken);
        let acks = self.cfg.release_acks;
        let current = [s.nodes[0].session.map(|ss| ss.sid), s.nodes[1].session.map(|ss| ss.sid)];
        let acked_by_node = |m: &Msg, sid: u8| acks && current[usize::from(m.node)] == Some(sid);
        s.net.retain(|m| match m.body {
            Body::Release { sid, name, token } => {
                let l = leases[usize::from(name)];
                // With release acknowledgements a no-op release still matters while its
                // reply can reach the session that sent it.
                if ignore_token { live(sid) } else { (l.holder == sid && l.token == token) || acked_by_node(m, sid) }
            }
            Body::ReleaseAck { sid, .. } => acked_by_node(m, sid),
            Body::Close { sid } => live(sid),
            _ => true,
        });
        for n in 0..self.cfg.names {
            let l = s.leases[n];
            let record_next = if l.holder != 0 { l.token } else { l.token + 1 };
            for i in 0..NODES {
                let mut low = record_next;
                for m in &s.net {
                    if let Body::AcqReply { name, result: AcqResult::Won(t), .. } = m.body
                        && usize::from(m.node) == i
                        && usize::from(name) == n
                    {
                        low = low.min(t);
                    }
                }
                let node = &mut s.nodes[i];
                if node.max_adopted[n] < low {
                    node.max_adopted[n] = 0;
                }
                let idle = node.attempts[n].is_none();
                if let Some(ss) = &mut node.session {
                    // The attempt that deferred the pruning of an acknowledged release ended.
                    if ss.acked[n] && idle {
                        ss.released[n] = 0;
                        ss.acked[n] = false;
                    }
                    if ss.released[n] < low {
                        ss.released[n] = 0;
                        ss.acked[n] = false;
                    }
                }
            }
        }
        self.canon_elections(s);
        if self.cfg.schedule == Schedule::Anytime {
            for node in &mut s.nodes {
                if let Some(ss) = &mut node.session {
                    ss.renew_at = 0;
                }
            }
        }
        s.net.sort_by_key_cached(Msg::key);
        if ignore_token {
            s.net.dedup_by(|a, b| a == b && matches!(a.body, Body::Close { .. }));
        } else {
            s.net.dedup_by(|a, b| a == b && matches!(a.body, Body::Release { .. } | Body::Close { .. }));
        }
    }

    /// The elections' part of [`canon`](Self::canon): a handover's abort instant only matters
    /// while the task it waits for runs; a wait for the next attempt (K1) only while a session
    /// is live and the schedule is the engine's timers: without a session, a waiting election
    /// and a candidate both wait for the next session, whose opening ends every wait (K2), and
    /// under [`Schedule::Anytime`] any instant may end a wait (the `Acquire` action).
    fn canon_elections(&self, s: &mut State) {
        let anytime = self.cfg.schedule == Schedule::Anytime;
        for node in &mut s.nodes {
            let no_session = node.session.is_none();
            for e in &mut node.elect {
                if !e.task {
                    e.abort_at = 0;
                }
                if (no_session || anytime) && matches!(e.phase, EPhase::Waiting(_)) {
                    e.phase = EPhase::Candidate;
                }
            }
        }
    }

    /// The candidate actions in `s` (some may turn out disabled).
    fn actions(&self, s: &State) -> Vec<Action> {
        let mut v = Vec::new();
        let rates = match self.cfg.rate_mode {
            RateMode::Fixed => std::slice::from_ref(&s.rates),
            RateMode::PerTick => &self.triples[..],
        };
        let mut keeps = Vec::new();
        match self.cfg.max_stragglers {
            None => keeps.push(Straggle::All),
            Some(0) => keeps.push(Straggle::None),
            Some(_) => {
                keeps.push(Straggle::None);
                let mut last = None;
                for m in &s.net {
                    let waits = !m.body.is_request() && s.nodes[usize::from(m.node)].paused > 0;
                    if waits || m.age >= self.cfg.max_delay || last == Some(*m) {
                        continue;
                    }
                    last = Some(*m);
                    keeps.push(Straggle::One(*m));
                }
            }
        }
        for r in rates {
            v.extend(keeps.iter().map(|k| Action::Tick(*r, *k)));
        }
        for i in 0..NODES as u8 {
            if self.cfg.schedule == Schedule::Anytime {
                v.push(Action::Open(i));
                v.push(Action::KeepAlive(i));
                v.extend((0..self.cfg.names as u8).map(|name| Action::Acquire(i, name)));
            }
            v.extend((0..self.cfg.names as u8).map(|name| Action::StepDown(i, name)));
            if self.cfg.tasks {
                v.extend((0..self.cfg.names as u8).map(|name| Action::TaskReturns(i, name)));
            }
            for t in 1..=self.cfg.max_pause {
                v.push(Action::Pause(i, t));
            }
            v.push(Action::Crash(i));
        }
        let mut last = None;
        for m in &s.net {
            if last == Some(*m) {
                continue;
            }
            last = Some(*m);
            v.push(if m.body.is_request() { Action::BackendReceives(*m) } else { Action::NodeReceives(*m) });
        }
        v
    }
}

/// Behaviours a configuration exercises, as bits of [`Report::observed`](super::Report): the
/// correct-model test asserts that each configuration reaches the ones it is meant to cover,
/// so a bound that silently cut them off would fail the test rather than pass vacuously.
pub mod seen {
    /// A node adopted a term.
    pub const TERM: u64 = 1;
    /// A node adopted a term with token 2 or more (the lease was won again after a term).
    pub const LATER_TERM: u64 = 1 << 1;
    /// The backend expired a session on its clock.
    pub const EXPIRY: u64 = 1 << 2;
    /// A message stayed in flight across a tick boundary (a delayed message).
    pub const DELAYED: u64 = 1 << 3;
    /// A tick passed with the clocks at different rates while a node held a term.
    pub const DRIFT: u64 = 1 << 4;
    /// A node holding a term paused.
    pub const PAUSED_HOLDER: u64 = 1 << 5;
    /// A node with a live session crashed and restarted.
    pub const CRASH: u64 = 1 << 6;
    /// A node read a `Won` reply that no longer answered its current attempt (K4).
    pub const LATE_WIN: u64 = 1 << 7;
    /// A node renewed its session (read an `Alive` reply).
    pub const RENEWED: u64 = 1 << 8;
    /// A handover: a node adopted a term while the other node had held the lease before.
    pub const HANDOVER: u64 = 1 << 9;
    /// A release was acknowledged while an acquisition of its name was in flight and the
    /// released token could still be adopted, so the node kept the record until the attempt
    /// ended (K4 pruning). The other case, an acknowledgement with no attempt in flight,
    /// never meets a record that still matters: by then the record is below every token that
    /// could be adopted, which `canon` already sets to 0 (so that case is the canonical form).
    pub const PRUNE_DEFERRED: u64 = 1 << 10;
    /// With two lease names: one node held a term of each name at once.
    pub const BOTH_HELD: u64 = 1 << 11;
    /// With two lease names: each node held a term of a different name at once.
    pub const SPLIT: u64 = 1 << 12;
    /// A handover waited for the term's task (H1: `AwaitTask` with the task running).
    pub const TASK_AWAITED: u64 = 1 << 13;
    /// A handover's task was aborted at the term's deadline (H5).
    pub const TASK_ABORTED: u64 = 1 << 14;
    /// A leader's task returned on its own and the election stepped down.
    pub const TASK_RETURNED: u64 = 1 << 15;
    /// A term was lost (session ended, taken over) while its task ran: aborted at once (H3).
    pub const LOST_WITH_TASK: u64 = 1 << 16;
    /// A step-down's cooldown ran out and the election contended again (H4).
    pub const COOLDOWN: u64 = 1 << 17;

    /// The names of the bits set in `bits`.
    pub fn names(bits: u64) -> Vec<&'static str> {
        const NAMES: [&str; 18] = [
            "term",
            "later-term",
            "expiry",
            "delayed",
            "drift",
            "paused-holder",
            "crash",
            "late-win",
            "renewed",
            "handover",
            "prune-deferred",
            "both-held",
            "split",
            "task-awaited",
            "task-aborted",
            "task-returned",
            "lost-with-task",
            "cooldown",
        ];
        NAMES.iter().enumerate().filter(|(i, _)| bits & (1 << i) != 0).map(|(_, n)| *n).collect()
    }
}

impl LeaseModel {
    /// The [`seen`] bits of the transition `s --a--> next` (`next` may be mirrored: only
    /// symmetric facts are read from it).
    fn observe(&self, s: &State, a: Action, next: &State) -> u64 {
        let terms = |st: &State| {
            let mut n = 0;
            for node in &st.nodes {
                for t in node.terms {
                    n += usize::from(t != 0);
                }
            }
            n
        };
        self.observe_elections(s, a, next) | self.observe_lease(s, a, next, terms)
    }

    /// The [`seen`] bits of the elections (counts only: `next` may be mirrored).
    fn observe_elections(&self, s: &State, a: Action, next: &State) -> u64 {
        if !self.cfg.tasks && self.cfg.cooldown == 0 {
            // Without tasks and cooldowns none of these can happen.
            return 0;
        }
        // (handovers waiting for a task, leaders with a task, elections cooling down)
        let count = |st: &State| {
            let mut c = [0u8; 3];
            for node in &st.nodes {
                for e in &node.elect {
                    match e.phase {
                        EPhase::HandingOver(_) if e.task => c[0] += 1,
                        EPhase::Leading if e.task => c[1] += 1,
                        EPhase::CoolingDown(_) => c[2] += 1,
                        _ => {}
                    }
                }
            }
            c
        };
        let (before, after) = (count(s), count(next));
        let mut o = 0;
        if after[0] > 0 {
            o |= seen::TASK_AWAITED;
        }
        if matches!(a, Action::Tick(..)) {
            if after[0] < before[0] {
                o |= seen::TASK_ABORTED;
            }
            if after[2] < before[2] {
                o |= seen::COOLDOWN;
            }
        }
        match a {
            Action::TaskReturns(i, n) if s.nodes[usize::from(i)].elect[usize::from(n)].phase == EPhase::Leading => {
                o |= seen::TASK_RETURNED;
            }
            Action::TaskReturns(..) | Action::StepDown(..) | Action::Crash(_) => {}
            _ if after[1] < before[1] => o |= seen::LOST_WITH_TASK,
            _ => {}
        }
        o
    }

    /// The [`seen`] bits of sessions, leases and the network.
    fn observe_lease(&self, s: &State, a: Action, next: &State, terms: impl Fn(&State) -> usize) -> u64 {
        match a {
            Action::Tick(r, keep) => {
                let mut o = 0;
                if next.sessions.len() < s.sessions.len() {
                    o |= seen::EXPIRY;
                }
                if matches!(keep, Straggle::One(_)) {
                    o |= seen::DELAYED;
                }
                if (r[0] != r[1] || r[0] != r[2]) && terms(s) > 0 {
                    o |= seen::DRIFT;
                }
                o
            }
            Action::Pause(i, _) if s.nodes[usize::from(i)].terms.iter().any(|t| *t != 0) => seen::PAUSED_HOLDER,
            Action::Crash(i) if s.nodes[usize::from(i)].session.is_some() => seen::CRASH,
            Action::NodeReceives(m) => match m.body {
                Body::Alive { .. } => seen::RENEWED,
                Body::ReleaseAck { sid, name, token } => {
                    let node = &s.nodes[usize::from(m.node)];
                    let n = usize::from(name);
                    let matters =
                        node.session.is_some_and(|ss| ss.sid == sid && ss.released[n] != 0 && ss.released[n] <= token);
                    if matters && node.attempts[n].is_some() { seen::PRUNE_DEFERRED } else { 0 }
                }
                Body::AcqReply { result: AcqResult::Won(t), sid, .. } => {
                    let i = usize::from(m.node);
                    if m.fate != Fate::Live || s.nodes[i].session.is_none_or(|ss| ss.sid != sid) {
                        return seen::LATE_WIN;
                    }
                    if terms(next) <= terms(s) {
                        return 0;
                    }
                    let mut o = seen::TERM;
                    let held = |node: &Node| node.terms.iter().filter(|t| **t != 0).count();
                    if next.nodes.iter().any(|node| held(node) == 2) {
                        o |= seen::BOTH_HELD;
                    }
                    if next.nodes.iter().all(|node| held(node) == 1) {
                        o |= seen::SPLIT;
                    }
                    if t >= 2 {
                        o |= seen::LATER_TERM;
                    }
                    // The other node had adopted a smaller token of this lease before.
                    if s.nodes[1 - i].max_adopted.iter().any(|x| *x != 0 && *x < t) {
                        o |= seen::HANDOVER;
                    }
                    o
                }
                _ => 0,
            },
            _ => 0,
        }
    }
}

impl Model for LeaseModel {
    type State = State;
    type Action = Action;
    type Invariant = Invariant;

    fn initial_states(&self) -> Vec<State> {
        let empty = |rates| State {
            rates,
            crashes: 0,
            sessions: Bag::default(),
            next_sid: 0,
            leases: [Lease::default(); MAX_NAMES],
            granted: [0; MAX_NAMES],
            nodes: [Node::default(); NODES],
            net: Bag::default(),
        };
        let rates = match self.cfg.rate_mode {
            RateMode::Fixed => self.triples.clone(),
            RateMode::PerTick => vec![[0; 3]],
        };
        let mut v: Vec<State> = Vec::new();
        for r in rates {
            let mut s = empty(r);
            if self.cfg.schedule == Schedule::Timers {
                self.eager_sends(&mut s, &mut Log::off());
                self.canon(&mut s);
            }
            let s = self.symmetric(s);
            if !v.contains(&s) {
                v.push(s);
            }
        }
        v
    }

    fn successors(&self, s: &State, out: &mut Vec<Transition<State, Action, Invariant>>) {
        for a in self.actions(s) {
            if let Some((next, violation)) = self.apply(s, a) {
                let observed = self.observe(s, a, &next);
                out.push(Transition { action: a, next, violation, observed });
            }
        }
    }

    fn check(&self, s: &State) -> Option<Violation<Invariant>> {
        for n in 0..self.cfg.names {
            let valid: Vec<usize> = (0..NODES).filter(|&i| valid_term(&s.nodes[i], n)).collect();
            if valid.len() > 1 {
                return Some(Violation {
                    invariant: Invariant::TermDisjointness,
                    detail: format!(
                        "n0 and n1 both hold a valid term of lease {} (tokens {} and {})",
                        name_of(n as u8),
                        s.nodes[0].terms[n],
                        s.nodes[1].terms[n]
                    ),
                });
            }
        }
        if let Some(v) = self.check_elections(s) {
            return Some(v);
        }
        for (i, node) in s.nodes.iter().enumerate() {
            if let Some(ss) = node.session
                && ss.deadline > 0
                && s.expiry(ss.sid).is_none()
            {
                return Some(Violation {
                    invariant: Invariant::DurableSession,
                    detail: format!(
                        "n{i} believes s{} live ({} node units before its deadline) but the backend has expired it",
                        ss.sid, ss.deadline
                    ),
                });
            }
        }
        None
    }
}

impl LeaseModel {
    /// The invariants of the elections: exclusive work per name (H1, H5) and the handover
    /// lists honoured in every state (H3, H4; the release's order is judged when it is sent).
    fn check_elections(&self, s: &State) -> Option<Violation<Invariant>> {
        for n in 0..self.cfg.names {
            let name = name_of(n as u8);
            if (0..NODES).all(|i| works(&s.nodes[i], n)) {
                return Some(Violation {
                    invariant: Invariant::ExclusiveWork,
                    detail: format!("n0 and n1 both work under {name} (a valid term or its task still running)"),
                });
            }
            for (i, node) in s.nodes.iter().enumerate() {
                let e = node.elect[n];
                let holds = matches!(e.phase, EPhase::Leading | EPhase::HandingOver(_));
                if e.task && !holds {
                    return Some(Violation {
                        invariant: Invariant::HandoverOrder,
                        detail: format!("n{i}'s election of {name} is {:?} but its task still runs (H3)", e.phase),
                    });
                }
                if matches!(e.phase, EPhase::CoolingDown(_)) && node.terms[n] != 0 {
                    return Some(Violation {
                        invariant: Invariant::HandoverOrder,
                        detail: format!(
                            "n{i} cools down after a step-down but still holds {name}#{} (H4)",
                            node.terms[n]
                        ),
                    });
                }
            }
        }
        None
    }
}

/// Whether `node` holds a valid term of name `n`: adopted, not revoked by a handover, its
/// session's local deadline not passed.
fn valid_term(node: &Node, n: usize) -> bool {
    node.terms[n] != 0 && !node.elect[n].revoked && node.session.is_some_and(|ss| ss.deadline > 0)
}

/// Whether `node` works under name `n`: a valid term, or the task of a term it is handing
/// over, until the shell aborts it at the term's deadline (H5).
fn works(node: &Node, n: usize) -> bool {
    let e = node.elect[n];
    valid_term(node, n) || (e.task && matches!(e.phase, EPhase::HandingOver(_)) && e.abort_at > 0)
}

/// The engine's K3 slot (`simba_core::attempt::AttemptSlot`) of a model attempt.
pub(crate) fn slot_of(a: Option<Attempt>) -> AttemptSlot {
    match a {
        None => AttemptSlot::Free,
        Some(a) if a.detached => AttemptSlot::Abandoned,
        Some(_) => AttemptSlot::InFlight,
    }
}

/// A symmetry of the model: swap the two nodes (with their clock rates), swap the two lease
/// names, or both. Each is its own inverse, and the two commute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Perm {
    /// Swap the nodes.
    pub nodes: bool,
    /// Swap the lease names.
    pub names: bool,
}

impl Perm {
    /// Every symmetry, the identity first.
    pub(crate) const ALL: [Perm; 4] = [
        Perm { nodes: false, names: false },
        Perm { nodes: true, names: false },
        Perm { nodes: false, names: true },
        Perm { nodes: true, names: true },
    ];
}

/// `m` with the nodes and/or the names swapped as `p` says.
fn permute_msg(mut m: Msg, p: Perm) -> Msg {
    if p.nodes {
        m.node = 1 - m.node;
    }
    if p.names {
        let k = |n: &mut u8| *n = 1 - *n;
        match &mut m.body {
            Body::KeepAlive { held, .. } => held.swap(0, 1),
            Body::Alive { owned: Some(o), .. } => o.swap(0, 1),
            Body::Acquire { name, .. } | Body::Release { name, .. } => k(name),
            Body::AcqReply { name, .. } | Body::ReleaseAck { name, .. } => k(name),
            _ => {}
        }
    }
    m
}
