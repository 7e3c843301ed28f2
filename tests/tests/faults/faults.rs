//! Fault injection with real processes and real servers (rule V2, issue "fault-injection
//! suite"): three `simba-fault-node` processes run a 50 ms job on the lease `ledger` that
//! appends to a fenced ledger (the SQLite recipe) with its term's token, and log each term's
//! validity on the host's monotonic clock. The harness injects faults at random from a seed it
//! prints: kill -9 of a node (then a restart), SIGSTOP of a node longer than the lease, and on
//! server backends kill -9 and restart of the server, SIGSTOP of the server, and links cut or
//! black-holed through a TCP fault proxy. Then it checks: zero stale writes accepted by the
//! ledger, zero overlap between two terms' validity intervals, tokens strictly increasing, and
//! a leader back within the failover bound after each fault.
//!
//! `SIMBA_FAULTS` sets the number of faults per backend (default 100, the size the test
//! command runs, 25 server kills on the persistent Redis; `SIMBA_FAULTS=25` for a quicker local run), `SIMBA_FAULT_SEED` the seed, `SIMBA_FAULT_BACKENDS` a comma-separated subset, and
//! `SIMBA_FAULT_KINDS` a comma-separated subset of the fault kinds (`NodeKill,ServerKill`),
//! `SIMBA_RELIABILITY_OUT` a file to append the report table to (see RELIABILITY.md), and
//! `SIMBA_FAULT_NODE_LOGS` a directory to keep the nodes' logs and the faults' times in.
//!
//! Clock-rate skew (issue 16 item 1, rule D6): `SIMBA_FAULT_CLOCK_RATE=0.97` starts every node
//! process under libfaketime (`LD_PRELOAD` of `libfaketime.so.1`, `FAKETIME="+0 x0.97"`), so
//! that its monotonic clock, the one Tokio reads, runs at 0.97 times the host's (and the
//! store's), 1.03 for a fast clock. `SIMBA_FAULT_DRIFT` sets the nodes' `[session] drift` (0.01
//! when unset, the library's default) and `SIMBA_FAULT_MARGIN_MS` their `margin` (0 ms when
//! unset, so that `drift` alone carries the safety argument); both apply only with a rate.
//! `SIMBA_FAKETIME_LIB` names the library when it is not at `/usr/lib/*/faketime/` (Debian's
//! `libfaketime` package, installed by `scripts/backends.sh`). Each node first measures its
//! clock's rate against the host's (the `clock` line of its log) and the run fails unless it
//! is the injected one within 0.3%; the nodes convert their terms' local deadlines to the
//! host's clock with the rate, so the overlap check compares validity intervals on the real
//! clock. `SIMBA_FAULT_EXPECT_OVERLAPS=1` turns the overlap assertion around: the run fails
//! unless it observed overlapping terms (stale writes accepted must still be 0: the fence
//! refuses them). Skew needs a server backend: SQLite's clock is `unixepoch()` inside each
//! node process, which libfaketime would fake too, differently in every process (its rate is
//! counted from each process's start). Without these knobs the suite runs as before. The tests
//! `clock_skew_slow_redis` (in the test command: 0.97, drift 0.05, 0 overlaps) and
//! `clock_skew_overlaps_redis` (ignored, run by `--ignored`: 0.97, drift 0.01, link faults,
//! overlaps observed) use them, and `SIMBA_FAULT_BACKENDS` names them `redis-skew`;
//! RELIABILITY.md has the table and the commands.
//!
//! Degraded networks (issue 16 item 2) reuse [`setup`], [`check`] and the node logs from
//! `degraded.rs`.

#![allow(clippy::print_stderr)] // The figures are printed for the report.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use simba_tests::proxy::{FaultProxy, Mode, Modes, host_port};
use simba_tests::server_url;

pub(crate) const LEASE: Duration = Duration::from_millis(1500);
pub(crate) const RENEW: Duration = Duration::from_millis(400);
pub(crate) const JITTER: Duration = Duration::from_millis(200);
pub(crate) const NODES: usize = 3;

/// One backend at a time: server faults disturb the shared servers.
use crate::SERIAL;

pub(crate) fn mono_ns() -> u128 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u128 * 1_000_000_000 + t.tv_nsec as u128
}

pub(crate) fn bound() -> Duration {
    LEASE + RENEW / 2 + JITTER
}

/// What a measured failover may take beyond the bound (item 4 of issue 16): the job's period
/// (50 ms) and its ledger write, the harness's 25 ms polling, and scheduling on a loaded
/// 2-core machine.
pub(crate) const ALLOWANCE: Duration = Duration::from_millis(300);

