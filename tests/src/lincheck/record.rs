//! The recorder: a backend wrapper that writes every lease operation as two lines, one when
//! it is invoked and one when it completes, each with an instant on the host's monotonic
//! clock ([`crate::node_log::mono_ns`]: `CLOCK_MONOTONIC` read through rustix's vDSO path, the
//! same clock for every process on the host and out of libfaketime's reach).
//!
//! ```text
//! call <process> <seq> <ns> open <ttl_ns>
//! call <process> <seq> <ns> keep <session>
//! call <process> <seq> <ns> acquire <session> <name>
//! call <process> <seq> <ns> release <session> <name> <token>
//! call <process> <seq> <ns> close <session>
//! call <process> <seq> <ns> owned <session>
//! call <process> <seq> <ns> claim <session> <name> <token> <slot>
//! ret <process> <seq> <ns> opened <session> <remaining_ns> | alive <remaining_ns> | expired
//!     | won <token> | held | bool <0|1> | done | owned <n> (<name> <token>)* | err | lost
//! ```
//!
//! `<process>` is a random tag drawn once per recorder (PIDs come back within a long run).
//! The invocation line is written before the call goes out, so that a node killed while its
//! call was in flight still leaves the call in the history, with an unknown outcome; `err`
//! (the store did not answer) and `lost` (the engine dropped the call at its timeout) are
//! unknown outcomes too: the store may have applied the call, then or later.

use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use simba::backend::{
    Acquire, Backend, BackendResult, HeldDigest, Join, KeepAlive, SessionGrant, SessionId, StoreSnapshot,
};
use tokio::sync::broadcast;

use crate::node_log::mono_ns;

/// A lease operation as the client invoked it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `open_session(ttl)`.
    Open {
        /// The lifetime asked for.
        ttl: Duration,
    },
    /// `keep_alive(session)`.
    KeepAlive {
        /// The session renewed.
        session: String,
    },
    /// `acquire(session, name)`.
    Acquire {
        /// The acquiring session.
        session: String,
        /// The lease.
        name: String,
    },
    /// `release(session, name, token)`.
    Release {
        /// The releasing session.
        session: String,
        /// The lease.
        name: String,
        /// The token released.
        token: u64,
    },
    /// `close_session(session)`.
    Close {
        /// The session closed.
        session: String,
    },
    /// `owned(session)`.
    Owned {
        /// The session listed.
        session: String,
    },
    /// `claim_slot(session, name, token, slot)`.
    Claim {
        /// The claiming session.
        session: String,
        /// The lease.
        name: String,
        /// The term's token.
        token: u64,
        /// The slot claimed.
        slot: i64,
    },
}

impl Call {
    /// The session the call names (`None` for an open).
    pub fn session(&self) -> Option<&str> {
        match self {
            Call::Open { .. } => None,
            Call::KeepAlive { session }
            | Call::Acquire { session, .. }
            | Call::Release { session, .. }
            | Call::Close { session }
            | Call::Owned { session }
            | Call::Claim { session, .. } => Some(session),
        }
    }

    /// The lease the call names, if it names one.
    pub fn name(&self) -> Option<&str> {
        match self {
            Call::Acquire { name, .. } | Call::Release { name, .. } | Call::Claim { name, .. } => Some(name),
            _ => None,
        }
    }

    fn encode(&self) -> String {
        match self {
            Call::Open { ttl } => format!("open {}", ttl.as_nanos()),
            Call::KeepAlive { session } => format!("keep {}", esc(session)),
            Call::Acquire { session, name } => format!("acquire {} {}", esc(session), esc(name)),
            Call::Release { session, name, token } => format!("release {} {} {token}", esc(session), esc(name)),
            Call::Close { session } => format!("close {}", esc(session)),
            Call::Owned { session } => format!("owned {}", esc(session)),
            Call::Claim { session, name, token, slot } => {
                format!("claim {} {} {token} {slot}", esc(session), esc(name))
            }
        }
    }

