//! `simba.toml`: loading, `SIMBA_*` environment overrides, and validation (rules C2, J4, J7).
//!
//! ```toml
//! [backend]
//! url = "sqlite://simba.db"
//! namespace = "billing-svc"  # optional: share one store with other applications (ADR 0013)
//!
//! [session]
//! lease_duration = "15s"
//!
//! [jobs.report]              # a #[simba_scheduled] job, by name
//! cron = "0 */10 * * * *"
//!
//! [jobs.billing]             # a #[simba_partitioned] job, by name
//! partitions = 32
//! enabled = false
//! ```
//!
//! Every key can be overridden by an environment variable `SIMBA_<TABLE>__<KEY>` (double
//! underscores between levels): `SIMBA_SESSION__LEASE_DURATION=10s`,
//! `SIMBA_JOBS__REPORT__ENABLED=false`, `SIMBA_BACKEND__URL=postgres://...`.
//!
//! The model is here; the file's tables and their checks are in `file`, the overrides in
//! `env`, and what an error says (lines, variables, masked secrets, hints) in `diagnostics`.

mod alerts;
mod diagnostics;
mod env;
mod file;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::job::{Misfire, Schedule};
use crate::{ConfigError, Error, SimbaConfig};

use diagnostics::{Cx, Origins, secrets_in};
pub(crate) use env::env_overrides;
use env::{apply_override, overridden_keys};
use file::FileConfig;

pub use alerts::{AlertSettings, DEFAULT_WEBHOOK_TIMEOUT, WebhookUrl};

/// The largest `retry` a job may ask for.
pub const MAX_RETRY: u32 = 100;

/// The [`RuntimeConfig::source`] of a configuration loaded without a file: the built-in
/// values and the `SIMBA_*` variables.
const NO_FILE: &str = "the environment (no simba.toml)";

/// Overrides for one job, by name (rule J7).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct JobOverride {
    /// `enabled = false` keeps the job from running on this node.
    pub enabled: Option<bool>,
    /// A schedule replacing the one in the code.
    pub schedule: Option<Schedule>,
    /// A misfire policy replacing the one in the code.
    pub misfire: Option<Misfire>,
    /// For partitioned jobs: the number of partitions.
    pub partitions: Option<u32>,
    /// `retry = 3`: how many times a failed run is retried while its term stays valid.
    pub retry: Option<u32>,
    /// `backoff = "1s"`: the first wait before a retry (doubling, capped, jittered).
    pub backoff: Option<Duration>,
    /// `timeout = "30s"`: a run that outlives it is cancelled and recorded `timed_out`.
    pub timeout: Option<Duration>,
    /// `overlap = "buffer_one"`: what a slot does while a run is in flight (J11).
    pub overlap: Option<crate::job::Overlap>,
    /// `catch_up_window = "10m"`: missed slots older than it are not caught up (J12).
    pub catch_up_window: Option<Duration>,
    /// `jitter = "30s"`: the longest start jitter of a slot (J13).
    pub jitter: Option<Duration>,
    /// `start = 2027-01-01T00:00:00Z`: no slot before it (J14).
    pub start: Option<chrono::DateTime<chrono::Utc>>,
    /// `end = "2027-12-31T23:59:59Z"`: no slot after it (J14).
    pub end: Option<chrono::DateTime<chrono::Utc>>,
}

impl JobOverride {
    /// `policies` with this override's policy keys applied.
    pub(crate) fn policies(&self, mut policies: crate::job::Policies) -> crate::job::Policies {
        policies.overlap = self.overlap.unwrap_or(policies.overlap);
        policies.catch_up_window = self.catch_up_window.or(policies.catch_up_window);
        policies.jitter = self.jitter.or(policies.jitter);
        policies.start = self.start.or(policies.start);
        policies.end = self.end.or(policies.end);
        policies
    }
}