/// The bound a fault's time back to an accepted write is held to. Node and link faults: the
/// failover bound (the others wait out the lease, then contend). A server kill: one renewal
/// interval more, for the reconnect (every connection died with the server: a node learns it
/// at its next renewal and opens new ones). A server pause keeps the connections.
fn fault_bound(f: Fault) -> Duration {
    match f {
        Fault::NodeKill | Fault::NodePause | Fault::LinkCut | Fault::LinkBlackHole | Fault::ServerPause => {
            bound() + ALLOWANCE
        }
        Fault::ServerKill => bound() + RENEW + ALLOWANCE,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    NodeKill,
    NodePause,
    ServerKill,
    ServerPause,
    LinkCut,
    LinkBlackHole,
}

pub(crate) struct Server {
    /// Name in scripts/backends.sh.
    name: &'static str,
    pidfile: PathBuf,
    /// A restart loses data (Redis without persistence): no server kill.
    volatile: bool,
}

/// A clock-rate skew injected into the node processes with libfaketime.
#[derive(Debug, Clone)]
pub(crate) struct Skew {
    /// The nodes' clock rate to the host's: 0.97 is 3% slow.
    rate: f64,
    /// The nodes' `[session] drift`.
    drift: f64,
    /// The nodes' `[session] margin`.
    margin: Duration,
    /// libfaketime's `LD_PRELOAD` library.
    lib: PathBuf,
    /// The run must observe overlapping terms (drift smaller than the skew).
    expect_overlaps: bool,
}

impl Skew {
    /// The skew the environment asks for, or the given defaults (`rate`, `drift`) for a test
    /// that always skews; `Ok(None)` without either. `Err` when libfaketime is not installed.
    fn from_env(default: Option<(f64, f64)>, expect_overlaps: bool) -> Result<Option<Skew>, String> {
        let num = |v: &str| {
            std::env::var(v).ok().map(|s| s.parse::<f64>().unwrap_or_else(|_| panic!("{v}={s}: not a number")))
        };
        let Some(rate) = num("SIMBA_FAULT_CLOCK_RATE").or(default.map(|d| d.0)) else { return Ok(None) };
        assert!(rate > 0.5 && rate < 2.0, "SIMBA_FAULT_CLOCK_RATE={rate}: between 0.5 and 2, please");
        let drift = num("SIMBA_FAULT_DRIFT").or(default.map(|d| d.1)).unwrap_or(0.01);
        let margin = Duration::from_millis(num("SIMBA_FAULT_MARGIN_MS").unwrap_or(0.0) as u64);
        let expect_overlaps = expect_overlaps || std::env::var("SIMBA_FAULT_EXPECT_OVERLAPS").is_ok_and(|v| v == "1");
        let lib = match std::env::var_os("SIMBA_FAKETIME_LIB") {
            Some(p) => PathBuf::from(p),
            None => std::fs::read_dir("/usr/lib")
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path().join("faketime/libfaketime.so.1"))
                .find(|p| p.is_file())
                .ok_or("libfaketime.so.1 is not installed (apt-get install libfaketime, or SIMBA_FAKETIME_LIB=PATH)")?,
        };
        Ok(Some(Skew { rate, drift, margin, lib, expect_overlaps }))
    }
}