    fn decode(f: &[&str]) -> Option<Call> {
        let s = |i: usize| f.get(i).map(|x| unesc(x));
        let n = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok());
        Some(match *f.first()? {
            "open" => Call::Open { ttl: Duration::from_nanos(n(1)?) },
            "keep" => Call::KeepAlive { session: s(1)? },
            "acquire" => Call::Acquire { session: s(1)?, name: s(2)? },
            "release" => Call::Release { session: s(1)?, name: s(2)?, token: n(3)? },
            "close" => Call::Close { session: s(1)? },
            "owned" => Call::Owned { session: s(1)? },
            "claim" => Call::Claim { session: s(1)?, name: s(2)?, token: n(3)?, slot: f.get(4)?.parse().ok()? },
            _ => return None,
        })
    }
}

/// What the store answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A session was opened.
    Opened {
        /// Its id.
        session: String,
        /// Its granted lifetime.
        remaining: Duration,
    },
    /// A keep-alive renewed the session.
    Alive {
        /// Its lifetime from the renewal, as the store measured it.
        remaining: Duration,
    },
    /// The session has expired (a keep-alive's or an acquisition's answer).
    Expired,
    /// The acquisition won, with this token.
    Won(u64),
    /// Another live session holds the lease.
    Held,
    /// A release's or a claim's answer.
    Bool(bool),
    /// A close completed.
    Done,
    /// The leases the store lists for the session.
    Owned(Vec<(String, u64)>),
    /// The store did not answer, or the engine dropped the call: it may have taken effect.
    Unknown,
}

impl Outcome {
    fn encode(&self) -> String {
        match self {
            Outcome::Opened { session, remaining } => format!("opened {} {}", esc(session), remaining.as_nanos()),
            Outcome::Alive { remaining } => format!("alive {}", remaining.as_nanos()),
            Outcome::Expired => "expired".into(),
            Outcome::Won(t) => format!("won {t}"),
            Outcome::Held => "held".into(),
            Outcome::Bool(b) => format!("bool {}", u8::from(*b)),
            Outcome::Done => "done".into(),
            Outcome::Owned(l) => {
                let mut s = format!("owned {}", l.len());
                for (name, token) in l {
                    s.push_str(&format!(" {} {token}", esc(name)));
                }
                s
            }
            Outcome::Unknown => "err".into(),
        }
    }

    fn decode(f: &[&str]) -> Option<Outcome> {
        let n = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok());
        Some(match *f.first()? {
            "opened" => Outcome::Opened { session: unesc(f.get(1)?), remaining: Duration::from_nanos(n(2)?) },
            "alive" => Outcome::Alive { remaining: Duration::from_nanos(n(1)?) },
            "expired" => Outcome::Expired,
            "won" => Outcome::Won(n(1)?),
            "held" => Outcome::Held,
            "bool" => Outcome::Bool(n(1)? == 1),
            "done" => Outcome::Done,
            "owned" => {
                let count = n(1)? as usize;
                let mut l = Vec::with_capacity(count);
                for i in 0..count {
                    l.push((unesc(f.get(2 + 2 * i)?), n(3 + 2 * i)?));
                }
                Outcome::Owned(l)
            }
            "err" | "lost" => Outcome::Unknown,
            _ => return None,
        })
    }
}

/// One recorded operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// The recorder that wrote it (one per process).
    pub process: u64,
    /// Its number within that recorder.
    pub seq: u64,
    /// What was asked.
    pub call: Call,
    /// When it was invoked, ns on the host's monotonic clock.
    pub invoked: u128,
    /// When it completed, if it did (also set for an error or a dropped call, whose outcome is
    /// still unknown).
    pub returned: Option<u128>,
    /// What the store answered.
    pub outcome: Outcome,
}

/// Percent-escapes the two characters the line format uses.
fn esc(s: &str) -> String {
    s.replace('%', "%25").replace(' ', "%20").replace('\n', "%0A")
}

fn unesc(s: &str) -> String {
    s.replace("%0A", "\n").replace("%20", " ").replace("%25", "%")
}