/// The runtime's configuration, resolved from a file (or the built-in values) and the
/// environment. Its `Debug` output masks the secrets of the backend URL.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// Where it came from (a path, or "the environment (no simba.toml)").
    pub source: String,
    /// The backend URL, with the `[backend]` credentials and `[backend.tls]` files merged in
    /// (so it may hold a password: show it through [`crate::runtime::redact`]). Empty when
    /// neither the file nor `SIMBA_BACKEND__URL` names one: the runtime then refuses to start
    /// unless it was given a backend in code (rule J4). There is no default store, because
    /// nodes started without one would each keep their own and each run every job.
    pub backend_url: String,
    /// Session timing.
    pub session: SimbaConfig,
    /// Per-job overrides, by job name.
    pub jobs: BTreeMap<String, JobOverride>,
    /// `[metrics] listen`: where the runtime serves `/metrics` and the probes (feature
    /// `prometheus`); `None` (the default): nothing listens.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// `[metrics] lease_labels` and `idle_timeout`: how terms are labelled and how long Simba's
    /// own recorder keeps a series that is not updated (rules O4, O5).
    pub metrics: crate::metrics::MetricsSettings,
    /// `[dashboard]`: where the runtime serves the web dashboard (feature `dashboard`);
    /// `None` (the default): nothing listens.
    pub dashboard: Option<crate::dashboard::DashboardConfig>,
    /// `[history] retention`: how many run records per job the jobs store keeps (at most
    /// [`MAX_HISTORY_RETENTION`]); `None` (the default): the store's
    /// [`DEFAULT_RETENTION`](crate::job_store::DEFAULT_RETENTION).
    pub history_retention: Option<usize>,
    /// `[schedules] partitions` (default 64, 1 to 4096): how many partitions the built-in
    /// group `simba.schedules` spreads schedules stored as data over (ADR 0020, rule A9);
    /// fixed per namespace at its first create.
    pub schedule_partitions: u32,
    /// `[backend] namespace` (or `SIMBA_BACKEND__NAMESPACE`): the namespace every lease,
    /// group and job name of this application lives in (ADR 0013); `None`
    /// (the default): the store's default namespace, as before namespaces existed.
    pub namespace: Option<crate::backend::namespace::Namespace>,
    /// `[alerts]`: the alert webhook (feature `webhook`) and the lateness of a `late` alert
    /// (rules R12, R13).
    pub alerts: AlertSettings,
    /// `[backend] start_timeout` (default [`DEFAULT_START_TIMEOUT`]): how long the runtime's
    /// start keeps trying a backend that is unavailable (refused, reset, no answer, a name
    /// that does not resolve yet) before it gives up. A misconfigured backend (a malformed URL,
    /// wrong credentials, a missing database, a TLS failure) fails at once. `0s`: one try.
    pub start_timeout: Duration,
    /// Where each key of the file was set (its line, or the variable that overrode it), for
    /// the errors found once the jobs are known (`Runtime`'s plan: an unknown `[jobs.NAME]`,
    /// `partitions = 0`, a namespace too long for a job's names).
    origins: Origins,
}

impl RuntimeConfig {
    /// `e` (an error about `key` of this configuration) with the key's line in the file, or
    /// the environment variable that set it, when the file or the environment set it.
    pub(crate) fn locate(&self, e: ConfigError, key: &str) -> ConfigError {
        self.origins.locate(e, key)
    }
}

/// The largest `[history] retention`: every write of a record lists or trims the job's
/// records, so a longer history belongs in the application's own store.
pub const MAX_HISTORY_RETENTION: usize = 10_000;

/// The default `[backend] start_timeout`: long enough for a database that starts beside the
/// application (a container, a restart), short enough that a node pointed at the wrong host
/// says so within a minute.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(60);

impl std::fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeConfig")
            .field("source", &self.source)
            .field("backend_url", &crate::secret::redact_url(&self.backend_url))
            .field("session", &self.session)
            .field("jobs", &self.jobs)
            .field("metrics_listen", &self.metrics_listen)
            .field("metrics", &self.metrics)
            .field("dashboard", &self.dashboard)
            .field("history_retention", &self.history_retention)
            .field("schedule_partitions", &self.schedule_partitions)
            .field("namespace", &self.namespace)
            .field("alerts", &self.alerts)
            .field("start_timeout", &self.start_timeout)
            .finish_non_exhaustive()
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            source: "RuntimeConfig::default()".into(),
            backend_url: String::new(),
            session: SimbaConfig::default(),
            jobs: BTreeMap::new(),
            metrics_listen: None,
            metrics: crate::metrics::MetricsSettings::default(),
            dashboard: None,
            history_retention: None,
            schedule_partitions: simba_core::schedules::DEFAULT_PARTITIONS,
            namespace: None,
            alerts: AlertSettings::default(),
            start_timeout: DEFAULT_START_TIMEOUT,
            origins: Origins::default(),
        }
    }
}

impl RuntimeConfig {
    /// Rule B7: one line per dashboard or metrics listener this configuration opens beyond
    /// this machine (plain HTTP: a TLS proxy belongs in front). The runtime logs them at
    /// `warn` when it starts; `simba check` prints them.
    pub fn listener_warnings(&self) -> Vec<String> {
        let listeners = [
            ("[metrics] listen", self.metrics_listen),
            ("[dashboard] listen", self.dashboard.as_ref().map(|d| d.listen)),
        ];
        listeners.into_iter().filter_map(|(what, addr)| crate::backend::listener_warning(what, addr?)).collect()
    }

    /// Loads the configuration as [`crate::run`] does: the file named by `SIMBA_CONFIG`, else
    /// `./simba.toml` if it exists, else the built-in values; then `SIMBA_*` overrides.
    ///
    /// Without a file and without `SIMBA_BACKEND__URL` the result names no backend
    /// ([`backend_url`](Self::backend_url) is empty): a tool can still add one (`simba
    /// --backend`), and the runtime refuses to start on it ([`RuntimeConfig::require_backend`]).
    pub fn load() -> Result<RuntimeConfig, Error> {
        match std::env::var_os("SIMBA_CONFIG") {
            Some(p) => Self::load_file(Path::new(&p)),
            None if Path::new("simba.toml").exists() => Self::load_file(Path::new("simba.toml")),
            None => Self::from_toml_str("", NO_FILE, env_overrides()),
        }
    }

