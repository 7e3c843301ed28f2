//! Replicated stores (rule V2, ADR 0029): the fault suite's three
//! `simba-fault-node` processes hold the lease `ledger` on a 3-member etcd cluster or a
//! 3-server ZooKeeper ensemble (durable: etcd fsyncs, ZooKeeper `forceSync=yes`;
//! `scripts/backends.sh start-replicated`), their URL naming every member, and append to a
//! fenced ledger (a SQLite file: no node is paused here, so no writer holds its lock). The
//! harness faults the store's LEADER (found with `backends.sh leader`: etcdctl endpoint
//! status, ZooKeeper's `srvr`), alternating:
//! - `Kill`: SIGKILL, down for [`hold`], then `backends.sh restart` (same data dir);
//! - `Pause`: SIGSTOP for [`hold`], then SIGCONT;
//! - `Cut`: every node's connections to the leader cut (the fault proxy: the URL names
//!   one proxy per member) for [`hold`], the member itself running on: one member partitioned
//!   from the clients (not from its peers), so the clients must go through the others.
//!
//! After each fault it waits for an accepted ledger write and for the member to be back in
//! the cluster. Then it checks: 0 stale writes accepted, 0 overlapping terms, tokens never
//! going back (all from the nodes' logs, as the fault suite does), the history checker's
//! verdict (rule V4), and per fault what users see: the longest time without an accepted
//! write around it (failover as seen by the ledger), and whether the holder's term was kept
//! (the same token wrote before and after) or lost; the gaps against [`gap_bound`] (counted)
//! and [`LIVENESS`] (asserted).
//!
//! `SIMBA_REPLICATED_FAULTS` sets the number of faults per store (the CI size by default: 6 on
//! ZooKeeper, two of each kind; 4 on etcd, kills and cuts), `SIMBA_REPLICATED_KINDS` the kinds
//! (`kill,pause,cut`); the long size is a documented command in RELIABILITY.md. Every run also
//! counts the sessions the store expired before the window it had promised (none allowed, but
//! in the etcd pause demonstration, where they must be seen).

#![allow(clippy::print_stderr)] // The figures are printed for the report.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use simba_tests::lincheck::{Budget, Tolerance, check_history, parse_history};
use simba_tests::proxy::{FaultProxy, Mode, Modes, host_port};
use simba_tests::server_url;

use crate::SERIAL;
use crate::faults::{LEASE, RENEW, Report, bound, check, fault_log, mono_ns, nix_kill, read_logs, setup, wanted};

/// How long the leader stays killed or stopped: the nodes' failover bound, so that a term
/// that depends on the old leader has to survive a whole lease without it.
fn hold() -> Duration {
    bound()
}

/// The time without an accepted write a store-leader fault should cause: the store's own
/// election (etcd: election timeout 500 ms; ZooKeeper: `syncLimit` x `tickTime` = 1 s to
/// notice, then its election), taken as 2 s, then at worst the holder's term is lost and the
/// others wait out the failover bound, plus one renewal for the reconnect and the fault
/// suite's allowance (300 ms). Reported (faults over it are counted), not asserted: the store's
/// elections are not simba's, and on this loaded machine ZooKeeper once elected twice after a
/// kill (a restarted member led, then lost its quorum: "Not sufficient followers synced"), a
/// 6.4 s gap. [`LIVENESS`] is asserted.
fn gap_bound() -> Duration {
    Duration::from_secs(2) + bound() + RENEW + Duration::from_millis(300)
}

/// The longest time without an accepted write a run may show: past it the store or simba is
/// not coming back on its own.
const LIVENESS: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
/// A fault of the store's leader.
enum Kind {
    /// SIGKILL, then a restart on its data.
    Kill,
    /// SIGSTOP, then SIGCONT.
    Pause,
    /// Every node's connections to it cut.
    Cut,
}

/// One fault's outcome.
struct Seen {
    kind: Kind,
    member: String,
    gap: Duration,
    kept: bool,
}

