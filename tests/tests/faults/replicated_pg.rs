//! PostgreSQL failover (ADR 0029, issue 35 item 1): the fault suite's three nodes hold the lease
//! `ledger` on a primary with a synchronous standby (`pg-sync`, `synchronous_standby_names`,
//! `synchronous_commit = on`) and an asynchronous one (`pg-async`), all durable (fsync on;
//! `backends.sh start-pg-replicated` builds the set afresh for each run). sqlx 0.9 connects to
//! one host (no multi-host URL, no `target_session_attrs`), so the nodes reach the primary
//! through one fault proxy that the harness repoints to the promoted standby: what a virtual IP
//! or a DNS name moved by the failover tool does in production.
//!
//! A run: the nodes start, the async standby is detached (it receives no more WAL: the writes a
//! lagging asynchronous standby has not received), the holder is stopped twice for the failover
//! bound so that two new tokens are granted on the primary, then the primary is killed
//! (SIGKILL), a standby promoted (`pg_ctl promote`) and the proxy repointed. With the
//! ASYNCHRONOUS standby promoted, the grants it never received are granted again: the token
//! regressions are counted and shown (the fenced ledger refuses the regressed tokens: 0 stale
//! writes accepted, and no write accepted until a token above its mark). With the SYNCHRONOUS
//! standby promoted: 0 regressions, the V4 history checker's verdict, writes again.
//!
//! `SIMBA_PG_FAILOVER_ROUNDS` sets the number of holder handovers before the kill (2 by default),
//! `SIMBA_PG_FAILOVERS` the number of async-then-sync failover pairs (1, the CI size: ~35 s).

#![allow(clippy::print_stderr)] // The figures are printed for the report.

use std::process::Command;
use std::time::{Duration, Instant};

use simba_tests::lincheck::{Budget, Tolerance, check_history, parse_history};
use simba_tests::proxy::{FaultProxy, Modes, host_port};
use simba_tests::server_url;

use crate::SERIAL;
use crate::faults::{Report, bound, check, fault_log, leader, mono_ns, nix_kill, read_logs, setup, wanted};

fn sh(args: &[&str]) -> String {
    let script = std::env::var("SIMBA_BACKENDS_SCRIPT").unwrap_or_else(|_| "scripts/backends.sh".into());
    let out = Command::new("bash").arg(script).args(args).output().expect("run backends.sh");
    assert!(out.status.success(), "backends.sh {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn port(var: &str) -> u16 {
    std::env::var(var).ok().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("{var} not set: eval env-replicated"))
}

