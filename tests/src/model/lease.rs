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

use std::fmt::Write as _;

use super::bag::Bag;
use super::explore::{Counterexample, Model, Transition, Violation};

/// Number of nodes (clients).
pub const NODES: usize = 2;
/// Largest number of lease names.
pub const MAX_NAMES: usize = 2;
/// Largest number of sessions a run may open.
pub const MAX_SESSIONS: u8 = 6;
/// Largest number of messages in flight at once.
pub const NET_CAP: usize = 16;

/// A deliberately broken rule, to show that the invariants catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutant {
    /// (a) The deadline is computed from the reply's arrival instead of `sent_at` (breaks D1).
    DeadlineFromArrival,
    /// (b) The node's formula ignores drift (`drift = 0`) while the clock rates differ (D1, D6).
    IgnoreDrift,
    /// (c) The node adopts a `Won` reply that does not answer its current attempt (one it
    /// abandoned, gave up on after the D2 timeout, or sent for a session that has ended since)
    /// into its current live session, instead of releasing or ignoring it (breaks K4; the
    /// released-token check is kept).
    AdoptLateReply,
    /// (d) The backend frees a lease on release without comparing the token (breaks T7).
    ReleaseWithoutToken,
    /// (e) Abandoning an attempt frees the election's attempt slot at once, so a new attempt
    /// may run while the abandoned one can still come back with `Won` and release what it won
    /// (relaxes K3 the way `election.rs` `abandon()` does).
    AbandonFreesSlot,
    /// A keep-alive reply that lists the session's leases revokes (`TakenOver`) every held
    /// term it does not list, including a term adopted after the backend took that snapshot;
    /// the election then wins the same token again and adopts it as a new term (breaks T3,
    /// the way `session.rs` `reconcile()` does).
    ReconcileStaleSnapshot,
}

/// How clock rates are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateMode {
    /// Each clock's rate is chosen once per run (one initial state per allowed combination).
    Fixed,
    /// The rates are chosen anew at every tick, within the drift bound.
    PerTick,
}

/// When nodes send their requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// At any instant their rules allow (one call per slot): the most general schedule.
    Anytime,
    /// On the engine's timers: a session is opened as soon as there is none; a keep-alive is
    /// sent `renew_interval` after the previous one was sent, or after the backoff
    /// `clamp(remaining / 2, 1, renew_interval)` when it failed (D5), at the last whole tick
    /// before that instant; an election attempts
    /// at once when a session opens or its term ends, and `renew_interval / 2` after an
    /// attempt that won nothing (K1, without jitter and without the release broadcast of K2).
    Timers,
}

/// The timing and the bounds of one model.
#[derive(Clone, Debug)]
pub struct Config {
    /// Lease names contended for, 1 or 2.
    pub names: usize,
    /// Candidate clock rates, in clock units per real tick.
    pub rates: Vec<i16>,
    /// `drift` as `(numerator, denominator)`. A node's rate lies within
    /// `[(1 - drift), (1 + drift)]` times the backend's, and the node's formula (D1) uses it.
    pub drift: (i16, i16),
    /// How rates are chosen.
    pub rate_mode: RateMode,
    /// `lease_duration`, in backend clock units: the backend expires a session this long after
    /// the last renewal it processed.
    pub lease: i16,
    /// `margin`, in node clock units.
    pub margin: i16,
    /// `renew_interval`, in node clock units: the call timeout of every backend call (D2).
    pub renew_interval: i16,
    /// Longest network delay of one message, in ticks (a message not delivered by then is lost).
    pub max_delay: u8,
    /// How many messages may be in flight across a tick boundary at once (`None`: any
    /// number). The others are delivered within the instant they were sent, or lost. Replies
    /// waiting for a paused node are not counted: they sit in its socket.
    pub max_stragglers: Option<u8>,
    /// Longest pause of a node, in ticks (0: no pauses).
    pub max_pause: u8,
    /// How many times, in one run, a node may crash and restart.
    pub max_crashes: u8,
    /// Sessions the backend may open in one run.
    pub max_sessions: u8,
    /// Tokens the backend may grant per name in one run.
    pub max_tokens: u8,
    /// When nodes send their requests.
    pub schedule: Schedule,
    /// The broken rule, if any.
    pub mutant: Option<Mutant>,
}

impl Config {
    /// The common timing: clock rates of 3 or 4 units per tick with `drift = 1/4` (the
    /// tight case: a node clock at 3 under a backend clock at 4), `lease_duration` 8,
    /// `margin` 1, `renew_interval` 4 (the D2 call timeout spans two ticks at rate 3, so a
    /// reply one tick late is still awaited), so a node trusts a grant for
    /// `8 * 3/4 - 1 = 5` of its units. Messages take at most one tick and at most one
    /// message straggles across a tick boundary; engine timers; one lease name; 2 sessions
    /// and 2 tokens per run; no pauses, no crashes.
    pub fn base() -> Self {
        Config {
            names: 1,
            rates: vec![3, 4],
            drift: (1, 4),
            rate_mode: RateMode::Fixed,
            lease: 8,
            margin: 1,
            renew_interval: 4,
            max_delay: 1,
            max_stragglers: Some(1),
            max_pause: 0,
            max_crashes: 0,
            max_sessions: 2,
            max_tokens: 2,
            schedule: Schedule::Timers,
            mutant: None,
        }
    }

    /// Drift: every allowed combination of the rates 3 and 4 for the backend and the two
    /// nodes, fixed per run ([`Config::base`]).
    pub fn drift() -> Self {
        Config::base()
    }

    /// Rates chosen anew at every tick within drift (3 or 4 per tick for each clock).
    pub fn drift_per_tick() -> Self {
        Config { rate_mode: RateMode::PerTick, ..Config::base() }
    }

    /// Handovers: all clocks at rate 3, 3 tokens per run (enough for a lease to pass
    /// n0 -> n1 -> n0, or for a late release to chase a later term).
    pub fn handover() -> Self {
        Config { rates: vec![3], max_tokens: 3, ..Config::base() }
    }

    /// Pauses: all clocks at rate 3, a node may pause for a tick at any instant (replies wait
    /// in its socket, its timers fire when it resumes); messages cross a tick boundary only
    /// by waiting for a paused node.
    pub fn pauses() -> Self {
        Config { rates: vec![3], max_stragglers: Some(0), max_pause: 1, ..Config::base() }
    }