pub(crate) struct Node {
    pub(crate) child: Child,
    pub(crate) proxy: Option<FaultProxy>,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = nix_kill(self.child.id(), "CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn nix_kill(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Signals the server's whole process group (PostgreSQL serves connections from children).
fn signal_server(server: &Server, sig: &str) {
    let pid = std::fs::read_to_string(&server.pidfile).ok().and_then(|s| s.trim().parse::<u32>().ok());
    let Some(pid) = pid else { panic!("no pid in {}", server.pidfile.display()) };
    let group =
        Command::new("kill").arg(format!("-{sig}")).arg("--").arg(format!("-{pid}")).stderr(Stdio::null()).status();
    if !group.is_ok_and(|s| s.success()) {
        assert!(nix_kill(pid, sig), "kill -{sig} {pid} failed");
    }
}

fn restart_server(server: &Server) {
    let script = std::env::var("SIMBA_BACKENDS_SCRIPT").unwrap_or_else(|_| "scripts/backends.sh".into());
    let out = Command::new("bash").arg(script).arg("restart").arg(server.name).output().expect("backends.sh restart");
    assert!(out.status.success(), "restart {} failed: {}", server.name, String::from_utf8_lossy(&out.stderr));
}

pub(crate) struct Suite {
    dir: tempfile::TempDir,
    url: String,
    ledger: String,
    ledger_id: String,
    upstream: Option<SocketAddr>,
    server: Option<Server>,
    pub(crate) nodes: Vec<Node>,
    skew: Option<Skew>,
    /// The modes a new node's link starts with (the degraded-network runs: their condition).
    pub(crate) link: Modes,
    /// Before the first node was spawned, on the host's monotonic clock.
    spawned_from: u128,
}

impl Suite {
    /// Panics, naming the node, when a node process exited on its own: every other check
    /// assumes `NODES` contenders (a node that gave up at its start while the server was
    /// down once left one node to fail over to none, and the run failed on a bound instead).
    pub(crate) fn assert_nodes_run(&mut self, backend: &str) {
        for n in &mut self.nodes {
            if let Ok(Some(status)) = n.child.try_wait() {
                panic!(
                    "[{backend}] node pid {} exited on its own ({status}); keep its log with SIMBA_FAULT_NODE_LOGS=DIR",
                    n.child.id()
                );
            }
        }
    }

    pub(crate) fn log(&self) -> PathBuf {
        self.dir.path().join("nodes.log")
    }

    /// Where the nodes record their lease operations for the history checker (`checker.rs`).
    pub(crate) fn history_log(&self) -> PathBuf {
        self.dir.path().join("history.log")
    }

    pub(crate) async fn spawn(&self) -> Node {
        let (url, proxy) = match self.upstream {
            Some(up) => {
                let p = FaultProxy::start_with(up, self.link).await.expect("proxy");
                (self.url.replace(&up.to_string(), &p.addr().to_string()), Some(p))
            }
            None => (self.url.clone(), None),
        };
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_simba-fault-node"));
        if let Some(dir) = std::env::var_os("SIMBA_FAULT_NODE_LOGS") {
            let _ = std::fs::create_dir_all(dir);
            cmd.env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info,simba=debug".into()));
        } else {
            cmd.env_remove("RUST_LOG");
        }
        if let Some(k) = &self.skew {
            // libfaketime counts the rate from the process's start: "+0 x0.97" leaves the clock
            // where it is and runs it at 0.97. No FAKETIME_NO_CACHE: the spec is in the
            // environment, read once (the cache is for the file-based specs).
            cmd.env("LD_PRELOAD", &k.lib)
                .env("FAKETIME", format!("+0 x{}", k.rate))
                .env("SIMBA_FAULT_CLOCK_RATE", k.rate.to_string());
        }
        let child = cmd
            .current_dir(self.dir.path())
            .env("SIMBA_CONFIG", self.dir.path().join("simba.toml"))
            .env("SIMBA_BACKEND__URL", url)
            .env("SIMBA_LEDGER", &self.ledger)
            .env("SIMBA_LEDGER_ID", &self.ledger_id)
            .env("SIMBA_NODE_LOG", self.log())
            .env("SIMBA_HISTORY_LOG", self.history_log())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn simba-fault-node");
        Node { child, proxy }
    }
}

/// `SIMBA_FAULT_NODE_LOGS=DIR` keeps every node's log (`RUST_LOG`, default
/// `info,simba=debug`) in `DIR/node-PID.log` (the node writes it), and the harness writes each
/// fault's start, end and the first accepted write after it, on the wall clock as the logs
/// show it, to `DIR/faults.log`.
/// Appends a line to `DIR/faults.log` when `SIMBA_FAULT_NODE_LOGS=DIR` is set.
pub(crate) fn fault_log(line: &str) {
    use std::io::Write as _;
    let Some(dir) = std::env::var_os("SIMBA_FAULT_NODE_LOGS") else { return };
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(Path::new(&dir).join("faults.log")) {
        let _ = writeln!(f, "{} {line}", chrono::Utc::now().format("%H:%M:%S%.6f"));
    }
}

#[derive(Default, Debug)]
pub(crate) struct Logs {
    /// (pid, token) -> (start, valid until). "Valid until" is the term's `end` line when its
    /// node logged one: the revoked term's frozen deadline (`Term::deadline`), the instant it
    /// ended, whenever the node got round to logging it. A term without one (its node was
    /// killed first, or the run ended while it lasted) is valid until the last deadline its
    /// node logged, at most: the session cannot be renewed once the node is dead (and a
    /// stopped node logs its end once it runs again).
    pub(crate) terms: BTreeMap<(u32, u64), (u128, u128)>,
    /// The terms whose node logged their `end` (the others end at their last logged deadline).
    pub(crate) ended: std::collections::BTreeSet<(u32, u64)>,
    /// (start, end, token, accepted, pid)
    pub(crate) writes: Vec<(u128, u128, u64, bool, u32)>,
    /// (pid, real start, real ns, local ns): a node's measured clock rate.
    clocks: Vec<(u32, u128, u128, u128)>,
    /// (pid, token) -> which process of that PID logged the term (0 for the first, counted by
    /// the `node` line each process logs first): a killed node's PID can come back within a run.
    pub(crate) process: BTreeMap<(u32, u64), u32>,
}

pub(crate) fn read_logs(path: &Path) -> Logs {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut l = Logs::default();
    let mut ends: BTreeMap<(u32, u64), u128> = BTreeMap::new();
    let mut deadlines: BTreeMap<(u32, u64), u128> = BTreeMap::new();
    let mut processes: BTreeMap<u32, u32> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let n = |i: usize| f.get(i).and_then(|s| s.parse::<u128>().ok()).unwrap_or(0);
        let pid = f.last().and_then(|s| s.parse::<u32>().ok()).unwrap_or(0);
        match f.first().copied() {
            Some("node") => {
                // A new process; the first one of a PID counts as 0.
                processes.entry(pid).and_modify(|p| *p += 1).or_insert(0);
            }
            Some("term") => {
                // The same token again for this process, with another start: the store granted
                // it twice (an asynchronous standby promoted). The later term replaces the
                // earlier, with none of its deadlines or its end; it starts after the higher
                // tokens the store lost, so the check counts it as a regression.
                let key = (pid, n(1) as u64);
                let this = processes.get(&pid).copied().unwrap_or(0);
                if l.terms.get(&key).is_some_and(|t| t.0 != n(2)) && l.process.get(&key).copied() == Some(this) {
                    ends.remove(&key);
                    deadlines.remove(&key);
                }
                l.terms.insert((pid, n(1) as u64), (n(2), n(2)));
                l.process.insert((pid, n(1) as u64), processes.get(&pid).copied().unwrap_or(0));
            }
            Some("valid") => {
                let d = deadlines.entry((pid, n(1) as u64)).or_insert(0);
                *d = (*d).max(n(2));
            }
            Some("end") => {
                let e = ends.entry((pid, n(1) as u64)).or_insert(u128::MAX);
                *e = (*e).min(n(2));
            }
            Some("write") => l.writes.push((n(1), n(2), n(3) as u64, n(4) == 1, pid)),
            Some("clock") => l.clocks.push((pid, n(1), n(2), n(3))),
            _ => {}
        }
    }
    for (k, (start, until)) in l.terms.iter_mut() {
        // The end is the truth when there is one: it can lie past the last logged deadline
        // (a renewal after the job's last run moved the deadline, and the term lasted until
        // its revocation) or before it (revoked before its deadline).
        *until = ends.get(k).copied().unwrap_or_else(|| deadlines.get(k).copied().unwrap_or(*start));
    }
    l.ended = ends.into_keys().collect();
    l
}

/// The first accepted write that started after `t`.
fn first_accept_after(path: &Path, t: u128) -> Option<u128> {
    read_logs(path).writes.iter().filter(|w| w.3 && w.0 > t).map(|w| w.1).min()
}

/// The end of the first accepted write that started after `began` by a node other than
/// `victim`, or by `victim` once it started after `restored`: the failover after a fault that
/// hit `victim` from `began` to `restored`.
pub(crate) fn next_write(logs: &Logs, began: u128, restored: u128, victim: u32) -> Option<u128> {
    logs.writes.iter().filter(|w| w.3 && w.0 > began && (w.4 != victim || w.0 > restored)).map(|w| w.1).min()
}

/// The pid of the node of the latest accepted write: the leader, as the ledger sees it.
pub(crate) fn leader(log: &Path) -> Option<u32> {
    read_logs(log).writes.iter().filter(|w| w.3).max_by_key(|w| w.1).map(|w| w.4)
}

#[derive(Debug, Default)]
pub(crate) struct Report {
    faults: BTreeMap<Fault, usize>,
    /// Per kind, the worst time from the fault's end to a leader's accepted write.
    worst: BTreeMap<Fault, Duration>,
    /// Per kind of node or link fault, the worst time from the fault's start to an accepted
    /// write by a node the fault did not hit, or by the one it hit once the fault ended: the
    /// failover itself when it hit the leader.
    worst_from_start: BTreeMap<Fault, Duration>,
    /// (kind, began, restored, pid of the node it hit) of every node and link fault.
    hits: Vec<(Fault, u128, u128, u32)>,
    /// Per kind, the longest gap between two accepted ledger writes around the fault: how long
    /// nobody worked, whoever held the lease.
    worst_gap: BTreeMap<Fault, Duration>,
    /// (kind, began, restored, back) of every fault.
    windows: Vec<(Fault, u128, u128, u128)>,
    pub(crate) writes: usize,
    pub(crate) refused: usize,
    pub(crate) stale_accepted: usize,
    pub(crate) overlaps: usize,
    pub(crate) token_regressions: usize,
    pub(crate) terms: usize,
    /// Terms whose node logged their `end` line.
    pub(crate) ended: usize,
    /// Terms without an `end` line that were not their node's last: their node lived on after
    /// them without logging their end (0 unless the node's logging is wrong).
    pub(crate) unended_not_last: usize,
    /// The largest change of the host's wall clock against its monotonic clock between two
    /// faults, in ns: a step of the wall clock (NTP, a paused VM catching up). The SQL stores
    /// and Redis expire sessions on their server's wall clock while the nodes count on the
    /// monotonic one, so a forward step shortens every session at the store by its size,
    /// which D6 (rates only) does not cover; printed so that an overlap can be told from one.
    pub(crate) wall_step: u128,
}

/// The host's wall clock minus its monotonic clock, in ns (read back to back).
fn wall_minus_mono() -> i128 {
    let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    wall as i128 - mono_ns() as i128
}

/// Writes the nodes' configuration, starts [`NODES`] node processes on `url` (through a fault
/// proxy each, starting in `link`, when there is a `server`), and waits for the first accepted
/// ledger write. `tag` makes the ledger's resource unique to the run. Shared by the fault suite
/// and the degraded-network runs (`degraded.rs`).
pub(crate) async fn setup(
    backend: &str,
    url: String,
    server: Option<Server>,
    ledger: Option<String>,
    skew: Option<Skew>,
    tag: &str,
    link: Modes,
) -> Suite {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut toml = format!(
        "[session]\nlease_duration = \"{}ms\"\nrenew_interval = \"{}ms\"\nretry_jitter = \"{}ms\"\n",
        LEASE.as_millis(),
        RENEW.as_millis(),
        JITTER.as_millis()
    );
    if let Some(k) = &skew {
        toml.push_str(&format!("drift = {}\nmargin = \"{}ms\"\n", k.drift, k.margin.as_millis()));
    }
    std::fs::write(dir.path().join("simba.toml"), toml).expect("config");
    let upstream = server.as_ref().map(|_| host_port(&url));
    if let Some(l) = &ledger {
        // A server ledger that is down would leave every node's job retrying its connection,
        // and the run would fail with "no leader" below: say what is wrong instead.
        let reach = tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect(host_port(l))).await;
        if !matches!(reach, Ok(Ok(_))) {
            panic!(
                "[{backend}] the ledger server at {l} is not reachable: the fault suite keeps the {backend} run's \
                 ledger there, apart from the store; start it with `eval \"$(bash scripts/backends.sh start)\"` \
                 (`bash scripts/backends.sh status` shows which server is down)"
            );
        }
    }
    let ledger = ledger.unwrap_or_else(|| dir.path().join("ledger.db").display().to_string());
    let ledger_id = format!("ledger-{backend}-{tag}-{}", std::process::id());
    let mut s =
        Suite { dir, url, ledger, ledger_id, upstream, server, nodes: Vec::new(), skew, link, spawned_from: mono_ns() };
    for _ in 0..NODES {
        let n = s.spawn().await;
        s.nodes.push(n);
    }
    let log = s.log();
    let start = mono_ns();
    let mut waited = 0;
    while first_accept_after(&log, start).is_none() {
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
        assert!(waited < 300, "[{backend}] no leader within 30 s of starting");
    }
    s
}

