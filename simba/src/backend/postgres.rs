//! The postgres backend (being written).

use super::BackendError;

/// The postgres backend.
#[derive(Debug, Clone)]
pub struct PostgresBackend {}

impl PostgresBackend {
    /// Connects to the server at `url` (`postgres://...`).
    pub async fn connect(url: &str) -> Result<Self, BackendError> {
        Err(BackendError::Misconfigured(format!("the postgres backend is not implemented yet: {url}")))
    }
}
