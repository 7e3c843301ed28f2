//! The redis backend (being written).

use super::BackendError;

/// The redis backend.
#[derive(Debug, Clone)]
pub struct RedisBackend {}

impl RedisBackend {
    /// Connects to the server at `url` (`redis://...`).
    pub async fn connect(url: &str) -> Result<Self, BackendError> {
        Err(BackendError::Misconfigured(format!("the redis backend is not implemented yet: {url}")))
    }
}
