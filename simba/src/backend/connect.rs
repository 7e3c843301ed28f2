//! The one dispatch from a backend URL's scheme to the backend that takes it.

use std::sync::Arc;

use super::{Backend, BackendError, BackendResult, BackendUrl, Health, SharedBackend};

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

/// A connected backend, type-erased as the engine holds it, with its health checks.
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
        "redis" | "rediss" => {
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
