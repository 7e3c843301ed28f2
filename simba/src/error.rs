//! The one error type of the crate.

use std::time::Duration;

use crate::backend::BackendError;

/// Everything that can go wrong in simba.
///
/// Variants separate three families: your term is gone ([`TermExpired`](Error::TermExpired)),
/// you asked for something invalid (names, configuration, lifecycle), and the store failed
/// ([`Backend`](Error::Backend)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The term ended, or will not stay valid for the time asked (rule T5). Stop the step;
    /// do not write with this term's token.
    #[error(
        "term of lease `{name}` (token {token}) is not valid for another {min_remaining:?}: stop this step and wait for the next term"
    )]
    TermExpired {
        /// The lease.
        name: String,
        /// The term's fencing token.
        token: u64,
        /// The validity asked for.
        min_remaining: Duration,
    },
    /// A lease, group or job name broke rule T1.
    #[error("invalid lease name {name:?}: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A configuration value broke a rule (C1).
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// An election (or lock) with this name is already started on this client (rule L4).
    #[error("`{name}` is already in use on this client by an election or a lock: stop it before starting another")]
    AlreadyStarted {
        /// The lease name.
        name: String,
    },
    /// The client was closed; create a new one.
    #[error("the simba client is closed: create a new client")]
    Closed,
    /// The operation needs a running Tokio runtime.
    #[error("simba needs a Tokio runtime: call this from inside `#[tokio::main]` or a runtime's `block_on`")]
    NoRuntime,
    /// The backend failed. The engine already retried where retrying was safe.
    #[error("backend {op} failed{}", name.as_ref().map(|n| format!(" for `{n}`")).unwrap_or_default())]
    Backend {
        /// The operation (`open session`, `acquire`, ...).
        op: &'static str,
        /// The lease or group involved, if any.
        name: Option<String>,
        /// The backend's error.
        #[source]
        source: BackendError,
    },
}