fn script() -> String {
    std::env::var("SIMBA_BACKENDS_SCRIPT").unwrap_or_else(|_| "scripts/backends.sh".into())
}

fn sh(args: &[&str]) -> Result<String, String> {
    let out = Command::new("bash").arg(script()).args(args).output().map_err(|e| format!("run backends.sh: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!("backends.sh {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr)))
    }
}

/// The member that leads `cluster` now, waiting up to 20 s for one.
fn store_leader(cluster: &str) -> String {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        match sh(&["leader", cluster]) {
            Ok(m) if !m.is_empty() => return m,
            r if Instant::now() > end => panic!("[{cluster}] no leader within 20 s: {r:?}"),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn member_pid(member: &str) -> u32 {
    let pid = sh(&["pid", member]).unwrap_or_else(|e| panic!("{e}"));
    pid.parse().unwrap_or_else(|_| panic!("backends.sh pid {member}: {pid:?}"))
}

/// The token of the last accepted write that ended before `t`, and of the first that started
/// after it.
fn tokens_around(log: &std::path::Path, before: u128, after: u128) -> (Option<u64>, Option<u64>) {
    let logs = read_logs(log);
    let accepted = logs.writes.iter().filter(|w| w.3);
    let last = accepted.clone().filter(|w| w.1 <= before).max_by_key(|w| w.1).map(|w| w.2);
    let next = accepted.filter(|w| w.0 >= after).min_by_key(|w| w.0).map(|w| w.2);
    (last, next)
}

/// The longest time between two accepted writes (by their ends) from the last one before
/// `began` to the first one after `back`.
fn longest_gap(log: &std::path::Path, began: u128, back: u128) -> Duration {
    let mut ends: Vec<u128> = read_logs(log).writes.iter().filter(|w| w.3).map(|w| w.1).collect();
    ends.sort_unstable();
    let from = ends.iter().rev().find(|e| **e <= began).copied().unwrap_or(began);
    let mut prev = from;
    let mut gap = 0;
    for e in ends.iter().filter(|e| **e > from && **e <= back) {
        gap = gap.max(e - prev);
        prev = *e;
    }
    Duration::from_nanos(gap as u64)
}

/// On a panic mid-fault, leaves the member running for the next test: woken, or restarted.
struct Wake<'a>(&'a str, u32);

impl Drop for Wake<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = nix_kill(self.1, "CONT");
            if sh(&["pid", self.0]).is_err() {
                let _ = sh(&["restart", self.0]);
            }
        }
    }
}

/// Injects `kind` into `member` (PID `pid`) and ends it: restarts a killed member, wakes a
/// stopped one, restores a cut link.
async fn inject(kind: Kind, member: &str, pid: u32, proxies: &[FaultProxy]) {
    let _wake = Wake(member, pid);
    match kind {
        Kind::Kill => {
            assert!(nix_kill(pid, "KILL"), "kill -KILL {pid} ({member})");
            tokio::time::sleep(hold()).await;
            sh(&["restart", member]).unwrap_or_else(|e| panic!("{e}"));
        }
        Kind::Pause => {
            assert!(nix_kill(pid, "STOP"), "kill -STOP {pid} ({member})");
            tokio::time::sleep(hold()).await;
            assert!(nix_kill(pid, "CONT"), "kill -CONT {pid} ({member})");
        }
        Kind::Cut => {
            // Members are named <cluster>-r1..3, in the URL's order.
            let n: usize = member.rsplit('r').next().and_then(|d| d.parse().ok()).expect("member number");
            proxies[n - 1].set(Mode::Cut);
            tokio::time::sleep(hold()).await;
            proxies[n - 1].restore();
        }
    }
}

