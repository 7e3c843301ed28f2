//! The tables of `simba.toml` as serde reads them, and their checks into the configuration's
//! model (each error names its key, through [`Cx`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::diagnostics::Cx;
use super::{JobOverride, MAX_HISTORY_RETENTION, MAX_RETRY};
use crate::job::{Misfire, Overlap, Schedule, parse_cron, parse_time_zone};
use crate::{Error, SimbaConfig};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    #[serde(default)]
    pub(super) backend: BackendTable,
    #[serde(default)]
    pub(super) session: SessionTable,
    #[serde(default)]
    pub(super) jobs: BTreeMap<String, JobTable>,
    #[serde(default)]
    pub(super) metrics: MetricsTable,
    #[serde(default)]
    pub(super) dashboard: crate::dashboard::DashboardTable,
    #[serde(default)]
    pub(super) history: HistoryTable,
    #[serde(default)]
    pub(super) schedules: SchedulesTable,
    #[serde(default)]
    pub(super) alerts: AlertsTable,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AlertsTable {
    pub(super) webhook: Option<String>,
    pub(super) webhook_timeout: Option<String>,
    pub(super) webhook_ca_file: Option<String>,
    pub(super) late_after: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SchedulesTable {
    pub(super) partitions: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HistoryTable {
    pub(super) retention: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MetricsTable {
    pub(super) listen: Option<String>,
    pub(super) lease_labels: Option<String>,
    pub(super) idle_timeout: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BackendTable {
    url: Option<String>,
    /// A string, or what TOML made of an environment override's value (`42`).
    pub(super) namespace: Option<toml::Value>,
    user: Option<String>,
    password: Option<String>,
    password_file: Option<PathBuf>,
    tls: Option<crate::runtime::security::TlsTable>,
    pub(super) start_timeout: Option<String>,
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
pub(super) struct SessionTable {
    lease_duration: Option<String>,
    renew_interval: Option<String>,
    drift: Option<f64>,
    margin: Option<String>,
    retry_jitter: Option<String>,
    min_backoff: Option<String>,
    /// A duration, or `"never"`.
    remove_idle_leases_after: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JobTable {
    enabled: Option<bool>,
    cron: Option<String>,
    time_zone: Option<String>,
    fixed_rate: Option<String>,
    misfire: Option<String>,
    partitions: Option<u32>,
    retry: Option<u32>,
    backoff: Option<String>,
    timeout: Option<String>,
    overlap: Option<String>,
    catch_up_window: Option<String>,
    jitter: Option<String>,
    /// An RFC 3339 string, or a TOML date-time.
    start: Option<toml::Value>,
    end: Option<toml::Value>,
}

/// A bound's instant: an RFC 3339 string or a TOML date-time with its offset (J14).
fn instant(v: &toml::Value) -> Result<chrono::DateTime<chrono::Utc>, String> {
    let text = match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Datetime(d) => d.to_string(),
        other => {
            return Err(format!("expected an instant, found {} (write e.g. 2027-01-01T00:00:00Z)", other.type_str()));
        }
    };
    chrono::DateTime::parse_from_rfc3339(&text).map(|t| t.with_timezone(&chrono::Utc)).map_err(|e| {
        format!("invalid instant {text:?}: {e} (write an RFC 3339 instant with its offset, e.g. 2027-01-01T00:00:00Z)")
    })
}

impl Cx<'_> {
    /// A duration value of `key` in `[section]`, if given.
    pub(super) fn dur(&self, section: &str, key: &str, v: &Option<String>) -> Result<Option<Duration>, Error> {
        v.as_deref()
            .map(|s| {
                humantime::parse_duration(s).map_err(|e| {
                    self.key_err(section, key, format!("invalid duration {s:?}: {e} (write e.g. \"15s\" or \"500ms\")"))
                })
            })
            .transpose()
    }

    /// `[session]`, checked against C1.
    pub(super) fn session(&self, s: &SessionTable) -> Result<SimbaConfig, Error> {
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
        match s.remove_idle_leases_after.as_deref() {
            Some("never") => b = b.remove_idle_leases_after(None),
            v => {
                let v = v.map(str::to_owned);
                if let Some(d) = self.dur("session", "remove_idle_leases_after", &v)? {
                    b = b.remove_idle_leases_after(Some(d));
                }
            }
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
    pub(super) fn job(&self, name: &str, j: &JobTable) -> Result<JobOverride, Error> {
        let section = format!("jobs.{name}");
        let bad = |key: &str, msg: String| self.key_err(&section, key, msg);
        let schedule = self.job_schedule(&section, j)?;
        let misfire: Option<Misfire> = match j.misfire.as_deref().map(|m| (m, simba_rules::misfire::parse(m))) {
            None => None,
            Some((_, Some(policy))) => Some(policy),
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
        let mut o = JobOverride {
            enabled: j.enabled,
            schedule,
            misfire,
            partitions: j.partitions,
            retry: j.retry,
            backoff,
            timeout,
            ..JobOverride::default()
        };
        self.job_policies(&section, j, &mut o)?;
        Ok(o)
    }

    /// `[jobs.NAME]`'s policy keys (J11-J14), each checked alone; their combination with the
    /// job's schedule and misfire is checked by the plan, which knows the code's values.
    fn job_policies(&self, section: &str, j: &JobTable, o: &mut JobOverride) -> Result<(), Error> {
        let bad = |key: &str, msg: String| self.key_err(section, key, msg);
        o.overlap = match j.overlap.as_deref() {
            None => None,
            Some(name) => Some(Overlap::from_name(name).ok_or_else(|| {
                bad("overlap", format!("unknown overlap policy {name:?}: use {}", simba_rules::overlap::VALID))
            })?),
        };
        o.catch_up_window = self.dur(section, "catch_up_window", &j.catch_up_window)?;
        if o.catch_up_window.is_some_and(|d| d.is_zero()) {
            return Err(bad("catch_up_window", "must be longer than zero (leave it out for no window)".into()));
        }
        o.jitter = self.dur(section, "jitter", &j.jitter)?;
        o.start = j.start.as_ref().map(|v| instant(v).map_err(|m| bad("start", m))).transpose()?;
        o.end = j.end.as_ref().map(|v| instant(v).map_err(|m| bad("end", m))).transpose()?;
        let ms = |t: Option<chrono::DateTime<chrono::Utc>>| t.map(|t| t.timestamp_millis());
        if let Some(m) = simba_rules::policies::bounds_problem(ms(o.start), ms(o.end)) {
            return Err(bad("end", m.to_owned()));
        }
        Ok(())
    }

    /// `[backend]`: the URL with the user, password and TLS keys folded in; empty when no URL
    /// is named (the runtime refuses that unless a backend is given in code, rule J4).
    pub(super) fn backend_url(&self, b: BackendTable) -> Result<String, Error> {
        let Some(url) = b.url else {
            let given = [("user", b.user.is_some()), ("password", b.password.is_some())]
                .into_iter()
                .chain([("password_file", b.password_file.is_some()), ("tls", b.tls.is_some())])
                .find(|(_, set)| *set);
            return match given {
                // Credentials or TLS files for no URL: the file means a server it does not name.
                Some((key, _)) => Err(self.key_err(
                    "backend",
                    "url",
                    format!(
                        "missing: [backend] {key} is set, so name the server it is for with url (or SIMBA_BACKEND__URL)"
                    ),
                )),
                None => Ok(String::new()),
            };
        };
        let password = match (b.password, &b.password_file) {
            (Some(_), Some(_)) => {
                return Err(self.key_err(
                    "backend",
                    "password_file",
                    "set either password (or SIMBA_BACKEND__PASSWORD) or password_file, not both".into(),
                ));
            }
            (Some(p), None) => Some(p),
            (None, Some(path)) => Some(
                crate::runtime::security::read_password_file(path)
                    .map_err(|m| self.err_at("backend.password_file", m))?,
            ),
            (None, None) => None,
        };
        crate::runtime::security::secure_url(&url, b.user.as_deref(), password.as_deref(), b.tls.as_ref())
            .map_err(|m| self.key_err("backend", "url", m))
    }

    /// `[backend] namespace`, checked against the lease-name rules before any backend call.
    pub(super) fn namespace(
        &self,
        v: Option<&toml::Value>,
    ) -> Result<Option<crate::backend::namespace::Namespace>, Error> {
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
    pub(super) fn metrics_listen(&self, listen: Option<String>) -> Result<Option<std::net::SocketAddr>, Error> {
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

    /// `[metrics] lease_labels` and `idle_timeout` (rules O4, O5).
    pub(super) fn metrics_settings(&self, t: &MetricsTable) -> Result<crate::metrics::MetricsSettings, Error> {
        let mut settings = crate::metrics::MetricsSettings::default();
        if let Some(l) = &t.lease_labels {
            settings.lease_labels = l.parse().map_err(|m| self.key_err("metrics", "lease_labels", m))?;
        }
        match t.idle_timeout.as_deref() {
            Some("off") => settings.idle_timeout = None,
            Some(_) => {
                let d = self.dur("metrics", "idle_timeout", &t.idle_timeout)?.filter(|d| !d.is_zero()).ok_or_else(
                    || {
                        self.key_err(
                            "metrics",
                            "idle_timeout",
                            "must be more than 0 (or \"off\": series never go idle)".into(),
                        )
                    },
                )?;
                settings.idle_timeout = Some(d);
            }
            None => {}
        }
        Ok(settings)
    }

    /// `[schedules] partitions` (rule A9): 1 to 4096, the default when unset.
    pub(super) fn schedule_partitions(&self, partitions: Option<i64>) -> Result<u32, Error> {
        use simba_core::schedules::{DEFAULT_PARTITIONS, MAX_PARTITIONS, check_partitions};
        let Some(n) = partitions else { return Ok(DEFAULT_PARTITIONS) };
        let bad = || {
            self.key_err(
                "schedules",
                "partitions",
                format!(
                    "{n} partitions: write a number from 1 to {MAX_PARTITIONS} (default {DEFAULT_PARTITIONS}); it is \
                     fixed per namespace at the first schedule's create"
                ),
            )
        };
        let n = u32::try_from(n).map_err(|_| bad())?;
        check_partitions(n).map_err(|_| bad())?;
        Ok(n)
    }

    /// `[history] retention`.
    /// `[alerts]` (rules R12, R13): a webhook needs the feature `webhook`, a timeout above zero.
    pub(super) fn alerts(&self, t: &AlertsTable) -> Result<super::AlertSettings, Error> {
        let mut s = super::AlertSettings::default();
        if let Some(d) = self.dur("alerts", "webhook_timeout", &t.webhook_timeout)? {
            if d.is_zero() {
                return Err(self.key_err(
                    "alerts",
                    "webhook_timeout",
                    "0s leaves no time to deliver: write e.g. \"10s\"".to_owned(),
                ));
            }
            s.webhook_timeout = d;
        }
        s.late_after = self.dur("alerts", "late_after", &t.late_after)?;
        if let Some(path) = &t.webhook_ca_file {
            let path = std::path::PathBuf::from(path);
            crate::secret::read_pem("CA file", &path).map_err(|m| self.key_err("alerts", "webhook_ca_file", m))?;
            s.webhook_ca_file = Some(path);
        }
        if let Some(url) = &t.webhook {
            if !cfg!(feature = "webhook") {
                return Err(self.key_err(
                    "alerts",
                    "webhook",
                    "this build has no alert webhook: enable the feature `webhook` of simba-sched (Cargo.toml: \
                     `simba = { package = \"simba-sched\", features = [\"webhook\"] }`), or remove the key"
                        .to_owned(),
                ));
            }
            s.webhook = Some(super::WebhookUrl::parse(url).map_err(|m| self.key_err("alerts", "webhook", m))?);
        }
        Ok(s)
    }

    pub(super) fn history_retention(&self, retention: Option<i64>) -> Result<Option<usize>, Error> {
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
