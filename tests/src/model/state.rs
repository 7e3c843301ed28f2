//! The state of the lease model, packed small: nodes, backend, messages in flight, and the
//! actions that move it. Timestamps are relative to their owner's clock (see [`super::lease`]).

use super::bag::Bag;
use super::config::{MAX_NAMES, MAX_SESSIONS, NET_CAP, NODES};

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
    /// Reply: the backend processed `release(name, sid, token)`; after it, the lease is not
    /// held by `sid` with `token` (whether it freed it or it was a no-op).
    ReleaseAck {
        /// Session.
        sid: u8,
        /// Lease name index.
        name: u8,
        /// Token of the release.
        token: u8,
    },
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
    pub(crate) fn is_request(&self) -> bool {
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
            Body::ReleaseAck { sid, name, token } => (9, (b(sid) << 16) | (b(name) << 8) | b(token)),
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
            Body::ReleaseAck { name, token, .. } => {
                write!(f, "release of {}#{token} acknowledged to n{n}", name_of(name))
            }
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
    /// A release of `released[n]` was acknowledged while an acquisition of `n` was in flight:
    /// the record is forgotten when that attempt ends ([`Config::release_acks`]).
    ///
    /// [`Config::release_acks`]: super::config::Config::release_acks
    pub acked: [bool; MAX_NAMES],
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

/// The phase of the engine's election machine (`simba_core::election::ElectionMachine`) of
/// one name, in the model's compact form: the model rebuilds the core's machine from it for
/// every event (see `lease::election`) and reads the phase back. Instants are node clock units
/// relative to the node's clock now, clamped at 0 (due).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum EPhase {
    /// Wants to attempt once a session is live.
    #[default]
    Candidate,
    /// The machine asked for an acquisition; it is in flight, or waits for the K3 slot.
    Attempting,
    /// K1: the next attempt at this instant.
    Waiting(i16),
    /// H4: out of contention until this instant.
    CoolingDown(i16),
    /// Holds a term.
    Leading,
    /// A handover's commands are being executed; then what the machine does next.
    HandingOver(Then),
    /// The election ended.
    Stopped,
}

/// What an election does once a handover is done (the core's private `Then`, read back by
/// probing a copy of the machine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Then {
    /// Contend again after the candidate delay (the task returned).
    Contend,
    /// Cool down for this many node clock units (a step-down).
    CoolDown(i16),
    /// Stop.
    Stop,
}

/// One node's election of one name: the machine's phase and what the shell holds for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Elect {
    /// The machine's phase.
    pub phase: EPhase,
    /// The term's task runs ([`Config::tasks`](super::config::Config::tasks)).
    pub task: bool,
    /// The handover revoked the term (it is no longer valid; the session still lists it until
    /// its release, T7).
    pub revoked: bool,
    /// Node clock units until a handover's `AwaitTask` aborts the task: the term's deadline
    /// when it was revoked (H5).
    pub abort_at: i16,
    /// While a handover's `AwaitTask` waits for the task: the index of the next command in
    /// the handover's list (which the core gives again for the phase's handover), else 0.
    pub pending: u8,
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
    /// The election of each name (the core's machine and the shell's task and handover).
    pub elect: [Elect; MAX_NAMES],
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
                w.put(1, u64::from(ss.acked[0])).put(1, u64::from(ss.acked[1]));
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
        w.u8(self.max_adopted[0]).u8(self.max_adopted[1]);
        for e in &self.elect {
            let (tag, t) = match e.phase {
                EPhase::Candidate => (0, 0),
                EPhase::Attempting => (1, 0),
                EPhase::Waiting(t) => (2, t),
                EPhase::CoolingDown(t) => (3, t),
                EPhase::Leading => (4, 0),
                EPhase::HandingOver(Then::Contend) => (5, 0),
                EPhase::HandingOver(Then::CoolDown(t)) => (6, t),
                EPhase::HandingOver(Then::Stop) => (7, 0),
                EPhase::Stopped => (8, 0),
            };
            w.put(4, tag).i16(t);
        }
        state.write_u64(w.value);
        for (k, e) in self.elect.iter().enumerate() {
            if e.task || e.revoked || e.pending != 0 || e.abort_at != 0 {
                let mut w = Packer::default();
                w.put(2, k as u64).put(1, u64::from(e.task)).put(1, u64::from(e.revoked)).i16(e.abort_at).u8(e.pending);
                state.write_u64(w.value);
            }
        }
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
    pub(crate) fn expiry(&self, sid: u8) -> Option<i16> {
        self.sessions.iter().find(|(s, _)| *s == sid).map(|(_, e)| *e)
    }

    pub(crate) fn take_msg(&mut self, m: &Msg) -> bool {
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
    /// A node's election steps down (H4: `ElectionMachine::step_down`): hands its term over
    /// (H1), or abandons its attempt.
    StepDown(u8, u8),
    /// The task of a node's term of a name returns ([`Config::tasks`]): on its own (the
    /// election steps down) or at the cancellation a handover signalled.
    ///
    /// [`Config::tasks`]: super::config::Config::tasks
    TaskReturns(u8, u8),
    /// A node pauses for some ticks (GC, SIGSTOP): its clock runs, it does nothing.
    Pause(u8, u8),
    /// A node crashes and restarts with an empty memory.
    Crash(u8),
    /// A node reads a reply.
    NodeReceives(Msg),
    /// The backend processes a request.
    BackendReceives(Msg),
}

/// The printed name of lease `n`: `a`, `b`, ...
pub(crate) fn name_of(n: u8) -> char {
    (b'a' + n) as char
}
