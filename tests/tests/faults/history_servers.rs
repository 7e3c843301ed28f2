//! Issue 38, the last "Done when" item: the job history with the store's OWN server killed
//! and paused during the run, on PostgreSQL, MySQL/MariaDB, Redis with persistence, ZooKeeper and etcd.
//!
//! A long run with its own command (not in the test command: about 60-65 s per backend). It
//! kills (SIGKILL) and pauses (SIGSTOP) the servers, so it runs on a set of servers of its
//! own, never the shared ones:
//!
//! ```sh
//! export SIMBA_BACKENDS_PORT_OFFSET=400 SIMBA_BACKENDS_DIR=/tmp/simba-fault-servers
//! eval "$(bash scripts/backends.sh start)"
//! SIMBA_HISTORY_SERVER_FAULTS=postgres,mysql,redis-persistent,zk,etcd \
//!   cargo test -p simba-tests --all-features --test faults history_servers -- --ignored --nocapture
//! bash scripts/backends.sh stop
//! ```
//!
//! `SIMBA_HISTORY_SERVER_FAULTS` names the backends (their `backends.sh` names); run with
//! `--ignored` and without it, the test fails and says so (it never passes without running).
//!
//! Per backend, three `simba-history-node` processes in a namespace of their own, with a
//! 1.5 s lease renewed every 500 ms, `[history] retention = 10000`, and two of the node's jobs
//! (`ledger` and `parts` are disabled): `slow`, a cron job every second whose run takes
//! 400 ms, and `flaky`, a cron job every 2 s with `retry = 2`, `backoff = "100ms"`,
//! `timeout = "400ms"` whose slots fail once, outlive the timeout once, or fail every attempt.
//! During the run the store's server is killed with `kill -9` and restarted twice and stopped
//! with SIGSTOP for 2-2.5 s twice, each fault timed against a slot of `flaky` (in the middle
//! of an attempt that will be retried, just before a slot, between two failing attempts), and
//! after each the test waits for `slow` to run again (the recovery). Then, from
//! `simba history --json` (the tool, in-process) and the nodes' own logs:
//! - every whole second of the window has exactly one record of `slow` (a `skipped_running`
//!   record counts for the slots it says it stands for), none `running`, anything but `ran`
//!   only inside a fault window (from 1 s before the fault to 2 s after the recovery);
//! - no slot started twice; every `ran` record was logged as started by its node;
//! - every slot of `flaky` has exactly one record, whose attempt is the last attempt the nodes
//!   logged for the slot (0 when none ran), all on one process, and whose outcome is one that
//!   attempt can end with (what the slot's mode makes it do: fail, time out or succeed;
//!   `retried` below the last attempt, `cancelled` when the term was lost).
//!
//! It prints a table per backend: the faults, the records checked, the missed slots and their
//! reasons, and the worst recovery (RELIABILITY.md, "Job history under store faults").

#![allow(clippy::print_stderr)] // The figures are printed.

// The node log reader of history.rs, compiled here too (its items are private to it); only
// the reader is used here.
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "history/logs.rs"]
mod logs;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use simba_tests::node_log::mono_ns;

use self::logs::Logs;

const NODES: [&str; 3] = ["a", "b", "c"];
const LEASE: Duration = Duration::from_millis(1500);
const RENEW: Duration = Duration::from_millis(500);
const JITTER: Duration = Duration::from_millis(350);
const RETENTION: usize = 10_000;
/// The variable naming the backends to run.
const VAR: &str = "SIMBA_HISTORY_SERVER_FAULTS";
/// How long `slow` may take to run again once the server is back before the test fails.
const RECOVERY_LIMIT: Duration = Duration::from_secs(30);
/// The steady time between two faults, after the recovery.
const BETWEEN: Duration = Duration::from_secs(6);

/// A backend of `scripts/backends.sh`: its name there and the variables of its URL and PID file.
struct Target {
    name: &'static str,
    url_var: &'static str,
    pid_var: &'static str,
}

