//! The one implementation of [`Backend`] for the three SQL backends. Every call they run
//! alike goes to their [`SqlStore`](super::SqlStore) ([`SqlCalls`]); [`SqlBackend`] has hooks
//! only for what differs between them: renewal, acquisition, how releases are heard (a release
//! watch that polls, or the database's broadcast), opening and closing where a dialect runs
//! them its own way (PostgreSQL's one unprepared statement, MySQL's retries of a close InnoDB
//! gave up), and whether the jobs store is on.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::broadcast;

use super::SqlCalls;
#[cfg(any(feature = "sqlite", feature = "mysql"))]
use super::release_watch::ReleaseWatch;
use crate::backend::job_store::SharedJobStore;
use crate::backend::schedule_store::SharedScheduleStore;
use crate::backend::{
    Acquire, Backend, BackendResult, HeldDigest, Join, KeepAlive, SessionGrant, SessionId, StoreSnapshot,
};

/// How a SQL backend hears of releases made by other nodes (K2).
pub(crate) enum Releases<'a> {
    /// A release watch that reads the waited-for leases (SQLite, MySQL/MariaDB): told of every
    /// acquisition's answer and of every release made through this backend.
    #[cfg(any(feature = "sqlite", feature = "mysql"))]
    Watch(&'a ReleaseWatch),
    /// A broadcast the database feeds (PostgreSQL's `NOTIFY`, forwarded by its listener); a
    /// release through this backend is notified by the database too.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Broadcast(&'a broadcast::Sender<String>),
}

impl Releases<'_> {
    /// Notes the answer to an acquisition of `name`.
    // Only a release watch reads them; a PostgreSQL-only build has none.
    #[cfg_attr(not(any(feature = "sqlite", feature = "mysql")), allow(unused_variables))]
    fn acquired(&self, name: &str, answer: &BackendResult<Acquire>) {
        match self {
            #[cfg(any(feature = "sqlite", feature = "mysql"))]
            Releases::Watch(watch) => watch.acquired(name, answer),
            Releases::Broadcast(_) => {}
        }
    }

    /// A release of `name` through this backend succeeded.
    // Only a release watch reads them; a PostgreSQL-only build has none.
    #[cfg_attr(not(any(feature = "sqlite", feature = "mysql")), allow(unused_variables))]
    fn released(&self, name: &str) {
        match self {
            #[cfg(any(feature = "sqlite", feature = "mysql"))]
            Releases::Watch(watch) => watch.released(name),
            Releases::Broadcast(_) => {}
        }
    }

    /// A new subscriber to the names of released leases.
    fn subscribe(&self) -> broadcast::Receiver<String> {
        match self {
            #[cfg(any(feature = "sqlite", feature = "mysql"))]
            Releases::Watch(watch) => watch.subscribe(),
            Releases::Broadcast(tx) => tx.subscribe(),
        }
    }
}

/// A SQL backend's jobs and schedule stores, built at the first
/// [`Backend::job_store`] / [`Backend::schedule_store`] call and handed out again after: each
/// store keeps its "schema checked" cell, so a new store per call would check the schema again
/// (and the runtime asks for the stores often). Shared by the backend's clones; a builder that
/// changes what the store is (`without_job_store`) starts a new cache.
#[derive(Debug, Clone, Default)]
pub(crate) struct StoreCache {
    jobs: Arc<OnceLock<Option<SharedJobStore>>>,
    schedules: Arc<OnceLock<Option<SharedScheduleStore>>>,
}

