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
            Arc::new(r)
        }
    };
    let scheme = url.split(':').next().unwrap_or_default();
    let sql = matches!(scheme, "sqlite" | "postgres" | "postgresql" | "mysql" | "mariadb");
    // Every table (SQL) or key space the status reads, and the backend's clock.
    let local_before = SystemTime::now();
    match tokio::time::timeout(cli.timeout, backend.inspect()).await {
        Ok(Ok(snap)) => {
            let local_after = SystemTime::now();
            let what = if sql { "schema" } else { "read access" };
            let detail = if sql {
                "simba_session, simba_lease and simba_member are readable".to_owned()
            } else {
                format!("{} sessions, {} leases listed", snap.sessions.len(), snap.leases.len())
            };
            report.add(what, Outcome::Pass, detail);
            clock_check(snap.taken_at, local_before, local_after, report);
        }
        Ok(Err(e)) => report.add("schema", Outcome::Fail, chain(&e)),
        Err(_) => report.add("schema", Outcome::Fail, format!("no answer within {:?}", cli.timeout)),
    }
    // D4: the backend must grant sessions as long as lease_duration (ZooKeeper caps them at
    // maxSessionTimeout). A short-lived probe session, closed at once.
    let wanted = config.session.lease_duration();
    match tokio::time::timeout(cli.timeout, backend.open_session(wanted)).await {
        Ok(Ok(grant)) => {
            let _ = tokio::time::timeout(cli.timeout, backend.close_session(&grant.id)).await;
            let name = if scheme.starts_with("zk") || scheme == "zookeeper" {
                "zookeeper maxSessionTimeout"
            } else {
                "session lifetime"
            };
            // Stores that measure in whole units may grant a hair less than asked.
            if grant.remaining + Duration::from_millis(50) >= wanted {
                report.add(name, Outcome::Pass, format!("granted {:?} for lease_duration {wanted:?}", grant.remaining));
            } else {
                report.add(
                    name,
                    Outcome::Fail,
                    format!(
                        "the backend grants at most {:?}, less than lease_duration {wanted:?}: raise the server's cap \
                         (ZooKeeper: maxSessionTimeout) or lower [session] lease_duration",
                        grant.remaining
                    ),
                );
            }
        }
        Ok(Err(e)) => {
            report.add("session lifetime", Outcome::Fail, format!("cannot open a probe session: {}", chain(&e)))
        }
        Err(_) => report.add("session lifetime", Outcome::Fail, format!("no answer within {:?}", cli.timeout)),
    }
}

fn clock_check(store: Option<SystemTime>, before: SystemTime, after: SystemTime, report: &mut Report) {
    let Some(store) = store else {
        report.add("clock", Outcome::Skip, "this backend does not tell its clock (expiry is its own timer)");
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
