//! An in-process backend for tests and single-process use.
//!
//! Its clock is Tokio's (`tokio::time::Instant`), so tests on paused time control when
//! sessions expire. It is the reference implementation of the [`Backend`] contract.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::sync::broadcast;
use tokio::time::Instant;

use super::{
    Acquire, Backend, BackendResult, GroupInfo, HeldDigest, KeepAlive, LeaseInfo, SessionGrant, SessionId, SessionInfo,
    StoreSnapshot,
};

/// An in-memory store shared by every clone (so several clients in one process can contend).
#[derive(Clone)]
pub struct MemoryBackend {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    releases: broadcast::Sender<String>,
    max_ttl: Option<Duration>,
}

#[derive(Default)]
struct State {
    sessions: HashMap<SessionId, SessionRec>,
    leases: HashMap<String, LeaseRec>,
    members: HashMap<String, BTreeSet<SessionId>>,
}

struct SessionRec {
    expires_at: Instant,
    ttl: Duration,
    opened_at: Instant,
}

struct LeaseRec {
    session: Option<SessionId>,
    token: u64,
    last_slot: Option<i64>,
    acquired_at: Option<Instant>,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// An empty store.
    pub fn new() -> Self {
        Self::build(None)
    }

    /// An empty store that grants sessions at most `max` (as ZooKeeper's
    /// `maxSessionTimeout` does), to exercise rule D4.
    pub fn with_max_session_ttl(max: Duration) -> Self {
        Self::build(Some(max))
    }

