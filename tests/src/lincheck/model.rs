//! The sequential model of the lease contract, for one lease name (rules V4, L-rules of
//! `Backend`'s contract: S3, T3, T7, and the exclusive holder).
//!
//! The state is the lease's holder (free, a session with its token, or a holder from before
//! the history began), the highest token granted so far, the highest slot claimed, and for
//! each session of the history whether it has expired and the earliest instant the store may
//! expire it: its *window*, the latest `invoked + remaining` of its open and of its successful
//! keep-alives (the store counts `remaining` from the instant the call took effect, which is
//! after its invocation).
//!
//! Expiry is the one thing the model cannot see happen: the store does it on its own clock.
//! It is taken lazily, when an answer needs it (another session wins the lease, the session
//! answers "expired", a release of the session's own lease is refused), and only where the
//! answering operation completed at or after the session's window (less a [`Tolerance`]);
//! once taken, the session never answers live again (S3). A store may also expire later than
//! the window, or free an expired holder's lease late: the model never requires an expiry.
//!
//! Operations whose outcome is unknown (an error, a call the engine dropped, a call in flight
//! when its process was killed) may have taken effect at any instant after their invocation,
//! or never: the search applies them only where they change the state (an acquisition that
//! wins, a release that frees, a close), never where they would only be read.

use std::time::Duration;

/// How much earlier than its window the store may expire a session without the checker
/// calling it a violation: the store's clock against the host's monotonic one (a SQL store's
/// `now()` is the wall clock, which NTP may slew), and rounding of the `remaining` a store
/// reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tolerance(pub Duration);

impl Default for Tolerance {
    /// 10 ms, or `SIMBA_CHECKER_TOLERANCE_MS`.
    fn default() -> Self {
        let ms = std::env::var("SIMBA_CHECKER_TOLERANCE_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
        Tolerance(Duration::from_millis(ms))
    }
}

/// An acquisition's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acq {
    Won(u64),
    Held,
    Expired,
}

/// One operation of a name's history, its session numbered within the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A session opened with this lifetime (ns).
    Open { remaining: u128 },
    /// A keep-alive answered alive, with this lifetime (ns).
    Alive { remaining: u128 },
    /// A keep-alive answered expired.
    KeepExpired,
    /// An acquisition; `None` when its answer is unknown.
    Acquire(Option<Acq>),
    /// A release of `token`; `None` when its answer is unknown.
    Release { token: u64, freed: Option<bool> },
    /// A close (its answer known or not: a close changes the state either way).
    Close,
    /// A listing of the session's leases: its token for this name, if listed.
    Owned { has: Option<u64> },
    /// A successful or refused claim of `slot` under `token`.
    Claim { token: u64, slot: i64, ok: bool },
}

/// An operation of one name's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LOp {
    pub kind: Kind,
    /// The session, numbered within the name's history.
    pub sess: u32,
    pub inv: u128,
    /// `u128::MAX` when the outcome is unknown.
    pub ret: u128,
    /// Its index in the recorded history.
    pub src: usize,
}

