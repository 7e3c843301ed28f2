//! The mysql backend (being written).

use super::BackendError;

/// The mysql backend.
#[derive(Debug, Clone)]
pub struct MySqlBackend {}

impl MySqlBackend {
    /// Connects to the server at `url` (`mysql://...`).
    pub async fn connect(url: &str) -> Result<Self, BackendError> {
        Err(BackendError::Misconfigured(format!("the mysql backend is not implemented yet: {url}")))
    }
}
