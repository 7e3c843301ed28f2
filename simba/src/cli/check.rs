//! `simba check`: the configuration, the connection, and the backend's safety settings.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::json;

use super::{Cli, Connected, EXIT_CHECK_FAILED, EXIT_ERROR, EXIT_OK, chain, connect_kind};
use crate::backend::SharedBackend;
use crate::runtime::redact;
use crate::{Error, RuntimeConfig};

/// The largest difference between the backend's clock and this machine's that `check`
/// accepts. Correctness never depends on it (every expiry is on the backend's clock, B2),
/// but cron slots are computed on the nodes' clocks and `status` times would mislead.
pub(super) const MAX_SKEW: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Pass,
    Fail,
    Skip,
}

struct Line {
    name: &'static str,
    outcome: Outcome,
    detail: String,
}

#[derive(Default)]
struct Report {
    lines: Vec<Line>,
    unreachable: bool,
}

impl Report {
    fn add(&mut self, name: &'static str, outcome: Outcome, detail: impl Into<String>) {
        self.lines.push(Line { name, outcome, detail: detail.into() });
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
        let lines: Vec<_> = report
            .lines
            .iter()
            .map(|l| json!({"check": l.name, "outcome": label(l.outcome), "detail": l.detail}))
            .collect();
        writeln!(out, "{}", json!({"ok": !failed, "checks": lines}))
    } else {
        let width = report.lines.iter().map(|l| l.name.len()).max().unwrap_or(0);
        report.lines.iter().try_for_each(|l| writeln!(out, "{:<4}  {:<width$}  {}", label(l.outcome), l.name, l.detail))
    };
    if let Err(e) = written {
        let _ = writeln!(err, "simba: cannot write the output: {e}");
        return EXIT_ERROR;
    }
    match (report.unreachable, failed) {
        (true, _) => EXIT_ERROR,
        (false, true) => EXIT_CHECK_FAILED,
        (false, false) => EXIT_OK,
    }
}

fn label(o: Outcome) -> &'static str {
    match o {
        Outcome::Pass => "PASS",
        Outcome::Fail => "FAIL",
        Outcome::Skip => "SKIP",
    }
}

/// The kinds of store whose checks differ.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Store {
    Sql,
    ZooKeeper,
    Etcd,
    Other,
}

impl Store {
    fn of(url: &str) -> Store {
        match url.split(':').next().unwrap_or_default() {
            "sqlite" | "postgres" | "postgresql" | "mysql" | "mariadb" => Store::Sql,
            "zk" | "zookeeper" => Store::ZooKeeper,
            "etcd" => Store::Etcd,
            _ => Store::Other,
        }
    }
}

async fn backend_checks(cli: &Cli, config: &RuntimeConfig, report: &mut Report) {
    let url = &config.backend_url;
    let shown = redact(url);
    let connected = match tokio::time::timeout(cli.timeout, connect_kind(url, true)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e @ crate::backend::BackendError::Misconfigured(_))) => {
            // Reached, but refused: an evicting Redis, a missing schema without rights, a bad URL.
            report.add("connect", Outcome::Fail, format!("{shown}: {}", chain(&e)));
            return;
        }
        Ok(Err(e)) => {
            report.unreachable = true;
            report.add("connect", Outcome::Fail, format!("cannot reach the backend at {shown}: {}", chain(&e)));
            return;
        }
        Err(_) => {
            report.unreachable = true;
            report.add(
                "connect",
                Outcome::Fail,
                format!("cannot reach the backend at {shown}: no answer within {:?}", cli.timeout),
            );
            return;
        }
    };
    report.add("connect", Outcome::Pass, format!("{shown} answered"));
    let backend: SharedBackend = match connected {
        Connected::Plain(b) => b,
        Connected::Redis(r) => {
            redis_checks(&r, report).await;
            Arc::new(r)
        }
        Connected::Etcd(e) => {
            etcd_checks(&e, cli.timeout, report).await;
            Arc::new(e)
        }
    };
    let store = Store::of(url);
    // Every table (SQL) or key space the status reads, and the backend's clock.
    let local_before = SystemTime::now();
    match tokio::time::timeout(cli.timeout, backend.inspect()).await {
        Ok(Ok(snap)) => {
            let local_after = SystemTime::now();
            if store == Store::Sql {
                report.add("schema", Outcome::Pass, "simba_session, simba_lease and simba_member are readable");
            } else {
                let detail = format!("{} sessions, {} leases listed", snap.sessions.len(), snap.leases.len());
                report.add("read access", Outcome::Pass, detail);
            }
            clock_check(snap.taken_at, store, local_before, local_after, report);
        }
        Ok(Err(e)) => report.add("schema", Outcome::Fail, chain(&e)),
        Err(_) => report.add("schema", Outcome::Fail, format!("no answer within {:?}", cli.timeout)),
    }
    namespace_check(&backend, config.namespace.as_ref(), cli.timeout, report).await;
    lifetime_check(&*backend, config.session.lease_duration(), store, cli.timeout, report).await;
    registry_check(&*backend, cli.timeout, report).await;
}