const TARGETS: [Target; 5] = [
    Target { name: "postgres", url_var: "SIMBA_TEST_POSTGRES_URL", pid_var: "SIMBA_TEST_POSTGRES_PIDFILE" },
    Target { name: "mysql", url_var: "SIMBA_TEST_MYSQL_URL", pid_var: "SIMBA_TEST_MYSQL_PIDFILE" },
    Target {
        name: "redis-persistent",
        url_var: "SIMBA_TEST_REDIS_PERSISTENT_URL",
        pid_var: "SIMBA_TEST_REDIS_PERSISTENT_PIDFILE",
    },
    Target { name: "zk", url_var: "SIMBA_TEST_ZK_URL", pid_var: "SIMBA_TEST_ZK_PIDFILE" },
    Target { name: "etcd", url_var: "SIMBA_TEST_ETCD_URL", pid_var: "SIMBA_TEST_ETCD_PIDFILE" },
];

/// The store's server, signalled as a process group (PostgreSQL serves from children). On
/// drop (a failed check) it is sent SIGCONT and started again if it is not running.
struct Server {
    name: &'static str,
    pidfile: PathBuf,
    script: String,
}

impl Server {
    fn pid(&self) -> u32 {
        let text = std::fs::read_to_string(&self.pidfile).unwrap_or_default();
        text.trim().parse().unwrap_or_else(|_| panic!("no PID in {}", self.pidfile.display()))
    }

    fn signal(&self, sig: &str) {
        let pid = self.pid();
        let group = Command::new("kill").arg(format!("-{sig}")).arg("--").arg(format!("-{pid}")).status();
        if !group.is_ok_and(|s| s.success()) {
            let one = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status();
            assert!(one.is_ok_and(|s| s.success()), "kill -{sig} {pid} ({}) failed", self.name);
        }
    }

    fn restart(&self) {
        let out = Command::new("bash").arg(&self.script).args(["restart", self.name]).output();
        let out = out.unwrap_or_else(|e| panic!("run {}: {e}", self.script));
        assert!(out.status.success(), "restart {}: {}", self.name, String::from_utf8_lossy(&out.stderr));
    }

    fn running(&self) -> bool {
        let out = Command::new("bash").arg(&self.script).args(["pid", self.name]).output();
        out.is_ok_and(|o| o.status.success())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let pid = std::fs::read_to_string(&self.pidfile).unwrap_or_default();
        let _ = Command::new("kill").args(["-CONT", "--", &format!("-{}", pid.trim())]).stderr(Stdio::null()).status();
        if !self.running() {
            let _ = Command::new("bash").arg(&self.script).args(["restart", self.name]).output();
        }
    }
}