/// The kinds `SIMBA_REPLICATED_KINDS` names (`kill,pause,cut`), or `default`.
fn kinds(default: &[Kind]) -> Vec<Kind> {
    let Ok(v) = std::env::var("SIMBA_REPLICATED_KINDS") else { return default.to_vec() };
    let all = [Kind::Kill, Kind::Pause, Kind::Cut];
    let kinds: Vec<Kind> =
        all.into_iter().filter(|k| v.split(',').any(|w| w.trim().eq_ignore_ascii_case(&format!("{k:?}")))).collect();
    assert!(!kinds.is_empty(), "SIMBA_REPLICATED_KINDS={v}: name some of kill, pause, cut");
    kinds
}

/// The answers `expired` (to a keep-alive or an acquisition) that came more than 10 ms (the
/// checker's tolerance) before the window the session's open or a keep-alive had promised:
/// the invocation of the call plus the `remaining` it answered (rule V4's "expiry within the
/// window"), read from the history the nodes recorded. Each as (instant in ns, session, how
/// early in ms).
fn early_expiries(history: &std::path::Path) -> Vec<(u128, String, f64)> {
    let text = std::fs::read_to_string(history).unwrap_or_default();
    let mut calls: BTreeMap<(String, String), (u128, String, String)> = BTreeMap::new();
    let mut window: BTreeMap<String, u128> = BTreeMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let (Some(kind), Some(client), Some(seq), Some(t)) = (f.first(), f.get(1), f.get(2), f.get(3)) else {
            continue;
        };
        let Ok(t) = t.parse::<u128>() else { continue };
        let key = (client.to_string(), seq.to_string());
        if *kind == "call" {
            calls.insert(key, (t, f.get(4).unwrap_or(&"").to_string(), f.get(5).unwrap_or(&"").to_string()));
            continue;
        }
        let Some((t0, op, session)) = calls.get(&key) else { continue };
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u128>().ok());
        match (op.as_str(), f.get(4).copied()) {
            ("open", Some("opened")) => {
                if let (Some(id), Some(r)) = (f.get(5), num(6)) {
                    window.insert(id.to_string(), t0 + r);
                }
            }
            ("keep", Some("alive")) => {
                if let Some(r) = num(5) {
                    let w = window.entry(session.clone()).or_default();
                    *w = (*w).max(t0 + r);
                }
            }
            (_, Some("expired")) => {
                if let Some(w) = window.get(session).filter(|w| t + 10_000_000 < **w) {
                    out.push((t, session.clone(), (w - t) as f64 / 1e6));
                }
            }
            _ => {}
        }
    }
    out
}

/// The checks after a run: the nodes' report (stale writes, overlaps, tokens), the early
/// expiries and the history checker (`expect_early`: the etcd pause demonstration, which must
/// see early expiries and may see the overlaps they allow), and each fault's gap.
fn judge(backend: &str, cluster: &str, seen: &[Seen], log: &Path, history: &Path, expect_early: bool) {
    let mut report = Report::default();
    check(backend, log, &mut report);
    let early = early_expiries(history);
    // The table first: a violation fails the run in `check_run`, and the figures still count.
    print_table(backend, cluster, seen, &report, &early);
    if expect_early {
        // The demonstration: the store expires sessions early; the checker must say so.
        let text = std::fs::read_to_string(history).unwrap_or_default();
        let checked = check_history(&parse_history(text.lines()), Tolerance::default(), Budget::default());
        eprintln!("[{backend}] history checker (V4): {}", checked.summary());
        assert!(!early.is_empty(), "[{backend}] no session expired before its window in {} faults", seen.len());
    } else {
        let checked = crate::checker::check_run(backend, history);
        eprintln!("[{backend}] history checker (V4): {}", checked.summary());
        assert!(early.is_empty(), "[{backend}] sessions expired before their window: {early:?}");
    }
    assert_eq!(report.stale_accepted, 0, "[{backend}] the ledger accepted stale writes");
    if !expect_early {
        // An early expiry lets a contender win while the holder still counts itself valid.
        assert_eq!(report.overlaps, 0, "[{backend}] two terms were valid at once");
    }
    assert_eq!(report.token_regressions, 0, "[{backend}] tokens went backwards");
    assert_eq!(report.unended_not_last, 0, "[{backend}] a node went on after a term without logging its end");
    for (i, f) in seen.iter().enumerate() {
        assert!(
            f.gap <= LIVENESS,
            "[{backend}] fault {i} ({:?} of {}): {:?} without an accepted write, over {LIVENESS:?}",
            f.kind,
            f.member,
            f.gap
        );
    }
}

