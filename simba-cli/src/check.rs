//! `simba check`: the configuration, the connection, and the backend's safety settings.

use std::io::Write;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::{Cli, EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, chain};
use crate::json;
use simba::backend::namespace::Namespace;
use simba::backend::{Backend, BackendUrl, CheckOutcome as Outcome, ConnectOptions, HealthCheck, HealthNotes};
use simba::{Error, RuntimeConfig};

/// The largest difference between the backend's clock and this machine's that `check`
/// accepts. Correctness never depends on it (every expiry is on the backend's clock, B2),
/// but cron slots are computed on the nodes' clocks and `status` times would mislead.
pub(super) const MAX_SKEW: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Report {
    lines: Vec<HealthCheck>,
    unreachable: bool,
}

impl Report {
    fn add(&mut self, name: &'static str, outcome: Outcome, detail: impl Into<String>) {
        self.lines.push(HealthCheck::new(name, outcome, detail));
    }
}

pub(super) async fn run(
    cli: &Cli,
    config: Result<RuntimeConfig, Error>,
    out: &mut (dyn Write + Send),
    err: &mut (dyn Write + Send),
) -> u8 {
    let mut report = Report::default();
    match config {
        Ok(config) => {
            report.add("configuration", Outcome::Pass, format!("{} is valid", config.source));
            backend_checks(cli, &config, &mut report).await;
        }
        Err(e) => report.add("configuration", Outcome::Fail, e.to_string()),
    }
    let failed = report.lines.iter().any(|l| l.outcome == Outcome::Fail);
    let written = if cli.json {
        let checks =
            report.lines.iter().map(|l| CheckJson { check: &l.name, outcome: label(l.outcome), detail: &l.detail });
        let value = CheckReportJson { schema: json::SCHEMA, ok: !failed, checks: checks.collect() };
        serde_json::to_string(&value).map_err(std::io::Error::other).and_then(|v| writeln!(out, "{v}"))
    } else {
        let width = report.lines.iter().map(|l| l.name.len()).max().unwrap_or(0);
        report.lines.iter().try_for_each(|l| writeln!(out, "{:<4}  {:<width$}  {}", label(l.outcome), l.name, l.detail))
    };
    // A reader that went away (`simba check | head -1`) still gets the check's exit code.
    if let Err(e) = written
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        let _ = writeln!(err, "simba: cannot write the output: {e}");
        return EXIT_FAILED;
    }
    match (report.unreachable, failed) {
        (true, _) => EXIT_UNREACHABLE,
        (false, true) => EXIT_FAILED,
        (false, false) => EXIT_OK,
    }
}

/// `simba check --json`.
#[derive(Serialize)]
struct CheckReportJson<'a> {
    schema: u32,
    /// Every check passed (or was skipped).
    ok: bool,
    checks: Vec<CheckJson<'a>>,
}

#[derive(Serialize)]
struct CheckJson<'a> {
    check: &'a str,
    /// `PASS`, `FAIL`, `WARN` or `SKIP`.
    outcome: &'static str,
    detail: &'a str,
}

fn label(o: Outcome) -> &'static str {
    match o {
        Outcome::Pass => "PASS",
        Outcome::Fail => "FAIL",
        Outcome::Skip => "SKIP",
        Outcome::Warn => "WARN",
        _ => "????",
    }
}