struct Node {
    name: &'static str,
    child: Child,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(dir: &Path, name: &'static str) -> Node {
    let stderr =
        std::fs::OpenOptions::new().create(true).append(true).open(dir.join(format!("{name}.stderr"))).expect("stderr");
    let child = Command::new(env!("CARGO_BIN_EXE_simba-history-node"))
        .current_dir(dir)
        .env("SIMBA_CONFIG", dir.join("simba.toml"))
        .env("SIMBA_NODE", name)
        .env("SIMBA_NODE_LOG", dir.join(format!("{name}.log")))
        .env_remove("SIMBA_LEDGER")
        .env("RUST_LOG", "warn")
        .env("SIMBA_NODE_TRACING", "1")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn simba-history-node");
    Node { name, child }
}

/// The last lines of each node's stderr, and how many records its writer gave up.
fn stderr_tail(dir: &Path) -> String {
    let mut out = String::new();
    for name in NODES {
        let text = std::fs::read_to_string(dir.join(format!("{name}.stderr"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        out.push_str(&format!("--- node {name} stderr ({} lines, last 15)\n", lines.len()));
        for l in &lines[lines.len().saturating_sub(15)..] {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// The nodes' log lines (stderr) that contain `needle`.
fn node_lines(dir: &Path, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for name in NODES {
        let text = std::fs::read_to_string(dir.join(format!("{name}.stderr"))).unwrap_or_default();
        out.extend(text.lines().filter(|l| l.contains(needle)).map(|l| format!("{name}: {l}")));
    }
    out
}

/// The warnings that say a record was given up or a term's start did not look for missed
/// slots.
const LOST: [&str; 2] = ["gave up a job record", "not looking for missed slots"];

/// One record of `simba history --json`.
#[derive(Debug, Clone)]
struct Rec {
    slot_ms: i64,
    kind: String,
    outcome: String,
    attempt: u32,
    node: String,
    token: u64,
    error: String,
}

/// `job`'s newest records, oldest first, as `simba --config FILE history JOB --json` prints
/// them (the tool in-process; the file names the backend and the namespace).
async fn history(config: &Path, job: &str) -> Vec<Rec> {
    let config = config.display().to_string();
    let args = ["simba", "--config", &config, "history", job, "--limit", "2000", "--json"];
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = simba_cli::run(args, &mut out, &mut err).await;
    let (out, err) = (String::from_utf8_lossy(&out), String::from_utf8_lossy(&err));
    assert_eq!(code, 0, "simba history {job}: {out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    let mut recs: Vec<Rec> = v["records"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| Rec {
                    slot_ms: r["slot_ms"].as_i64().unwrap_or_default(),
                    kind: r["kind"].as_str().unwrap_or_default().to_owned(),
                    outcome: r["outcome"].as_str().unwrap_or_default().to_owned(),
                    attempt: r["attempt"].as_u64().unwrap_or_default() as u32,
                    node: r["node"].as_str().unwrap_or_default().to_owned(),
                    token: r["token"].as_u64().unwrap_or_default(),
                    error: r["error"].as_str().unwrap_or_default().to_owned(),
                })
                .collect()
        })
        .unwrap_or_default();
    recs.reverse();
    recs
}

fn table(recs: &[Rec]) -> String {
    recs.iter()
        .map(|r| {
            format!("{} {:9} {:15} #{} {} {} {}\n", r.slot_ms, r.kind, r.outcome, r.attempt, r.node, r.token, r.error)
        })
        .collect()
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Records a failed check (`$cond` false) in `$fails` and goes on: every violation of a
/// backend is reported, and the other backends still run.
macro_rules! check {
    ($fails:expr, $cond:expr, $($msg:tt)+) => {
        if !$cond {
            $fails.push(format!($($msg)+));
        }
    };
}

/// What a slot of `flaky` does (the node's `flaky_mode`): 0 fails once, 1 outlives the
/// timeout once, 2 fails every attempt.
fn flaky_mode(slot_ms: i64) -> i64 {
    (slot_ms.div_euclid(1000) / 2).rem_euclid(3)
}

/// What attempt `n` of a `flaky` slot does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Does {
    Fails,
    TimesOut,
    Succeeds,
}

fn does(slot_ms: i64, attempt: u32) -> Does {
    match (flaky_mode(slot_ms), attempt) {
        (0, 1) | (2, _) => Does::Fails,
        (1, 1) => Does::TimesOut,
        _ => Does::Succeeds,
    }
}

/// The outcomes a record whose last attempt `n` (of 3) did `what` may end with: its own end,
/// `retried` when another attempt was to follow but never started (the term ended in the
/// backoff), `cancelled` when the term was lost during it; a failure may also end the slot
/// when the term had too little time left for the backoff.
fn may_end(what: Does, n: u32) -> &'static [&'static str] {
    match (what, n) {
        (Does::Succeeds, _) => &["ran", "cancelled"],
        (Does::Fails, 3) => &["failed", "cancelled"],
        (Does::Fails, _) => &["retried", "failed", "cancelled"],
        (Does::TimesOut, 3) => &["timed_out", "cancelled"],
        (Does::TimesOut, _) => &["retried", "timed_out", "cancelled"],
    }
}

/// A fault on the store's server, and what it took to recover.
#[derive(Debug, Clone)]
struct Fault {
    what: &'static str,
    /// Wall ms and host monotonic ns when it began; wall ms and ns when the server was back.
    wall: i64,
    mono: u128,
    back_wall: i64,
    back_mono: u128,
    /// From the server's return to the first run of `slow` that started after it.
    recovery: Duration,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Kill,
    Stop,
}

/// The faults: which, aimed at a slot of `flaky` of `mode` plus `offset_ms`, and how long
/// the server stays down (killed: before the restart; stopped: until SIGCONT).
const PLAN: [(Kind, i64, i64, Duration); 4] = [
    // kill -9 in the middle of attempt 1 of a slot that times out once: its retried record
    // and attempt 2's end are written once the server is back.
    (Kind::Kill, 1, 200, Duration::from_millis(2000)),
    // SIGSTOP just before a slot: the claims get no answer (`missed`, with the reason).
    (Kind::Stop, 0, -300, Duration::from_millis(2500)),
    // kill -9 between the failing attempts of a slot that fails every attempt.
    (Kind::Kill, 2, 50, Duration::from_millis(1000)),
    // SIGSTOP during attempt 1 of a slot that times out once.
    (Kind::Stop, 1, 200, Duration::from_millis(2000)),
];

/// Sleeps until `offset_ms` after the next slot of `flaky` whose mode is `mode` (at least
/// 1 s from now).
async fn aim(mode: i64, offset_ms: i64) {
    let mut slot = (now_ms() + 1000 - offset_ms).div_euclid(2000) * 2000 + 2000;
    while flaky_mode(slot) != mode {
        slot += 2000;
    }
    let wait = slot + offset_ms - now_ms();
    tokio::time::sleep(Duration::from_millis(wait.max(0) as u64)).await;
}

/// Waits until 700 ms into an odd second, when neither `slow` nor `flaky` has a run in flight.
async fn quiet_moment() {
    let wait = (1700 - now_ms().rem_euclid(2000)).rem_euclid(2000);
    tokio::time::sleep(Duration::from_millis(wait as u64)).await;
}

/// Waits (at most `within`) for a run of `slow` that started after `after` (host ns): its
/// start, or a panic naming `what`.
async fn next_run(dir: &Path, after: u128, within: Duration, what: &str) -> u128 {
    let start = Instant::now();
    loop {
        let logs = Logs::read(dir, &NODES);
        if let Some(r) = logs.runs.iter().find(|r| r.mono > after && r.kind == "scheduled") {
            return r.mono;
        }
        assert!(start.elapsed() < within, "{what}: `slow` did not run within {within:?}\n{}", stderr_tail(dir));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Issue 38: every slot keeps exactly one record, and every retried slot's last record names
/// the attempt that ran last, with the store's own server killed and paused during the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long run on servers of its own: SIMBA_HISTORY_SERVER_FAULTS=postgres,mysql,redis-persistent,zk,etcd cargo test -p simba-tests --all-features --test faults history_servers -- --ignored --nocapture (RELIABILITY.md)"]
async fn every_slot_keeps_one_record_with_the_stores_server_killed_and_paused() {
    let Ok(wanted) = std::env::var(VAR) else {
        panic!(
            "{VAR} is not set: this long run names its backends (postgres,mysql,redis-persistent,zk,etcd) and kills their \
             servers; start a set of servers of its own first (the module's docs)"
        )
    };
    let _serial = crate::SERIAL.lock().await;
    let mut reports = Vec::new();
    for name in wanted.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let t = TARGETS.iter().find(|t| t.name == name).unwrap_or_else(|| {
            panic!("{VAR}: unknown backend {name} (one of postgres, mysql, redis-persistent, zk, etcd)")
        });
        reports.push(run(t).await);
    }
    eprintln!("\nJob history under store faults (3 nodes, lease 1.5 s, renew 500 ms, retention {RETENTION}):");
    eprintln!(
        "| backend | faults (down) | `slow` slots checked | `flaky` slots checked (with a retry) | missed slots: reasons | other non-ran | worst recovery |"
    );
    eprintln!("|---|---|---|---|---|---|---|");
    for (row, _) in &reports {
        eprintln!("{row}");
    }
    let fails: Vec<&String> = reports.iter().flat_map(|(_, f)| f).collect();
    let n = fails.len();
    let shown: Vec<&str> = fails.iter().take(20).map(|f| f.as_str()).collect();
    assert!(n == 0, "{n} checks failed (the first 20; the records are printed above):\n{}", shown.join("\n"));
}

/// One backend's run: the nodes, the faults, the checks; returns its table row and the
/// checks that failed.
async fn run(t: &Target) -> (String, Vec<String>) {
    let url = simba_tests::servers::required_env(t.url_var);
    let server = Server {
        name: t.name,
        pidfile: simba_tests::servers::required_env(t.pid_var).into(),
        script: simba_tests::servers::required_env("SIMBA_BACKENDS_SCRIPT"),
    };
    assert!(server.running(), "{}: the server is not running (bash scripts/backends.sh status)", t.name);
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let namespace = format!("hist-{:012x}", rand::random::<u64>() >> 16);
    let config = dir.join("simba.toml");
    std::fs::write(
        &config,
        format!(
            "[backend]\nurl = \"{url}\"\nnamespace = \"{namespace}\"\n\n[session]\nlease_duration = \"{}ms\"\n\
             renew_interval = \"{}ms\"\nretry_jitter = \"{}ms\"\n\n[history]\nretention = {RETENTION}\n\n\
             [jobs.ledger]\nenabled = false\n\n[jobs.parts]\nenabled = false\n",
            LEASE.as_millis(),
            RENEW.as_millis(),
            JITTER.as_millis()
        ),
    )
    .expect("write simba.toml");
    let began = Instant::now();
    let t0 = now_ms();
    let mut nodes: Vec<Node> = NODES.iter().map(|n| spawn(dir, n)).collect();
    let start = mono_ns();
    for _ in 0..3 {
        next_run(dir, start, Duration::from_secs(30), &format!("{}: at the start", t.name)).await;
        let logs = Logs::read(dir, &NODES);
        if logs.runs.iter().filter(|r| r.kind == "scheduled").count() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(BETWEEN).await;

    let mut faults = Vec::new();
    for (kind, mode, offset, down) in PLAN {
        aim(mode, offset).await;
        let (wall, mono) = (now_ms(), mono_ns());
        let what = match kind {
            Kind::Kill => {
                server.signal("KILL");
                tokio::time::sleep(down).await;
                server.restart();
                "kill -9"
            }
            Kind::Stop => {
                server.signal("STOP");
                tokio::time::sleep(down).await;
                server.signal("CONT");
                "SIGSTOP"
            }
        };
        let (back_wall, back_mono) = (now_ms(), mono_ns());
        let what_msg = format!("{}: after the {what} at {wall}", t.name);
        let ran = next_run(dir, back_mono, RECOVERY_LIMIT, &what_msg).await;
        let recovery = Duration::from_nanos((ran.saturating_sub(back_mono)) as u64);
        eprintln!(
            "{}: {what} for {:?} (server back {:?} after the fault); `slow` ran {recovery:?} after",
            t.name,
            down,
            Duration::from_millis((back_wall - wall) as u64)
        );
        faults.push(Fault { what, wall, mono, back_wall, back_mono, recovery });
        tokio::time::sleep(BETWEEN).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    quiet_moment().await;
    let end_wall = now_ms();
    for n in &nodes {
        let _ = Command::new("kill").arg("-TERM").arg(n.child.id().to_string()).status();
    }
    for n in &mut nodes {
        let start = Instant::now();
        while n.child.try_wait().ok().flatten().is_none() {
            assert!(start.elapsed() < Duration::from_secs(15), "{}: node {} did not stop", t.name, n.name);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let out = verify(t.name, dir, &config, t0, end_wall, &faults).await;
    eprintln!("{}: the run took {:?}", t.name, began.elapsed());
    out
}

/// The checks after the nodes stopped; returns the backend's table row.
async fn verify(
    label: &str,
    dir: &Path,
    config: &Path,
    t0: i64,
    end_wall: i64,
    faults: &[Fault],
) -> (String, Vec<String>) {
    let logs = Logs::read(dir, &NODES);
    let mut fails: Vec<String> = Vec::new();
    let in_fault = |slot: i64, period: i64| {
        faults
            .iter()
            .any(|f| slot >= f.wall - period && slot <= f.back_wall + f.recovery.as_millis() as i64 + 2000 + period)
    };
    let report_of = |job: &str, h: &[Rec]| {
        let lost: Vec<String> = LOST.iter().flat_map(|n| node_lines(dir, n)).collect();
        format!(
            "{label} `{job}` records:\n{}\nfaults: {faults:#?}\n{}--- the nodes' warnings of lost records:\n{}\n",
            table(h),
            stderr_tail(dir),
            lost.join("\n")
        )
    };
    // The window: from the first slot of this run to the last whole second before the stop.
    let last_slot = end_wall.div_euclid(1000) * 1000 - 1000;

    // `slow`: one record per second.
    let mut h = history(config, "slow").await;
    h.retain(|r| r.slot_ms >= t0);
    let mut reports = vec![report_of("slow", &h)];
    let first = h.iter().map(|r| r.slot_ms).min().unwrap_or_else(|| panic!("{label}: `slow` has no record"));
    let mut per_slot: BTreeMap<i64, Vec<&Rec>> = BTreeMap::new();
    for r in h.iter().filter(|r| r.kind == "scheduled" || r.kind == "caught_up") {
        per_slot.entry(r.slot_ms).or_default().push(r);
        // A `skipped_running` record stands for the run of slots it names: "N slots skipped
        // through ...".
        if r.outcome == "skipped_running"
            && let Some(n) = r.error.split(' ').next().and_then(|n| n.parse::<i64>().ok())
            && r.error.contains("slots skipped through")
        {
            for i in 1..n {
                per_slot.entry(r.slot_ms + i * 1000).or_default().push(r);
            }
        }
    }
    let mut missed: BTreeMap<String, usize> = BTreeMap::new();
    let mut other: BTreeMap<String, usize> = BTreeMap::new();
    let mut slot = first;
    let mut slots = 0;
    while slot <= last_slot {
        let recs = per_slot.get(&slot).map(Vec::as_slice).unwrap_or_default();
        let [r] = recs else {
            fails.push(format!("{label}: `slow` slot {slot} has {} records: {recs:?}", recs.len()));
            slot += 1000;
            continue;
        };
        check!(
            fails,
            ["ran", "caught_up", "cancelled", "missed", "declined", "skipped_running"].contains(&r.outcome.as_str()),
            "{label}: `slow` slot {slot} ended {}",
            r.outcome
        );
        check!(
            fails,
            r.outcome == "ran" || in_fault(slot, 1000),
            "{label}: `slow` slot {slot} is {} outside every fault window",
            r.outcome
        );
        match r.outcome.as_str() {
            "ran" | "caught_up" => {}
            "missed" => *missed.entry(reason(&r.error)).or_default() += 1,
            o => *other.entry(o.to_owned()).or_default() += 1,
        }
        slots += 1;
        slot += 1000;
    }
    check!(fails, h.iter().all(|r| r.outcome != "running"), "{label}: a record left running");
    let mut started = BTreeSet::new();
    for r in &logs.runs {
        check!(fails, started.insert((r.slot_ms, r.kind.clone())), "{label}: slot {} started twice", r.slot_ms);
    }
    for r in h.iter().filter(|r| r.outcome == "ran") {
        check!(
            fails,
            logs.runs.iter().any(|x| x.slot_ms == r.slot_ms && x.kind == r.kind && x.node == r.node),
            "{label}: a `ran` record no node logged: {r:?}"
        );
    }

    // `flaky`: one record per 2 s slot, naming the last attempt that ran, ending as it can.
    let mut f = history(config, "flaky").await;
    f.retain(|r| r.slot_ms >= t0);
    reports.push(report_of("flaky", &f));
    let by_slot: BTreeMap<i64, Vec<&Rec>> = f.iter().fold(BTreeMap::new(), |mut m, r| {
        m.entry(r.slot_ms).or_default().push(r);
        m
    });
    let first = by_slot.keys().next().copied().unwrap_or_else(|| panic!("{label}: `flaky` has no record"));
    let (mut flaky_slots, mut retried, mut flaky_missed) = (0, 0, 0);
    let mut unplanned = Vec::new();
    let mut slot = first;
    while slot <= last_slot {
        let recs = by_slot.get(&slot).map(Vec::as_slice).unwrap_or_default();
        let [r] = recs else {
            fails.push(format!("{label}: `flaky` slot {slot} has {} records: {recs:?}", recs.len()));
            slot += 2000;
            continue;
        };
        let tries: Vec<_> = logs.tries.iter().filter(|t| t.slot_ms == slot).collect();
        let last = tries.iter().map(|t| t.attempt).max().unwrap_or(0);
        let pids: BTreeSet<u32> = tries.iter().map(|t| t.pid).collect();
        check!(fails, pids.len() <= 1, "{label}: `flaky` slot {slot} ran on several processes {pids:?}");
        check!(
            fails,
            r.attempt == last,
            "{label}: `flaky` slot {slot}: the record names attempt {} ({}), the nodes ran up to attempt {last}",
            r.attempt,
            r.outcome
        );
        if last == 0 {
            check!(fails, r.outcome == "missed", "{label}: `flaky` slot {slot} did not run");
            check!(fails, in_fault(slot, 2000), "{label}: `flaky` slot {slot} missed outside every fault window");
            flaky_missed += 1;
            *missed.entry(format!("flaky: {}", reason(&r.error))).or_default() += 1;
        } else {
            let allowed = may_end(does(slot, last), last);
            check!(
                fails,
                allowed.contains(&r.outcome.as_str()),
                "{label}: `flaky` slot {slot}: attempt {last} {:?}, recorded {} (expected one of {allowed:?})",
                does(slot, last),
                r.outcome
            );
            let planned = if flaky_mode(slot) == 2 { ("failed", 3) } else { ("ran", 2) };
            if (r.outcome.as_str(), r.attempt) != planned {
                unplanned.push(format!("{}#{}", r.outcome, r.attempt));
            }
            check!(
                fails,
                (r.outcome.as_str(), r.attempt) == planned || in_fault(slot, 2000),
                "{label}: `flaky` slot {slot} ended {} at attempt {} outside every fault window",
                r.outcome,
                r.attempt
            );
        }
        if last >= 2 || r.outcome == "retried" {
            retried += 1;
        }
        flaky_slots += 1;
        slot += 2000;
    }
    check!(fails, f.iter().all(|r| r.outcome != "running"), "{label}: a `flaky` record left running");

    let kills = faults.iter().filter(|f| f.what == "kill -9").count();
    let downs: Vec<String> = faults.iter().map(|f| format!("{:.1}", (f.back_wall - f.wall) as f64 / 1000.0)).collect();
    let worst = faults.iter().map(|f| f.recovery).max().unwrap_or_default();
    let gap = faults
        .iter()
        .filter_map(|f| {
            let before = logs.runs.iter().filter(|r| r.mono <= f.mono).map(|r| r.mono).max()?;
            let after = logs.runs.iter().filter(|r| r.mono > f.back_mono).map(|r| r.mono).min()?;
            Some(Duration::from_nanos((after - before) as u64))
        })
        .max()
        .unwrap_or_default();
    let missed_text = if missed.is_empty() {
        "0".to_owned()
    } else {
        let n: usize = missed.values().sum();
        format!("{n}: {}", missed.iter().map(|(k, v)| format!("{v} × {k}")).collect::<Vec<_>>().join("; "))
    };
    eprintln!(
        "{label}: {slots} slots of `slow`, {flaky_slots} of `flaky` ({retried} retried, {flaky_missed} missed); \
         records given up by the writers: {}; term starts that did not look for missed slots: {}",
        node_lines(dir, LOST[0]).len(),
        node_lines(dir, LOST[1]).len()
    );
    if !fails.is_empty() {
        eprintln!("{}", reports.join("\n"));
        for f in &fails {
            eprintln!("FAILED: {f}");
        }
    }
    let row = format!(
        "| {label} | {kills} kill -9, {} SIGSTOP ({} s) | {slots} | {flaky_slots} ({retried}; ended otherwise than planned: {}) | {missed_text} | {} | {:.2} s (longest stretch without a run {:.2} s) |",
        faults.len() - kills,
        downs.join(", "),
        if unplanned.is_empty() { "none".to_owned() } else { unplanned.join(", ") },
        if other.is_empty() { "0".to_owned() } else { format!("{other:?}") },
        worst.as_secs_f64(),
        gap.as_secs_f64()
    );
    (row, fails)
}

/// A missed record's reason, in short: the claim got no answer, the gap a new term found, or
/// the text's first words.
fn reason(error: &str) -> String {
    if error.is_empty() {
        "gap seen at a term's start".to_owned()
    } else if let Some(rest) = error.strip_prefix("the store did not answer: ") {
        let why = rest.split(" (the slot's claim failed").next().unwrap_or(rest);
        let why: String = why.chars().take(60).collect();
        format!(
            "claim failed ({})",
            why.split(' ')
                .map(|w| if w.chars().any(|c| c.is_ascii_digit()) { "N" } else { w })
                .collect::<Vec<_>>()
                .join(" ")
        )
    } else {
        error.chars().take(60).collect()
    }
}
