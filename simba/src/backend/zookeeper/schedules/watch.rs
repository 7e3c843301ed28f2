//! The broadcast of schedule changes on ZooKeeper (rule A11): every write sets its space's row
//! (`/simba/schedules/{space}`), so one persistent recursive watch on `/simba/schedules` per
//! backend, started at the first subscriber, hears every space's writes and forwards the space.
//! The watch is made again when the session it was on ends; what changed meanwhile is found by
//! the holders' poll. The task stops when the backend's schedule state drops.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::broadcast;
use tokio::task::AbortHandle;
use zookeeper_client as zk;

use super::SCHEDULES;
use super::path::unsegment;
use crate::backend::zookeeper::ZooKeeperBackend;

/// The backend's watch: its sender once somebody subscribed, and its task.
#[derive(Default)]
pub(super) struct Watch {
    changes: Mutex<Option<broadcast::Sender<String>>>,
    task: Mutex<Option<AbortHandle>>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().unwrap_or_else(PoisonError::into_inner).take() {
            task.abort();
        }
    }
}

impl Watch {
    /// A receiver of the spaces whose schedules changed, the watch started at the first call.
    pub(super) fn subscribe(&self, backend: &ZooKeeperBackend) -> Option<broadcast::Receiver<String>> {
        let mut slot = self.changes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = &*slot {
            return Some(tx.subscribe());
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (tx, rx) = broadcast::channel(1024);
        let shared = Arc::clone(&backend.inner.shared);
        let description = backend.inner.description.clone();
        let forward = tx.clone();
        let task = runtime.spawn(async move {
            loop {
                let watched = match shared.get().await {
                    Ok(c) => c.watch(SCHEDULES, zk::AddWatchMode::PersistentRecursive).await.map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                let mut w = match watched {
                    Ok(w) => w,
                    Err(error) => {
                        tracing::debug!(backend = %description, %error, "cannot watch schedule changes; holders poll");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        continue;
                    }
                };
                loop {
                    let event = w.changed().await;
                    match event.event_type {
                        zk::EventType::NodeCreated | zk::EventType::NodeDataChanged => {
                            if let Some(space) = changed_space(&event.path) {
                                let _ = forward.send(space);
                            }
                        }
                        zk::EventType::Session if event.session_state == zk::SessionState::Disconnected => {}
                        zk::EventType::Session => break,
                        _ => {}
                    }
                }
            }
        });
        *self.task.lock().unwrap_or_else(PoisonError::into_inner) = Some(task.abort_handle());
        *slot = Some(tx);
        Some(rx)
    }
}

/// The space whose row `path` is (`/simba/schedules/{space}`), or `None` for any other node.
fn changed_space(path: &str) -> Option<String> {
    let segment = path.strip_prefix(SCHEDULES)?.strip_prefix('/')?;
    (!segment.is_empty() && !segment.contains('/')).then(|| unsegment(segment))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_space_row_names_a_space() {
        assert_eq!(changed_space("/simba/schedules/billing").as_deref(), Some("billing"));
        assert_eq!(changed_space("/simba/schedules/~").as_deref(), Some(""));
        assert_eq!(changed_space("/simba/schedules/billing/p/3/x"), None);
        assert_eq!(changed_space("/simba/schedules"), None);
        assert_eq!(changed_space("/simba/jobsignal/x"), None);
    }
}
