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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::job::{Misfire, Schedule, parse_cron, parse_time_zone};
use crate::{ConfigError, Error, SimbaConfig};

/// The largest `retry` a job may ask for.
pub const MAX_RETRY: u32 = 100;

/// The backend used when no configuration file exists: SQLite in `./simba.db`.
pub const DEFAULT_BACKEND_URL: &str = "sqlite://simba.db";

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
}

/// The runtime's configuration, resolved from a file (or the embedded default) and the
/// environment. Its `Debug` output masks the secrets of the backend URL.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// Where it came from (a path, or "the embedded default").
    pub source: String,
    /// The backend URL, with the `[backend]` credentials and `[backend.tls]` files merged in
    /// (so it may hold a password: show it through [`crate::runtime::redact`]).
    pub backend_url: String,
    /// Session timing.
    pub session: SimbaConfig,
    /// Per-job overrides, by job name.
    pub jobs: BTreeMap<String, JobOverride>,
    /// `[metrics] listen`: where the runtime serves `/metrics` and `/healthz` (feature
    /// `prometheus`); `None` (the default): nothing listens.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// `[dashboard]`: where the runtime serves the web dashboard (feature `dashboard`);
    /// `None` (the default): nothing listens.
    pub dashboard: Option<crate::dashboard::DashboardConfig>,
    /// `[history] retention`: how many run records per job the jobs store keeps (at most
    /// [`MAX_HISTORY_RETENTION`]); `None` (the default): the store's
    /// [`DEFAULT_RETENTION`](crate::job_store::DEFAULT_RETENTION).
    pub history_retention: Option<usize>,
    /// `[backend] namespace` (or `SIMBA_BACKEND__NAMESPACE`): the namespace every lease,
    /// group and job name of this application lives in (issue 12 item 6, ADR 0013); `None`
    /// (the default): the store's default namespace, as before namespaces existed.
    pub namespace: Option<crate::backend::namespace::Namespace>,
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

/// Where the keys of one configuration were set: `jobs.report.cron` -> line 7, or ->
/// `SIMBA_JOBS__REPORT__CRON`; a table (`jobs.report`) -> the line of its header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Origins(BTreeMap<String, Origin>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    Line(usize),
    Env(String),
}