/// Runs the suite on `backend` at `url`. The ledger is the protected resource, apart from the
/// lease store: a PostgreSQL or Redis URL, or `None` for a SQLite file (a SQLite ledger is
/// locked by a writer that is paused mid-write, which would stall everyone, so server runs use
/// a server ledger).
///
/// `only` restricts the fault kinds (the persistent Redis run: server kills only), and
/// `default_count` is the number of faults when `SIMBA_FAULTS` is not set.
async fn run(
    backend: &str,
    url: String,
    server: Option<Server>,
    ledger: Option<String>,
    only: Option<&[Fault]>,
    default_count: usize,
    skew: Option<Skew>,
) {
    assert!(
        skew.is_none() || server.is_some(),
        "[{backend}] a clock-rate skew needs a server backend: SQLite's clock is inside each node process, and libfaketime would skew it too"
    );
    let _serial = SERIAL.lock().await;
    let count: usize = std::env::var("SIMBA_FAULTS").ok().and_then(|s| s.parse().ok()).unwrap_or(default_count);
    let seed: u64 = std::env::var("SIMBA_FAULT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    eprintln!("[{backend}] {count} faults, seed {seed} (SIMBA_FAULT_SEED={seed} reproduces the sequence)");
    if let Some(k) = &skew {
        eprintln!(
            "[{backend}] nodes' clocks at x{} under {} (FAKETIME=\"+0 x{}\"), drift {}, margin {:?}",
            k.rate,
            k.lib.display(),
            k.rate,
            k.drift,
            k.margin
        );
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut s = setup(backend, url, server, ledger, skew.clone(), &format!("{seed:x}"), Modes::default()).await;
    let log = s.log();
    let spawned_from = s.spawned_from;
    let mut kinds = vec![Fault::NodeKill, Fault::NodePause];
    if s.server.is_some() {
        kinds.extend([Fault::ServerPause, Fault::LinkCut, Fault::LinkBlackHole]);
        if !s.server.as_ref().is_some_and(|x| x.volatile) {
            kinds.push(Fault::ServerKill);
        }
    }
    if let Some(only) = only {
        kinds.retain(|k| only.contains(k));
        assert!(!kinds.is_empty(), "[{backend}] none of {only:?} applies to this backend");
    }
    if let Ok(wanted) = std::env::var("SIMBA_FAULT_KINDS") {
        kinds.retain(|k| wanted.split(',').any(|w| w.trim() == format!("{k:?}")));
        assert!(!kinds.is_empty(), "[{backend}] SIMBA_FAULT_KINDS={wanted}: none of these kinds applies here");
    }
    // A pause or a cut lasts the failover bound: longer than the lease, so the others take
    // over while it lasts (it was 1.5 leases, 0.35 s more per fault: with it the test command
    // ran 47-51 minutes on 2 cores).
    let hold = bound();
    let mut report = Report::default();
    let mut offset = wall_minus_mono();
    for i in 0..count {
        s.assert_nodes_run(backend);
        let fault = kinds[rng.random_range(0..kinds.len())];
        // Two faults in three hit the current leader (the node of the latest accepted write).
        let leader = leader(&log);
        let leader_idx = leader.and_then(|pid| s.nodes.iter().position(|n| n.child.id() == pid));
        let victim = match leader_idx {
            Some(l) if rng.random_range(0..3) < 2 => l,
            _ => rng.random_range(0..NODES),
        };
        let began = mono_ns();
        let victim_pid = s.nodes[victim].child.id();
        fault_log(&format!("[{backend}] fault {i} {fault:?} starts (node pid {victim_pid}, leader pid {leader:?})"));
        match fault {
            Fault::NodeKill => {
                let pid = s.nodes[victim].child.id();
                assert!(nix_kill(pid, "KILL"));
                let _ = s.nodes[victim].child.wait();
                let n = s.spawn().await;
                s.nodes[victim] = n;
            }
            Fault::NodePause => {
                let pid = s.nodes[victim].child.id();
                assert!(nix_kill(pid, "STOP"));
                tokio::time::sleep(hold).await;
                assert!(nix_kill(pid, "CONT"));
            }
            Fault::ServerKill => {
                let srv = s.server.as_ref().expect("server");
                signal_server(srv, "KILL");
                tokio::time::sleep(Duration::from_millis(200)).await;
                restart_server(srv);
            }
            Fault::ServerPause => {
                let srv = s.server.as_ref().expect("server");
                signal_server(srv, "STOP");
                tokio::time::sleep(hold).await;
                signal_server(srv, "CONT");
            }
            Fault::LinkCut | Fault::LinkBlackHole => {
                let mode = if fault == Fault::LinkCut { Mode::Cut } else { Mode::BlackHole };
                let p = s.nodes[victim].proxy.as_ref().expect("proxy");
                p.set(mode);
                tokio::time::sleep(hold).await;
                p.restore();
            }
        }
        // Wait for a leader's accepted write that started after the fault ended.
        let restored = mono_ns();
        fault_log(&format!("[{backend}] fault {i} {fault:?} ends"));
        if matches!(fault, Fault::NodeKill | Fault::NodePause | Fault::LinkCut | Fault::LinkBlackHole) {
            report.hits.push((fault, began, restored, victim_pid));
        }
        let mut back = None;
        for _ in 0..400 {
            if let Some(t) = first_accept_after(&log, restored) {
                back = Some(t);
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let Some(back) = back else { panic!("[{backend}] fault {i} ({fault:?}): no leader within 10 s of its end") };
        let after_end = Duration::from_nanos(back.saturating_sub(restored) as u64);
        fault_log(&format!("[{backend}] fault {i} {fault:?}: an accepted write {after_end:?} after its end"));
        report.windows.push((fault, began, restored, back));
        *report.faults.entry(fault).or_default() += 1;
        let w = report.worst.entry(fault).or_default();
        *w = (*w).max(after_end);
        // Let the cluster settle before the next fault (a restarted node opens its session).
        tokio::time::sleep(Duration::from_millis(150)).await;
        let now = wall_minus_mono();
        let step = now.abs_diff(offset);
        if step > 50_000_000 {
            fault_log(&format!(
                "[{backend}] the wall clock moved {:.1} ms against the monotonic one",
                step as f64 / 1e6
            ));
        }
        report.wall_step = report.wall_step.max(step);
        offset = now;
    }
    s.assert_nodes_run(backend);
    drop(std::mem::take(&mut s.nodes));
    let s_is_file = s.server.is_none();
    check(backend, &log, &mut report);
    // A slow clock stretches the nodes' timers (renewal, retry, jitter) by 1 / rate on the
    // real clock; the store's expiry is not stretched.
    let stretch = skew.as_ref().map_or(1.0, |k| (1.0 / k.rate).max(1.0));
    print_report(backend, seed, count, &report, stretch);
    crate::checker::check_run(backend, &s.history_log());
    if let Some(k) = &skew {
        check_clocks(backend, &log, k, spawned_from);
        let line = format!(
            "\nclock-rate skew: x{} (FAKETIME=\"+0 x{}\"), drift {}, margin {:?}: overlapping terms {} (expected {}), stale writes accepted {}, refused {}\n",
            k.rate,
            k.rate,
            k.drift,
            k.margin,
            report.overlaps,
            if k.expect_overlaps { "some" } else { "none" },
            report.stale_accepted,
            report.refused
        );
        eprintln!("{line}");
        if let Ok(path) = std::env::var("SIMBA_RELIABILITY_OUT") {
            use std::io::Write;
            if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
                let _ = f.write_all(line.as_bytes());
            }
        }
    }
    assert_eq!(report.stale_accepted, 0, "[{backend}] the ledger accepted stale writes");
    if skew.as_ref().is_some_and(|k| k.expect_overlaps) {
        // The other side of D6: with drift below the real skew, the harness must see terms
        // that overlap on the real clock, or its check could not see what drift guards against.
        assert!(
            report.overlaps > 0,
            "[{backend}] drift {} below the clock's skew x{}: the run observed no overlapping terms",
            skew.as_ref().map_or(0.0, |k| k.drift),
            skew.as_ref().map_or(1.0, |k| k.rate)
        );
    } else {
        assert_eq!(report.overlaps, 0, "[{backend}] two terms were valid at once");
    }
    assert_eq!(report.token_regressions, 0, "[{backend}] tokens went backwards");
    assert_eq!(report.unended_not_last, 0, "[{backend}] a node went on after a term without logging its end");
    // Item 4 of issue 16: every fault's time back to an accepted write, from the fault's end
    // (all kinds) and from its start (node and link faults), within its bound.
    for (what, worst) in [("end", &report.worst), ("start", &report.worst_from_start)] {
        for (f, w) in worst {
            // SQLite: the store is a file that the node processes lock. A node stopped inside
            // a write transaction holds the write lock, so its pause stops the store for
            // everyone, as a server pause does: held to the bound from its end only.
            if s_is_file && *f == Fault::NodePause && what == "start" {
                continue;
            }
            let b = fault_bound(*f).mul_f64(stretch);
            assert!(
                *w <= b,
                "[{backend}] {f:?}: an accepted write {w:?} after the fault's {what}, over its bound {b:?} \
                 (failover bound {:?}{} + {ALLOWANCE:?})",
                bound(),
                if *f == Fault::ServerKill { format!(" + renewal {RENEW:?}") } else { String::new() }
            );
        }
    }
}

pub(crate) fn check(_backend: &str, log: &Path, r: &mut Report) {
    let logs = read_logs(log);
    for (f, began, restored, victim) in &r.hits {
        let next = next_write(&logs, *began, *restored, *victim);
        // Nobody wrote before the run ended: nothing to measure (the wait for a write after
        // each fault's end has failed the run already).
        if let Some(t) = next {
            let d = r.worst_from_start.entry(*f).or_default();
            *d = (*d).max(Duration::from_nanos(t.saturating_sub(*began) as u64));
        }
    }
    let mut ends: Vec<u128> = logs.writes.iter().filter(|w| w.3).map(|w| w.1).collect();
    ends.sort_unstable();
    for (f, began, _restored, back) in &r.windows {
        // The last accepted write before the fault, then every one up to the first after it.
        let before = ends.iter().rev().find(|e| *e <= began).copied().unwrap_or(*began);
        let mut prev = before;
        let mut gap = 0u128;
        for e in ends.iter().filter(|e| **e > before && **e <= *back) {
            gap = gap.max(e - prev);
            prev = *e;
        }
        let g = r.worst_gap.entry(*f).or_default();
        *g = (*g).max(Duration::from_nanos(gap as u64));
    }
    r.terms = logs.terms.len();
    r.ended = logs.terms.keys().filter(|k| logs.ended.contains(k)).count();
    // A term's node process: its PID and which process of that PID it was.
    let process = |k: &(u32, u64)| (k.0, logs.process.get(k).copied().unwrap_or(0));
    let mut last: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    for k in logs.terms.keys() {
        let l = last.entry(process(k)).or_default();
        *l = (*l).max(k.1);
    }
    r.unended_not_last = logs
        .terms
        .keys()
        .filter(|k| !logs.ended.contains(k) && last.get(&process(k)).is_some_and(|l| *l != k.1))
        .count();
    let mut writes = logs.writes.clone();
    writes.sort_by_key(|w| w.1);
    r.writes = writes.len();
    r.refused = writes.iter().filter(|w| !w.3).count();
    // A write accepted although a higher token had been accepted by a write that ended before
    // it started is a stale write.
    let accepted: Vec<_> = writes.iter().filter(|w| w.3).collect();
    for w in &accepted {
        let higher_before = accepted.iter().any(|a| a.1 < w.0 && a.2 > w.2);
        if higher_before {
            r.stale_accepted += 1;
        }
    }
    let mut terms: Vec<(u128, u128, u64, u32)> =
        logs.terms.iter().map(|((pid, tok), (s, e))| (*s, *e, *tok, *pid)).collect();
    terms.sort();
    for (i, a) in terms.iter().enumerate() {
        for b in &terms[i + 1..] {
            if b.0 < a.1 && b.2 != a.2 {
                r.overlaps += 1;
                eprintln!(
                    "overlap: token {} (pid {}) valid until {} ({}) and token {} (pid {}) from {} ({:.1} ms both valid)",
                    a.2,
                    a.3,
                    a.1,
                    if logs.ended.contains(&(a.3, a.2)) {
                        "its end line"
                    } else {
                        "its last logged deadline: no end line"
                    },
                    b.2,
                    b.3,
                    b.0,
                    a.1.min(b.1).saturating_sub(b.0) as f64 / 1e6
                );
                explain_overlap(log, r, (a.3, a.2), (b.3, b.2), b.0.saturating_sub(3_000_000_000), a.1);
            }
        }
    }
    for w in terms.windows(2) {
        if w[1].2 <= w[0].2 {
            r.token_regressions += 1;
        }
    }
}

/// Prints what the log holds of two overlapping terms (their `term`, `valid` and `end`
/// lines, and their writes from `from` to `to`) and the faults injected from `from` to `to`:
/// enough to tell a harness artefact from a real overlap once the run's temporary directory
/// is gone.
fn explain_overlap(log: &Path, r: &Report, a: (u32, u64), b: (u32, u64), from: u128, to: u128) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let pid = f.last().and_then(|s| s.parse::<u32>().ok());
        let num = |i: usize| f.get(i).and_then(|s| s.parse::<u128>().ok());
        let token = match f.first().copied() {
            Some("term" | "valid" | "end") => num(1),
            Some("write") if num(1).is_some_and(|t| t >= from && t <= to) => num(3),
            _ => None,
        };
        if let (Some(pid), Some(token)) = (pid, token)
            && ((pid, token as u64) == a || (pid, token as u64) == b)
        {
            eprintln!("  {line}");
        }
    }
    for (f, began, restored, back) in r.windows.iter().filter(|w| w.1 <= to && w.3 >= from) {
        eprintln!("  fault {f:?}: from {began} to {restored}, an accepted write at {back}");
    }
    for (f, began, restored, pid) in r.hits.iter().filter(|h| h.1 <= to && h.2 >= from) {
        eprintln!("  fault {f:?} hit pid {pid}: from {began} to {restored}");
    }
}

/// Every node measured the injected rate on Tokio's clock, against a host clock that is the
/// harness's own (its readings lie between the first spawn and now).
fn check_clocks(backend: &str, log: &Path, k: &Skew, spawned_from: u128) {
    let clocks = read_logs(log).clocks;
    assert!(clocks.len() >= NODES, "[{backend}] {} clock measurements, fewer than the {NODES} nodes", clocks.len());
    let now = mono_ns();
    let mut worst = 0.0f64;
    for (pid, r0, real, local) in &clocks {
        let measured = *local as f64 / *real as f64;
        assert!(
            (measured - k.rate).abs() <= 0.003 * k.rate,
            "[{backend}] node {pid}: Tokio's clock ran at x{measured:.4}, not the injected x{} (libfaketime did not reach it?)",
            k.rate
        );
        assert!(
            *r0 >= spawned_from && r0 + real <= now,
            "[{backend}] node {pid}: its host-clock reading {r0} is not between the first spawn {spawned_from} and now {now} (libfaketime reached rustix's clock?)"
        );
        worst = worst.max((measured - k.rate).abs());
    }
    eprintln!(
        "[{backend}] {} nodes measured Tokio's clock at x{} within {:.5} of the injection (the host clock read through rustix's vDSO path is the harness's)",
        clocks.len(),
        k.rate,
        worst
    );
}

fn print_report(backend: &str, seed: u64, count: usize, r: &Report, stretch: f64) {
    let mut out = format!(
        "\n### {backend}: {count} faults (seed {seed}), lease {:?}, failover bound {:?}\n\n| fault | injected | worst gap without an accepted write | worst time from the fault's start to an accepted write by a node it did not hit, or by the one it hit after its end | worst time from the fault's end to an accepted write | asserted bound |\n| --- | --- | --- | --- | --- | --- |\n",
        LEASE,
        bound()
    );
    for (f, n) in &r.faults {
        out.push_str(&format!(
            "| {f:?} | {n} | {:?} | {} | {:?} | {:?} |\n",
            r.worst_gap.get(f).copied().unwrap_or_default(),
            r.worst_from_start.get(f).map_or_else(|| "-".to_owned(), |d| format!("{d:?}")),
            r.worst.get(f).copied().unwrap_or_default(),
            fault_bound(*f).mul_f64(stretch)
        ));
    }
    out.push_str(&format!(
        "\nterms: {}, ledger writes: {} ({} refused as stale), stale writes accepted: {}, overlapping terms: {}, token regressions: {}\n",
        r.terms, r.writes, r.refused, r.stale_accepted, r.overlaps, r.token_regressions
    ));
    out.push_str(&format!(
        "terms that logged their end: {} of {} (the others' nodes were killed, or held the lease when the run ended); without one although their node went on: {}\n",
        r.ended, r.terms, r.unended_not_last
    ));
    out.push_str(&format!(
        "largest wall-clock step against the monotonic clock between two faults: {:.1} ms\n",
        r.wall_step as f64 / 1e6
    ));
    eprintln!("{out}");
    if let Ok(path) = std::env::var("SIMBA_RELIABILITY_OUT") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = f.write_all(out.as_bytes());
        }
    }
}

