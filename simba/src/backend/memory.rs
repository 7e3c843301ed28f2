//! An in-process backend for tests and single-process use.
//!
//! Its clock is Tokio's (`tokio::time::Instant`), so tests on paused time control when
//! sessions expire. It is the reference implementation of the [`Backend`] contract.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use simba_core::claim::{self, ControlRow, Decision, Logs, RequestLog, SlotHistory, Trigger};
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::backend::job_store::{
    Claim, ClaimRequest, DEFAULT_RETENTION, JobState, JobStore, RunRecord, SharedJobStore, SlotKind, Triggered,
    group_of, slot_history, truncate_error,
};

use super::{
    Acquire, Backend, BackendResult, GroupInfo, HeldDigest, Join, KeepAlive, LeaseInfo, SessionGrant, SessionId,
    SessionInfo, StoreSnapshot,
};

/// An in-memory store shared by every clone (so several clients in one process can contend).
#[derive(Clone)]
pub struct MemoryBackend {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    releases: broadcast::Sender<String>,
    control: broadcast::Sender<String>,
    max_ttl: Option<Duration>,
    /// The schedule store (ADR 0020): apart from the leases, which it never reads.
    schedules: super::memory_schedules::MemorySchedules,
}

#[derive(Default)]
struct State {
    sessions: HashMap<SessionId, SessionRec>,
    leases: HashMap<String, LeaseRec>,
    /// The highest token of a removed lease record: a new record starts above it (B3, T3).
    token_floor: u64,
    members: HashMap<String, BTreeSet<SessionId>>,
    jobs: JobsMem,
}

/// The jobs store's part of the state.
struct JobsMem {
    retention: usize,
    version: u64,
    /// Control rows by job name, as the core's claim rule reads and writes them.
    controls: BTreeMap<String, ControlRow>,
    /// Run-now request logs by job name, beside the control rows.
    requests: BTreeMap<String, RequestLog>,
    /// Per job: records by `(slot_ms, kind)`.
    records: BTreeMap<String, BTreeMap<(i64, SlotKind), RunRecord>>,
    /// What each session published ([`JobStore::publish_registry`]).
    registries: BTreeMap<SessionId, String>,
}