async fn backend_checks(cli: &Cli, config: &RuntimeConfig, report: &mut Report) {
    let url = BackendUrl::new(config.backend_url.as_str());
    transport_checks(&url, config, report);
    let options = ConnectOptions::for_reading();
    let connected = match tokio::time::timeout(cli.timeout, simba::backend::connect(&url, options)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e @ simba::backend::BackendError::Misconfigured(_))) => {
            // Reached, but refused: an evicting Redis, a missing schema without rights, a bad URL.
            report.add("connect", Outcome::Fail, format!("{url}: {}", chain(&e)));
            return;
        }
        Ok(Err(e)) => {
            report.unreachable = true;
            report.add("connect", Outcome::Fail, format!("cannot reach the backend at {url}: {}", chain(&e)));
            return;
        }
        Err(_) => {
            report.unreachable = true;
            report.add(
                "connect",
                Outcome::Fail,
                format!("cannot reach the backend at {url}: no answer within {:?}", cli.timeout),
            );
            return;
        }
    };
    report.add("connect", Outcome::Pass, format!("{url} answered"));
    // The backend's own settings (Redis's eviction policy, etcd's leader and alarms).
    report.lines.extend(connected.health().health_checks(cli.timeout).await);
    let notes = connected.health().health_notes();
    let backend = &connected;
    // Every table (SQL) or key space the status reads, and the backend's clock.
    let local_before = SystemTime::now();
    match tokio::time::timeout(cli.timeout, backend.inspect()).await {
        Ok(Ok(snap)) => {
            let local_after = SystemTime::now();
            match notes.schema {
                Some(readable) => report.add("schema", Outcome::Pass, readable),
                None => {
                    let detail = format!("{} sessions, {} leases listed", snap.sessions.len(), snap.leases.len());
                    report.add("read access", Outcome::Pass, detail);
                }
            }
            clock_check(snap.taken_at, &notes, local_before, local_after, report);
        }
        Ok(Err(e)) => report.add("schema", Outcome::Fail, chain(&e)),
        Err(_) => report.add("schema", Outcome::Fail, format!("no answer within {:?}", cli.timeout)),
    }
    namespace_check(backend, config.namespace.as_ref(), cli.timeout, report).await;
    lifetime_check(backend, config.session.lease_duration(), &notes, cli.timeout, report).await;
    registry_check(backend, cli.timeout, report).await;
}

/// Rule B7: what the URL and the listeners leave in plain text or unverified. A warning, not a
/// failure: a private network may be the operator's choice.
fn transport_checks(url: &BackendUrl, config: &RuntimeConfig, report: &mut Report) {
    let found = simba::backend::transport_warnings(url);
    if found.is_empty() {
        report.add("transport", Outcome::Pass, "verified TLS, or every host is this machine");
    } else {
        let detail = found.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
        report.add("transport", Outcome::Warn, detail);
    }
    if config.metrics_listen.is_none() && config.dashboard.is_none() {
        return;
    }
    let wide = config.listener_warnings();
    if wide.is_empty() {
        report.add("listeners", Outcome::Pass, "every listener is on loopback");
    } else {
        report.add("listeners", Outcome::Warn, wide.join("; "));
    }
}

/// The live nodes run the same jobs with the same settings.
async fn registry_check(backend: &impl Backend, timeout: Duration, report: &mut Report) {
    const NAME: &str = "job registry";
    let Some(store) = backend.job_store() else {
        return report.add(NAME, Outcome::Skip, "this backend keeps no jobs store: nodes publish no registry");
    };
    let published = match tokio::time::timeout(timeout, store.registries()).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return report.add(NAME, Outcome::Fail, format!("cannot read the registries: {}", chain(&e))),
        Err(_) => return report.add(NAME, Outcome::Fail, format!("no answer within {timeout:?}")),
    };
    let r = simba::job::RegistryReport::from_published(&published);
    let versions = simba::job::registry_versions(&r.nodes).map(|v| format!(" (simba {v})")).unwrap_or_default();
    if r.nodes.is_empty() && r.unreadable.is_empty() {
        return report.add(NAME, Outcome::Skip, "no live node published its jobs (no runtime is running)");
    }
    let mut problems = r.differences.clone();
    problems.extend(r.unreadable.iter().cloned());
    if problems.is_empty() {
        let jobs = r.nodes.first().map_or(0, |n| n.jobs.len() + n.omitted);
        let digest = r.nodes.first().map_or("", |n| n.digest.as_str());
        let nodes = r.nodes.len();
        let detail = format!(
            "{nodes} live node{} run the same {jobs} job{} (digest {digest}){versions}",
            if nodes == 1 { "" } else { "s" },
            if jobs == 1 { "" } else { "s" }
        );
        return report.add(NAME, Outcome::Pass, detail);
    }
    report.add(
        NAME,
        Outcome::Fail,
        format!(
            "the {} live nodes differ{versions}: {}; finish the rolling deploy, or align their code and simba.toml",
            r.nodes.len(),
            problems.join("; ")
        ),
    );
}