async fn run_replicated(
    backend: &str,
    url_var: &str,
    cluster: &str,
    default_kinds: &[Kind],
    expect_early: bool,
    default_count: usize,
) {
    if !wanted(backend) {
        return;
    }
    let Some(url) = server_url(url_var) else { return };
    let _serial = SERIAL.lock().await;
    let kinds = kinds(default_kinds);
    let count: usize =
        std::env::var("SIMBA_REPLICATED_FAULTS").ok().and_then(|s| s.parse().ok()).unwrap_or(default_count);
    eprintln!("[{backend}] {count} store-leader faults ({kinds:?}) on {url}, lease {LEASE:?}, hold {:?}", hold());
    // One fault proxy per member, shared by the nodes, in the members' order.
    let (scheme, hosts) = url.split_once("://").unwrap_or_else(|| panic!("{url_var}={url}: no scheme"));
    let mut proxies = Vec::new();
    for h in hosts.split(['/', '?']).next().unwrap_or_default().split(',') {
        proxies.push(FaultProxy::start(host_port(&format!("{scheme}://{h}"))).await.expect("proxy"));
    }
    let via: Vec<String> = proxies.iter().map(|p| p.addr().to_string()).collect();
    let url = format!("{scheme}://{}", via.join(","));
    let mut s = setup(backend, url, None, None, None, "replicated", Modes::default()).await;
    let log = s.log();
    let mut seen = Vec::new();
    for i in 0..count {
        let kind = kinds[i % kinds.len()];
        let member = store_leader(cluster);
        let pid = member_pid(&member);
        let began = mono_ns();
        fault_log(&format!("[{backend}] fault {i} {kind:?} of {member} (pid {pid}) starts at mono {began} ns"));
        inject(kind, &member, pid, &proxies).await;
        let restored = mono_ns();
        let mut back = None;
        for _ in 0..1200 {
            back = read_logs(&log).writes.iter().filter(|w| w.3 && w.0 > restored).map(|w| w.1).min();
            if back.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let Some(back) = back else {
            panic!("[{backend}] fault {i} ({kind:?}): no accepted write within 30 s of its end")
        };
        let gap = longest_gap(&log, began, back);
        let (before, after) = tokens_around(&log, began, restored);
        let kept = before.is_some() && before == after;
        if let (Some(b), Some(a)) = (before, after) {
            assert!(a >= b, "[{backend}] fault {i} ({kind:?}): token {a} after the fault, below {b} before it");
        }
        fault_log(&format!(
            "[{backend}] fault {i} {kind:?} ended at mono {restored} ns: longest gap {gap:?}, term kept: {kept}"
        ));
        seen.push(Seen { kind, member, gap, kept });
        // The member rejoined (a restart waits for it); let the cluster settle.
        let _ = store_leader(cluster);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    s.assert_nodes_run(backend);
    drop(std::mem::take(&mut s.nodes));
    judge(backend, cluster, &seen, &log, &s.history_log(), expect_early);
}

fn print_table(backend: &str, cluster: &str, seen: &[Seen], r: &Report, early: &[(u128, String, f64)]) {
    let mut by: BTreeMap<Kind, Vec<&Seen>> = BTreeMap::new();
    for f in seen {
        by.entry(f.kind).or_default().push(f);
    }
    let mut out = format!(
        "\n### {backend} ({cluster}, 3 members, durable): {} store-leader faults, lease {LEASE:?}, leader down {:?}\n\n| fault of the store's leader | injected | terms kept | terms lost | median gap without an accepted write | worst gap | over the {:?} target |\n| --- | --- | --- | --- | --- | --- | --- |\n",
        seen.len(),
        hold(),
        gap_bound()
    );
    for (k, fs) in &by {
        let mut gaps: Vec<Duration> = fs.iter().map(|f| f.gap).collect();
        gaps.sort();
        let kept = fs.iter().filter(|f| f.kept).count();
        out.push_str(&format!(
            "| leader {k:?} | {} | {kept} | {} | {:?} | {:?} | {} |\n",
            fs.len(),
            fs.len() - kept,
            gaps[gaps.len() / 2],
            gaps[gaps.len() - 1],
            gaps.iter().filter(|g| **g > gap_bound()).count()
        ));
    }
    out.push_str(&format!(
        "\nterms: {}, ledger writes: {} ({} refused as stale), stale writes accepted: {}, overlapping terms: {}, token regressions: {}\nsessions the store expired before their window (more than 10 ms early): {}{}\n",
        r.terms,
        r.writes,
        r.refused,
        r.stale_accepted,
        r.overlaps,
        r.token_regressions,
        early.len(),
        early.iter().map(|e| e.2).reduce(f64::max).map_or_else(String::new, |m| format!(" (up to {m:.0} ms)"))
    ));
    eprintln!("{out}");
    if let Ok(path) = std::env::var("SIMBA_RELIABILITY_OUT") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = f.write_all(out.as_bytes());
        }
    }
}