/// What a SQL backend does its own way; [`Backend`] is implemented once for every
/// implementation of it. Method names differ from [`Backend`]'s so that calls never need a
/// trait named.
pub(crate) trait SqlBackend: Send + Sync + 'static {
    /// The backend's store (a [`SqlStore`](super::SqlStore) of its dialect).
    type Store: SqlCalls;

    /// The store every shared call runs on.
    fn store(&self) -> &Self::Store;

    /// [`Backend::keep_alive`]: renews `session`, comparing its leases' digest with `held`.
    fn renew(&self, session: &SessionId, held: HeldDigest) -> impl Future<Output = BackendResult<KeepAlive>> + Send;

    /// [`Backend::acquire`] without the release bookkeeping, which the generic part does.
    fn acquire_once(&self, session: &SessionId, name: &str) -> impl Future<Output = BackendResult<Acquire>> + Send;

    /// How this backend hears of releases.
    fn releases(&self) -> Releases<'_>;

    /// Where the backend keeps its stores once built.
    fn cache(&self) -> &StoreCache;

    /// [`Backend::open_session`]; the shared statements unless the dialect opens its own way.
    fn open(&self, ttl: Duration) -> impl Future<Output = BackendResult<SessionGrant>> + Send {
        self.store().open_session(ttl)
    }

    /// [`Backend::close_session`]; the shared statements unless the dialect closes its own way.
    fn close(&self, session: &SessionId) -> impl Future<Output = BackendResult<()>> + Send {
        self.store().close_session(session)
    }

    /// [`Backend::job_store`]: a new jobs store, on unless the backend was built without it
    /// (called once per [`StoreCache`]).
    fn jobs(&self) -> Option<SharedJobStore> {
        Some(self.store().job_store(None))
    }

    /// [`Backend::schedule_store`]: a new schedule store, on every SQL backend (called once
    /// per [`StoreCache`]).
    fn schedules(&self) -> Option<SharedScheduleStore> {
        Some(self.store().schedule_store(None))
    }
}

impl<B: SqlBackend> Backend for B {
    fn open_session(&self, ttl: Duration) -> impl Future<Output = BackendResult<SessionGrant>> + Send {
        self.open(ttl)
    }

    fn keep_alive(
        &self,
        session: &SessionId,
        held: HeldDigest,
    ) -> impl Future<Output = BackendResult<KeepAlive>> + Send {
        self.renew(session, held)
    }

    async fn acquire(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        let answer = self.acquire_once(session, name).await;
        self.releases().acquired(name, &answer);
        answer
    }

    async fn release(&self, session: &SessionId, name: &str, token: u64) -> BackendResult<bool> {
        let released = self.store().release(session, name, token).await?;
        if released {
            self.releases().released(name);
        }
        Ok(released)
    }

    fn close_session(&self, session: &SessionId) -> impl Future<Output = BackendResult<()>> + Send {
        self.close(session)
    }

    fn owned(&self, session: &SessionId) -> impl Future<Output = BackendResult<Vec<(String, u64)>>> + Send {
        self.store().owned(session)
    }

    fn claim_slot(
        &self,
        session: &SessionId,
        name: &str,
        token: u64,
        slot: i64,
    ) -> impl Future<Output = BackendResult<bool>> + Send {
        self.store().claim_slot(session, name, token, slot)
    }

    fn join_group(&self, session: &SessionId, group: &str) -> impl Future<Output = BackendResult<Join>> + Send {
        self.store().join_group(session, group)
    }

    fn leave_group(&self, session: &SessionId, group: &str) -> impl Future<Output = BackendResult<()>> + Send {
        self.store().leave_group(session, group)
    }

    fn members(&self, group: &str) -> impl Future<Output = BackendResult<Vec<SessionId>>> + Send {
        self.store().members(group)
    }

    fn inspect(&self) -> impl Future<Output = BackendResult<StoreSnapshot>> + Send {
        self.store().inspect()
    }

    fn remove_idle_leases(
        &self,
        prefix: &str,
        idle_for: Duration,
        limit: usize,
    ) -> impl Future<Output = BackendResult<usize>> + Send {
        self.store().remove_idle_leases(prefix, idle_for, limit)
    }

    fn subscribe_releases(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.releases().subscribe())
    }

    fn job_store(&self) -> Option<SharedJobStore> {
        self.cache().jobs.get_or_init(|| self.jobs()).clone()
    }

    fn schedule_store(&self) -> Option<SharedScheduleStore> {
        self.cache().schedules.get_or_init(|| self.schedules()).clone()
    }

    fn describe(&self) -> String {
        self.store().described().to_owned()
    }
}