impl Default for JobsMem {
    fn default() -> Self {
        JobsMem {
            retention: DEFAULT_RETENTION,
            version: 0,
            controls: BTreeMap::new(),
            requests: BTreeMap::new(),
            records: BTreeMap::new(),
            registries: BTreeMap::new(),
        }
    }
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
        let (control, _) = broadcast::channel(1024);
        MemoryBackend {
            inner: Arc::new(Inner {
                state: Mutex::default(),
                releases,
                control,
                max_ttl,
                schedules: super::memory_schedules::MemorySchedules::default(),
            }),
        }
    }

    /// Keeps at most `records` history records per job in this store (and every clone of it;
    /// default [`DEFAULT_RETENTION`]). At least 1.
    #[must_use]
    pub fn with_job_retention(self, records: usize) -> Self {
        self.state().jobs.retention = records.max(1);
        self
    }

    /// This store's jobs store (the same as [`Backend::job_store`]).
    pub fn jobs(&self) -> MemoryJobStore {
        MemoryJobStore { inner: Arc::clone(&self.inner), retention: None }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Test hook: makes `session` the holder of `name` as if another client had overwritten
    /// the record in the store (a manual takeover). The token grows as for any new term.
    pub fn force_holder(&self, name: &str, session: Option<&SessionId>) -> u64 {
        let mut st = self.state();
        let floor = st.token_floor;
        let rec = st.leases.entry(name.to_owned()).or_insert(LeaseRec {
            session: None,
            token: floor,
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
        let floor = st.token_floor;
        let rec = st.leases.entry(name.to_owned()).or_insert(LeaseRec {
            session: None,
            token: floor,
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
            let mut freed: Vec<String> =
                st.leases.iter().filter(|(_, l)| l.session.as_ref() == Some(session)).map(|(n, _)| n.clone()).collect();
            // In name order, not the map's: a seeded simulation replays bit for bit (ADR 0021).
            freed.sort();
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

    async fn join_group(&self, session: &SessionId, group: &str) -> BackendResult<Join> {
        let mut st = self.state();
        st.sweep(Instant::now());
        if !st.live(session) {
            return Ok(Join::Expired);
        }
        st.members.entry(group.to_owned()).or_default().insert(session.clone());
        Ok(Join::Joined)
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

    async fn remove_idle_leases(&self, prefix: &str, idle_for: Duration, limit: usize) -> BackendResult<usize> {
        let now = Instant::now();
        let mut st = self.state();
        st.sweep(now);
        let idle = |l: &LeaseRec| {
            l.session.is_none()
                && l.last_slot.is_none()
                && l.acquired_at.is_none_or(|t| now.saturating_duration_since(t) >= idle_for)
        };
        let mut gone: Vec<String> =
            st.leases.iter().filter(|(n, l)| n.starts_with(prefix) && idle(l)).map(|(n, _)| n.clone()).collect();
        // In name order, not the map's: a seeded simulation replays bit for bit (ADR 0021).
        gone.sort();
        gone.truncate(limit);
        for name in &gone {
            if let Some(l) = st.leases.remove(name) {
                st.token_floor = st.token_floor.max(l.token);
            }
        }
        Ok(gone.len())
    }

    fn subscribe_releases(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.inner.releases.subscribe())
    }

    fn job_store(&self) -> Option<SharedJobStore> {
        Some(crate::backend::job_store::SharedJobStore::new(self.jobs()))
    }

    fn schedule_store(&self) -> Option<crate::backend::schedule_store::SharedScheduleStore> {
        Some(crate::backend::schedule_store::SharedScheduleStore::new(self.inner.schedules.clone()))
    }

    fn describe(&self) -> String {
        "memory://".to_owned()
    }
}

/// The in-memory jobs store: history and control beside the leases of a [`MemoryBackend`],
/// fenced by them. The reference implementation of the [`JobStore`] contract; broadcasts
/// control changes.
#[derive(Clone)]
pub struct MemoryJobStore {
    inner: Arc<Inner>,
    /// This handle's bound ([`JobStore::keeping`]); `None`: the backend's
    /// ([`MemoryBackend::with_job_retention`]).
    retention: Option<usize>,
}

impl MemoryJobStore {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn changed(&self, job: &str) {
        let _ = self.inner.control.send(job.to_owned());
    }
}

impl JobsMem {
    fn state_of(&self, job: &str) -> Option<JobState> {
        let c = self.controls.get(job);
        let last = self.records.get(job).and_then(|r| r.values().next_back().cloned());
        if c.is_none() && last.is_none() {
            return None;
        }
        let c = c.copied().unwrap_or_default();
        Some(JobState {
            job: job.to_owned(),
            paused: c.paused,
            last_slot_ms: c.last_slot,
            last,
            trigger_pending_ms: c.pending(),
        })
    }

    fn insert(&mut self, mut rec: RunRecord, retention: Option<usize>) {
        rec.error = rec.error.as_deref().map(truncate_error);
        rec.payload_override = None;
        let retention = retention.unwrap_or(self.retention);
        let recs = self.records.entry(rec.job.clone()).or_default();
        recs.insert((rec.slot_ms, rec.kind), rec);
        while recs.len() > retention {
            recs.pop_first();
        }
    }
}

impl JobStore for MemoryJobStore {
    async fn claim_run(&self, req: ClaimRequest<'_>) -> BackendResult<Claim> {
        let mut st = self.state();
        st.sweep(Instant::now());
        let holder =
            st.leases.get(req.lease).is_some_and(|l| l.session.as_ref() == Some(req.session) && l.token == req.token);
        if !holder {
            return Ok(Claim::NotHolder);
        }
        // The core's claim rule decides; this store only applies its writes.
        let lease_slot = st.leases.get(req.lease).and_then(|l| l.last_slot);
        let own = st.jobs.controls.get(req.job).copied().unwrap_or_default();
        let group_name = group_of(req.job);
        let group = group_name.and_then(|g| st.jobs.controls.get(g).copied());
        let none = RequestLog::default();
        let history = match st.jobs.records.get(req.job).filter(|_| req.is_backfill()) {
            Some(recs) => slot_history(
                recs.range((req.slot_ms, SlotKind::Scheduled)..=(req.slot_ms, SlotKind::Backfill)).map(|(_, r)| r),
                recs.values().next(),
            ),
            None => SlotHistory::default(),
        };
        let logs = Logs {
            own: st.jobs.requests.get(req.job).unwrap_or(&none),
            group: group_name.and_then(|g| st.jobs.requests.get(g)).unwrap_or(&none),
            history: &history,
        };
        let Decision { answer, writes, request } = claim::decide(req.ask(), &own, group.as_ref(), lease_slot, logs);
        if let Some(row) = writes.own {
            st.jobs.controls.insert(req.job.to_owned(), row);
        }
        if let (Some(row), Some(g)) = (writes.group, group_name) {
            st.jobs.controls.insert(g.to_owned(), row);
        }
        if let (Some(slot), Some(l)) = (writes.lease_slot, st.leases.get_mut(req.lease)) {
            l.last_slot = Some(slot);
        }
        if writes.bump_version {
            st.jobs.version += 1;
        }
        let claim = req.claim_of(answer, request.as_ref());
        if let Claim::Claimed(rec) = &claim {
            st.jobs.insert(rec.clone(), self.retention);
        }
        Ok(claim)
    }

    async fn finish_run(&self, record: &RunRecord) -> BackendResult<bool> {
        let mut st = self.state();
        let claimed = st
            .jobs
            .records
            .get(&record.job)
            .and_then(|r| r.get(&(record.slot_ms, record.kind)))
            .is_some_and(|r| r.token == record.token);
        if claimed {
            st.jobs.insert(record.clone(), self.retention);
        }
        Ok(claimed)
    }

    async fn append(&self, record: &RunRecord) -> BackendResult<bool> {
        let mut st = self.state();
        let exists = st.jobs.records.get(&record.job).is_some_and(|r| r.contains_key(&(record.slot_ms, record.kind)));
        if exists {
            return Ok(false);
        }
        st.jobs.insert(record.clone(), self.retention);
        Ok(true)
    }

    async fn history(&self, job: &str, limit: usize) -> BackendResult<Vec<RunRecord>> {
        let st = self.state();
        Ok(st.jobs.records.get(job).map(|r| r.values().rev().take(limit).cloned().collect()).unwrap_or_default())
    }

    async fn job(&self, job: &str) -> BackendResult<Option<JobState>> {
        Ok(self.state().jobs.state_of(job))
    }

    async fn jobs(&self) -> BackendResult<Vec<JobState>> {
        let st = self.state();
        let names: BTreeSet<&String> = st.jobs.controls.keys().chain(st.jobs.records.keys()).collect();
        Ok(names.into_iter().filter_map(|n| st.jobs.state_of(n)).collect())
    }

    async fn set_paused(&self, job: &str, paused: bool) -> BackendResult<bool> {
        let before = {
            let mut st = self.state();
            st.jobs.version += 1;
            let c = st.jobs.controls.entry(job.to_owned()).or_default();
            std::mem::replace(&mut c.paused, paused)
        };
        self.changed(job);
        Ok(before)
    }

    async fn trigger(&self, job: &str, ask: Trigger<'_>) -> BackendResult<Triggered> {
        let answer = {
            let mut st = self.state();
            let row = st.jobs.controls.get(job).copied().unwrap_or_default();
            let log = st.jobs.requests.get(job).cloned().unwrap_or_default();
            // The core's request rule decides; this store applies its writes.
            let (answer, writes) = claim::request(&row, &log, ask);
            if let Some((row, log)) = writes {
                st.jobs.version += 1;
                st.jobs.controls.insert(job.to_owned(), row);
                st.jobs.requests.insert(job.to_owned(), log);
            }
            answer
        };
        if matches!(answer, Triggered::Requested(_)) {
            self.changed(job);
        }
        Ok(answer)
    }

    async fn control_version(&self) -> BackendResult<u64> {
        Ok(self.state().jobs.version)
    }

    async fn publish_registry(&self, session: &SessionId, registry: &str) -> BackendResult<bool> {
        let mut st = self.state();
        st.sweep(Instant::now());
        let State { sessions, jobs, .. } = &mut *st;
        jobs.registries.retain(|s, _| sessions.contains_key(s));
        if !sessions.contains_key(session) {
            return Ok(false);
        }
        jobs.registries.insert(session.clone(), registry.to_owned());
        Ok(true)
    }

    async fn registries(&self) -> BackendResult<Vec<(SessionId, String)>> {
        let mut st = self.state();
        st.sweep(Instant::now());
        let st = &*st;
        Ok(st
            .jobs
            .registries
            .iter()
            .filter(|(s, _)| st.sessions.contains_key(*s))
            .map(|(s, r)| (s.clone(), r.clone()))
            .collect())
    }

    fn subscribe_control(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.inner.control.subscribe())
    }

    fn retention(&self) -> usize {
        self.retention.unwrap_or_else(|| self.state().jobs.retention)
    }

    fn keeping(&self, records: usize) -> SharedJobStore {
        crate::backend::job_store::SharedJobStore::new(MemoryJobStore {
            inner: self.inner.clone(),
            retention: Some(records.max(1)),
        })
    }

    fn describe(&self) -> String {
        "memory://".to_owned()
    }
}
