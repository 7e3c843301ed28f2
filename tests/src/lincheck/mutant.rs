//! The checker's positive control: a backend wrapper that breaks the exclusive holder once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use simba::backend::{
    Acquire, Backend, BackendResult, HeldDigest, Join, KeepAlive, SessionGrant, SessionId, StoreSnapshot,
};
use tokio::sync::broadcast;

/// Forwards every call to `inner`, except the first acquisition that `inner` answers
/// [`Acquire::Held`]: that one answers [`Acquire::Won`] with the current holder's token (read
/// with `inspect`), so two sessions believe they hold the lease, under one token. The nodes'
/// own report cannot see it (its overlap check compares terms of different tokens, and a
/// fence accepts the equal token); the history checker must.
pub struct DoubleGrant<B> {
    inner: B,
    fired: Arc<AtomicBool>,
}

/// Tells whether a [`DoubleGrant`] made its grant, once the wrapper has moved into a client.
#[derive(Clone, Debug)]
pub struct Fired(Arc<AtomicBool>);

impl Fired {
    /// Whether the double grant was made.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl<B> DoubleGrant<B> {
    /// Wraps `inner`.
    pub fn new(inner: B) -> (Self, Fired) {
        let fired = Arc::new(AtomicBool::new(false));
        (DoubleGrant { inner, fired: Arc::clone(&fired) }, Fired(fired))
    }
}

impl<B: Backend> DoubleGrant<B> {
    async fn holder_token(&self, name: &str) -> Option<u64> {
        let snap = self.inner.inspect().await.ok()?;
        snap.leases.iter().find(|l| l.name == name).map(|l| l.token)
    }
}

impl<B: Backend> Backend for DoubleGrant<B> {
    async fn open_session(&self, ttl: Duration) -> BackendResult<SessionGrant> {
        self.inner.open_session(ttl).await
    }
    async fn keep_alive(&self, session: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
        self.inner.keep_alive(session, held).await
    }
    async fn acquire(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        let r = self.inner.acquire(session, name).await;
        if matches!(r, Ok(Acquire::Held))
            && !self.fired.load(Ordering::SeqCst)
            && let Some(token) = self.holder_token(name).await
            && !self.fired.swap(true, Ordering::SeqCst)
        {
            return Ok(Acquire::Won(token));
        }
        r
    }
    async fn release(&self, session: &SessionId, name: &str, token: u64) -> BackendResult<bool> {
        self.inner.release(session, name, token).await
    }
    async fn close_session(&self, session: &SessionId) -> BackendResult<()> {
        self.inner.close_session(session).await
    }
    async fn owned(&self, session: &SessionId) -> BackendResult<Vec<(String, u64)>> {
        self.inner.owned(session).await
    }
    async fn claim_slot(&self, session: &SessionId, name: &str, token: u64, slot: i64) -> BackendResult<bool> {
        self.inner.claim_slot(session, name, token, slot).await
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
        format!("double-grant({})", self.inner.describe())
    }
}