pub(crate) fn wanted(backend: &str) -> bool {
    std::env::var("SIMBA_FAULT_BACKENDS").map_or(true, |v| v.split(',').any(|b| b.trim() == backend))
}

pub(crate) fn server(name: &'static str, var: &str, volatile: bool) -> Option<Server> {
    let pidfile = std::env::var(var).ok()?;
    Some(Server { name, pidfile: pidfile.into(), volatile })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_sqlite() {
    if !wanted("sqlite") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("simba.db").display());
    if std::env::var_os("SIMBA_FAULT_CLOCK_RATE").is_some() {
        // SQLite's clock is `unixepoch()` inside each node process: libfaketime would skew
        // the store's clock with the node's, differently in each process.
        eprintln!("SKIPPED: SIMBA_FAULT_CLOCK_RATE needs a server backend, not SQLite");
        return;
    }
    run("sqlite", url, None, None, None, 100, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_postgres() {
    if !wanted("postgres") {
        return;
    }
    let Some(url) = server_url("SIMBA_TEST_POSTGRES_URL") else { return };
    run(
        "postgres",
        url.clone(),
        server("postgres", "SIMBA_TEST_POSTGRES_PIDFILE", false),
        Some(url),
        None,
        100,
        env_skew(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_redis() {
    if !wanted("redis") {
        return;
    }
    let Some(url) = server_url("SIMBA_TEST_REDIS_URL") else { return };
    // Without persistence a Redis restart loses every token (documented in the README): the
    // suite pauses and cuts Redis but does not kill it.
    run("redis", url.clone(), server("redis", "SIMBA_TEST_REDIS_PIDFILE", true), Some(url), None, 100, env_skew())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_zookeeper() {
    if !wanted("zookeeper") {
        return;
    }
    let Some(url) = server_url("SIMBA_TEST_ZK_URL") else { return };
    let ledger = server_url("SIMBA_TEST_POSTGRES_URL");
    run("zookeeper", url, server("zk", "SIMBA_TEST_ZK_PIDFILE", false), ledger, None, 100, env_skew()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_etcd() {
    if !wanted("etcd") {
        return;
    }
    let Some(url) = server_url("SIMBA_TEST_ETCD_URL") else { return };
    // etcd keeps its data across a kill -9 (its revisions, so the tokens, only grow): every
    // fault kind, the server kill included.
    let ledger = server_url("SIMBA_TEST_POSTGRES_URL");
    run("etcd", url, server("etcd", "SIMBA_TEST_ETCD_PIDFILE", false), ledger, None, 100, env_skew()).await;
}

/// MariaDB (issue 16, item 3): every fault kind, the server kill included (InnoDB keeps the
/// committed lease rows across a kill -9). The ledger is on PostgreSQL, apart from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_mysql() {
    if !wanted("mysql") {
        return;
    }
    let Some(url) = server_url("SIMBA_TEST_MYSQL_URL") else { return };
    let ledger = server_url("SIMBA_TEST_POSTGRES_URL");
    run("mysql", url, server("mysql", "SIMBA_TEST_MYSQL_PIDFILE", false), ledger, None, 100, env_skew()).await;
}

/// Redis with persistence (issue 16, item 3): `appendonly yes`, `appendfsync always` (the
/// `redis-persistent` server of scripts/backends.sh). A kill -9 and restart must lose no
/// token: the run checks that tokens never go backwards across server kills, and that no
/// stale write gets through. Server kills only (the other kinds run on the plain Redis),
/// 25 by default to keep the test command short; `SIMBA_FAULTS` sets more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_redis_persistent() {
    if !wanted("redis-persistent") {
        return;
    }
    let Some(url) = server_url("SIMBA_TEST_REDIS_PERSISTENT_URL") else { return };
    let server = server("redis-persistent", "SIMBA_TEST_REDIS_PERSISTENT_PIDFILE", false);
    run("redis-persistent", url.clone(), server, Some(url), Some(&[Fault::ServerKill]), 25, env_skew()).await;
}

/// The skew `SIMBA_FAULT_CLOCK_RATE` asks for, if any, on the backend tests above.
fn env_skew() -> Option<Skew> {
    Skew::from_env(None, false).unwrap_or_else(|e| panic!("{e}"))
}

/// The skew a clock-skew test runs with; `None` (the test returns) when libfaketime is not
/// installed outside CI. Under `CI=true` a missing library fails the test.
fn test_skew(rate: f64, drift: f64, expect_overlaps: bool) -> Option<Skew> {
    match Skew::from_env(Some((rate, drift)), expect_overlaps) {
        Ok(k) => k,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("{e}"),
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            None
        }
    }
}

/// Issue 16 item 1, the safe side of D6: the nodes' clocks run 3% slow (libfaketime), their
/// `drift` is 0.05 and their `margin` 0, on Redis (the store's clock is the server's) with
/// every Redis fault kind: 0 overlapping terms on the real clock, 0 stale writes. 20 faults by
/// default (`SIMBA_FAULTS`); `SIMBA_FAULT_CLOCK_RATE=1.03` runs a fast clock, and the other
/// knobs of the module doc apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_skew_slow_redis() {
    if !wanted("redis-skew") {
        return;
    }
    let Some(url) = server_url("SIMBA_TEST_REDIS_URL") else { return };
    let Some(skew) = test_skew(0.97, 0.05, false) else { return };
    run("redis-skew", url.clone(), server("redis", "SIMBA_TEST_REDIS_PIDFILE", true), Some(url), None, 20, Some(skew))
        .await;
}

/// Issue 16 item 1, the other side: the same 3% slow clock with `drift = 0.01` (and margin 0).
/// A holder whose link is cut or black-holed believes itself valid until its local deadline,
/// which comes about 2% of the lease (~30 ms) after Redis expired its session; a contender
/// that retries in that window takes the lease while the old holder still counts itself
/// valid. The run ASSERTS that it observed such overlapping terms (and still 0 stale writes
/// accepted: the fence refuses the old token). Ignored in the test command (each fault shows
/// an overlap only when a contender's retry, every 200-400 ms, falls in the ~30 ms window:
/// 3 in 40 and 8 in 60 in the runs of RELIABILITY.md, "Clock-rate skew", and its log); run it with `--ignored`: 60 link faults by
/// default, so that a run without one is rare (about 1% at the lower rate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "expected-to-overlap demonstration, a documented command (RELIABILITY.md)"]
async fn clock_skew_overlaps_redis() {
    if !wanted("redis-skew") {
        return;
    }
    let Some(url) = server_url("SIMBA_TEST_REDIS_URL") else { return };
    let Some(skew) = test_skew(0.97, 0.01, true) else { return };
    let server = server("redis", "SIMBA_TEST_REDIS_PIDFILE", true);
    run("redis-skew", url.clone(), server, Some(url), Some(&[Fault::LinkCut, Fault::LinkBlackHole]), 60, Some(skew))
        .await;
}

/// The harness's reading of the node log: a term ends at its `end` line when there is one
/// (before or past its last logged deadline), at its last logged deadline otherwise; overlaps
/// are counted on those intervals. No server needed.
#[test]
fn read_logs_ends_a_term_at_its_end_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("nodes.log");
    let lines = [
        // 1 (pid 10): revoked at 150, before its last logged deadline 400.
        "term 1 100 10",
        "valid 1 400 10",
        "end 1 150 10",
        // 2 (pid 11): renewed after its last `valid` line, revoked at 500.
        "term 2 200 11",
        "valid 2 300 11",
        "end 2 500 11",
        // 3 (pid 12): its node killed, no `end`: valid until its last logged deadline, 900.
        "term 3 600 12",
        "valid 3 700 12",
        "valid 3 900 12",
        // 4 (pid 10) starts at 800, inside 3's interval.
        "term 4 800 10",
        "valid 4 1000 10",
    ];
    std::fs::write(&log, lines.join("\n") + "\n").expect("write the log");
    let logs = read_logs(&log);
    assert_eq!(logs.terms[&(10, 1)], (100, 150));
    assert_eq!(logs.terms[&(11, 2)], (200, 500));
    assert_eq!(logs.terms[&(12, 3)], (600, 900));
    assert_eq!(logs.ended.len(), 2);
    let mut r = Report::default();
    check("test", &log, &mut r);
    // 2 (200-500) overlaps 1 (100-150)? No. 3 (600-900) and 4 (800-): yes, once.
    assert_eq!((r.terms, r.ended, r.overlaps, r.token_regressions, r.unended_not_last), (4, 2, 1, 0, 0));
    // A node that logged a later term after one without an `end` line lived on after it.
    let mut more = lines.join("\n");
    more.push_str("\nterm 5 1100 12\n");
    std::fs::write(&log, more).expect("write the log");
    let mut r = Report::default();
    check("test", &log, &mut r);
    assert_eq!(r.unended_not_last, 1, "term 3 of pid 12 is not its last any more");
    // Unless the later term is another process's that got the same PID (PIDs wrap): node 12
    // was killed during term 3, and a new node 12 logged term 5.
    let mut reused = vec!["node 0 12"];
    reused.extend(lines.iter().copied());
    reused.extend(["node 1050 12", "term 5 1100 12"]);
    std::fs::write(&log, reused.join("\n") + "\n").expect("write the log");
    let mut r = Report::default();
    check("test", &log, &mut r);
    assert_eq!(r.unended_not_last, 0, "term 3 was the last of the first process with PID 12");
}