const ALL: [Kind; 3] = [Kind::Kill, Kind::Pause, Kind::Cut];

/// etcd: the leader killed and cut off. Not stopped: see the next test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_etcd_cluster() {
    run_replicated("etcd-cluster", "SIMBA_TEST_ETCD_CLUSTER_URL", "etcd-cluster", &[Kind::Kill, Kind::Cut], false, 4)
        .await;
}

/// etcd 3.4.23 (Debian 12's) with its leader stopped (SIGSTOP for the failover bound, then
/// SIGCONT): the stopped leader's lessor still counts itself primary when it resumes and
/// revokes the leases whose keep-alives went to the new leader meanwhile (etcd-io/etcd issues
/// 12528 and 15247), within 75 ms of SIGCONT and up to ~960 ms before the window the new
/// leader's keep-alive answers promised. The history checker reports the violation; this run
/// ASSERTS that such early expiries are seen (and still 0 stale writes accepted). Ignored in the
/// test command: seen in about one pause in six; run with `--ignored` (20 pauses by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "demonstrates an etcd 3.4 bug (RELIABILITY.md, Replicated stores)"]
async fn replicated_etcd_cluster_leader_pause() {
    run_replicated("etcd-cluster", "SIMBA_TEST_ETCD_CLUSTER_URL", "etcd-cluster", &[Kind::Pause], true, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_zk_ensemble() {
    run_replicated("zk-ensemble", "SIMBA_TEST_ZK_ENSEMBLE_URL", "zk-ensemble", &ALL, false, 6).await;
}

/// The early-expiry count on a history whose answers are known: a keep-alive invoked at 1 s
/// answered 1 s remaining, so the session may expire from 2 s (less 10 ms); an `expired` at
/// 1.5 s is 500 ms early, one at 2.5 s is not. No server needed.
#[test]
fn early_expiries_are_counted_against_the_promised_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("history.log");
    let lines = [
        "call c 0 0 open 1500000000",
        "ret c 0 100 opened s1 1000000000",
        "call c 1 1000000000 keep s1",
        "ret c 1 1000100000 alive 1000000000",
        "call c 2 1400000000 acquire s1 ledger",
        "ret c 2 1500000000 expired",
        "call c 3 2400000000 keep s1",
        "ret c 3 2500000000 expired",
    ];
    std::fs::write(&path, lines.join("\n") + "\n").expect("write");
    let early = early_expiries(&path);
    assert_eq!(early.len(), 1, "{early:?}");
    assert_eq!((early[0].0, early[0].1.as_str(), early[0].2.round()), (1_500_000_000, "s1", 500.0));
}