    fn build(max_ttl: Option<Duration>) -> Self {
        let (releases, _) = broadcast::channel(1024);
        MemoryBackend { inner: Arc::new(Inner { state: Mutex::default(), releases, max_ttl }) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Test hook: makes `session` the holder of `name` as if another client had overwritten
    /// the record in the store (a manual takeover). The token grows as for any new term.
    pub fn force_holder(&self, name: &str, session: Option<&SessionId>) -> u64 {
        let mut st = self.state();
        let rec = st.leases.entry(name.to_owned()).or_insert(LeaseRec {
            session: None,
            token: 0,
            last_slot: None,
            acquired_at: None,
        });
        rec.token += 1;
        rec.session = session.cloned();
        rec.acquired_at = Some(Instant::now());
        rec.token
    }

    /// Test hook: expires `session` at once, as if the store's clock had passed its expiry.
    pub fn expire_session(&self, session: &SessionId) {
        let mut st = self.state();
        st.expire(session);
    }

    /// The current holder and token of lease `name`, if it was ever held.
    pub fn holder(&self, name: &str) -> Option<(Option<SessionId>, u64)> {
        let mut st = self.state();
        st.sweep(Instant::now());
        st.leases.get(name).map(|l| (l.session.clone(), l.token))
    }
}

impl State {
    /// Drops sessions whose time is up, freeing their leases and memberships.
    fn sweep(&mut self, now: Instant) {
        let dead: Vec<SessionId> =
            self.sessions.iter().filter(|(_, s)| s.expires_at <= now).map(|(id, _)| id.clone()).collect();
        for id in dead {
            self.expire(&id);
        }
    }

    fn expire(&mut self, id: &SessionId) {
        self.sessions.remove(id);
        for l in self.leases.values_mut() {
            if l.session.as_ref() == Some(id) {
                l.session = None;
            }
        }
        for m in self.members.values_mut() {
            m.remove(id);
        }
    }

    fn live(&self, id: &SessionId) -> bool {
        self.sessions.contains_key(id)
    }
}

impl Backend for MemoryBackend {
    async fn open_session(&self, ttl: Duration) -> BackendResult<SessionGrant> {
        let ttl = self.inner.max_ttl.map_or(ttl, |m| ttl.min(m));
        let id = SessionId::random();
        let mut st = self.state();
        let now = Instant::now();
        st.sessions.insert(id.clone(), SessionRec { expires_at: now + ttl, ttl, opened_at: now });
        Ok(SessionGrant { id, remaining: ttl })
    }

    async fn keep_alive(&self, session: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
        let now = Instant::now();
        let mut st = self.state();
        st.sweep(now);
        let Some(rec) = st.sessions.get_mut(session) else {
            return Ok(KeepAlive::Expired);
        };
        rec.expires_at = now + rec.ttl;
        let remaining = rec.expires_at - now;
        let mut digest = HeldDigest::default();
        for l in st.leases.values().filter(|l| l.session.as_ref() == Some(session)) {
            digest.add(l.token);
        }
        Ok(KeepAlive::Alive { remaining, digest_matches: digest == held })
    }

    async fn acquire(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        let mut st = self.state();
        st.sweep(Instant::now());
        if !st.live(session) {
            return Ok(Acquire::Expired);
        }
        let rec = st.leases.entry(name.to_owned()).or_insert(LeaseRec {
            session: None,
            token: 0,
            last_slot: None,
            acquired_at: None,
        });
        match &rec.session {
            Some(s) if s == session => Ok(Acquire::Won(rec.token)),
            Some(_) => Ok(Acquire::Held),
            None => {
                rec.token += 1;
                rec.session = Some(session.clone());
                rec.acquired_at = Some(Instant::now());
                Ok(Acquire::Won(rec.token))
            }
        }
    }

    async fn release(&self, session: &SessionId, name: &str, token: u64) -> BackendResult<bool> {
        let released = {
            let mut st = self.state();
            st.sweep(Instant::now());
            match st.leases.get_mut(name) {
                Some(l) if l.session.as_ref() == Some(session) && l.token == token => {
                    l.session = None;
                    true
                }
                _ => false,
            }
        };
        if released {
            let _ = self.inner.releases.send(name.to_owned());
        }
        Ok(released)
    }

    async fn close_session(&self, session: &SessionId) -> BackendResult<()> {
        let freed: Vec<String> = {
            let mut st = self.state();
            let freed =
                st.leases.iter().filter(|(_, l)| l.session.as_ref() == Some(session)).map(|(n, _)| n.clone()).collect();
            st.expire(session);
            freed
        };
        for name in freed {
            let _ = self.inner.releases.send(name);
        }
        Ok(())
    }

    async fn owned(&self, session: &SessionId) -> BackendResult<Vec<(String, u64)>> {
        let mut st = self.state();
        st.sweep(Instant::now());
        let mut v: Vec<(String, u64)> = st
            .leases
            .iter()
            .filter(|(_, l)| l.session.as_ref() == Some(session))
            .map(|(n, l)| (n.clone(), l.token))
            .collect();
        v.sort();
        Ok(v)
    }

    async fn claim_slot(&self, session: &SessionId, name: &str, token: u64, slot: i64) -> BackendResult<bool> {
        let mut st = self.state();
        st.sweep(Instant::now());
        match st.leases.get_mut(name) {
            Some(l)
                if l.session.as_ref() == Some(session) && l.token == token && l.last_slot.is_none_or(|s| s < slot) =>
            {
                l.last_slot = Some(slot);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn join_group(&self, session: &SessionId, group: &str) -> BackendResult<()> {
        let mut st = self.state();
        st.sweep(Instant::now());
        if !st.live(session) {
            return Err(super::BackendError::Protocol(format!(
                "session {session} expired; cannot join group `{group}`"
            )));
        }
        st.members.entry(group.to_owned()).or_default().insert(session.clone());
        Ok(())
    }

    async fn leave_group(&self, session: &SessionId, group: &str) -> BackendResult<()> {
        let mut st = self.state();
        if let Some(m) = st.members.get_mut(group) {
            m.remove(session);
        }
        Ok(())
    }

    async fn members(&self, group: &str) -> BackendResult<Vec<SessionId>> {
        let mut st = self.state();
        st.sweep(Instant::now());
        Ok(st.members.get(group).map(|m| m.iter().cloned().collect()).unwrap_or_default())
    }

    /// Times are on Tokio's clock; `acquired_at` is mapped onto the system clock for display.
    async fn inspect(&self) -> BackendResult<StoreSnapshot> {
        let now = Instant::now();
        let wall = SystemTime::now();
        let mut st = self.state();
        st.sweep(now);
        let sessions = st
            .sessions
            .iter()
            .map(|(id, s)| SessionInfo {
                id: id.clone(),
                age: Some(now.saturating_duration_since(s.opened_at)),
                remaining: Some(s.expires_at.saturating_duration_since(now)),
            })
            .collect();
        let leases = st
            .leases
            .iter()
            .filter_map(|(name, l)| {
                let session = l.session.clone()?;
                let acquired_at = l.acquired_at.map(|t| wall - now.saturating_duration_since(t));
                Some(LeaseInfo { name: name.clone(), session, token: l.token, acquired_at })
            })
            .collect();
        let groups = st
            .members
            .iter()
            .map(|(name, m)| GroupInfo { name: name.clone(), members: m.iter().cloned().collect() })
            .collect();
        Ok(StoreSnapshot { taken_at: None, sessions, leases, groups }.normalized())
    }

    fn subscribe_releases(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.inner.releases.subscribe())
    }

    fn describe(&self) -> String {
        "memory://".to_owned()
    }
}
