//! A backend wrapper that injects faults and counts calls, for engine tests.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::schedule_store::{Actor, AuditRecord, Created, ListQuery, Schedule, ScheduleStore, SharedScheduleStore};

use crate::backend::{
    Acquire, Backend, BackendError, BackendResult, HeldDigest, Join, KeepAlive, SessionGrant, SessionId, StoreSnapshot,
};

/// A backend operation, to aim a fault at or to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`Backend::open_session`].
    OpenSession,
    /// [`Backend::keep_alive`].
    KeepAlive,
    /// [`Backend::acquire`].
    Acquire,
    /// [`Backend::release`].
    Release,
    /// [`Backend::close_session`].
    CloseSession,
    /// [`Backend::owned`].
    Owned,
    /// [`Backend::claim_slot`].
    ClaimSlot,
    /// Group calls: join, leave and members.
    Group,
    /// [`Backend::inspect`].
    Inspect,
    /// [`Backend::remove_idle_leases`].
    RemoveIdle,
    /// The schedule store's reads of the change counters
    /// ([`ScheduleStore::changes`](crate::schedule_store::ScheduleStore::changes)).
    ScheduleChanges,
    /// The schedule store's other reads (`get`, `list`, `partitions`, `audit`); its writes are
    /// neither counted nor faulted.
    ScheduleRead,
}

const OPS: [Op; 12] = [
    Op::OpenSession,
    Op::KeepAlive,
    Op::Acquire,
    Op::Release,
    Op::CloseSession,
    Op::Owned,
    Op::ClaimSlot,
    Op::Group,
    Op::Inspect,
    Op::RemoveIdle,
    Op::ScheduleChanges,
    Op::ScheduleRead,
];

/// What to do to the calls of one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// Forward the call.
    #[default]
    None,
    /// Fail at once without forwarding, as an unreachable store does.
    Fail,
    /// Never answer (the engine's timeout must end the call).
    Hang,
    /// Wait this long, then forward (a slow request).
    DelayRequest(Duration),
    /// Forward at once, then hold the reply this long (a slow reply; with a long enough delay
    /// the reply arrives after the local deadline).
    DelayReply(Duration),
    /// Answer "expired" without forwarding (keep-alive, acquire and group joins only; other
    /// operations, leaving a group and listing members included, forward).
    Expired,
}

/// Controls the faults of a [`FaultyBackend`] and reads its call counts.
#[derive(Clone, Default)]
pub struct FaultHandle {
    inner: Arc<Ctl>,
}

type Hook = Box<dyn Fn(Op) + Send + Sync>;

#[derive(Default)]
struct Ctl {
    faults: Mutex<HashMap<Op, Fault>>,
    counts: [AtomicU64; 12],
    times: Mutex<Vec<(Op, tokio::time::Instant)>>,
    hook: Mutex<Option<Hook>>,
}

impl FaultHandle {
    /// Sets the fault for `op`.
    pub fn set(&self, op: Op, fault: Fault) {
        self.inner.faults.lock().unwrap_or_else(PoisonError::into_inner).insert(op, fault);
    }

    /// Sets the same fault for every operation (a store that went away).
    pub fn set_all(&self, fault: Fault) {
        for op in OPS {
            self.set(op, fault);
        }
    }

