//! The backend's own ZooKeeper session (directories, group listings) and the release watch
//! that feeds [`Backend::subscribe_releases`](crate::backend::Backend::subscribe_releases)
//! (rule K2).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use zookeeper_client as zk;

use super::LEASES;
use super::url::ConnectSpec;
use crate::backend::BackendResult;

/// The session timeout asked for the backend's own shared session (directories, group
/// listings, the release watch). It holds no ephemeral node.
pub(super) const SHARED_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// Bounds of the pause between two attempts to re-register the release watch.
const REWATCH_BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// The backend's own ZooKeeper session, reconnected when it expires.
pub(super) struct SharedClient {
    pub(super) spec: ConnectSpec,
    pub(super) client: tokio::sync::Mutex<Option<zk::Client>>,
}

impl SharedClient {
    pub(super) async fn get(&self) -> BackendResult<zk::Client> {
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref()
            && !c.state().is_terminated()
        {
            return Ok(c.clone());
        }
        let c = self.spec.connect(SHARED_SESSION_TIMEOUT).await?;
        *slot = Some(c.clone());
        Ok(c)
    }
}

/// Forwards deletions of lease nodes (releases, closed and expired sessions) to the release
/// broadcast until the backend is dropped.
pub(super) async fn watch_releases(
    shared: Arc<SharedClient>,
    tx: broadcast::Sender<String>,
    mut watch: zk::PersistentWatcher,
    description: String,
) {
    let prefix = format!("{LEASES}/");
    loop {
        loop {
            let event = watch.changed().await;
            match (event.event_type, event.session_state) {
                (zk::EventType::NodeDeleted, _) => {
                    if let Some(name) = event.path.strip_prefix(&prefix)
                        && !name.contains('/')
                    {
                        let _ = tx.send(name.to_owned());
                    }
                }
                (zk::EventType::Session, zk::SessionState::Disconnected) => {}
                // Reconnected: zookeeper-client 0.11.2 does not register persistent watches
                // again after a reconnection, so watch again. Terminal: a new session. After
                // a terminal event this watcher must not be polled again.
                (zk::EventType::Session, _) => break,
                _ => {}
            }
        }
        drop(watch);
        let mut backoff = REWATCH_BACKOFF.0;
        watch = loop {
            let watched = match shared.get().await {
                Ok(c) => c.watch(LEASES, zk::AddWatchMode::PersistentRecursive).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match watched {
                Ok(w) => break w,
                Err(error) => {
                    tracing::warn!(backend = %description, %error, retry_in = ?backoff, "cannot watch lease releases; candidates fall back to their retry timer");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(REWATCH_BACKOFF.1);
                }
            }
        };
    }
}