    /// Crashes: all clocks at rate 3, one crash per run at any instant (the node forgets
    /// everything, its requests in flight are still processed, and it opens a new session:
    /// 3 sessions per run); no message crosses a tick boundary.
    pub fn crashes() -> Self {
        Config { rates: vec![3], max_stragglers: Some(0), max_crashes: 1, max_sessions: 3, ..Config::base() }
    }

    /// Everything at once, for a release build (`--ignored`): rates 3, 4 and 5, pauses,
    /// a crash, 3 sessions and 3 tokens.
    pub fn full() -> Self {
        Config { rates: vec![3, 4, 5], max_pause: 1, max_crashes: 1, max_sessions: 3, max_tokens: 3, ..Config::base() }
    }

    /// This configuration with `mutant`.
    pub fn with_mutant(mut self, mutant: Mutant) -> Self {
        self.mutant = Some(mutant);
        self
    }

    /// Checks the configuration rules of SPEC C1 and the model's own limits.
    pub fn validate(&self) -> Result<(), String> {
        let (num, den) = self.drift;
        if !(1..=MAX_NAMES).contains(&self.names) {
            return Err(format!("names must be 1..={MAX_NAMES}"));
        }
        if den <= 0 || num < 0 || 2 * num >= den {
            return Err("drift must be in [0, 0.5)".into());
        }
        if self.renew_interval * 2 > self.lease {
            return Err("C1: renew_interval * 2 <= lease_duration".into());
        }
        if i32::from(self.lease) * i32::from(den - num) / i32::from(den) - i32::from(self.margin)
            <= i32::from(self.renew_interval)
        {
            return Err("C1: lease_duration * (1 - drift) - margin > renew_interval".into());
        }
        if self.rates.iter().any(|r| *r <= 0) || self.rates.is_empty() {
            return Err("rates must be positive".into());
        }
        if self.max_sessions > MAX_SESSIONS {
            return Err(format!("max_sessions must be at most {MAX_SESSIONS}"));
        }
        if self.max_stragglers.is_some_and(|k| k > 1) {
            return Err("max_stragglers must be None, 0 or 1".into());
        }
        if self.rate_triples().is_empty() {
            return Err("no combination of rates is within drift".into());
        }
        Ok(())
    }

    /// Whether a node clock at `rn` per tick is within drift of a backend clock at `rb`.
    fn within_drift(&self, rb: i16, rn: i16) -> bool {
        let (num, den) = (i32::from(self.drift.0), i32::from(self.drift.1));
        let (rb, rn) = (i32::from(rb), i32::from(rn));
        rb * (den - num) <= rn * den && rn * den <= rb * (den + num)
    }

    /// Every allowed `(backend, node 0, node 1)` rate combination.
    pub fn rate_triples(&self) -> Vec<[i16; 3]> {
        let mut v = Vec::new();
        for &rb in &self.rates {
            for &r0 in &self.rates {
                for &r1 in &self.rates {
                    if self.within_drift(rb, r0) && self.within_drift(rb, r1) {
                        v.push([rb, r0, r1]);
                    }
                }
            }
        }
        v
    }
}

/// The invariants of rule V1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invariant {
    /// No two nodes consider a term of the same name valid at the same real instant.
    TermDisjointness,
    /// Tokens granted per name strictly increase, and so do the tokens a node adopts per name.
    TokenMonotonicity,
    /// While a node believes its session live (local clock < deadline), the backend has not
    /// expired or closed that session (judged at the same real instant).
    DurableSession,
}

/// What became of the call a message belongs to, on the node's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Fate {
    /// The node waits for this call.
    #[default]
    Live,
    /// The election abandoned the attempt (step-down); a `Won` reply is released (K4).
    Detached,
    /// The node gave up on the call (timeout, end of session, crash): its reply is never seen.
    Dropped,
}

/// The backend's answer to an acquisition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AcqResult {
    /// The session holds the lease with this token.
    Won(u8),
    /// Another live session holds the lease.
    Held,
    /// The session has expired.
    Expired,
}

/// A message. Requests go from `node` to the backend; replies go from the backend to `node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Body {
    /// Open a session.
    #[default]
    Open,
    /// Renew `sid`; `held` lists the token this node believes it holds per name (the digest).
    KeepAlive {
        /// Session.
        sid: u8,
        /// Tokens of the terms the node holds, per name (0: none).
        held: [u8; MAX_NAMES],
    },
    /// Acquire lease `name` for `sid`.
    Acquire {
        /// Session.
        sid: u8,
        /// Lease name index.
        name: u8,
    },
    /// Release lease `name` held by `sid` with `token` (T7).
    Release {
        /// Session.
        sid: u8,
        /// Lease name index.
        name: u8,
        /// Token of the term released.
        token: u8,
    },
    /// Close `sid` (after its deadline passed).
    Close {
        /// Session.
        sid: u8,
    },
    /// Reply: session `sid` opened for `remaining` backend units.
    Opened {
        /// Session.
        sid: u8,
        /// Backend clock units left.
        remaining: i16,
    },
    /// Reply: the session was renewed for `remaining`; `owned` lists the leases the backend
    /// holds for it when they differ from the digest sent (`None` when they match).
    Alive {
        /// Backend clock units left.
        remaining: i16,
        /// Leases held per name (0: none), only on a digest mismatch.
        owned: Option<[u8; MAX_NAMES]>,
    },
    /// Reply: the session has expired (S3).
    Expired,
    /// Reply to an acquisition.
    AcqReply {
        /// Session that asked.
        sid: u8,
        /// Lease name index.
        name: u8,
        /// The answer.
        result: AcqResult,
    },
}

impl Body {
    fn is_request(&self) -> bool {
        matches!(
            self,
            Body::Open | Body::KeepAlive { .. } | Body::Acquire { .. } | Body::Release { .. } | Body::Close { .. }
        )
    }
}

/// A message in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Msg {
    /// The sending node (request) or the receiving node (reply).
    pub node: u8,
    /// Content.
    pub body: Body,
    /// What became of the call on the node's side.
    pub fate: Fate,
    /// Ticks in flight (a reply to a paused node does not age: it waits in the socket).
    pub age: u8,
}