    /// Removes every fault.
    pub fn clear(&self) {
        self.inner.faults.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    /// How many calls of `op` were made (faulty or not).
    pub fn calls(&self, op: Op) -> u64 {
        self.inner.counts[index(op)].load(Ordering::SeqCst)
    }

    /// Zeroes the counts.
    pub fn reset_counts(&self) {
        for c in &self.inner.counts {
            c.store(0, Ordering::SeqCst);
        }
        self.inner.times.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    /// When each call of `op` was made, on Tokio's clock.
    pub fn call_times(&self, op: Op) -> Vec<tokio::time::Instant> {
        let times = self.inner.times.lock().unwrap_or_else(PoisonError::into_inner);
        times.iter().filter(|(o, _)| *o == op).map(|(_, t)| *t).collect()
    }

    /// Calls `hook` at the start of every call, before any fault applies (to record the
    /// order of calls against other events).
    pub fn on_call(&self, hook: impl Fn(Op) + Send + Sync + 'static) {
        *self.inner.hook.lock().unwrap_or_else(PoisonError::into_inner) = Some(Box::new(hook));
    }

    fn fault(&self, op: Op) -> Fault {
        self.inner.counts[index(op)].fetch_add(1, Ordering::SeqCst);
        self.inner.times.lock().unwrap_or_else(PoisonError::into_inner).push((op, tokio::time::Instant::now()));
        if let Some(h) = &*self.inner.hook.lock().unwrap_or_else(PoisonError::into_inner) {
            h(op);
        }
        self.inner.faults.lock().unwrap_or_else(PoisonError::into_inner).get(&op).copied().unwrap_or_default()
    }
}

impl FaultHandle {
    /// Counts a call of `op` and applies its fault to `fut` (`expired`: the answer of
    /// [`Fault::Expired`], when the operation has one).
    async fn apply<T>(
        &self,
        op: Op,
        expired: Option<T>,
        fut: impl std::future::Future<Output = BackendResult<T>>,
    ) -> BackendResult<T> {
        match self.fault(op) {
            Fault::None => fut.await,
            Fault::Fail => {
                Err(BackendError::Unavailable { message: format!("injected failure of {op:?}"), source: None })
            }
            Fault::Hang => std::future::pending().await,
            Fault::DelayRequest(d) => {
                tokio::time::sleep(d).await;
                fut.await
            }
            Fault::DelayReply(d) => {
                let r = fut.await;
                tokio::time::sleep(d).await;
                r
            }
            Fault::Expired => match expired {
                Some(v) => Ok(v),
                None => fut.await,
            },
        }
    }
}

fn index(op: Op) -> usize {
    OPS.iter().position(|o| *o == op).unwrap_or(0)
}

/// Wraps a backend and injects the faults its [`FaultHandle`] sets.
pub struct FaultyBackend<B> {
    inner: B,
    handle: FaultHandle,
    jobs: Jobs,
    schedules: bool,
}

/// Which jobs store a [`FaultyBackend`] offers.
enum Jobs {
    None,
    Inner,
    Given(crate::job_store::SharedJobStore),
}

impl<B: Backend> FaultyBackend<B> {
    /// Wraps `inner`; returns the backend and the handle that controls it.
    pub fn new(inner: B) -> (Self, FaultHandle) {
        let handle = FaultHandle::default();
        (FaultyBackend { inner, handle: handle.clone(), jobs: Jobs::None, schedules: true }, handle)
    }

    /// Also offers the wrapped backend's jobs store ([`Backend::job_store`]; its calls are not
    /// faulted). Without it the wrapper has none, and the scheduler claims slots with
    /// [`Backend::claim_slot`], which the faults reach.
    #[must_use]
    pub fn with_job_store(mut self) -> Self {
        self.jobs = Jobs::Inner;
        self
    }

    /// Offers no schedule store (a backend without one, rule A8), whatever the wrapped
    /// backend has.
    #[must_use]
    pub fn without_schedule_store(mut self) -> Self {
        self.schedules = false;
        self
    }

    /// Offers `store` as the jobs store instead of the wrapped backend's: a test's own store
    /// (one that fails on demand, say) behind a backend whose lease calls are real.
    #[must_use]
    pub fn with_job_store_of(mut self, store: crate::job_store::SharedJobStore) -> Self {
        self.jobs = Jobs::Given(store);
        self
    }

    async fn call<T>(
        &self,
        op: Op,
        expired: Option<T>,
        fut: impl std::future::Future<Output = BackendResult<T>>,
    ) -> BackendResult<T> {
        self.handle.apply(op, expired, fut).await
    }
}

impl<B: Backend> Backend for FaultyBackend<B> {
    async fn open_session(&self, ttl: Duration) -> BackendResult<SessionGrant> {
        self.call(Op::OpenSession, None, self.inner.open_session(ttl)).await
    }
    async fn keep_alive(&self, session: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
        self.call(Op::KeepAlive, Some(KeepAlive::Expired), self.inner.keep_alive(session, held)).await
    }
    async fn acquire(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        self.call(Op::Acquire, Some(Acquire::Expired), self.inner.acquire(session, name)).await
    }
    async fn release(&self, session: &SessionId, name: &str, token: u64) -> BackendResult<bool> {
        self.call(Op::Release, None, self.inner.release(session, name, token)).await
    }
    async fn close_session(&self, session: &SessionId) -> BackendResult<()> {
        self.call(Op::CloseSession, None, self.inner.close_session(session)).await
    }
    async fn owned(&self, session: &SessionId) -> BackendResult<Vec<(String, u64)>> {
        self.call(Op::Owned, None, self.inner.owned(session)).await
    }
    async fn claim_slot(&self, session: &SessionId, name: &str, token: u64, slot: i64) -> BackendResult<bool> {
        self.call(Op::ClaimSlot, None, self.inner.claim_slot(session, name, token, slot)).await
    }
    async fn join_group(&self, session: &SessionId, group: &str) -> BackendResult<Join> {
        self.call(Op::Group, Some(Join::Expired), self.inner.join_group(session, group)).await
    }
    async fn leave_group(&self, session: &SessionId, group: &str) -> BackendResult<()> {
        self.call(Op::Group, None, self.inner.leave_group(session, group)).await
    }
    async fn members(&self, group: &str) -> BackendResult<Vec<SessionId>> {
        self.call(Op::Group, None, self.inner.members(group)).await
    }
    async fn inspect(&self) -> BackendResult<StoreSnapshot> {
        self.call(Op::Inspect, None, self.inner.inspect()).await
    }
    async fn remove_idle_leases(&self, prefix: &str, idle_for: Duration, limit: usize) -> BackendResult<usize> {
        self.call(Op::RemoveIdle, None, self.inner.remove_idle_leases(prefix, idle_for, limit)).await
    }
    fn subscribe_releases(&self) -> Option<broadcast::Receiver<String>> {
        self.inner.subscribe_releases()
    }
    fn job_store(&self) -> Option<crate::job_store::SharedJobStore> {
        match &self.jobs {
            Jobs::None => None,
            Jobs::Inner => self.inner.job_store(),
            Jobs::Given(store) => Some(store.clone()),
        }
    }
    fn schedule_store(&self) -> Option<crate::schedule_store::SharedScheduleStore> {
        let inner = self.inner.schedule_store().filter(|_| self.schedules)?;
        Some(crate::schedule_store::SharedScheduleStore::new(FaultySchedules { inner, handle: self.handle.clone() }))
    }
    fn describe(&self) -> String {
        format!("faulty({})", self.inner.describe())
    }
}

/// The wrapped backend's schedule store, its reads counted and faulted ([`Op::ScheduleChanges`],
/// [`Op::ScheduleRead`]); its writes forwarded as they are.
struct FaultySchedules {
    inner: SharedScheduleStore,
    handle: FaultHandle,
}

impl ScheduleStore for FaultySchedules {
    async fn create(&self, space: &str, s: &Schedule, partitions: u32, actor: &Actor<'_>) -> BackendResult<Created> {
        self.inner.in_space(space).create(s, partitions, actor).await
    }
    async fn update(&self, space: &str, s: &Schedule, actor: &Actor<'_>) -> BackendResult<Option<u64>> {
        self.inner.in_space(space).update(s, actor).await
    }
    async fn delete(&self, space: &str, id: &str, actor: &Actor<'_>) -> BackendResult<bool> {
        self.inner.in_space(space).delete(id, actor).await
    }
    async fn set_paused(&self, space: &str, id: &str, paused: bool, actor: &Actor<'_>) -> BackendResult<Option<bool>> {
        self.inner.in_space(space).set_paused(id, paused, actor).await
    }
    async fn record(
        &self,
        space: &str,
        id: &str,
        action: crate::schedule_store::AuditAction,
        actor: &Actor<'_>,
    ) -> BackendResult<bool> {
        self.inner.in_space(space).record(id, action, actor).await
    }
    async fn get(&self, space: &str, id: &str) -> BackendResult<Option<Schedule>> {
        self.handle.apply(Op::ScheduleRead, None, self.inner.in_space(space).get(id)).await
    }
    async fn list(&self, space: &str, q: &ListQuery) -> BackendResult<Vec<Schedule>> {
        self.handle.apply(Op::ScheduleRead, None, self.inner.in_space(space).list(q)).await
    }
    async fn partitions(&self, space: &str) -> BackendResult<Option<u32>> {
        self.handle.apply(Op::ScheduleRead, None, self.inner.in_space(space).partitions()).await
    }
    async fn changes(&self, space: &str) -> BackendResult<Vec<(u32, u64)>> {
        self.handle.apply(Op::ScheduleChanges, None, self.inner.in_space(space).changes()).await
    }
    async fn audit(&self, space: &str, target: Option<&str>, limit: usize) -> BackendResult<Vec<AuditRecord>> {
        self.handle.apply(Op::ScheduleRead, None, self.inner.in_space(space).audit(target, limit)).await
    }
    fn audit_retention(&self) -> usize {
        self.inner.audit_retention()
    }
    fn keeping_audit(&self, records: usize) -> SharedScheduleStore {
        SharedScheduleStore::new(FaultySchedules {
            inner: self.inner.keeping_audit(records),
            handle: self.handle.clone(),
        })
    }
    fn describe(&self) -> String {
        format!("faulty({})", self.inner.describe())
    }
    fn subscribe_changes(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        self.inner.subscribe_changes()
    }
}