impl LOp {
    pub(crate) fn known(&self) -> bool {
        self.ret != u128::MAX
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Sess {
    pub opened: bool,
    pub expired: bool,
    /// The earliest instant the store may expire it (ns).
    pub window: u128,
}

/// A holder's token: known, or granted by an acquisition whose answer was lost (then only a
/// lower bound is known until the session's next answer names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Tok {
    Known(u64),
    AtLeast(u64),
}

impl Tok {
    fn matches(self, t: u64) -> bool {
        match self {
            Tok::Known(k) => k == t,
            Tok::AtLeast(lo) => t >= lo,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Holder {
    Free,
    /// Held before the history began (an earlier run's session), or not: it may end at any time.
    Foreign,
    Session {
        sess: u32,
        token: Tok,
    },
}

/// The model's state for one name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct State {
    pub sess: Vec<Sess>,
    pub holder: Holder,
    /// The highest token granted (a lower bound after a lost grant).
    pub floor: u64,
    pub slot: Option<i64>,
}

impl State {
    /// The state before the history: sessions opened inside it start unopened, the others
    /// (opened before it began) live with no window.
    pub(crate) fn initial(opened_inside: &[bool]) -> State {
        let sess = opened_inside.iter().map(|o| Sess { opened: !o, expired: false, window: 0 }).collect();
        State { sess, holder: Holder::Foreign, floor: 0, slot: None }
    }

    /// The next state after `op` with its recorded answer, or `None` when the contract does
    /// not allow that answer here. For an operation whose answer is unknown, the state after
    /// it took effect, or `None` when taking effect would change nothing.
    pub(crate) fn step(&self, op: &LOp, tol: Tolerance) -> Option<State> {
        let mut s = self.clone();
        let ok = if op.known() { s.apply(op, tol) } else { s.apply_unknown(op) };
        ok.then_some(s)
    }

    fn apply(&mut self, op: &LOp, tol: Tolerance) -> bool {
        let i = op.sess as usize;
        match op.kind {
            Kind::Open { remaining } => {
                self.sess[i] = Sess { opened: true, expired: false, window: op.inv.saturating_add(remaining) };
                true
            }
            Kind::Alive { remaining } => {
                let s = &mut self.sess[i];
                s.window = s.window.max(op.inv.saturating_add(remaining));
                !s.expired
            }
            Kind::KeepExpired | Kind::Acquire(Some(Acq::Expired)) => self.expire(i, op.ret, tol),
            Kind::Acquire(Some(Acq::Won(t))) => self.won(i, t, op.ret, tol),
            Kind::Acquire(Some(Acq::Held)) => self.held(i),
            Kind::Release { token, freed: Some(true) } => self.release(i, token),
            Kind::Release { token, freed: Some(false) } => self.release_refused(i, token, op.ret, tol),
            Kind::Close => {
                self.close(i);
                true
            }
            Kind::Owned { has } => self.owned(i, has, op.ret, tol),
            Kind::Claim { token, slot, ok } => !ok || self.claim(i, token, slot),
            Kind::Acquire(None) | Kind::Release { freed: None, .. } => false,
        }
    }

    fn apply_unknown(&mut self, op: &LOp) -> bool {
        let i = op.sess as usize;
        match op.kind {
            Kind::Acquire(None) => {
                if self.sess[i].expired || matches!(self.holder, Holder::Session { sess, .. } if sess == op.sess) {
                    return false;
                }
                if let Holder::Session { sess, .. } = self.holder {
                    // Won only if the store had expired the holder: some instant after the
                    // invocation, however late, may be past its window.
                    self.sess[sess as usize].expired = true;
                }
                self.floor += 1;
                self.holder = Holder::Session { sess: op.sess, token: Tok::AtLeast(self.floor) };
                true
            }
            Kind::Release { token, freed: None } => self.release(i, token),
            Kind::Close if !self.sess[i].expired => {
                self.close(i);
                true
            }
            _ => false,
        }
    }

    /// Marks session `i` expired, where an operation that completed at `ret` allows it.
    fn expire(&mut self, i: usize, ret: u128, tol: Tolerance) -> bool {
        let s = &mut self.sess[i];
        if s.expired {
            return true;
        }
        if ret.saturating_add(tol.0.as_nanos()) < s.window {
            return false;
        }
        s.expired = true;
        true
    }

    fn won(&mut self, i: usize, t: u64, ret: u128, tol: Tolerance) -> bool {
        if self.sess[i].expired {
            return false;
        }
        let holder = self.holder;
        match holder {
            // A retry after a lost reply answers the current token, unchanged.
            Holder::Session { sess, token } if sess as usize == i => {
                if !token.matches(t) {
                    return false;
                }
                self.holder = Holder::Session { sess, token: Tok::Known(t) };
                self.floor = self.floor.max(t);
                true
            }
            Holder::Session { sess, .. } if !self.expire(sess as usize, ret, tol) => false,
            _ if t <= self.floor => false,
            _ => {
                self.holder = Holder::Session { sess: i as u32, token: Tok::Known(t) };
                self.floor = t;
                true
            }
        }
    }

    fn held(&self, i: usize) -> bool {
        match self.holder {
            Holder::Free => false,
            Holder::Session { sess, .. } => sess as usize != i || self.sess[i].expired,
            Holder::Foreign => true,
        }
    }

    fn release(&mut self, i: usize, t: u64) -> bool {
        match self.holder {
            Holder::Session { sess, token } if sess as usize == i && token.matches(t) => {
                self.holder = Holder::Free;
                self.floor = self.floor.max(t);
                true
            }
            _ => false,
        }
    }

    fn release_refused(&mut self, i: usize, t: u64, ret: u128, tol: Tolerance) -> bool {
        let holder = self.holder;
        match holder {
            Holder::Session { sess, token: Tok::Known(k) } if sess as usize == i && k == t => self.expire(i, ret, tol),
            _ => true,
        }
    }

    /// A close ends the session at once (S3 from now on, and anybody may win its leases), but
    /// its leases may still be answered as held for a while: ZooKeeper's close answers once its
    /// wait for the server's confirmation ran out, and the server, restarted, keeps the session
    /// and its ephemeral lease node until it expires them itself.
    fn close(&mut self, i: usize) {
        self.sess[i].expired = true;
    }

    fn owned(&mut self, i: usize, has: Option<u64>, ret: u128, tol: Tolerance) -> bool {
        let mine = match self.holder {
            Holder::Session { sess, token } if sess as usize == i => Some(token),
            _ => None,
        };
        match (has, mine) {
            (Some(t), Some(token)) if token.matches(t) => {
                self.holder = Holder::Session { sess: i as u32, token: Tok::Known(t) };
                true
            }
            (Some(_), _) => false,
            (None, Some(_)) => self.expire(i, ret, tol),
            (None, None) => true,
        }
    }

    fn claim(&mut self, i: usize, t: u64, slot: i64) -> bool {
        let holds = matches!(self.holder, Holder::Session { sess, token } if sess as usize == i && token.matches(t));
        if !holds || self.sess[i].expired || self.slot.is_some_and(|s| slot <= s) {
            return false;
        }
        self.slot = Some(slot);
        true
    }

    /// One line for a report: the holder and the highest token.
    pub(crate) fn describe(&self, sessions: &[String]) -> String {
        let name = |s: u32| sessions.get(s as usize).cloned().unwrap_or_default();
        let holder = match self.holder {
            Holder::Free => "free".to_owned(),
            Holder::Foreign => "unknown (held before the history began, or free)".to_owned(),
            Holder::Session { sess, token } => format!(
                "session {} with token {}{}",
                name(sess),
                match token {
                    Tok::Known(t) => t.to_string(),
                    Tok::AtLeast(t) => format!(">= {t} (a lost grant)"),
                },
                if self.sess[sess as usize].expired { ", expired" } else { "" }
            ),
        };
        format!("holder {holder}; highest token {}", self.floor)
    }
}