/// The live nodes run the same jobs with the same settings.
async fn registry_check(backend: &dyn crate::backend::DynBackend, timeout: Duration, report: &mut Report) {
    const NAME: &str = "job registry";
    let Some(store) = backend.job_store() else {
        return report.add(NAME, Outcome::Skip, "this backend keeps no jobs store: nodes publish no registry");
    };
    let published = match tokio::time::timeout(timeout, store.registries()).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return report.add(NAME, Outcome::Fail, format!("cannot read the registries: {}", chain(&e))),
        Err(_) => return report.add(NAME, Outcome::Fail, format!("no answer within {timeout:?}")),
    };
    let r = crate::job::RegistryReport::from_published(&published);
    let versions = crate::job::registry_versions(&r.nodes).map(|v| format!(" (simba {v})")).unwrap_or_default();
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
    backend: &SharedBackend,
    namespace: Option<&crate::backend::namespace::Namespace>,
    timeout: Duration,
    report: &mut Report,
) {
    const NAME: &str = "namespace";
    let list = match tokio::time::timeout(timeout, crate::backend::namespace::list_shared(backend)).await {
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

async fn redis_checks(r: &crate::backend::redis::RedisBackend, report: &mut Report) {
    match r.eviction_policy().await {
        Ok(Some(p)) if p == "noeviction" => report.add("redis maxmemory-policy", Outcome::Pass, "noeviction"),
        Ok(Some(p)) => report.add(
            "redis maxmemory-policy",
            Outcome::Fail,
            format!("{p}: evicted keys reset tokens and free leases early; set maxmemory-policy noeviction"),
        ),
        Ok(None) => report.add("redis maxmemory-policy", Outcome::Skip, "CONFIG is disabled on this server"),
        Err(e) => report.add("redis maxmemory-policy", Outcome::Fail, chain(&e)),
    }
}

/// etcd: a leader, no alarm (a `NOSPACE` alarm refuses every write, renewals included).
async fn etcd_checks(e: &crate::backend::etcd::EtcdBackend, timeout: Duration, report: &mut Report) {
    const NAME: &str = "etcd cluster health";
    let health = match tokio::time::timeout(timeout, e.cluster_health()).await {
        Ok(Ok(h)) => h,
        Ok(Err(err)) => return report.add(NAME, Outcome::Fail, chain(&err)),
        Err(_) => return report.add(NAME, Outcome::Fail, format!("no answer within {timeout:?}")),
    };
    let members = format!("{} member{}", health.members, if health.members == 1 { "" } else { "s" });
    let detail = match (health.leader, health.healthy()) {
        (Some(leader), true) => format!("{members}, leader {leader:016x}, etcd {}, no alarms", health.version),
        (None, _) => format!("{members}, no leader: the cluster cannot renew sessions; check that a majority runs"),
        (Some(_), false) => format!(
            "{members}, alarms: {}{}; a NOSPACE alarm refuses every write (compact, defragment, then \
             `etcdctl alarm disarm`)",
            health.alarms.join(", "),
            health.errors.iter().map(|e| format!("; {e}")).collect::<String>()
        ),
    };
    report.add(NAME, if health.healthy() { Outcome::Pass } else { Outcome::Fail }, detail);
}

/// D4: the backend must grant sessions as long as lease_duration (ZooKeeper caps them at
/// maxSessionTimeout; etcd grants whole seconds). A short-lived probe session, closed at once.
async fn lifetime_check(
    backend: &dyn crate::backend::DynBackend,
    wanted: Duration,
    store: Store,
    timeout: Duration,
    report: &mut Report,
) {
    let name = match store {
        Store::ZooKeeper => "zookeeper maxSessionTimeout",
        Store::Etcd => "etcd lease TTL",
        _ => "session lifetime",
    };
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
    let fix = match store {
        Store::Etcd => "etcd grants whole seconds: make [session] lease_duration a whole number of seconds",
        _ => "raise the server's cap (ZooKeeper: maxSessionTimeout) or lower [session] lease_duration",
    };
    report.add(
        name,
        Outcome::Fail,
        format!("the backend grants at most {:?}, less than lease_duration {wanted:?}: {fix}", grant.remaining),
    );
}

fn clock_check(taken_at: Option<SystemTime>, kind: Store, before: SystemTime, after: SystemTime, report: &mut Report) {
    let Some(store) = taken_at else {
        let why = if kind == Store::Etcd {
            "not needed: etcd expires sessions by its own lease TTL and simba compares no clock with it (cron \
             slots use the nodes' clocks)"
        } else {
            "this backend does not tell its clock (expiry is its own timer)"
        };
        report.add("clock", Outcome::Skip, why);
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