impl Origins {
    /// The keys and table headers of `text` with their 1-based lines; an environment override
    /// (`(key path, variable)`) replaces the line of its key.
    fn of(text: &str, overridden: &[(String, String)]) -> Self {
        let mut map = BTreeMap::new();
        let mut section = String::new();
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if let Some(h) = l.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
                section = h.trim().replace(['"', ' '], "");
                map.entry(section.clone()).or_insert(Origin::Line(i + 1));
            } else if let Some((k, _)) = l.split_once('=') {
                let k = k.trim().trim_matches('"');
                if !section.is_empty() && !k.is_empty() && !k.starts_with('#') {
                    map.entry(format!("{section}.{k}")).or_insert(Origin::Line(i + 1));
                }
            }
        }
        for (path, var) in overridden {
            map.insert(path.clone(), Origin::Env(var.clone()));
        }
        Origins(map)
    }

    /// `e` with the line of `key` in the file, or the variable that set it, when known.
    pub(crate) fn locate(&self, e: ConfigError, key: &str) -> ConfigError {
        match self.0.get(key) {
            Some(Origin::Line(line)) => e.with_line(Some(*line)),
            Some(Origin::Env(var)) => e.with_env_var(var.as_str()),
            None => e,
        }
    }
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
            .field("dashboard", &self.dashboard)
            .field("history_retention", &self.history_retention)
            .field("namespace", &self.namespace)
            .field("start_timeout", &self.start_timeout)
            .finish_non_exhaustive()
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            source: "the embedded default".into(),
            backend_url: DEFAULT_BACKEND_URL.into(),
            session: SimbaConfig::default(),
            jobs: BTreeMap::new(),
            metrics_listen: None,
            dashboard: None,
            history_retention: None,
            namespace: None,
            start_timeout: DEFAULT_START_TIMEOUT,
            origins: Origins::default(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    backend: BackendTable,
    #[serde(default)]
    session: SessionTable,
    #[serde(default)]
    jobs: BTreeMap<String, JobTable>,
    #[serde(default)]
    metrics: MetricsTable,
    #[serde(default)]
    dashboard: crate::dashboard::DashboardTable,
    #[serde(default)]
    history: HistoryTable,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryTable {
    retention: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricsTable {
    listen: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BackendTable {
    url: Option<String>,
    /// A string, or what TOML made of an environment override's value (`42`).
    namespace: Option<toml::Value>,
    user: Option<String>,
    password: Option<String>,
    password_file: Option<PathBuf>,
    tls: Option<super::security::TlsTable>,
    start_timeout: Option<String>,
}

impl std::fmt::Debug for BackendTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendTable")
            .field("url", &self.url.as_deref().map(crate::secret::redact_url))
            .field("namespace", &self.namespace)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| crate::secret::MASK))
            .field("password_file", &self.password_file)
            .field("tls", &self.tls)
            .field("start_timeout", &self.start_timeout)
            .finish()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionTable {
    lease_duration: Option<String>,
    renew_interval: Option<String>,
    drift: Option<f64>,
    margin: Option<String>,
    retry_jitter: Option<String>,
    min_backoff: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobTable {
    enabled: Option<bool>,
    cron: Option<String>,
    time_zone: Option<String>,
    fixed_rate: Option<String>,
    misfire: Option<String>,
    partitions: Option<u32>,
    retry: Option<u32>,
    backoff: Option<String>,
    timeout: Option<String>,
}

const SECTIONS: [&str; 6] = ["backend", "session", "jobs", "metrics", "dashboard", "history"];

/// What every check of one configuration text needs: the text (for line numbers), its name,
/// the secrets to mask in messages, and which keys the environment overrides.
struct Cx<'a> {
    text: &'a str,
    source: &'a str,
    secrets: Vec<(String, String)>,
    /// `(key path, variable)` of every override: `("session.lease_duration",
    /// "SIMBA_SESSION__LEASE_DURATION")`.
    overridden: Vec<(String, String)>,
    /// Where each key was set (its line, or the variable of `overridden`): built once, used by
    /// every error about a key and kept in the [`RuntimeConfig`].
    origins: Origins,
}

impl Cx<'_> {
    /// A configuration error naming the source, with every secret masked; its reason says
    /// where (a TOML parser message, or one naming its key).
    fn err(&self, msg: String) -> Error {
        ConfigError::new(msg).with_file(self.source).map_reason(|r| scrub(r, &self.secrets)).into()
    }

    /// The error for `key` of `[section]`, with the line it is on in the file, or the
    /// environment variable that set it; every secret masked.
    fn key_err(&self, section: &str, key: &str, msg: String) -> Error {
        let path = format!("{section}.{key}");
        let e = ConfigError::at_key(&path, scrub(&msg, &self.secrets)).with_file(self.source);
        self.origins.locate(e, &path).into()
    }

    /// A TOML error in the file itself: its line (from the error's span) and the key on that
    /// line, as fields.
    fn toml_err(&self, e: &toml::de::Error) -> Error {
        let line = e.span().map(|r| self.text.get(..r.start).unwrap_or_default().matches('\n').count() + 1);
        let key = line.and_then(|l| key_at(self.text, l));
        let mut c = ConfigError::new(scrub(&with_hint(&e.to_string()), &self.secrets)).with_file(self.source);
        if let Some(key) = key {
            c = c.with_key(key);
        }
        c.with_line(line).into()
    }

    /// A TOML error of the table once the environment overrides are applied (it has no line of
    /// the file): the key it names (toml ends its text with "in `session.drift`") as a field,
    /// with the variable that set it.
    fn override_err(&self, e: &toml::de::Error, applied: &[&str]) -> Error {
        let text = e.to_string();
        let key = text.lines().rev().find_map(|l| l.strip_prefix("in `")?.strip_suffix('`')).map(str::to_owned);
        let mut c = ConfigError::new(scrub(
            &format!("after the environment overrides {}: {}", applied.join(", "), with_hint(&text)),
            &self.secrets,
        ))
        .with_file(self.source);
        if let Some((_, var)) = key.as_ref().and_then(|k| self.overridden.iter().find(|(p, _)| p == k)) {
            c = c.with_env_var(var.as_str());
        }
        match key {
            Some(k) => c.with_key(k).into(),
            None => c.into(),
        }
    }

    /// An error whose reason names its key (`at` was written into it): `key` as a field.
    fn err_at(&self, key: &str, msg: String) -> Error {
        match self.err(msg) {
            Error::InvalidConfig(c) => c.with_key(key).into(),
            other => other,
        }
    }

    /// A duration value of `key` in `[section]`, if given.
    fn dur(&self, section: &str, key: &str, v: &Option<String>) -> Result<Option<Duration>, Error> {
        v.as_deref()
            .map(|s| {
                humantime::parse_duration(s).map_err(|e| {
                    self.key_err(section, key, format!("invalid duration {s:?}: {e} (write e.g. \"15s\" or \"500ms\")"))
                })
            })
            .transpose()
    }

    /// `[session]`, checked against C1.
    fn session(&self, s: &SessionTable) -> Result<SimbaConfig, Error> {
        let mut b = SimbaConfig::builder();
        if let Some(d) = self.dur("session", "lease_duration", &s.lease_duration)? {
            b = b.lease_duration(d);
        }
        if let Some(d) = self.dur("session", "renew_interval", &s.renew_interval)? {
            b = b.renew_interval(d);
        }
        if let Some(d) = s.drift {
            b = b.drift(d);
        }
        if let Some(d) = self.dur("session", "margin", &s.margin)? {
            b = b.margin(d);
        }
        if let Some(d) = self.dur("session", "retry_jitter", &s.retry_jitter)? {
            b = b.retry_jitter(d);
        }
        if let Some(d) = self.dur("session", "min_backoff", &s.min_backoff)? {
            b = b.min_backoff(d);
        }
        b.build().map_err(|e| match e {
            // The builder names the setting: point at its line in `[session]`.
            Error::InvalidConfig(c) => {
                let key = c.key().unwrap_or("lease_duration").to_owned();
                self.key_err("session", &key, c.reason().to_owned())
            }
            other => other,
        })
    }

    /// `[jobs.NAME]`'s schedule keys: `cron` (with `time_zone`) or `fixed_rate`, or neither.
    fn job_schedule(&self, section: &str, j: &JobTable) -> Result<Option<Schedule>, Error> {
        let bad = |key: &str, msg: String| self.key_err(section, key, msg);
        match (&j.cron, &j.fixed_rate) {
            (Some(_), Some(_)) => Err(bad("cron", "set either cron or fixed_rate, not both".into())),
            (Some(c), None) => {
                parse_cron(c).map_err(|m| bad("cron", m))?;
                if let Some(z) = &j.time_zone {
                    parse_time_zone(z).map_err(|m| bad("time_zone", m))?;
                }
                Ok(Some(Schedule::Cron { expr: c.clone().into(), time_zone: j.time_zone.clone().map(Into::into) }))
            }
            (None, fixed) => {
                if j.time_zone.is_some() {
                    return Err(bad("time_zone", "time_zone only applies to cron".into()));
                }
                if fixed.is_none() {
                    return Ok(None);
                }
                let d = self.dur(section, "fixed_rate", fixed)?.unwrap_or_default();
                if d.is_zero() {
                    return Err(bad("fixed_rate", "fixed_rate must be greater than zero".into()));
                }
                Ok(Some(Schedule::FixedRate(d)))
            }
        }
    }

    /// `[jobs.NAME]`.
    fn job(&self, name: &str, j: &JobTable) -> Result<JobOverride, Error> {
        let section = format!("jobs.{name}");
        let bad = |key: &str, msg: String| self.key_err(&section, key, msg);
        let schedule = self.job_schedule(&section, j)?;
        let misfire = match j.misfire.as_deref().map(|m| (m, simba_rules::misfire::parse(m))) {
            None => None,
            Some((_, Some(simba_rules::misfire::Policy::Skip))) => Some(Misfire::Skip),
            Some((_, Some(simba_rules::misfire::Policy::RunOnce))) => Some(Misfire::RunOnce),
            Some((other, None)) => {
                return Err(bad(
                    "misfire",
                    format!(
                        "unknown misfire policy {other:?}: use {:?} or {:?}",
                        simba_rules::misfire::SKIP,
                        simba_rules::misfire::RUN_ONCE
                    ),
                ));
            }
        };
        if j.partitions == Some(0) {
            return Err(bad("partitions", "partitions must be at least 1".into()));
        }
        if j.retry.is_some_and(|r| r > MAX_RETRY) {
            return Err(bad(
                "retry",
                format!(
                    "retry must be at most {MAX_RETRY} (a slot that fails that often needs a fix, not more attempts)"
                ),
            ));
        }
        let backoff = self.dur(&section, "backoff", &j.backoff)?;
        if backoff.is_some_and(|d| d.is_zero()) {
            return Err(bad("backoff", "backoff must be greater than zero".into()));
        }
        let timeout = self.dur(&section, "timeout", &j.timeout)?;
        if timeout.is_some_and(|d| d.is_zero()) {
            return Err(bad("timeout", "timeout must be greater than zero (leave it out for no timeout)".into()));
        }
        Ok(JobOverride {
            enabled: j.enabled,
            schedule,
            misfire,
            partitions: j.partitions,
            retry: j.retry,
            backoff,
            timeout,
        })
    }

    /// `[backend]`: the URL with the user, password and TLS keys folded in.
    fn backend_url(&self, b: BackendTable) -> Result<String, Error> {
        let url = b.url.unwrap_or_else(|| DEFAULT_BACKEND_URL.to_owned());
        let password = match (b.password, &b.password_file) {
            (Some(_), Some(_)) => {
                return Err(self.key_err(
                    "backend",
                    "password_file",
                    "set either password (or SIMBA_BACKEND__PASSWORD) or password_file, not both".into(),
                ));
            }
            (Some(p), None) => Some(p),
            (None, Some(path)) => {
                Some(super::security::read_password_file(path).map_err(|m| self.err_at("backend.password_file", m))?)
            }
            (None, None) => None,
        };
        super::security::secure_url(&url, b.user.as_deref(), password.as_deref(), b.tls.as_ref())
            .map_err(|m| self.key_err("backend", "url", m))
    }

    /// `[backend] namespace`, checked against the lease-name rules before any backend call.
    fn namespace(&self, v: Option<&toml::Value>) -> Result<Option<crate::backend::namespace::Namespace>, Error> {
        let text = match v {
            None => return Ok(None),
            Some(toml::Value::String(s)) => s.clone(),
            Some(toml::Value::Integer(i)) => i.to_string(),
            Some(other) => {
                return Err(self.key_err(
                    "backend",
                    "namespace",
                    format!("expected a string, found {} (write e.g. namespace = \"billing-svc\")", other.type_str()),
                ));
            }
        };
        match crate::backend::namespace::problem(&text) {
            Some(message) => Err(self.key_err("backend", "namespace", message)),
            None => crate::backend::namespace::Namespace::new(&text).map(Some),
        }
    }

    /// `[metrics] listen`.
    fn metrics_listen(&self, listen: Option<String>) -> Result<Option<std::net::SocketAddr>, Error> {
        let addr = listen
            .map(|l| {
                l.parse::<std::net::SocketAddr>().map_err(|e| {
                    self.key_err(
                        "metrics",
                        "listen",
                        format!("invalid address {l:?}: {e} (write e.g. \"127.0.0.1:9464\")"),
                    )
                })
            })
            .transpose()?;
        if addr.is_some() && !cfg!(feature = "prometheus") {
            return Err(self.key_err(
                "metrics",
                "listen",
                "serving metrics needs simba's cargo feature `prometheus` (or remove [metrics] listen and install \
                 your own metrics exporter)"
                    .into(),
            ));
        }
        Ok(addr)
    }

    /// `[history] retention`.
    fn history_retention(&self, retention: Option<i64>) -> Result<Option<usize>, Error> {
        let Some(n) = retention else { return Ok(None) };
        match usize::try_from(n) {
            Ok(n @ 1..=MAX_HISTORY_RETENTION) => Ok(Some(n)),
            _ => Err(self.key_err(
                "history",
                "retention",
                format!(
                    "{n} records per job: write a number from 1 to {MAX_HISTORY_RETENTION} (default {}; \
                     keep a longer history in your own store)",
                    crate::job_store::DEFAULT_RETENTION
                ),
            )),
        }
    }
}

