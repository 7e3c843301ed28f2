//! The one dispatch from a backend URL's scheme to the backend that takes it.

use std::sync::Arc;

use std::time::Duration;

use tokio::sync::broadcast;

use super::job_store::SharedJobStore;
use super::{
    Acquire, Backend, BackendError, BackendResult, BackendUrl, Health, HeldDigest, Join, KeepAlive, SessionGrant,
    SessionId, SharedBackend, StoreSnapshot,
};

/// What a connection tolerates. The default is what a node needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectOptions {
    accept_eviction: bool,
}

impl ConnectOptions {
    /// Options to read a store and check it: an evicting Redis is accepted (reading is
    /// harmless, and `simba check` reports the policy as a failed check of its own).
    pub fn for_reading() -> Self {
        ConnectOptions { accept_eviction: true }
    }
}

/// A connected backend, picked at run time by a URL's scheme, with its health checks.
///
/// It is a [`Backend`] itself (every call goes to the backend the URL named), so it goes
/// wherever a backend does: [`Namespaced::new`](super::namespace::Namespaced::new),
/// [`namespace::list`](super::namespace::list), [`crate::dashboard::serve`],
/// [`crate::SimbaBuilder::backend`]. Clones share one connection.
#[derive(Clone)]
pub struct Connected {
    backend: SharedBackend,
    health: Arc<dyn Health>,
}

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Connected").field(&self.backend.describe()).finish()
    }
}

impl Connected {
    fn new<B: Backend + Health>(backend: B) -> Self {
        let backend = Arc::new(backend);
        Connected { backend: Arc::clone(&backend) as SharedBackend, health: backend }
    }

    /// The backend, type-erased.
    pub(crate) fn backend(&self) -> SharedBackend {
        Arc::clone(&self.backend)
    }

    /// The backend's health checks.
    pub fn health(&self) -> &dyn Health {
        &*self.health
    }
}

// Delegation to the type-erased backend: the URL picked it, so its type is known only at run
// time; the engine calls the same erased methods. `async fn` ties each future to the borrows it
// takes (the erased futures share one lifetime for all of them).
impl Backend for Connected {
    async fn open_session(&self, ttl: Duration) -> BackendResult<SessionGrant> {
        self.backend.open_session(ttl).await
    }
    async fn keep_alive(&self, s: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
        self.backend.keep_alive(s, held).await
    }
    async fn acquire(&self, s: &SessionId, name: &str) -> BackendResult<Acquire> {
        self.backend.acquire(s, name).await
    }
    async fn release(&self, s: &SessionId, name: &str, token: u64) -> BackendResult<bool> {
        self.backend.release(s, name, token).await
    }
    async fn close_session(&self, s: &SessionId) -> BackendResult<()> {
        self.backend.close_session(s).await
    }
    async fn owned(&self, s: &SessionId) -> BackendResult<Vec<(String, u64)>> {
        self.backend.owned(s).await
    }
    async fn claim_slot(&self, s: &SessionId, name: &str, token: u64, slot: i64) -> BackendResult<bool> {
        self.backend.claim_slot(s, name, token, slot).await
    }
    async fn join_group(&self, s: &SessionId, group: &str) -> BackendResult<Join> {
        self.backend.join_group(s, group).await
    }
    async fn leave_group(&self, s: &SessionId, group: &str) -> BackendResult<()> {
        self.backend.leave_group(s, group).await
    }
    async fn members(&self, group: &str) -> BackendResult<Vec<SessionId>> {
        self.backend.members(group).await
    }
    async fn inspect(&self) -> BackendResult<StoreSnapshot> {
        self.backend.inspect().await
    }
    async fn remove_idle_leases(&self, prefix: &str, idle_for: Duration, limit: usize) -> BackendResult<usize> {
        self.backend.remove_idle_leases(prefix, idle_for, limit).await
    }
    fn subscribe_releases(&self) -> Option<broadcast::Receiver<String>> {
        self.backend.subscribe_releases()
    }
    fn job_store(&self) -> Option<SharedJobStore> {
        self.backend.job_store()
    }
    fn schedule_store(&self) -> Option<crate::backend::schedule_store::SharedScheduleStore> {
        self.backend.schedule_store()
    }
    fn describe(&self) -> String {
        self.backend.describe()
    }
}