/// Packs small fields into a `u64`, most significant first (every caller packs at most 64
/// bits, and every value fits its width: `u8` in 8 bits, `i16` in 16, flags in 1).
#[derive(Default)]
struct Packer {
    value: u64,
}

impl Packer {
    fn put(&mut self, bits: u32, v: u64) -> &mut Self {
        self.value = (self.value << bits) | v;
        self
    }
    fn i16(&mut self, v: i16) -> &mut Self {
        self.put(16, u64::from(v as u16))
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.put(8, u64::from(v))
    }
}

impl Msg {
    /// A lossless encoding, used to order and hash messages cheaply: the header (node,
    /// fate, age) in the top 18 bits, then a 4-bit tag and the body's fields at fixed
    /// positions.
    pub fn key(&self) -> u64 {
        let b = |v: u8| u64::from(v);
        let w = |v: i16| u64::from(v as u16);
        let (tag, fields): (u64, u64) = match self.body {
            Body::Open => (0, 0),
            Body::KeepAlive { sid, held } => (1, (b(sid) << 16) | (b(held[0]) << 8) | b(held[1])),
            Body::Acquire { sid, name } => (2, (b(sid) << 8) | b(name)),
            Body::Release { sid, name, token } => (3, (b(sid) << 16) | (b(name) << 8) | b(token)),
            Body::Close { sid } => (4, b(sid)),
            Body::Opened { sid, remaining } => (5, (b(sid) << 16) | w(remaining)),
            Body::Alive { remaining, owned } => {
                let o = owned.unwrap_or_default();
                (6, (w(remaining) << 17) | (u64::from(owned.is_some()) << 16) | (b(o[0]) << 8) | b(o[1]))
            }
            Body::Expired => (7, 0),
            Body::AcqReply { sid, name, result } => {
                let r = match result {
                    AcqResult::Won(t) => b(t),
                    AcqResult::Held => 1 << 8,
                    AcqResult::Expired => 2 << 8,
                };
                (8, (b(sid) << 18) | (b(name) << 10) | r)
            }
        };
        (b(self.node) << 54) | ((self.fate as u64) << 52) | (b(self.age) << 44) | (tag << 40) | fields
    }
}

impl std::fmt::Display for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.node;
        match self.body {
            Body::Open => write!(f, "open-session from n{n}"),
            Body::KeepAlive { sid, .. } => write!(f, "keep-alive(s{sid}) from n{n}"),
            Body::Acquire { sid, name } => write!(f, "acquire({}, s{sid}) from n{n}", name_of(name)),
            Body::Release { sid, name, token } => {
                write!(f, "release({}, s{sid}, token {token}) from n{n}", name_of(name))
            }
            Body::Close { sid } => write!(f, "close(s{sid}) from n{n}"),
            Body::Opened { sid, .. } => write!(f, "Opened(s{sid}) to n{n}"),
            Body::Alive { .. } => write!(f, "Alive to n{n}"),
            Body::Expired => write!(f, "Expired to n{n}"),
            Body::AcqReply { name, result, .. } => write!(f, "{result:?} for {} to n{n}", name_of(name)),
        }?;
        match self.fate {
            Fate::Live => Ok(()),
            Fate::Detached => f.write_str(" (abandoned attempt)"),
            Fate::Dropped => f.write_str(" (given up)"),
        }
    }
}

impl std::hash::Hash for Msg {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.key());
    }
}

impl PartialOrd for Msg {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Msg {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// A backend call the node waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Call {
    /// When it was sent, relative to the node's clock now (<= 0).
    pub sent: i16,
    /// Node clock units until it times out (D2).
    pub expires: i16,
}

/// The node's current session (its `SessionCell`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sess {
    /// Session id.
    pub sid: u8,
    /// Local deadline, relative to the node's clock now; live while > 0.
    pub deadline: i16,
    /// The keep-alive in flight, if any (one renewal slot).
    pub ka: Option<Call>,
    /// The digest that keep-alive carried: the token held per name when it was sent.
    pub ka_held: [u8; MAX_NAMES],
    /// Node clock units until the next keep-alive is due ([`Schedule::Timers`]).
    pub renew_at: i16,
    /// Highest token this session released, per name (K4).
    pub released: [u8; MAX_NAMES],
}

/// The election's acquisition in flight (K3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attempt {
    /// The session it acquires for.
    pub sid: u8,
    /// Node clock units until it times out (D2).
    pub expires: i16,
    /// Abandoned by a step-down: a `Won` reply is released.
    pub detached: bool,
}

/// One node (client). Everything but `max_adopted` is lost in a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Node {
    /// Ticks left in the current pause (0: running).
    pub paused: u8,
    /// The session being opened.
    pub opening: Option<Call>,
    /// The current session.
    pub session: Option<Sess>,
    /// The attempt in flight, per name.
    pub attempts: [Option<Attempt>; MAX_NAMES],
    /// Token of the held term, per name (0: none). A term belongs to the current session.
    pub terms: [u8; MAX_NAMES],
    /// Node clock units until the election may attempt again, per name ([`Schedule::Timers`]).
    pub retry_at: [i16; MAX_NAMES],
    /// Ghost: highest token this node ever adopted, per name (survives crashes).
    pub max_adopted: [u8; MAX_NAMES],
}

/// A lease record on the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Lease {
    /// Holding session (0: free). Always a live session.
    pub holder: u8,
    /// Last token granted, never reset.
    pub token: u8,
}

/// A state of the whole system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    /// Fixed rates `(backend, node 0, node 1)`; zeros in [`RateMode::PerTick`].
    pub rates: [i16; 3],
    /// Crashes so far.
    pub crashes: u8,
    /// Live backend sessions `(sid, expiry relative to the backend clock now)`, by sid.
    pub sessions: Bag<(u8, i16), { MAX_SESSIONS as usize }>,
    /// Sessions opened so far (ids are 1..=next_sid).
    pub next_sid: u8,
    /// Lease records.
    pub leases: [Lease; MAX_NAMES],
    /// Ghost: the highest token ever granted, per name.
    pub granted: [u8; MAX_NAMES],
    /// The nodes.
    pub nodes: [Node; NODES],
    /// Messages in flight, sorted (a multiset).
    pub net: Bag<Msg, NET_CAP>,
}