/// Reads a history from recorder lines (other lines are skipped). A call without its
/// completion line (its process was killed) has an unknown outcome.
pub fn parse_history<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<Op> {
    let mut ops: Vec<Op> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for line in lines {
        let f: Vec<&str> = line.split(' ').collect();
        let (Some(kind), Some(process), Some(seq), Some(ns)) = (
            f.first().copied(),
            f.get(1).and_then(|s| u64::from_str_radix(s, 16).ok()),
            f.get(2).and_then(|s| s.parse::<u64>().ok()),
            f.get(3).and_then(|s| s.parse::<u128>().ok()),
        ) else {
            continue;
        };
        match kind {
            "call" => {
                if let Some(call) = Call::decode(&f[4..]) {
                    index.insert((process, seq), ops.len());
                    ops.push(Op { process, seq, call, invoked: ns, returned: None, outcome: Outcome::Unknown });
                }
            }
            "ret" => {
                if let (Some(i), Some(outcome)) = (index.get(&(process, seq)), Outcome::decode(&f[4..])) {
                    ops[*i].returned = Some(ns);
                    ops[*i].outcome = outcome;
                }
            }
            _ => {}
        }
    }
    ops
}

enum Sink {
    File(Mutex<std::fs::File>),
    Memory(Mutex<Vec<String>>),
}

struct Inner {
    process: u64,
    seq: AtomicU64,
    sink: Sink,
}

/// Where recorded operations go: a file that several processes append to, or memory.
/// Clones share the sink.
#[derive(Clone)]
pub struct Recorder(Arc<Inner>);

impl Recorder {
    /// Appends to `path` (created if missing), one `write` per line, so that the lines of
    /// several processes never interleave.
    pub fn to_file(path: &Path) -> std::io::Result<Recorder> {
        let f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Recorder::with(Sink::File(Mutex::new(f))))
    }

    /// Keeps the lines in memory ([`Recorder::lines`]).
    pub fn in_memory() -> Recorder {
        Recorder::with(Sink::Memory(Mutex::default()))
    }

    fn with(sink: Sink) -> Recorder {
        Recorder(Arc::new(Inner { process: rand::random::<u64>() >> 1, seq: AtomicU64::new(0), sink }))
    }

    /// The lines recorded in memory (none for a file recorder).
    pub fn lines(&self) -> Vec<String> {
        match &self.0.sink {
            Sink::Memory(m) => m.lock().unwrap_or_else(PoisonError::into_inner).clone(),
            Sink::File(_) => Vec::new(),
        }
    }

    /// The history recorded in memory.
    pub fn history(&self) -> Vec<Op> {
        let lines = self.lines();
        parse_history(lines.iter().map(String::as_str))
    }

    fn write(&self, line: String) {
        match &self.0.sink {
            Sink::File(f) => {
                let mut f = f.lock().unwrap_or_else(PoisonError::into_inner);
                let _ = f.write_all(format!("{line}\n").as_bytes());
            }
            Sink::Memory(m) => m.lock().unwrap_or_else(PoisonError::into_inner).push(line),
        }
    }

    /// Writes the invocation line; the returned guard writes the completion line, or `lost`
    /// when the call's future is dropped first.
    fn begin(&self, call: &Call) -> Pending<'_> {
        let seq = self.0.seq.fetch_add(1, Ordering::Relaxed);
        self.write(format!("call {:x} {seq} {} {}", self.0.process, mono_ns(), call.encode()));
        Pending { rec: self, seq, done: false }
    }
}

/// An operation in flight.
struct Pending<'a> {
    rec: &'a Recorder,
    seq: u64,
    done: bool,
}

impl Pending<'_> {
    fn finish<T>(mut self, r: &BackendResult<T>, outcome: impl FnOnce(&T) -> Outcome) {
        let now = mono_ns();
        let o = match r {
            Ok(v) => outcome(v),
            Err(_) => Outcome::Unknown,
        };
        self.rec.write(format!("ret {:x} {} {now} {}", self.rec.0.process, self.seq, o.encode()));
        self.done = true;
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.rec.write(format!("ret {:x} {} {} lost", self.rec.0.process, self.seq, mono_ns()));
        }
    }
}

