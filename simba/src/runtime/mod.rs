//! The runtime behind [`run`]: reads `simba.toml`, opens ONE session, starts an
//! election per scheduled job and joins every partition group, runs until SIGINT or SIGTERM,
//! then hands everything over (H1) and closes the session (rule J4).
//!
//! By concern: `config` (the configuration: model, file, environment, diagnostics), `plan`
//! (what runs: the jobs checked against the configuration, and their settings), `builder`
//! (what to run and how to start it), `connect` (the backend, with retries while it is
//! unavailable), `running` (the started runtime: control loop, shutdown), `signals`, `jobs`
//! (jobs added and removed while it runs), `registry` (the published job registries) and
//! `schedules` (the handlers, and the group that runs schedules stored as data).

mod builder;
mod config;
mod connect;
mod jobs;
mod plan;
mod registry;
mod running;
mod schedules;
mod security;
mod signals;

use crate::Error;

pub use builder::RuntimeBuilder;
pub use config::{
    AlertSettings, DEFAULT_START_TIMEOUT, DEFAULT_WEBHOOK_TIMEOUT, JobOverride, MAX_HISTORY_RETENTION, MAX_RETRY,
    RuntimeConfig, WebhookUrl,
};
pub use jobs::JobsHandle;
pub use registry::REGISTRY_CHECK_PERIOD;
pub use running::RunningRuntime;

/// Reads `simba.toml` (`SIMBA_CONFIG`, else `./simba.toml`), applies `SIMBA_*` environment
/// overrides, opens the session, runs every job registered with `#[simba_scheduled]` /
/// `#[simba_partitioned]` while this node holds its term, and returns after SIGINT or SIGTERM
/// once everything was handed over and the session closed. A bad configuration is an error and
/// nothing starts; so is none: without a file and without `SIMBA_BACKEND__URL` no backend is
/// named, and it refuses to start rather than pick a store of its own (rule J4; for a trial on
/// one host, a `simba.toml` holding `[backend]` and `url = "sqlite://simba.db"`).
pub async fn run() -> Result<(), Error> {
    Runtime::builder().run().await
}

/// Programmatic control of the runtime: [`run`] is `Runtime::builder().run()`.
#[derive(Debug, Clone, Copy)]
pub struct Runtime;

impl Runtime {
    /// A builder that reads the configuration as [`run`] does and uses the link-time
    /// registry.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::new()
    }
}

/// `url` with every secret masked as `***`, for logs, errors and any output: the password
/// of the userinfo (`postgres://user:***@host/db`, `zk://digest:***@host`) and the values
/// of secret query parameters (`password=`, `sslpassword=`, `auth=`, `token=`, ...).
pub fn redact(url: &str) -> String {
    crate::secret::redact_url(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact("redis://:hunter2@db:6379"), "redis://:***@db:6379");
        assert_eq!(redact("postgres://u:p@h/d"), "postgres://u:***@h/d");
        assert_eq!(redact("sqlite://simba.db"), "sqlite://simba.db");
    }
}