/// Which namespace the configuration works in, and what it holds now (a new
/// namespace holds nothing, which is no failure). The name itself was checked with the
/// configuration.
async fn namespace_check(
    backend: &impl Backend,
    namespace: Option<&Namespace>,
    timeout: Duration,
    report: &mut Report,
) {
    const NAME: &str = "namespace";
    let list = match tokio::time::timeout(timeout, simba::backend::namespace::list(backend)).await {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => return report.add(NAME, Outcome::Fail, chain(&e)),
        Err(_) => return report.add(NAME, Outcome::Fail, format!("no answer within {timeout:?}")),
    };
    let label = namespace.map_or_else(|| "the default namespace".to_owned(), |n| format!("`{n}`"));
    let others = list.iter().filter(|i| i.name.as_deref() != namespace.map(|n| n.as_str())).count();
    let detail = match list.iter().find(|i| i.name.as_deref() == namespace.map(|n| n.as_str())) {
        Some(i) => format!(
            "{label}: {} sessions, {} leases, {} jobs; {others} other namespace(s) in this store",
            i.sessions, i.leases, i.jobs
        ),
        None => format!("{label}: nothing stored yet; {others} other namespace(s) in this store"),
    };
    report.add(NAME, Outcome::Pass, detail);
}

/// D4: the backend must grant sessions as long as lease_duration (ZooKeeper caps them at
/// maxSessionTimeout; etcd grants whole seconds). A short-lived probe session, closed at once.
async fn lifetime_check(
    backend: &impl Backend,
    wanted: Duration,
    notes: &HealthNotes,
    timeout: Duration,
    report: &mut Report,
) {
    let name = notes.session_lifetime;
    let grant = match tokio::time::timeout(timeout, backend.open_session(wanted)).await {
        Ok(Ok(grant)) => grant,
        Ok(Err(e)) => return report.add(name, Outcome::Fail, format!("cannot open a probe session: {}", chain(&e))),
        Err(_) => return report.add(name, Outcome::Fail, format!("no answer within {timeout:?}")),
    };
    let _ = tokio::time::timeout(timeout, backend.close_session(&grant.id)).await;
    // Stores that measure in whole units may grant a hair less than asked.
    if grant.remaining + Duration::from_millis(50) >= wanted {
        report.add(name, Outcome::Pass, format!("granted {:?} for lease_duration {wanted:?}", grant.remaining));
        return;
    }
    let fix = notes.session_lifetime_fix;
    report.add(
        name,
        Outcome::Fail,
        format!("the backend grants at most {:?}, less than lease_duration {wanted:?}: {fix}", grant.remaining),
    );
}

fn clock_check(
    taken_at: Option<SystemTime>,
    notes: &HealthNotes,
    before: SystemTime,
    after: SystemTime,
    report: &mut Report,
) {
    let Some(store) = taken_at else {
        report.add("clock", Outcome::Skip, notes.no_clock);
        return;
    };
    let skew = if store < before {
        before.duration_since(store).unwrap_or_default()
    } else if store > after {
        store.duration_since(after).unwrap_or_default()
    } else {
        Duration::ZERO
    };
    if skew <= MAX_SKEW {
        report.add("clock", Outcome::Pass, format!("backend and local clocks agree within {}ms", skew.as_millis()));
    } else {
        report.add(
            "clock",
            Outcome::Fail,
            format!(
                "the backend's clock differs from this machine's by {}ms (more than {MAX_SKEW:?}): run NTP on both; \
                 leases stay safe (expiry is on the backend's clock) but cron slots and times shown are off",
                skew.as_millis()
            ),
        );
    }
}