/// Waits for an accepted write with a token above `above` that started after `after`; its token.
async fn accepted_above(log: &std::path::Path, above: u64, after: u128, within: Duration) -> Option<u64> {
    let end = Instant::now() + within;
    while Instant::now() < end {
        let t = read_logs(log).writes.iter().filter(|w| w.3 && w.0 > after && w.2 > above).map(|w| w.2).min();
        if t.is_some() {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    None
}

/// One failover to `standby` (`pg-sync` or `pg-async`); the report and the time from the kill
/// to the first write accepted after the promotion (sync; None: none in the window, and always
/// for the async standby, whose window is run out in full).
///
/// The fenced ledger is on the main PostgreSQL server, apart from the replicated set (`ledger`):
/// a SQLite ledger stays locked while a node stopped for a handover is paused mid-write, and
/// the next holder's first write then waited up to the busy timeout (5 s) past the handover's
/// window. Each run has its own ledger row (`round`).
async fn failover(
    backend: &str,
    (url, ledger): (&str, &str),
    (standby, standby_port): (&str, u16),
    round: usize,
) -> (Report, Option<Duration>, usize) {
    sh(&["start-pg-replicated"]);
    let proxy = FaultProxy::start(host_port(url)).await.expect("proxy");
    let via = format!("postgres://postgres@{}/simba", proxy.addr());
    let tag = format!("{standby}-{round}");
    let mut s = setup(backend, via, None, Some(ledger.to_owned()), None, &tag, Modes::default()).await;
    let log = s.log();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let lsn = sh(&["pg-detach", "pg-async"]);
    fault_log(&format!("[{backend}] pg-async detached at WAL {lsn}"));
    let rounds: usize = std::env::var("SIMBA_PG_FAILOVER_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    for i in 0..rounds {
        let logs = read_logs(&log);
        let top = logs.writes.iter().filter(|w| w.3).map(|w| w.2).max().unwrap_or(0);
        let holder = leader(&log).expect("a holder");
        let from = mono_ns();
        assert!(nix_kill(holder, "STOP"), "kill -STOP {holder}");
        let next = accepted_above(&log, top, from, bound() * 3).await;
        assert!(nix_kill(holder, "CONT"), "kill -CONT {holder}");
        let next = next.unwrap_or_else(|| panic!("[{backend}] handover {i}: no new token above {top}"));
        fault_log(&format!("[{backend}] handover {i}: token {top} -> {next}"));
    }
    let granted = read_logs(&log).writes.iter().filter(|w| w.3).map(|w| w.2).max().unwrap_or(0);
    let primary: u32 = sh(&["pid", "pg-primary"]).parse().expect("pid");
    let killed = mono_ns();
    assert!(nix_kill(primary, "KILL"), "kill -KILL {primary}");
    sh(&["promote", standby]);
    proxy.repoint(std::net::SocketAddr::from(([127, 0, 0, 1], standby_port)));
    let promoted = mono_ns();
    fault_log(&format!("[{backend}] primary killed (highest token accepted {granted}), {standby} promoted"));
    // Long enough for every session to expire and a new term on the promoted server.
    let window = bound() * 4 + Duration::from_secs(2);
    let back = if standby == "pg-sync" {
        // Back: the first write accepted that started once the standby was promoted (the holder
        // may keep its term across the promotion; its writes between the kill and the
        // promotion went to the ledger, not the store).
        accepted_above(&log, 0, promoted, window).await.map(|_| {
            let logs = read_logs(&log);
            let t = logs.writes.iter().filter(|w| w.3 && w.0 > promoted).map(|w| w.1).min().unwrap_or(promoted);
            Duration::from_nanos((t - killed) as u64)
        })
    } else {
        // The whole window: the grants the standby never received are granted again, and the
        // ledger refuses their writes; an accepted write (the old holder's, in flight at the
        // kill) must not end the observation before the new terms come.
        tokio::time::sleep(window).await;
        None
    };
    let back_text = match back {
        Some(d) => format!("first write accepted after the promotion {d:?} after the kill"),
        None if standby == "pg-sync" => "no write accepted after the promotion".to_owned(),
        None => format!("observed for {window:?} after the promotion"),
    };
    s.assert_nodes_run(backend);
    drop(std::mem::take(&mut s.nodes));
    let refused_after = read_logs(&log).writes.iter().filter(|w| !w.3 && w.0 > killed).count();
    let mut report = Report::default();
    check(backend, &log, &mut report);
    // The sync run must be linearizable (check_run panics on a violation); the async run's
    // verdict is shown (its regressed grants are a violation of the lease model).
    let checked = if standby == "pg-sync" {
        crate::checker::check_run(backend, &s.history_log()).summary()
    } else {
        let text = std::fs::read_to_string(s.history_log()).unwrap_or_default();
        check_history(&parse_history(text.lines()), Tolerance::default(), Budget::default()).summary()
    };
    let out = format!(
        "\n### PostgreSQL primary killed, {standby} promoted ({}): tokens accepted up to {granted} before the kill\n\nterms: {}, token regressions: {}, ledger writes: {} ({} refused; {refused_after} refused after the kill), stale writes accepted: {}, {back_text}\nhistory checker (V4): {checked}\n",
        if standby == "pg-sync" { "synchronous" } else { "asynchronous, detached" },
        report.terms,
        report.token_regressions,
        report.writes,
        report.refused,
        report.stale_accepted,
    );
    eprintln!("{out}");
    if let Ok(path) = std::env::var("SIMBA_RELIABILITY_OUT") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = f.write_all(out.as_bytes());
        }
    }
    (report, back, refused_after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_pg_failover() {
    let backend = "pg-replicated";
    if !wanted(backend) {
        return;
    }
    let Some(url) = server_url("SIMBA_TEST_PG_REPLICATED_URL") else { return };
    let Some(ledger) = server_url("SIMBA_TEST_POSTGRES_URL") else { return };
    let _serial = SERIAL.lock().await;
    let runs: usize = std::env::var("SIMBA_PG_FAILOVERS").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    for round in 0..runs {
        // The asynchronous standby: the grants it never received come back.
        let (r, _, refused) =
            failover(backend, (&url, &ledger), ("pg-async", port("SIMBA_TEST_PG_ASYNC_PORT")), round).await;
        assert_eq!(r.stale_accepted, 0, "[{backend}] the ledger accepted stale writes (async)");
        assert!(r.token_regressions > 0, "[{backend}] the async standby promoted without a token regression");
        assert!(refused > 0, "[{backend}] the ledger refused no regressed token");
        // The synchronous standby: nothing granted is lost.
        let (r, back, _) =
            failover(backend, (&url, &ledger), ("pg-sync", port("SIMBA_TEST_PG_SYNC_PORT")), round).await;
        assert_eq!(r.stale_accepted, 0, "[{backend}] the ledger accepted stale writes (sync)");
        assert_eq!(r.token_regressions, 0, "[{backend}] tokens went back with the synchronous standby promoted");
        assert_eq!(r.overlaps, 0, "[{backend}] two terms were valid at once (sync)");
        assert!(back.is_some(), "[{backend}] no accepted write after the sync standby's promotion");
    }
    sh(&["start-pg-replicated"]);
}