/// The schemes [`connect`] takes, for messages.
pub(crate) const SCHEMES: &str = "memory://, sqlite://PATH, postgres://, mysql://, redis://, zk:// or etcd://";

/// Connects to the backend that `url` names, with `options`: the one place a URL's scheme
/// picks a backend, for [`crate::Simba::connect`], the runtime and the `simba` tool. An
/// unsupported scheme (or one whose cargo feature is off) is [`BackendError::Misconfigured`],
/// naming the scheme and the ones that work.
pub async fn connect(url: &BackendUrl, options: ConnectOptions) -> BackendResult<Connected> {
    connect_known(url, options).await?.ok_or_else(|| unsupported(url.scheme()))
}

/// [`connect`], with `Ok(None)` for a scheme no backend of this build takes (the client
/// reports it as a configuration error of `[backend] url`).
#[cfg_attr(not(feature = "redis"), expect(unused_variables))]
pub(crate) async fn connect_known(url: &BackendUrl, options: ConnectOptions) -> BackendResult<Option<Connected>> {
    Ok(Some(match url.scheme() {
        "memory" => Connected::new(super::memory::MemoryBackend::new()),
        #[cfg(feature = "sqlite")]
        "sqlite" => Connected::new(super::sqlite::SqliteBackend::connect_url(url).await?),
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => Connected::new(super::postgres::PostgresBackend::connect_url(url).await?),
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => Connected::new(super::mysql::MySqlBackend::connect_url(url).await?),
        #[cfg(feature = "redis")]
        "redis" | "rediss" | super::redis::SENTINEL_SCHEME => {
            let redis = super::redis::RedisOptions::default().allow_eviction(options.accept_eviction);
            Connected::new(super::redis::RedisBackend::connect_url(url, redis).await?)
        }
        #[cfg(feature = "zookeeper")]
        "zk" | "zookeeper" => Connected::new(super::zookeeper::ZooKeeperBackend::connect_url(url).await?),
        #[cfg(feature = "etcd")]
        "etcd" => Connected::new(super::etcd::EtcdBackend::connect_url(url).await?),
        _ => return Ok(None),
    }))
}

/// The error for a scheme no backend of this build takes.
fn unsupported(scheme: &str) -> BackendError {
    if scheme.is_empty() {
        // A configuration that names no backend (J4) reaches here through a tool.
        return BackendError::Misconfigured(format!(
            "no backend URL: name one ([backend] url in simba.toml, SIMBA_BACKEND__URL or --backend), e.g. {SCHEMES}"
        ));
    }
    let known = [
        "memory",
        "sqlite",
        "postgres",
        "postgresql",
        "mysql",
        "mariadb",
        "redis",
        "rediss",
        "redis+sentinel",
        "zk",
        "zookeeper",
        "etcd",
    ];
    let why = if known.contains(&scheme) {
        "its cargo feature is off in this build (features sqlite, postgres, mysql, redis, zookeeper, etcd)"
    } else {
        "no backend takes it"
    };
    BackendError::Misconfigured(format!("unsupported backend URL scheme `{scheme}`: {why}; use {SCHEMES}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration that names no backend (J4) reaching a tool: the error says to name one,
    /// not that the empty scheme is unknown.
    #[test]
    fn an_empty_url_asks_for_one() {
        let BackendError::Misconfigured(m) = unsupported("") else { panic!("not a configuration error") };
        assert!(
            m.starts_with("no backend URL: ") && m.contains("SIMBA_BACKEND__URL") && m.contains("--backend"),
            "{m}"
        );
        let BackendError::Misconfigured(m) = unsupported("mongodb") else { panic!("not a configuration error") };
        assert!(m.contains("unsupported backend URL scheme `mongodb`"), "{m}");
    }
}