impl std::hash::Hash for Node {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let mut w = Packer::default();
        let o = self.opening;
        w.u8(self.paused).put(1, u64::from(o.is_some()));
        let o = o.unwrap_or(Call { sent: 0, expires: 0 });
        w.i16(o.sent).i16(o.expires).u8(self.terms[0]).u8(self.terms[1]);
        state.write_u64(w.value);
        let mut w = Packer::default();
        match self.session {
            Some(ss) => {
                w.put(1, 1).u8(ss.sid).i16(ss.deadline).i16(ss.renew_at).u8(ss.released[0]).u8(ss.released[1]);
                state.write_u64(w.value);
                let mut w = Packer::default();
                let ka = ss.ka.unwrap_or(Call { sent: 0, expires: 0 });
                w.put(1, u64::from(ss.ka.is_some())).i16(ka.sent).i16(ka.expires).u8(ss.ka_held[0]).u8(ss.ka_held[1]);
                state.write_u64(w.value);
            }
            None => state.write_u64(0),
        }
        let mut w = Packer::default();
        for a in &self.attempts {
            match a {
                Some(a) => w.put(1, 1).u8(a.sid).i16(a.expires).put(1, u64::from(a.detached)),
                None => w.put(26, 0),
            };
        }
        state.write_u64(w.value);
        let mut w = Packer::default();
        w.i16(self.retry_at[0]).i16(self.retry_at[1]).u8(self.max_adopted[0]).u8(self.max_adopted[1]);
        state.write_u64(w.value);
    }
}

impl std::hash::Hash for State {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let mut w = Packer::default();
        w.i16(self.rates[0]).i16(self.rates[1]).i16(self.rates[2]).u8(self.crashes);
        state.write_u64(w.value);
        let mut w = Packer::default();
        w.u8(self.next_sid);
        for (l, g) in self.leases.iter().zip(&self.granted) {
            w.u8(l.holder).u8(l.token).u8(*g);
        }
        state.write_u64(w.value);
        state.write_usize(self.sessions.len());
        for (sid, e) in self.sessions.iter() {
            let mut w = Packer::default();
            w.u8(*sid).i16(*e);
            state.write_u64(w.value);
        }
        self.nodes[0].hash(state);
        self.nodes[1].hash(state);
        state.write_usize(self.net.len());
        for m in self.net.iter() {
            state.write_u64(m.key());
        }
    }
}

impl State {
    fn expiry(&self, sid: u8) -> Option<i16> {
        self.sessions.iter().find(|(s, _)| *s == sid).map(|(_, e)| *e)
    }

    fn take_msg(&mut self, m: &Msg) -> bool {
        match self.net.iter().position(|x| x == m) {
            Some(i) => {
                self.net.remove(i);
                true
            }
            None => false,
        }
    }
}

/// Which messages in flight survive a tick boundary (the others are lost).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Straggle {
    /// Every message younger than `max_delay` survives.
    All,
    /// None survives.
    None,
    /// Only this one survives.
    One(Msg),
}

/// A step of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// One real tick passes; the clocks advance by these rates `(backend, node 0, node 1)`,
    /// and the messages in flight that survive the tick boundary are chosen.
    Tick([i16; 3], Straggle),
    /// A node starts opening a session.
    Open(u8),
    /// A node sends a keep-alive.
    KeepAlive(u8),
    /// A node's election sends an acquisition for a name.
    Acquire(u8, u8),
    /// A node's election steps down: releases its term, or abandons its attempt.
    StepDown(u8, u8),
    /// A node pauses for some ticks (GC, SIGSTOP): its clock runs, it does nothing.
    Pause(u8, u8),
    /// A node crashes and restarts with an empty memory.
    Crash(u8),
    /// A node reads a reply.
    NodeReceives(Msg),
    /// The backend processes a request.
    BackendReceives(Msg),
}

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

fn name_of(n: u8) -> char {
    (b'a' + n) as char
}

/// The lease protocol model.
#[derive(Clone, Debug)]
pub struct LeaseModel {
    cfg: Config,
    triples: Vec<[i16; 3]>,
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
        LeaseModel { cfg, triples }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    fn is(&self, m: Mutant) -> bool {
        self.cfg.mutant == Some(m)
    }

    /// D1 without `sent_at`: `remaining * (1 - drift) - margin`, never negative.
    fn validity(&self, remaining: i16) -> i16 {
        let (num, den) = if self.is(Mutant::IgnoreDrift) { (0, 1) } else { self.cfg.drift };
        let v = i32::from(remaining) * i32::from(den - num) / i32::from(den) - i32::from(self.cfg.margin);
        i16::try_from(v.max(0)).expect("validity fits in i16")
    }

    /// The base instant of the D1 formula, relative to the node's clock now.
    fn deadline_base(&self, sent: i16) -> i16 {
        if self.is(Mutant::DeadlineFromArrival) { 0 } else { sent }
    }

    /// The floor below which a relative `sent` no longer changes any outcome.
    fn sent_floor(&self) -> i16 {
        -(self.cfg.lease + 1)
    }

    fn push_reply(&self, s: &mut State, node: u8, body: Body, fate: Fate) {
        let keep_dropped = self.is(Mutant::AdoptLateReply) && matches!(body, Body::AcqReply { .. });
        if fate != Fate::Dropped || keep_dropped {
            s.net.push(Msg { node, body, fate, age: 0 });
        }
    }

