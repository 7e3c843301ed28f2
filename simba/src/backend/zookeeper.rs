//! The zookeeper backend (being written).

use super::BackendError;

/// The zookeeper backend.
#[derive(Debug, Clone)]
pub struct ZooKeeperBackend {}

impl ZooKeeperBackend {
    /// Connects to the server at `url` (`zk://...`).
    pub async fn connect(url: &str) -> Result<Self, BackendError> {
        Err(BackendError::Misconfigured(format!("the zookeeper backend is not implemented yet: {url}")))
    }
}