    /// `Ok` when this configuration names a backend; otherwise the error the runtime's start
    /// returns (rule J4): what to create (`simba.toml` with `[backend] url`), the variables
    /// (`SIMBA_CONFIG`, `SIMBA_BACKEND__URL`), and the line for a single-host trial on SQLite.
    /// Nodes started without a backend would each keep their own store and each run every
    /// job, which no check can see: so the runtime never picks one.
    pub fn require_backend(&self) -> Result<(), Error> {
        if !self.backend_url.is_empty() {
            return Ok(());
        }
        const WHY: &str = "simba does not pick one, since nodes started that way would each keep their own store \
                           and each run every job";
        const TRIAL: &str = "for a trial on one host, embedded SQLite: url = \"sqlite://simba.db\" (or \
                             SIMBA_BACKEND__URL=sqlite://simba.db)";
        let e = if self.source == NO_FILE {
            ConfigError::new(format!(
                "no backend configured: no SIMBA_CONFIG, no ./simba.toml and no SIMBA_BACKEND__URL, and {WHY}: create \
                 simba.toml with a [backend] table whose url names the store every node shares, e.g. url = \
                 \"postgres://user@db-host/simba\" (or point SIMBA_CONFIG at such a file, or set \
                 SIMBA_BACKEND__URL); {TRIAL}"
            ))
            .with_key("backend.url")
        } else {
            ConfigError::at_key(
                "backend.url",
                format!(
                    "missing: no backend is named here nor in SIMBA_BACKEND__URL, and {WHY}; add url with the store \
                     every node shares, e.g. url = \"postgres://user@db-host/simba\" (or give the runtime a \
                     backend in code); {TRIAL}"
                ),
            )
            .with_file(self.source.clone())
        };
        Err(e.into())
    }

    /// Loads `path`, then applies `SIMBA_*` overrides.
    pub fn load_file(path: &Path) -> Result<RuntimeConfig, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::from(
                ConfigError::new(format!(
                    "cannot read the file: {e} (set SIMBA_CONFIG to the right file, or remove it to use the embedded \
                     default)"
                ))
                .with_file(path.display().to_string()),
            )
        })?;
        Self::from_toml_str(&text, &path.display().to_string(), env_overrides())
    }

    /// Parses `text` (named `source` in errors), then applies `overrides` (variable name and
    /// value, as `SIMBA_SESSION__LEASE_DURATION=10s`).
    pub fn from_toml_str(text: &str, source: &str, overrides: Vec<(String, String)>) -> Result<RuntimeConfig, Error> {
        // Messages may quote the file (TOML errors show the offending line) or an override's
        // value: mask every secret first.
        let overridden = overridden_keys(&overrides);
        let origins = Origins::of(text, &overridden);
        let cx = Cx { text, source, secrets: secrets_in(text, &overrides), overridden, origins };
        // First the file alone, so that errors carry its line and column.
        if let Err(e) = toml::from_str::<FileConfig>(text) {
            return Err(cx.toml_err(&e));
        }
        let mut table: toml::Table = toml::from_str(text).map_err(|e| cx.toml_err(&e))?;
        let mut applied = Vec::new();
        for (var, value) in &overrides {
            apply_override(&mut table, var, value).map_err(|m| match cx.err(m) {
                Error::InvalidConfig(c) => Error::from(c.with_env_var(var.as_str())),
                other => other,
            })?;
            applied.push(var.as_str());
        }
        let file: FileConfig = table.try_into().map_err(|e: toml::de::Error| cx.override_err(&e, &applied))?;
        let session = cx.session(&file.session)?;
        let mut jobs = BTreeMap::new();
        for (name, j) in file.jobs {
            let o = cx.job(&name, &j)?;
            jobs.insert(name, o);
        }
        let namespace = cx.namespace(file.backend.namespace.as_ref())?;
        let start_timeout =
            cx.dur("backend", "start_timeout", &file.backend.start_timeout)?.unwrap_or(DEFAULT_START_TIMEOUT);
        let backend_url = cx.backend_url(file.backend)?;
        let metrics = cx.metrics_settings(&file.metrics)?;
        let metrics_listen = cx.metrics_listen(file.metrics.listen)?;
        let dashboard =
            crate::dashboard::resolve(file.dashboard).map_err(|(key, m)| cx.key_err("dashboard", key, m))?;
        let history_retention = cx.history_retention(file.history.retention)?;
        let schedule_partitions = cx.schedule_partitions(file.schedules.partitions)?;
        let alerts = cx.alerts(&file.alerts)?;
        Ok(RuntimeConfig {
            source: source.to_owned(),
            backend_url,
            session,
            jobs,
            metrics_listen,
            metrics,
            dashboard,
            history_retention,
            schedule_partitions,
            namespace,
            alerts,
            start_timeout,
            origins: cx.origins,
        })
    }

    /// The path `load()` reads, if any.
    pub fn default_path() -> Option<PathBuf> {
        match std::env::var_os("SIMBA_CONFIG") {
            Some(p) => Some(PathBuf::from(p)),
            None => Some(PathBuf::from("simba.toml")).filter(|p| p.exists()),
        }
    }
}