/// A backend that records every lease operation of `inner` in a [`Recorder`]. Group calls,
/// `inspect` and the jobs store are forwarded unrecorded.
pub struct RecordingBackend<B> {
    inner: B,
    rec: Recorder,
}

impl<B> RecordingBackend<B> {
    /// Records the calls made to `inner` in `rec`.
    pub fn new(inner: B, rec: Recorder) -> Self {
        RecordingBackend { inner, rec }
    }
}

impl<B: Backend> Backend for RecordingBackend<B> {
    async fn open_session(&self, ttl: Duration) -> BackendResult<SessionGrant> {
        let p = self.rec.begin(&Call::Open { ttl });
        let r = self.inner.open_session(ttl).await;
        p.finish(&r, |g| Outcome::Opened { session: g.id.to_string(), remaining: g.remaining });
        r
    }
    async fn keep_alive(&self, session: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
        let p = self.rec.begin(&Call::KeepAlive { session: session.to_string() });
        let r = self.inner.keep_alive(session, held).await;
        p.finish(&r, |k| match k {
            KeepAlive::Alive { remaining, .. } => Outcome::Alive { remaining: *remaining },
            KeepAlive::Expired => Outcome::Expired,
        });
        r
    }
    async fn acquire(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        let p = self.rec.begin(&Call::Acquire { session: session.to_string(), name: name.into() });
        let r = self.inner.acquire(session, name).await;
        p.finish(&r, |a| match a {
            Acquire::Won(t) => Outcome::Won(*t),
            Acquire::Held => Outcome::Held,
            Acquire::Expired => Outcome::Expired,
        });
        r
    }
    async fn release(&self, session: &SessionId, name: &str, token: u64) -> BackendResult<bool> {
        let p = self.rec.begin(&Call::Release { session: session.to_string(), name: name.into(), token });
        let r = self.inner.release(session, name, token).await;
        p.finish(&r, |b| Outcome::Bool(*b));
        r
    }
    async fn close_session(&self, session: &SessionId) -> BackendResult<()> {
        let p = self.rec.begin(&Call::Close { session: session.to_string() });
        let r = self.inner.close_session(session).await;
        p.finish(&r, |_| Outcome::Done);
        r
    }
    async fn owned(&self, session: &SessionId) -> BackendResult<Vec<(String, u64)>> {
        let p = self.rec.begin(&Call::Owned { session: session.to_string() });
        let r = self.inner.owned(session).await;
        p.finish(&r, |l| Outcome::Owned(l.clone()));
        r
    }
    async fn claim_slot(&self, session: &SessionId, name: &str, token: u64, slot: i64) -> BackendResult<bool> {
        let p = self.rec.begin(&Call::Claim { session: session.to_string(), name: name.into(), token, slot });
        let r = self.inner.claim_slot(session, name, token, slot).await;
        p.finish(&r, |b| Outcome::Bool(*b));
        r
    }
    async fn join_group(&self, session: &SessionId, group: &str) -> BackendResult<Join> {
        self.inner.join_group(session, group).await
    }
    async fn leave_group(&self, session: &SessionId, group: &str) -> BackendResult<()> {
        self.inner.leave_group(session, group).await
    }
    async fn members(&self, group: &str) -> BackendResult<Vec<SessionId>> {
        self.inner.members(group).await
    }
    async fn inspect(&self) -> BackendResult<StoreSnapshot> {
        self.inner.inspect().await
    }
    /// Not recorded: a removal changes no lease's holder, and a name used again gets a token
    /// above its old ones (T3), which the model checks at that acquisition.
    async fn remove_idle_leases(&self, prefix: &str, idle_for: Duration, limit: usize) -> BackendResult<usize> {
        self.inner.remove_idle_leases(prefix, idle_for, limit).await
    }
    fn subscribe_releases(&self) -> Option<broadcast::Receiver<String>> {
        self.inner.subscribe_releases()
    }
    fn job_store(&self) -> Option<simba::job_store::SharedJobStore> {
        self.inner.job_store()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}
