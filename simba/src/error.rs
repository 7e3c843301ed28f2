//! The one error type of the crate.

use std::time::Duration;

use crate::backend::BackendError;

/// The error type a leader task may return.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

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
    /// A configuration value broke a rule (C1), or a request named something this node does
    /// not have. Its [`ConfigError`] carries the file, line, key and reason as fields.
    #[error("invalid configuration: {0}")]
    InvalidConfig(ConfigError),
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

impl Error {
    /// An [`Error::InvalidConfig`] with only a reason.
    pub(crate) fn invalid_config(reason: impl Into<String>) -> Error {
        Error::InvalidConfig(ConfigError::new(reason))
    }
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        Error::InvalidConfig(e)
    }
}

/// What is wrong with a configuration, in parts a program can read: where the value came
/// from ([`file`](Self::file), [`line`](Self::line), [`env_var`](Self::env_var)), which
/// setting ([`key`](Self::key)) and why ([`reason`](Self::reason)). Its `Display` text is the
/// message a person reads, e.g.
/// `simba.toml: line 3, [jobs.report] timeout: invalid duration "soon": ...`.
///
/// ```
/// use simba::{Error, RuntimeConfig};
///
/// let e = RuntimeConfig::from_toml_str("[jobs.report]\ncron = \"*/5 * * * *\"\n", "simba.toml", Vec::new())
///     .expect_err("a 5-field cron expression");
/// let Error::InvalidConfig(c) = &e else { panic!("{e}") };
/// assert_eq!(c.file(), Some("simba.toml"));
/// assert_eq!(c.line(), Some(2));
/// assert_eq!(c.key(), Some("jobs.report.cron"));
/// assert!(c.reason().contains("6 fields"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    file: Option<String>,
    env_var: Option<String>,
    line: Option<usize>,
    key: Option<String>,
    reason: String,
    /// Whether `Display` writes the location (line or variable, then key) before the reason;
    /// `false` where the reason already says where (a TOML parser message quoting the line, a
    /// builder message naming its setting).
    located: bool,
}

impl ConfigError {
    /// An error with only a reason; the reason says what to change.
    pub(crate) fn new(reason: impl Into<String>) -> Self {
        ConfigError { file: None, env_var: None, line: None, key: None, reason: reason.into(), located: false }
    }

    /// The error for `key` (a `simba.toml` path such as `jobs.report.cron`), written before
    /// the reason as `[jobs.report] cron: `.
    pub(crate) fn at_key(key: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError { key: Some(key.into()), located: true, ..ConfigError::new(reason) }
    }

    /// Names the setting without writing it before the reason (the reason names it).
    pub(crate) fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Names the file (or the configuration text) the value came from.
    pub(crate) fn with_file(mut self, file: impl Into<String>) -> Self {
        self.file = Some(file.into());
        self
    }

    /// Sets the 1-based line of the value in the file.
    pub(crate) fn with_line(mut self, line: Option<usize>) -> Self {
        self.line = line;
        self
    }

    /// Names the environment variable the value came from.
    pub(crate) fn with_env_var(mut self, var: impl Into<String>) -> Self {
        self.env_var = Some(var.into());
        self
    }

    /// The reason with `f` applied (e.g. masking secrets).
    pub(crate) fn map_reason(mut self, f: impl FnOnce(&str) -> String) -> Self {
        self.reason = f(&self.reason);
        self
    }

    /// Where the configuration came from: the path of the file read (`simba.toml`,
    /// `/etc/app/simba.toml`), or the name the text was given
    /// ([`RuntimeConfig::from_toml_str`](crate::RuntimeConfig::from_toml_str)'s `source`,
    /// `the environment (no simba.toml)` when no file exists); `None` for a value set in code.
    pub fn file(&self) -> Option<&str> {
        self.file.as_deref()
    }

    /// The 1-based line of the value in [`file`](Self::file), where known.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The environment variable the value came from (`SIMBA_SESSION__LEASE_DURATION`), when it
    /// came from one.
    pub fn env_var(&self) -> Option<&str> {
        self.env_var.as_deref()
    }

    /// The setting: a `simba.toml` key path (`jobs.report.cron`, `backend.url`,
    /// `session.lease_duration`), or the name of the builder method that set it
    /// (`lease_duration` of [`SimbaConfigBuilder`](crate::SimbaConfigBuilder),
    /// `SimbaBuilder::backend`); `None` when no single setting is at fault.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// What is wrong and what to do, without the file and location (secrets masked).
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}: ")?;
        }
        if self.located {
            match (&self.env_var, self.line) {
                (Some(var), _) => write!(f, "environment variable {var}, ")?,
                (None, Some(line)) => write!(f, "line {line}, ")?,
                (None, None) => {}
            }
            match self.key.as_deref().map(|k| k.rsplit_once('.').unwrap_or((k, ""))) {
                Some((table, "")) => write!(f, "[{table}]: ")?,
                Some((table, leaf)) => write!(f, "[{table}] {leaf}: ")?,
                None => {}
            }
        }
        f.write_str(&self.reason)
    }
}

impl std::error::Error for ConfigError {}