impl RuntimeConfig {
    /// Loads the configuration as [`crate::run`] does: the file named by `SIMBA_CONFIG`, else
    /// `./simba.toml` if it exists, else the embedded default; then `SIMBA_*` overrides.
    pub fn load() -> Result<RuntimeConfig, Error> {
        match std::env::var_os("SIMBA_CONFIG") {
            Some(p) => Self::load_file(Path::new(&p)),
            None if Path::new("simba.toml").exists() => Self::load_file(Path::new("simba.toml")),
            None => Self::from_toml_str("", "the embedded default", env_overrides()),
        }
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
        let overridden: Vec<(String, String)> = overrides
            .iter()
            .filter_map(|(var, _)| {
                let path = var.strip_prefix("SIMBA_")?.split("__").map(str::to_ascii_lowercase).collect::<Vec<_>>();
                Some((path.join("."), var.clone()))
            })
            .collect();
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
        let metrics_listen = cx.metrics_listen(file.metrics.listen)?;
        let dashboard =
            crate::dashboard::resolve(file.dashboard).map_err(|(key, m)| cx.key_err("dashboard", key, m))?;
        let history_retention = cx.history_retention(file.history.retention)?;
        Ok(RuntimeConfig {
            source: source.to_owned(),
            backend_url,
            session,
            jobs,
            metrics_listen,
            dashboard,
            history_retention,
            namespace,
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

/// `SIMBA_<TABLE>__<KEY>` variables (those with a double underscore); others such as
/// `SIMBA_CONFIG` are not overrides.
pub(crate) fn env_overrides() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("SIMBA_") && k.contains("__") && !k.starts_with("SIMBA_TEST_"))
        .collect();
    v.sort();
    v
}

fn apply_override(table: &mut toml::Table, var: &str, value: &str) -> Result<(), String> {
    // Overrides come from `env_overrides` (prefixed names only), but `from_toml_str` takes any
    // list: a name without the prefix is an error, not a panic (found by the `config` fuzz
    // target).
    let Some(rest) = var.strip_prefix("SIMBA_") else {
        return Err(format!(
            "environment variable {var}: overrides are named SIMBA_<TABLE>__<KEY>, e.g. SIMBA_SESSION__LEASE_DURATION"
        ));
    };
    let path: Vec<String> = rest.split("__").map(|s| s.to_ascii_lowercase()).collect();
    if path.len() < 2 || path.iter().any(String::is_empty) {
        return Err(format!(
            "environment variable {var}: write SIMBA_<TABLE>__<KEY>, e.g. SIMBA_SESSION__LEASE_DURATION"
        ));
    }
    if !SECTIONS.contains(&path[0].as_str()) {
        let hint = crate::suggest::nearest(&path[0], SECTIONS)
            .map(|s| format!(" (did you mean SIMBA_{}__...?)", s.to_uppercase()));
        return Err(format!(
            "environment variable {var}: unknown table `{}`; tables are backend, session, jobs, metrics, dashboard and history{}",
            path[0],
            hint.unwrap_or_default()
        ));
    }
    // Numbers and booleans as TOML reads them; anything else is a string ("10s"). Secrets are
    // always strings (a numeric password is still a password).
    let secret = path.last().is_some_and(|k| crate::secret::is_secret_key(k));
    let parsed = if secret {
        None
    } else {
        toml::from_str::<toml::Table>(&format!("v = {value}")).ok().and_then(|mut t| t.remove("v"))
    };
    let v = match parsed {
        Some(v @ (toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_))) => v,
        _ => toml::Value::String(value.to_owned()),
    };
    let mut t = table;
    for key in &path[..path.len() - 1] {
        let entry = t.entry(key.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        t = match entry {
            toml::Value::Table(inner) => inner,
            _ => return Err(format!("environment variable {var}: `{key}` is not a table")),
        };
    }
    if let Some(last) = path.last() {
        t.insert(last.clone(), v);
    }
    Ok(())
}

/// The secret values `text` and `overrides` hold, each with what to show instead: values of
/// secret keys (`password = ...`, as written and as they appear once a quoted string is
/// parsed) by `***`, and URLs that hold a password or secret parameters by their redacted form.
fn secrets_in(text: &str, overrides: &[(String, String)]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut add = |key: &str, value: &str| {
        let value = value.trim();
        let unquoted = value.trim_matches(|c| c == '"' || c == '\'');
        if crate::secret::is_secret_key(key) {
            // Masked whole, never redacted as a URL: a password such as `p@ss` on a broken line
            // would show as `***@ss` (found by the fuzz target `url_redaction`, issue 16).
            out.extend([value, unquoted].map(|s| (s.to_owned(), crate::secret::MASK.to_owned())));
        } else {
            // Any URL: what redaction removes is secret.
            let shown = crate::secret::redact_url(unquoted);
            if shown != unquoted {
                out.push((unquoted.to_owned(), shown));
            }
        }
    };
    for line in text.lines() {
        if let Some((k, v)) = line.split_once('=') {
            add(k.trim().trim_matches('"'), v);
        }
    }
    for (var, value) in overrides {
        add(var.rsplit("__").next().unwrap_or_default(), value);
    }
    out.retain(|(s, _)| !s.is_empty());
    // Longest first, so that a URL is masked before a part of it.
    out.sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
    out
}

/// `msg` with every secret replaced by what to show instead.
fn scrub(msg: &str, secrets: &[(String, String)]) -> String {
    let mut msg = msg.to_owned();
    for (s, shown) in secrets {
        msg = msg.replace(s.as_str(), shown);
    }
    msg
}

/// Adds "did you mean" to serde's unknown-field errors.
fn with_hint(msg: &str) -> String {
    let Some(rest) = msg.split("unknown field `").nth(1) else { return msg.to_owned() };
    let Some(field) = rest.split('`').next() else { return msg.to_owned() };
    let expected: Vec<&str> = msg.split("expected one of ").nth(1).map_or_else(Vec::new, |s| {
        s.split(',').map(|p| p.trim().trim_matches(|c| c == '`' || c == '\n' || c == ' ')).collect()
    });
    match crate::suggest::nearest(field, expected.iter().copied()) {
        Some(n) => format!("{}\nhint: did you mean `{n}`?", msg.trim_end()),
        None => msg.to_owned(),
    }
}

/// The key path on 1-based line `line` of `text`: `session.drift` for `drift = ...` under
/// `[session]`, or the table of a `[table]` header; `None` for a blank or comment line.
fn key_at(text: &str, line: usize) -> Option<String> {
    let mut current = String::new();
    for (i, l) in text.lines().enumerate().take(line) {
        let l = l.trim();
        if let Some(h) = l.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            current = h.trim().replace(['"', ' '], "");
            if i + 1 == line {
                return Some(current);
            }
        } else if i + 1 == line {
            let key = l
                .split('=')
                .next()
                .map(|k| k.trim().trim_matches('"'))
                .filter(|k| !k.is_empty() && !k.starts_with('#'))?;
            return Some(if current.is_empty() { key.to_owned() } else { format!("{current}.{key}") });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RuntimeConfig, Error> {
        RuntimeConfig::from_toml_str(text, "simba.toml", Vec::new())
    }

    /// `examples/simba.toml` documents every key with its default: it parses, and the values
    /// it shows are the defaults.
    #[test]
    fn the_example_file_holds_the_defaults() {
        let c = parse(include_str!("../../../examples/simba.toml")).expect("the example parses");
        let d = RuntimeConfig::default();
        assert_eq!((&c.backend_url, c.start_timeout), (&d.backend_url, d.start_timeout));
        assert_eq!(c.session, d.session);
    }

    /// J4: without a file, the embedded default: SQLite in ./simba.db.
    #[test]
    fn j4_default_is_sqlite() {
        let c = parse("").expect("empty");
        assert_eq!(c.backend_url, "sqlite://simba.db");
        assert_eq!(c.session, SimbaConfig::default());
    }

    /// C2/J7: every table and key.
    #[test]
    fn c2_j7_full_file() {
        let c = parse(
            r#"
[backend]
url = "postgres://db/simba"

[session]
lease_duration = "9s"
renew_interval = "3s"
drift = 0.02
margin = "100ms"
retry_jitter = "1s"
min_backoff = "200ms"

[jobs.report]
cron = "0 */10 * * * *"
time_zone = "Europe/Berlin"
misfire = "run_once"

[jobs.billing]
partitions = 32
enabled = false

[jobs.tick]
fixed_rate = "250ms"
"#,
        )
        .expect("valid");
        assert_eq!(c.backend_url, "postgres://db/simba");
        assert_eq!(c.session.lease_duration(), Duration::from_secs(9));
        assert_eq!(c.session.drift(), 0.02);
        assert_eq!(c.session.min_backoff(), Duration::from_millis(200));
        let r = &c.jobs["report"];
        assert_eq!(r.schedule, Some(Schedule::cron_in("0 */10 * * * *", "Europe/Berlin")));
        assert_eq!(r.misfire, Some(Misfire::RunOnce));
        assert_eq!(c.jobs["billing"].partitions, Some(32));
        assert_eq!(c.jobs["billing"].enabled, Some(false));
        assert_eq!(c.jobs["tick"].schedule, Some(Schedule::FixedRate(Duration::from_millis(250))));
    }

    /// C2: environment overrides, typed as TOML reads them.
    #[test]
    fn c2_env_overrides() {
        let c = RuntimeConfig::from_toml_str(
            "[session]\nlease_duration = \"15s\"\n",
            "simba.toml",
            vec![
                ("SIMBA_SESSION__LEASE_DURATION".into(), "10s".into()),
                ("SIMBA_SESSION__DRIFT".into(), "0.05".into()),
                ("SIMBA_JOBS__REPORT__ENABLED".into(), "false".into()),
                ("SIMBA_BACKEND__URL".into(), "memory://".into()),
            ],
        )
        .expect("valid");
        assert_eq!(c.session.lease_duration(), Duration::from_secs(10));
        assert_eq!(c.session.drift(), 0.05);
        assert_eq!(c.jobs["report"].enabled, Some(false));
        assert_eq!(c.backend_url, "memory://");
        let e = RuntimeConfig::from_toml_str("", "simba.toml", vec![("SIMBA_SESION__X".into(), "1".into())])
            .expect_err("bad table");
        assert!(e.to_string().contains("did you mean SIMBA_SESSION__"), "{e}");
        for short in ["", "SIMBA", "é", "SIMB\u{e9}_X"] {
            let e = RuntimeConfig::from_toml_str("", "simba.toml", vec![(short.into(), "1".into())])
                .expect_err("not an override name");
            assert!(e.to_string().contains("SIMBA_<TABLE>__<KEY>"), "{e}");
        }
    }

    /// ADR 0007: `[metrics] listen` is an address; nothing listens without it.
    #[test]
    fn metrics_listen() {
        assert_eq!(parse("").expect("empty").metrics_listen, None);
        let r = parse("[metrics]\nlisten = \"127.0.0.1:9464\"\n");
        if cfg!(feature = "prometheus") {
            assert_eq!(r.expect("valid").metrics_listen, Some(([127, 0, 0, 1], 9464).into()));
        } else {
            let e = r.expect_err("needs the feature").to_string();
            assert!(e.contains("cargo feature `prometheus`"), "{e}");
        }
        let e = parse("[metrics]\nlisten = \"localhost\"\n").expect_err("bad address").to_string();
        assert!(e.contains("line 2, [metrics] listen") && e.contains("127.0.0.1:9464"), "{e}");
        let e = parse("[metrics]\nlisen = \"127.0.0.1:1\"\n").expect_err("typo").to_string();
        assert!(e.contains("unknown field `lisen`") && e.contains("`listen`"), "{e}");
    }

    /// Issue 12 item 3: `[jobs.NAME]` retry, backoff and timeout; bad values name file, line
    /// and key.
    #[test]
    fn jobs_retry_backoff_timeout_keys() {
        let c = parse("[jobs.report]\nretry = 3\nbackoff = \"2s\"\ntimeout = \"30s\"\n").expect("valid");
        let r = &c.jobs["report"];
        assert_eq!(
            (r.retry, r.backoff, r.timeout),
            (Some(3), Some(Duration::from_secs(2)), Some(Duration::from_secs(30)))
        );
        let e = parse("[jobs.report]\nretry = 3\ntimeout = \"soon\"\n").expect_err("bad").to_string();
        assert!(e.contains("simba.toml") && e.contains("line 3, [jobs.report] timeout"), "{e}");
        let e = parse("[jobs.report]\nbackoff = \"0s\"\n").expect_err("zero").to_string();
        assert!(e.contains("line 2, [jobs.report] backoff") && e.contains("greater than zero"), "{e}");
        let e = parse("[jobs.report]\nretry = 1000\n").expect_err("many").to_string();
        assert!(e.contains("line 2, [jobs.report] retry") && e.contains("at most 100"), "{e}");
        let e = parse("[jobs.report]\nretry = -1\n").expect_err("negative").to_string();
        assert!(e.contains("retry"), "{e}");
    }

    /// Bad input: unknown keys name the nearest valid key, with the line.
    #[test]
    fn unknown_key_suggests() {
        let e = parse("[session]\nleese_duration = \"10s\"\n").expect_err("unknown key").to_string();
        assert!(e.contains("simba.toml"), "{e}");
        assert!(e.contains("leese_duration"), "{e}");
        assert!(e.contains("line 2"), "{e}");
        assert!(e.contains("did you mean `lease_duration`"), "{e}");
    }

    /// Bad input: wrong types and invalid values name the file, line and key.
    #[test]
    fn bad_values_name_file_line_key() {
        let e = parse("[session]\ndrift = \"high\"\n").expect_err("type").to_string();
        assert!(e.contains("simba.toml") && e.contains("line 2") && e.contains("drift"), "{e}");
        let e = parse("[session]\nlease_duration = \"soon\"\n").expect_err("duration").to_string();
        assert!(e.contains("line 2, [session] lease_duration"), "{e}");
        let e = parse("\n[jobs.report]\ncron = \"*/5 * * * *\"\n").expect_err("cron").to_string();
        assert!(e.contains("line 3, [jobs.report] cron") && e.contains("6 fields"), "{e}");
        let e = parse("[jobs.x]\ncron = \"* * * * * *\"\ntime_zone = \"Moon/Base\"\n").expect_err("tz").to_string();
        assert!(e.contains("[jobs.x] time_zone") && e.contains("IANA"), "{e}");
        let e = parse("[jobs.x]\npartitions = 0\n").expect_err("zero").to_string();
        assert!(e.contains("partitions must be at least 1"), "{e}");
        let e = parse("[session]\nlease_duration = \"10s\"\nrenew_interval = \"6s\"\n").expect_err("C1").to_string();
        assert!(e.contains("renew_interval * 2 <= lease_duration"), "{e}");
        let e = parse("[jobs.x]\ncron = \"* * * * * *\"\nfixed_rate = \"1s\"\n").expect_err("both").to_string();
        assert!(e.contains("not both"), "{e}");
        let e = parse("[jobs.x]\nmisfire = \"later\"\n").expect_err("misfire").to_string();
        assert!(e.contains("\"skip\" or \"run_once\""), "{e}");
    }

    /// Issue 12 item 6: `[backend] namespace` is read, overridden by
    /// `SIMBA_BACKEND__NAMESPACE`, and a name that breaks the lease-name rules is refused
    /// with the file, line and key, before any backend call (parsing makes none).
    #[test]
    fn issue12_6_backend_namespace_is_read_and_checked() {
        assert_eq!(parse("").expect("empty").namespace, None);
        let c = parse("[backend]\nurl = \"memory://\"\nnamespace = \"billing-svc\"\n").expect("valid");
        assert_eq!(c.namespace.as_ref().map(|n| n.as_str()), Some("billing-svc"));
        let c = RuntimeConfig::from_toml_str(
            "[backend]\nnamespace = \"billing-svc\"\n",
            "simba.toml",
            vec![("SIMBA_BACKEND__NAMESPACE".into(), "42".into())],
        )
        .expect("a numeric namespace from the environment");
        assert_eq!(c.namespace.as_ref().map(|n| n.as_str()), Some("42"));
        let e = parse("[backend]\nurl = \"memory://\"\nnamespace = \"billing/svc\"\n").expect_err("slash").to_string();
        assert!(
            e.contains("simba.toml: line 3, [backend] namespace: invalid namespace \"billing/svc\"")
                && e.contains("lease-name rules"),
            "{e}"
        );
        let e = parse("[backend]\nnamespace = 7.5\n").expect_err("float").to_string();
        assert!(e.contains("line 2, [backend] namespace: expected a string"), "{e}");
        let e = RuntimeConfig::from_toml_str("", "simba.toml", vec![("SIMBA_BACKEND__NAMESPACE".into(), "..".into())])
            .expect_err("dot dot")
            .to_string();
        assert!(e.contains("[backend] namespace: invalid namespace \"..\""), "{e}");
    }

    /// `[history] retention`: records kept per job; unset keeps the store's default; out of
    /// range or not a number is an error naming the line and the range; the environment
    /// overrides it.
    #[test]
    fn history_retention_is_read_and_checked() {
        assert_eq!(parse("").expect("empty").history_retention, None);
        let c = parse("[history]\nretention = 500\n").expect("valid");
        assert_eq!(c.history_retention, Some(500));
        for bad in ["0", "-3", "10001"] {
            let e = parse(&format!("[history]\nretention = {bad}\n")).expect_err(bad).to_string();
            assert!(e.contains("line 2, [history] retention") && e.contains("from 1 to 10000"), "{e}");
        }
        let e = parse("[history]\nretention = \"lots\"\n").expect_err("a string").to_string();
        assert!(e.contains("line 2") && e.contains("expected i64"), "{e}");
        let e = parse("[history]\nkeep = 5\n").expect_err("unknown key").to_string();
        assert!(e.contains("keep") && e.contains("retention"), "{e}");
        let over = vec![("SIMBA_HISTORY__RETENTION".to_owned(), "7".to_owned())];
        let c = RuntimeConfig::from_toml_str("[history]\nretention = 500\n", "simba.toml", over).expect("override");
        assert_eq!(c.history_retention, Some(7));
    }

    /// Issue 13 item 6: an error carries the file, line, key and reason as fields; a value
    /// set by an environment variable names the variable instead of a line of the file.
    #[test]
    fn item13_6_errors_carry_file_line_key_and_reason() {
        let fields = |r: Result<RuntimeConfig, Error>| match r {
            Err(Error::InvalidConfig(c)) => c,
            other => panic!("not a configuration error: {other:?}"),
        };
        let c = fields(parse("[session]\nlease_duration = \"15s\"\n\n[jobs.report]\nretry = 3\ntimeout = \"soon\"\n"));
        assert_eq!(
            (c.file(), c.line(), c.key(), c.env_var()),
            (Some("simba.toml"), Some(6), Some("jobs.report.timeout"), None)
        );
        assert!(c.reason().starts_with("invalid duration \"soon\""), "{c}");
        assert_eq!(c.to_string(), format!("simba.toml: line 6, [jobs.report] timeout: {}", c.reason()));
        // The file sets the key too: the variable is what is wrong, not line 2.
        let over = vec![("SIMBA_SESSION__LEASE_DURATION".to_owned(), "soon".to_owned())];
        let c =
            fields(RuntimeConfig::from_toml_str("[session]\nlease_duration = \"15s\"\n", "/etc/app/simba.toml", over));
        assert_eq!(
            (c.file(), c.line(), c.key(), c.env_var()),
            (Some("/etc/app/simba.toml"), None, Some("session.lease_duration"), Some("SIMBA_SESSION__LEASE_DURATION"))
        );
        assert!(
            c.to_string().starts_with(
                "/etc/app/simba.toml: environment variable SIMBA_SESSION__LEASE_DURATION, [session] lease_duration: \
                 invalid duration \"soon\""
            ),
            "{c}"
        );
        // A value of the wrong type from a variable: its key and the variable.
        let over = vec![("SIMBA_SESSION__DRIFT".to_owned(), "high".to_owned())];
        let c = fields(RuntimeConfig::from_toml_str("", "simba.toml", over));
        assert_eq!(
            (c.line(), c.key(), c.env_var()),
            (None, Some("session.drift"), Some("SIMBA_SESSION__DRIFT")),
            "{c}"
        );
        assert!(c.reason().starts_with("after the environment overrides SIMBA_SESSION__DRIFT: "), "{c}");
        // The TOML parser's errors: the line from its span, the key on that line.
        let c = fields(parse("[session]\n\ndrift = \"high\"\n"));
        assert_eq!((c.file(), c.line(), c.key()), (Some("simba.toml"), Some(3), Some("session.drift")), "{c}");
        assert!(c.reason().contains("expected f64"), "{c}");
        let c = fields(parse("[jobs.report]\ncron = \"0 * * * * *\"\ncrn = \"x\"\n"));
        assert_eq!((c.line(), c.key()), (Some(3), Some("jobs.report.crn")), "{c}");
        // A C1 error from the builder: its setting, at its line in [session].
        let c = fields(parse("[session]\nlease_duration = \"10s\"\nrenew_interval = \"6s\"\n"));
        assert_eq!((c.line(), c.key()), (Some(3), Some("session.renew_interval")), "{c}");
        assert!(c.reason().starts_with("renew_interval * 2 <= lease_duration"), "{c}");
        // A file that cannot be read: the path is the file.
        let missing = Path::new("/nonexistent-simba-dir/simba.toml");
        let c = fields(RuntimeConfig::load_file(missing));
        assert_eq!((c.file(), c.line(), c.key()), (Some("/nonexistent-simba-dir/simba.toml"), None, None));
        assert!(c.reason().starts_with("cannot read the file: "), "{c}");
        // Secrets stay masked in the reason, the field a program may log.
        let c = fields(parse(
            "[backend]\nurl = \"postgres://u:hunter2@db/simba\"\npassword = \"x\"\npassword_file = \"/p\"\n",
        ));
        assert_eq!((c.line(), c.key()), (Some(4), Some("backend.password_file")), "{c}");
        let c = fields(parse("[backend]\npassword = \"p@hunter2\n"));
        assert!(c.line() == Some(2) && !c.reason().contains("hunter2"), "{c}");
    }

    /// A password on a broken line (the TOML error quotes the line) is masked whole, also when
    /// it holds an `@` (it was redacted as if a URL, showing `***@hunter2`; found by the fuzz
    /// target `url_redaction`, issue 16).
    #[test]
    fn a_password_on_a_broken_line_is_masked_whole() {
        for text in ["[backend]\npassword = \"p@hunter2\n", "[backend]\npassword = \"@s3cret\"dE/b?x\n"] {
            let e = parse(text).expect_err("syntax").to_string();
            assert!(e.contains("line 2") && !e.contains("hunter2") && !e.contains("s3cret"), "{e}");
        }
    }
}