    /// Marks the call of node `i` selected by `pred` as given up: its request is `Dropped`,
    /// its reply is removed (nobody reads it).
    fn drop_calls(&self, s: &mut State, i: usize, pred: impl Fn(&Msg) -> bool) {
        let keep_dropped_acq = self.is(Mutant::AdoptLateReply);
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
        s.nodes[i].terms = [0; MAX_NAMES];
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
        node.retry_at[n] = 0;
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

    /// One real tick with clock rates `r`.
    fn tick(&self, s: &mut State, r: [i16; 3], keep: Straggle, log: &mut Log) -> Option<Violation<Invariant>> {
        let mut violation = None;
        // Durable session over the open interval (now, now + 1): the backend session may expire
        // strictly inside it while the node still believes it live.
        for (i, node) in s.nodes.iter().enumerate() {
            if let Some(ss) = node.session
                && ss.deadline > 0
                && let Some(e) = s.expiry(ss.sid)
            {
                let (rb, rn) = (i32::from(r[0]), i32::from(r[1 + i]));
                let (e, d) = (i32::from(e), i32::from(ss.deadline));
                if e < rb && e * rn < d * rb {
                    violation.get_or_insert_with(|| Violation {
                        invariant: Invariant::DurableSession,
                        detail: format!(
                            "between instants, the backend expires s{} after {e}/{rb} of the tick while n{i} \
                             believes it live for {d}/{rn} of the tick",
                            ss.sid
                        ),
                    });
                }
            }
        }
        if log.on() {
            log.now += 1;
            for (k, c) in log.clocks.iter_mut().enumerate() {
                *c += i64::from(r[k]);
            }
        }
        log.note(|_| format!("one tick passes: backend clock +{}, n0 clock +{}, n1 clock +{}", r[0], r[1], r[2]));
        // Backend sessions expire.
        for (_, e) in &mut s.sessions {
            *e -= r[0];
        }
        let mut dead: Bag<u8, { MAX_SESSIONS as usize }> = Bag::default();
        for (sid, e) in s.sessions.iter() {
            if *e <= 0 {
                dead.push(*sid);
            }
        }
        if !dead.is_empty() {
            s.sessions.retain(|(_, e)| *e > 0);
            for l in &mut s.leases {
                if dead.contains(&l.holder) {
                    l.holder = 0;
                }
            }
            log.note(|_| format!("backend: session(s) {dead:?} expired on the backend clock"));
        }
        // Messages age; one older than max_delay is lost, and so is every one not chosen to
        // straggle across this tick boundary.
        let paused = [s.nodes[0].paused > 0, s.nodes[1].paused > 0];
        let max_delay = self.cfg.max_delay;
        let mut kept_one = false;
        let before = s.net.len();
        s.net.retain_mut(|m| {
            if !m.body.is_request() && paused[usize::from(m.node)] {
                return true;
            }
            let survives = match keep {
                Straggle::All => true,
                Straggle::None => false,
                Straggle::One(k) if !kept_one && *m == k => {
                    kept_one = true;
                    true
                }
                Straggle::One(_) => false,
            };
            m.age += 1;
            survives && m.age <= max_delay
        });
        let lost = before - s.net.len();
        if let Straggle::One(m) = keep {
            log.note(|_| format!("network: {m} stays in flight across the tick"));
        }
        if lost > 0 {
            log.note(|_| format!("network: {lost} message(s) in flight lost"));
        }
        // Node clocks, pauses and timers.
        let floor = self.sent_floor();
        for i in 0..NODES {
            let rn = r[1 + i];
            let node = &mut s.nodes[i];
            node.paused = node.paused.saturating_sub(1);
            let dec = |call: &mut Call| {
                call.sent = (call.sent - rn).max(floor);
                call.expires = (call.expires - rn).max(0);
            };
            if let Some(c) = &mut node.opening {
                dec(c);
            }
            for t in &mut node.retry_at {
                *t = (*t - rn).max(0);
            }
            if let Some(ss) = &mut node.session {
                ss.deadline = (ss.deadline - rn).max(0);
                ss.renew_at = (ss.renew_at - rn).max(0);
                if let Some(c) = &mut ss.ka {
                    dec(c);
                }
            }
            for a in node.attempts.iter_mut().flatten() {
                a.expires = (a.expires - rn).max(0);
            }
            if node.paused > 0 {
                continue;
            }
            // Timers fire (a paused node's fire when it resumes).
            if node.session.is_some_and(|ss| ss.deadline == 0) {
                self.end_session(s, i, "DeadlinePassed", log);
            }
            let node = &mut s.nodes[i];
            if let Some(ss) = &mut node.session
                && ss.ka.is_some_and(|c| c.expires == 0)
            {
                ss.ka = None;
                ss.ka_held = [0; MAX_NAMES];
                ss.renew_at = (ss.deadline / 2).clamp(1, self.cfg.renew_interval);
                self.drop_calls(s, i, |m| {
                    matches!(m.body, Body::KeepAlive { .. } | Body::Alive { .. } | Body::Expired)
                });
                log.note(|_| format!("n{i}: keep-alive timed out (D2)"));
            }
            let node = &mut s.nodes[i];
            if node.opening.is_some_and(|c| c.expires == 0) {
                node.opening = None;
                self.drop_calls(s, i, |m| matches!(m.body, Body::Open | Body::Opened { .. }));
                log.note(|_| format!("n{i}: open-session timed out (D2)"));
            }
            for n in 0..self.cfg.names {
                let node = &mut s.nodes[i];
                if node.attempts[n].is_some_and(|a| a.expires == 0) {
                    node.attempts[n] = None;
                    node.retry_at[n] = self.cfg.renew_interval / 2;
                    let name = n as u8;
                    self.drop_calls(
                        s,
                        i,
                        |m| matches!(m.body, Body::Acquire { name: x, .. } | Body::AcqReply { name: x, .. } if x == name),
                    );
                    log.note(|_| format!("n{i}: acquire {} timed out (D2); its reply will be ignored", name_of(name)));
                }
            }
        }
        violation
    }

    /// Node `i` reads reply `m` (already removed from the network).
    fn node_receives(&self, s: &mut State, i: usize, m: Msg, log: &mut Log) -> Option<Violation<Invariant>> {
        match m.body {
            Body::Opened { sid, remaining } => {
                let Some(call) = s.nodes[i].opening.filter(|_| m.fate == Fate::Live) else {
                    log.note(|_| format!("n{i}: ignores a stale Opened(s{sid})"));
                    return None;
                };
                s.nodes[i].opening = None;
                let base = self.deadline_base(call.sent);
                let d = base + self.validity(remaining);
                log.note(|c| {
                    format!(
                        "n{i}: reads Opened(s{sid}, remaining {remaining}): deadline = {} + {} = {} (n{i} clock)",
                        Log::node_at(c, i, base),
                        self.validity(remaining),
                        Log::node_at(c, i, d)
                    )
                });
                if d <= 0 {
                    s.net.push(Msg { node: i as u8, body: Body::Close { sid }, fate: Fate::Live, age: 0 });
                    log.note(|_| format!("n{i}: granted too little time; close(s{sid}) sent"));
                } else {
                    s.nodes[i].session = Some(Sess {
                        sid,
                        deadline: d,
                        ka: None,
                        ka_held: [0; MAX_NAMES],
                        renew_at: (call.sent + self.cfg.renew_interval).max(0),
                        released: [0; MAX_NAMES],
                    });
                    s.nodes[i].retry_at = [0; MAX_NAMES];
                }
                None
            }
            Body::Alive { remaining, owned } => {
                let Some(ss) = s.nodes[i].session.filter(|ss| ss.ka.is_some() && m.fate == Fate::Live) else {
                    log.note(|_| format!("n{i}: ignores a stale keep-alive reply"));
                    return None;
                };
                let call = ss.ka.expect("checked above");
                if ss.deadline <= 0 {
                    // D3: a late reply never revives a passed deadline.
                    self.end_session(s, i, "DeadlinePassed", log);
                    return None;
                }
                let base = self.deadline_base(call.sent);
                let new = base + self.validity(remaining);
                let d = ss.deadline.max(new);
                log.note(|c| {
                    format!(
                        "n{i}: reads Alive(remaining {remaining}) for the keep-alive sent at n{i}={}: deadline = \
                         max({}, {} + {}) = {}",
                        Log::node_at(c, i, call.sent),
                        Log::node_at(c, i, ss.deadline),
                        Log::node_at(c, i, base),
                        self.validity(remaining),
                        Log::node_at(c, i, d)
                    )
                });
                if let Some(ss) = &mut s.nodes[i].session {
                    ss.ka = None;
                    ss.ka_held = [0; MAX_NAMES];
                    ss.deadline = d;
                    ss.renew_at = (call.sent + self.cfg.renew_interval).max(0);
                }
                if let Some(owned) = owned {
                    self.reconcile(s, i, ss.sid, ss.ka_held, owned, log);
                }
                None
            }
            Body::Expired => {
                if m.fate != Fate::Live || s.nodes[i].session.is_none_or(|ss| ss.ka.is_none()) {
                    return None;
                }
                log.note(|_| format!("n{i}: reads Expired"));
                self.end_session(s, i, "SessionExpired", log);
                None
            }
            Body::AcqReply { sid, name, result } => self.acq_reply(s, i, m.fate, sid, name, result, log),
            _ => None,
        }
    }

    /// A digest mismatch: held terms the backend no longer lists are taken over; leases it
    /// lists that no term or attempt knows are orphans, released with their token. The
    /// snapshot was taken when the backend processed the keep-alive, so it only speaks about
    /// the terms the keep-alive's digest (`held`) covered: a term adopted since is not judged.
    fn reconcile(
        &self,
        s: &mut State,
        i: usize,
        sid: u8,
        held: [u8; MAX_NAMES],
        owned: [u8; MAX_NAMES],
        log: &mut Log,
    ) {
        for n in 0..self.cfg.names {
            let t = s.nodes[i].terms[n];
            let covered = held[n] == t || self.is(Mutant::ReconcileStaleSnapshot);
            if t != 0 && covered && owned[n] != t {
                s.nodes[i].terms[n] = 0;
                log.note(|_| format!("n{i}: term {}#{t} revoked (TakenOver)", name_of(n as u8)));
            }
        }
        for (n, &t) in owned.iter().enumerate().take(self.cfg.names) {
            let node = &s.nodes[i];
            if t != 0 && node.terms[n] == 0 && node.attempts[n].is_none() {
                self.release_won(s, i, (sid, n as u8, t), "orphan listed by the backend", log);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn acq_reply(
        &self,
        s: &mut State,
        i: usize,
        fate: Fate,
        sid: u8,
        name: u8,
        result: AcqResult,
        log: &mut Log,
    ) -> Option<Violation<Invariant>> {
        let n = usize::from(name);
        log.note(|_| format!("n{i}: reads acquire reply {result:?} for {} (s{sid}, {fate:?})", name_of(name)));
        let session_live = s.nodes[i].session.is_some_and(|ss| ss.deadline > 0);
        let current = fate == Fate::Live && s.nodes[i].session.is_some_and(|ss| ss.sid == sid);
        if self.is(Mutant::AdoptLateReply)
            && !current
            && let AcqResult::Won(t) = result
            && session_live
            && s.nodes[i].terms[n] == 0
            && s.nodes[i].session.is_some_and(|ss| t > ss.released[n])
        {
            match fate {
                Fate::Live => s.nodes[i].attempts[n] = None,
                Fate::Detached if s.nodes[i].attempts[n].is_some_and(|a| a.detached) => s.nodes[i].attempts[n] = None,
                _ => {}
            }
            log.note(|_| format!("n{i}: MUTANT (c) adopts a reply that does not answer its current attempt"));
            return self.adopt(s, i, name, t, log);
        }
        match fate {
            Fate::Live => {
                s.nodes[i].attempts[n] = None;
                s.nodes[i].retry_at[n] = self.cfg.renew_interval / 2;
                if let AcqResult::Won(t) = result {
                    let adoptable = s.nodes[i].session.is_some_and(|ss| {
                        ss.sid == sid && ss.deadline > 0 && t > ss.released[n] && s.nodes[i].terms[n] == 0
                    });
                    if adoptable {
                        return self.adopt(s, i, name, t, log);
                    }
                    self.release_won(s, i, (sid, name, t), "not adoptable (K4)", log);
                }
            }
            Fate::Detached => {
                if !self.is(Mutant::AbandonFreesSlot) {
                    s.nodes[i].attempts[n] = None;
                }
                if let AcqResult::Won(t) = result {
                    self.release_won(s, i, (sid, name, t), "late win of an abandoned attempt (K4)", log);
                }
            }
            Fate::Dropped => {}
        }
        None
    }

    /// The backend processes request `m` (already removed). `None` when a bound forbids it.
    fn backend_receives(&self, s: &mut State, m: Msg, log: &mut Log) -> Option<Option<Violation<Invariant>>> {
        let i = m.node;
        let lease = self.cfg.lease;
        match m.body {
            Body::Open => {
                if s.next_sid >= self.cfg.max_sessions {
                    return None;
                }
                s.next_sid += 1;
                let sid = s.next_sid;
                s.sessions.push((sid, lease));
                log.note(|c| {
                    format!("backend: opens s{sid} for n{i}, expires at B={}; replies Opened", c[0] + i64::from(lease))
                });
                self.push_reply(s, i, Body::Opened { sid, remaining: lease }, m.fate);
            }
            Body::KeepAlive { sid, held } => {
                if let Some(e) = s.sessions.iter_mut().find(|(x, _)| *x == sid) {
                    e.1 = lease;
                    let mut owned = [0; MAX_NAMES];
                    for (n, l) in s.leases.iter().enumerate().take(self.cfg.names) {
                        if l.holder == sid {
                            owned[n] = l.token;
                        }
                    }
                    let owned = (owned != held).then_some(owned);
                    let names = self.cfg.names;
                    log.note(|c| {
                        format!(
                            "backend: renews s{sid} (from n{i}), expires at B={}; replies Alive(remaining {lease}){}",
                            c[0] + i64::from(lease),
                            owned.map_or(String::new(), |o| format!(", digest differs, owned {:?}", &o[..names]))
                        )
                    });
                    self.push_reply(s, i, Body::Alive { remaining: lease, owned }, m.fate);
                } else {
                    log.note(|_| format!("backend: keep-alive of s{sid} (from n{i}): expired; replies Expired"));
                    self.push_reply(s, i, Body::Expired, m.fate);
                }
            }
            Body::Acquire { sid, name } => {
                let n = usize::from(name);
                let mut granted_violation = None;
                let result = if s.expiry(sid).is_none() {
                    AcqResult::Expired
                } else if s.leases[n].holder == sid {
                    AcqResult::Won(s.leases[n].token)
                } else if s.leases[n].holder == 0 {
                    if s.leases[n].token >= self.cfg.max_tokens {
                        return None;
                    }
                    s.leases[n].token += 1;
                    s.leases[n].holder = sid;
                    let t = s.leases[n].token;
                    if t <= s.granted[n] {
                        granted_violation = Some(Violation {
                            invariant: Invariant::TokenMonotonicity,
                            detail: format!(
                                "the backend granted token {t} of {} after token {}",
                                name_of(name),
                                s.granted[n]
                            ),
                        });
                    }
                    s.granted[n] = s.granted[n].max(t);
                    AcqResult::Won(t)
                } else {
                    AcqResult::Held
                };
                log.note(|_| format!("backend: acquire {} for s{sid} (from n{i}): {result:?}", name_of(name)));
                self.push_reply(s, i, Body::AcqReply { sid, name, result }, m.fate);
                if granted_violation.is_some() {
                    return Some(granted_violation);
                }
            }
            Body::Release { sid, name, token } => {
                let l = &mut s.leases[usize::from(name)];
                let frees = l.holder == sid && (token == l.token || self.is(Mutant::ReleaseWithoutToken));
                let current = *l;
                if frees {
                    l.holder = 0;
                }
                log.note(|_| {
                    format!(
                        "backend: release({}, s{sid}, token {token}) (from n{i}); record is s{}#{}: {}",
                        name_of(name),
                        current.holder,
                        current.token,
                        if frees { "freed" } else { "no-op" }
                    )
                });
            }
            Body::Close { sid } => {
                s.sessions.retain(|(x, _)| *x != sid);
                for l in &mut s.leases {
                    if l.holder == sid {
                        l.holder = 0;
                    }
                }
                log.note(|_| format!("backend: closes s{sid} (from n{i}); its leases are free"));
            }
            _ => return None,
        }
        Some(None)
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
                let k = usize::from(name);
                let node = &mut n.nodes[usize::from(i)];
                let due = self.cfg.schedule == Schedule::Anytime || node.retry_at.get(k).is_some_and(|t| *t == 0);
                if !running(i) || k >= names || node.attempts[k].is_some() || node.terms[k] != 0 || !due {
                    return false;
                }
                let Some(ss) = node.session.filter(|ss| ss.deadline > 0) else { return false };
                node.attempts[k] =
                    Some(Attempt { sid: ss.sid, expires: self.cfg.renew_interval.min(ss.deadline), detached: false });
                n.net.push(Msg { node: i, body: Body::Acquire { sid: ss.sid, name }, fate: Fate::Live, age: 0 });
                log.note(|_| format!("n{i}: sends acquire({}, s{})", name_of(name), ss.sid));
            }
            _ => return false,
        }
        true
    }

    /// [`apply_raw`](Self::apply_raw), then the symmetry reduction: the two nodes are
    /// interchangeable once their rates are swapped too, so of a state and its mirror image
    /// the one with the smaller fingerprint stands for both.
    fn apply(&self, s: &State, a: Action) -> Option<(State, Option<Violation<Invariant>>)> {
        let (n, v) = self.apply_raw(s, a, &mut Log::off())?;
        Some((self.symmetric(n), v))
    }

    /// The representative of `s` and its mirror image: the one whose node 0 (with its rate)
    /// orders first, and on a tie the one whose network orders first.
    fn symmetric(&self, s: State) -> State {
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

    /// [`Schedule::Timers`]: every running node sends what its rules and timers allow.
    fn eager_sends(&self, s: &mut State, log: &mut Log) {
        for i in 0..NODES as u8 {
            self.send(s, Action::Open(i), log);
            self.send(s, Action::KeepAlive(i), log);
            for n in 0..self.cfg.names as u8 {
                self.send(s, Action::Acquire(i, n), log);
            }
        }
    }

    /// `s` with the nodes swapped.
    fn mirror(&self, s: &State) -> State {
        let mut m = *s;
        m.nodes.swap(0, 1);
        m.rates.swap(1, 2);
        for msg in &mut m.net {
            msg.node = 1 - msg.node;
        }
        self.canon(&mut m);
        m
    }

    /// `a` with the nodes swapped.
    fn mirror_action(a: Action) -> Action {
        let o = |i: u8| 1 - i;
        match a {
            Action::Tick(r, k) => Action::Tick(
                [r[0], r[2], r[1]],
                match k {
                    Straggle::One(m) => Straggle::One(Msg { node: o(m.node), ..m }),
                    k => k,
                },
            ),
            Action::Open(i) => Action::Open(o(i)),
            Action::KeepAlive(i) => Action::KeepAlive(o(i)),
            Action::Acquire(i, n) => Action::Acquire(o(i), n),
            Action::StepDown(i, n) => Action::StepDown(o(i), n),
            Action::Pause(i, t) => Action::Pause(o(i), t),
            Action::Crash(i) => Action::Crash(o(i)),
            Action::NodeReceives(m) => Action::NodeReceives(Msg { node: o(m.node), ..m }),
            Action::BackendReceives(m) => Action::BackendReceives(Msg { node: o(m.node), ..m }),
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
            Action::StepDown(i, name) => {
                let k = usize::from(name);
                if !running(i) || k >= names {
                    return None;
                }
                let iu = usize::from(i);
                let node = n.nodes[iu];
                if node.terms[k] != 0 {
                    let ss = node.session.expect("a term belongs to the current session");
                    let t = node.terms[k];
                    n.nodes[iu].terms[k] = 0;
                    log.note(|_| format!("n{i}: steps down from {}#{t}: term revoked", name_of(name)));
                    self.release_won(&mut n, iu, (ss.sid, name, t), "handover (H1, T7)", log);
                } else if let Some(att) = node.attempts[k].filter(|a| !a.detached) {
                    if self.is(Mutant::AbandonFreesSlot) {
                        n.nodes[iu].attempts[k] = None;
                    } else {
                        n.nodes[iu].attempts[k] = Some(Attempt { detached: true, ..att });
                    }
                    for m in &mut n.net {
                        let of_it = matches!(m.body, Body::Acquire { name: x, .. } | Body::AcqReply { name: x, .. } if x == name);
                        if usize::from(m.node) == iu && m.fate == Fate::Live && of_it {
                            m.fate = Fate::Detached;
                        }
                    }
                    log.note(|_| format!("n{i}: steps down while acquiring {}: attempt abandoned", name_of(name)));
                } else {
                    return None;
                }
                None
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
    ///   removed (under [`Mutant::ReleaseWithoutToken`], whose releases ignore the token and
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
        s.net.retain(|m| match m.body {
            Body::Release { sid, name, token } => {
                let l = leases[usize::from(name)];
                if ignore_token { live(sid) } else { l.holder == sid && l.token == token }
            }
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
                if let Some(ss) = &mut node.session
                    && ss.released[n] < low
                {
                    ss.released[n] = 0;
                }
            }
        }
        if self.cfg.schedule == Schedule::Anytime {
            for node in &mut s.nodes {
                node.retry_at = [0; MAX_NAMES];
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

    /// Renders a counterexample as a readable trace, with absolute clock readings.
    pub fn render(&self, cex: &Counterexample<State, Action, Invariant>) -> String {
        let mut out = String::new();
        match self.cfg.mutant {
            Some(m) => {
                let _ = writeln!(out, "rules: mutant {m:?}");
            }
            None => {
                let _ = writeln!(out, "rules: correct");
            }
        }
        if self.cfg.rate_mode == RateMode::Fixed {
            let r = cex.initial.rates;
            let _ = writeln!(out, "clock rates per real tick: backend {}, n0 {}, n1 {}", r[0], r[1], r[2]);
        }
        let _ = writeln!(
            out,
            "lease {} (backend units), drift {}/{}, margin {}, renew_interval {}: node validity = {} node units",
            self.cfg.lease,
            self.cfg.drift.0,
            self.cfg.drift.1,
            self.cfg.margin,
            self.cfg.renew_interval,
            self.validity(self.cfg.lease)
        );
        if self.cfg.schedule == Schedule::Timers {
            let _ = writeln!(out, "  0. t=0 [B=0 n0=0 n1=0] n0 and n1: send open-session (sent at 0)");
        }
        let mut log = Log { clocks: [0; 3], now: 0, lines: Some(Vec::new()) };
        // The trace's actions apply to representatives (see `symmetric`); `s` is the state as
        // it really evolves, and `mirrored` says whether the representative is its mirror.
        let mut s = cex.initial;
        let mut mirrored = false;
        for (k, a) in cex.actions.iter().enumerate() {
            log.lines = Some(Vec::new());
            let a = if mirrored { Self::mirror_action(*a) } else { *a };
            let (next, _) = self.apply_raw(&s, a, &mut log).expect("a replayed action is enabled");
            mirrored = self.symmetric(next) != next;
            let c = log.clocks;
            let head = format!("{:>3}. t={} [B={} n0={} n1={}]", k + 1, log.now, c[0], c[1], c[2]);
            let lines = log.lines.take().unwrap_or_default();
            for (j, l) in lines.iter().enumerate() {
                if j == 0 {
                    let _ = writeln!(out, "{head} {l}");
                } else {
                    let _ = writeln!(out, "{:width$} {l}", "", width = head.len());
                }
            }
            s = next;
        }
        let _ = writeln!(out, "state: {}", self.describe(&s, &log.clocks));
        let _ = writeln!(out, "VIOLATED {:?}: {}", cex.violation.invariant, cex.violation.detail);
        out
    }

    /// A one-line summary of `s`, with absolute readings.
    fn describe(&self, s: &State, c: &[i64; 3]) -> String {
        let mut d = String::new();
        for (i, node) in s.nodes.iter().enumerate() {
            let _ = write!(d, "n{i}: ");
            match node.session {
                Some(ss) => {
                    let _ = write!(d, "s{} deadline n{i}={}", ss.sid, Log::node_at(c, i, ss.deadline));
                }
                None => d.push_str("no session"),
            }
            for n in 0..self.cfg.names {
                if node.terms[n] != 0 {
                    let _ = write!(d, ", term {}#{}", name_of(n as u8), node.terms[n]);
                }
            }
            d.push_str("; ");
        }
        d.push_str("backend:");
        if s.sessions.is_empty() {
            d.push_str(" no live session");
        }
        for (sid, e) in &s.sessions {
            let _ = write!(d, " s{sid} expires at B={}", c[0] + i64::from(*e));
        }
        for (n, l) in s.leases.iter().enumerate().take(self.cfg.names) {
            if l.holder == 0 {
                let _ = write!(d, ", lease {} free (last token {})", name_of(n as u8), l.token);
            } else {
                let _ = write!(d, ", lease {} held by s{} with token {}", name_of(n as u8), l.holder, l.token);
            }
        }
        d
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
                out.push(Transition { action: a, next, violation });
            }
        }
    }

    fn check(&self, s: &State) -> Option<Violation<Invariant>> {
        for n in 0..self.cfg.names {
            let valid: Vec<usize> = (0..NODES)
                .filter(|&i| s.nodes[i].terms[n] != 0 && s.nodes[i].session.is_some_and(|ss| ss.deadline > 0))
                .collect();
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
