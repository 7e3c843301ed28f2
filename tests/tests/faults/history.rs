//! The multi-process history check of issues 12 and 38 ("Done when"): three
//! `simba-history-node` processes on one SQLite file and, at the same time, three on one
//! PostgreSQL database, each with `[history] retention = 10000` and every job's history
//! prefilled to 9,990 records (so that every write trims at full retention), a 1.5 s lease
//! renewed every 500 ms, and four jobs: `slow` (a 400 ms cron run every second), `ledger` (a
//! 100 ms fixed-rate job writing its fencing token to a fenced ledger), `flaky` (a 2 s cron job
//! with `retry = 2`, `backoff = "100ms"`, `timeout = "400ms"` whose slots fail once, outlive the
//! timeout once, or fail every attempt) and `parts` (a 12-partition group).
//!
//! The test kills the node running a slot of `slow` with SIGKILL in the middle of the run and
//! starts it again, stops (SIGSTOP) the next holder for longer than its lease, asks for runs
//! now and pauses then resumes `slow` with the `simba` tool (a run-now request made while
//! paused runs after the resume), stops the ledger's holder with SIGTERM and starts it again,
//! waits for the partitions to spread 4/4/4, stops the nodes, and reads `simba history --json`.
//! Then:
//! - every whole second of the window has exactly one scheduled record of `slow` (ran, or
//!   cancelled, missed or declined only inside a fault window) except while paused, where none
//!   has; no slot ran twice (the nodes' own logs); every `ran` record ran where it says;
//! - the killed run was closed `cancelled` by the next holder (abandoned), the failover after
//!   the kill left missed slots, and no record is left `running`;
//! - every run-now request ran once, on the node holding the term; nothing ran while paused;
//! - every slot of `flaky` has one record whose attempt is the last attempt the nodes ran, and
//!   outside the fault windows it ended as its slot's mode says (`ran` at attempt 2 after one
//!   failure or one timeout, `failed` at attempt 3);
//! - failovers of `slow` and `ledger` stay within the bound (`lease + renew / 2 + jitter`, plus
//!   500 ms for two busy cores and the job's period), except after a SIGSTOP of a process that
//!   held the SQLite file's write lock when it was stopped: `/proc/locks` shows it (a POSIX
//!   write lock on byte 120 of the `-shm` file, SQLite's WAL write lock), and every node then
//!   waits for that process (README, "SQLite");
//! - the fenced ledger refused no write of a current holder and accepted none of a stale one;
//! - the partitions end 4/4/4, and each job keeps at most `retention` records.

#![allow(clippy::print_stderr)] // The record tables and figures are printed.

mod logs;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use simba::backend::namespace::Namespace;
use simba::job_store::{Outcome, RunRecord, SharedJobStore};
use simba::{Simba, SimbaConfig};
use simba_tests::node_log::mono_ns;

use self::logs::{Logs, holds_wal_write_lock, stopped};
use crate::nodes::{self, Node, exited, signal};

const NODES: [&str; 3] = ["a", "b", "c"];
const LEASE: Duration = Duration::from_millis(1500);
const RENEW: Duration = Duration::from_millis(500);
const JITTER: Duration = Duration::from_millis(350);
/// `lease_duration + renew_interval / 2 + retry_jitter` ([`SimbaConfig::failover_bound`]).
const BOUND: Duration = Duration::from_millis(1500 + 250 + 350);
/// What a failover may take beyond [`BOUND`]: the job's own period and two busy cores.
const SLACK: Duration = Duration::from_millis(500);
const RETENTION: usize = 10_000;
/// Records per job written before the nodes start: every write of the run trims.
const PREFILL: usize = RETENTION - 10;
/// The jobs with a history, and their periods (ms).
const JOBS: [(&str, i64); 3] = [("slow", 1000), ("ledger", 100), ("flaky", 2000)];

/// One backend's run: its directory (config, node logs), store URL and ledger.
struct Setup {
    dir: PathBuf,
    url: String,
    ledger: String,
    label: &'static str,
    /// The SQLite store's and ledger's files, whose write locks a stopped process may hold.
    sqlite_files: Vec<PathBuf>,
    /// The namespace of this run (`[backend] namespace`), on a store shared with earlier runs.
    namespace: Option<String>,
}

impl Setup {
    /// The tool's arguments that name this run's store and namespace.
    fn target(&self) -> Vec<&str> {
        let mut args = vec!["--backend", self.url.as_str()];
        if let Some(ns) = &self.namespace {
            args.extend(["--namespace", ns.as_str()]);
        }
        args
    }

    fn spawn(&self, name: &'static str) -> Node {
        let envs = [
            ("SIMBA_HISTORY_LOG", self.dir.join("history.log").into_os_string()),
            ("SIMBA_LEDGER", self.ledger.clone().into()),
            ("SIMBA_LEDGER_ID", "history".into()),
            ("RUST_LOG", "warn".into()),
        ];
        nodes::spawn(env!("CARGO_BIN_EXE_simba-history-node"), &self.dir, name, envs)
    }

    fn logs(&self) -> Logs {
        Logs::read(&self.dir, &NODES)
    }

    /// The last lines each node wrote to its stderr, for a failure message.
    fn stderr_tail(&self) -> String {
        nodes::stderr_tail(&self.dir, self.label, &NODES, 12)
    }
}

/// Runs the tool in-process: `(exit code, stdout and stderr)`.
async fn simba(args: &[&str]) -> (u8, String) {
    let mut argv = vec!["simba".to_owned()];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    // On a task of its own: a fresh worker stack for the tool's call chain, whose debug-build
    // frames on top of this scenario's overflowed the test thread's 2 MiB stack once.
    let run = tokio::spawn(async move {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = simba_cli::run(argv, &mut out, &mut err).await;
        (code, String::from_utf8_lossy(&out).into_owned() + &String::from_utf8_lossy(&err))
    });
    run.await.expect("the tool's task")
}

/// An operator's command (`pause`, `resume`, `trigger`), which must succeed.
async fn operator(s: &Setup, cmd: &str, job: &str) {
    let mut args = s.target();
    args.extend([cmd, job]);
    let started = Instant::now();
    let (code, out) = simba(&args).await;
    assert_eq!(code, 0, "{}: simba {cmd} {job} failed: {out}", s.label);
    eprintln!("{}: simba {cmd} {job} took {:?}", s.label, started.elapsed());
}

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

/// `job`'s newest `limit` records, oldest first, as `simba history JOB --json` prints them.
async fn history(s: &Setup, job: &str, limit: usize) -> Vec<Rec> {
    let limit = limit.to_string();
    let mut args = s.target();
    args.extend(["history", job, "--limit", &limit, "--json"]);
    let (code, out) = simba(&args).await;
    assert_eq!(code, 0, "simba history {job}: {out}");
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

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn table(recs: &[Rec]) -> String {
    recs.iter()
        .map(|r| {
            format!("{} {:9} {:9} #{} {} {} {}\n", r.slot_ms, r.kind, r.outcome, r.attempt, r.node, r.token, r.error)
        })
        .collect()
}

/// Polls `slow`'s newest records (those of this run) until `f` holds.
async fn wait_for(s: &Setup, t0: i64, what: &str, within: Duration, f: impl Fn(&[Rec]) -> bool) -> Vec<Rec> {
    let start = Instant::now();
    loop {
        let mut h = history(s, "slow", 200).await;
        h.retain(|r| r.slot_ms >= t0);
        if f(&h) {
            return h;
        }
        assert!(
            start.elapsed() < within,
            "{}: {what}: not within {within:?}\n{}{}",
            s.label,
            table(&h),
            s.stderr_tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until 700 ms into an odd second, when neither `slow` (400 ms from each second) nor
/// `flaky` (from each even second) has a run in flight: a run that a graceful stop ends early
/// returns `ensure_valid`'s error, which records the slot `failed` when the job returns
/// `anyhow::Result` (the decline is not seen through anyhow's box).
async fn quiet_moment() {
    let wait = (1700 - now_ms().rem_euclid(2000)).rem_euclid(2000);
    tokio::time::sleep(Duration::from_millis(wait as u64)).await;
}

/// Waits (at most 30 s) until the live nodes hold the 12 partitions 4/4/4, none twice.
async fn balanced(s: &Setup, nodes: &[Node], what: &str) -> Duration {
    let start = Instant::now();
    loop {
        let live: Vec<u32> = nodes.iter().map(|n| n.child.id()).collect();
        let (shares, distinct) = s.logs().shares(&live);
        if shares == [4, 4, 4] && distinct {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{}: {what}: partitions not 4/4/4 within 30 s (held {shares:?}, none twice: {distinct})\n{}",
            s.label,
            s.stderr_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Fills each job's history to [`PREFILL`] records older than the run, through the jobs store
/// in the run's namespace: on the SQL stores the first record (which creates the tables) and
/// one SQL statement for the rest; elsewhere record by record.
async fn prefill(s: &Setup) {
    let started = Instant::now();
    let ns = s.namespace.as_deref().map(|n| Namespace::new(n).expect("a valid namespace"));
    let client =
        Simba::connect_in(&s.url, ns.clone(), SimbaConfig::default()).await.expect("connect to prefill the history");
    // At the run's retention: the store's own (the default) would trim every append to it.
    let store = client.job_store().expect("the backend has a jobs store").keeping(RETENTION);
    let base = now_ms() - 60_000;
    for (job, period) in JOBS {
        let record = |n: i64| {
            let mut rec = RunRecord::not_run(job, base - n * period, Outcome::Ran);
            (rec.attempt, rec.attempts, rec.node) = (1, 1, "prefill".to_owned());
            (rec.started_ms, rec.ended_ms) = (Some(rec.slot_ms), Some(rec.slot_ms + 1));
            rec
        };
        assert!(store.append(&record(0)).await.expect("append the first record"), "{job}: a record existed");
        if ["sqlite", "postgres", "mysql"].iter().any(|scheme| s.url.starts_with(scheme)) {
            let stored = ns.as_ref().map_or_else(|| job.to_owned(), |n| n.map(job));
            prefill_sql(s, &stored, period).await;
        } else {
            // Eight writers at a time, but one on ZooKeeper, whose store lists a job's records
            // again whenever another writer changed them.
            let writers_n = if s.url.starts_with("zk") { 1 } else { 8 };
            let mut writers = tokio::task::JoinSet::new();
            for w in 0..writers_n {
                let recs = (1..PREFILL as i64).filter(|n| n % writers_n == w).map(record).collect();
                let store = store.clone();
                writers.spawn(append_all(store, recs));
            }
            writers.join_all().await;
        }
        let kept = store.history(job, RETENTION).await.expect("read the prefilled history").len();
        assert_eq!(kept, PREFILL, "{}: {job} prefilled", s.label);
    }
    client.close().await;
    eprintln!("{}: history prefilled to {PREFILL} records per job in {:?}", s.label, started.elapsed());
}

/// Appends `recs` one after the other, each tried up to 5 times while the store is unavailable.
async fn append_all(store: SharedJobStore, recs: Vec<RunRecord>) {
    for rec in recs {
        let mut tries = 0;
        loop {
            tries += 1;
            match store.append(&rec).await {
                Ok(inserted) => {
                    assert!(inserted, "{} {}: a record existed", rec.job, rec.slot_ms);
                    break;
                }
                Err(simba::backend::BackendError::Unavailable { .. }) if tries < 5 => {
                    tokio::time::sleep(Duration::from_millis(20 * tries)).await;
                }
                Err(e) => panic!("prefill {} {} (try {tries}): {e}", rec.job, rec.slot_ms),
            }
        }
    }
}

/// Copies `job`'s one record (`job` as stored: in the run's namespace) [`PREFILL`]` - 1`
/// times, `period` ms apart, with one SQL statement.
async fn prefill_sql(s: &Setup, job: &str, period: i64) {
    let columns =
        "job, kind, slot_ms, outcome, attempt, attempts, session_id, node, token, started_ms, ended_ms, error";
    let copies = format!(
        "r.job, r.kind, r.slot_ms - s.n * {period}, r.outcome, r.attempt, r.attempts, r.session_id, r.node, \
         r.token, r.started_ms - s.n * {period}, r.ended_ms - s.n * {period}, r.error"
    );
    let n = PREFILL - 1;
    if s.url.starts_with("sqlite") {
        let opts: sqlx::sqlite::SqliteConnectOptions = s.url.parse().expect("SQLite URL");
        let pool = sqlx::SqlitePool::connect_with(opts.busy_timeout(Duration::from_secs(5))).await.expect("open");
        let sql = format!(
            "INSERT INTO simba_job_run ({columns}) WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s \
             WHERE n < {n}) SELECT {copies} FROM simba_job_run r, s WHERE r.job = ?1"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql)).bind(job).execute(&pool).await.expect("prefill on SQLite");
        pool.close().await;
    } else if s.url.starts_with("mysql") {
        // 0..9999 from four digit tables (no recursion limit to meet).
        let digit = "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL \
                     SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)";
        let sql = format!(
            "INSERT INTO simba_job_run ({columns}) SELECT {copies} FROM simba_job_run r, (SELECT a.d + 10 * b.d + \
             100 * c.d + 1000 * e.d + 1 AS n FROM {digit} a, {digit} b, {digit} c, {digit} e) s \
             WHERE r.job = ? AND s.n <= {n}"
        );
        let pool = sqlx::MySqlPool::connect(&s.url).await.expect("connect to MySQL");
        sqlx::query(sqlx::AssertSqlSafe(sql)).bind(job).execute(&pool).await.expect("prefill on MySQL");
        pool.close().await;
    } else {
        let pool = sqlx::PgPool::connect(&s.url).await.expect("connect to PostgreSQL");
        let sql = format!(
            "INSERT INTO simba_job_run ({columns}) SELECT {copies} FROM simba_job_run r, \
             generate_series(1, {n}) AS s(n) WHERE r.job = $1"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql)).bind(job).execute(&pool).await.expect("prefill on PostgreSQL");
        pool.close().await;
    }
}

/// A fault: what, on which process, when (host monotonic ns and wall ms), until when (wall),
/// and why its failover is exempt from the bound, if it is.
#[derive(Debug)]
struct Fault {
    what: &'static str,
    pid: u32,
    mono: u128,
    wall: i64,
    until: i64,
    exempt: Option<String>,
}

/// Issues 12 and 38 ("Done when"): history at full retention across kill -9, SIGSTOP, SIGTERM,
/// run now and pause, on SQLite and PostgreSQL at the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_slot_is_accounted_for_once_at_full_retention_across_faults_and_the_operator() {
    let _serial = crate::SERIAL.lock().await;
    let sqlite = async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("simba.db");
        let ledger = dir.path().join("ledger.db");
        let s = Setup {
            dir: dir.path().to_owned(),
            url: format!("sqlite://{}", db.display()),
            ledger: ledger.display().to_string(),
            label: "SQLite",
            sqlite_files: vec![db, ledger],
            namespace: None,
        };
        check(&s).await;
    };
    // Each run gets a PostgreSQL database of its own, dropped at the end, so no record of an
    // earlier run counts.
    let postgres = async move {
        let Some(server) = simba_tests::server_url("SIMBA_TEST_POSTGRES_URL") else { return };
        let admin = sqlx::PgPool::connect(&server).await.expect("connect to the PostgreSQL test server");
        let database = format!("simba_history_{:016x}", rand::random::<u64>());
        simba_tests::servers::exec(&admin, format!("CREATE DATABASE {database}")).await;
        let user = server.split_once("://").and_then(|(_, r)| r.split_once('@')).map_or("postgres", |(u, _)| u);
        let url = simba_tests::servers::url_for("postgres", &server, user, &database);
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Setup {
            dir: dir.path().to_owned(),
            ledger: url.clone(),
            url,
            label: "PostgreSQL",
            sqlite_files: Vec::new(),
            namespace: None,
        };
        check(&s).await;
        simba_tests::servers::exec(&admin, format!("DROP DATABASE {database} WITH (FORCE)")).await;
    };
    // Each store on a task of its own (a worker's fresh stack, not the test thread's, under
    // the scenario's deep debug-build frames: the test thread overflowed once); a panic of
    // either is this test's, with its message.
    let (sqlite, postgres) = tokio::join!(tokio::spawn(sqlite), tokio::spawn(postgres));
    for ended in [sqlite, postgres] {
        if let Err(e) = ended {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

/// The stores besides SQLite and PostgreSQL, by their `scripts/backends.sh` names: the label
/// and the variable of the test server's URL.
const OTHER_STORES: [(&str, &str, &str); 4] = [
    ("mysql", "MySQL/MariaDB", "SIMBA_TEST_MYSQL_URL"),
    ("redis", "Redis", "SIMBA_TEST_REDIS_URL"),
    ("zk", "ZooKeeper", "SIMBA_TEST_ZK_URL"),
    ("etcd", "etcd", "SIMBA_TEST_ETCD_URL"),
];

/// The variable naming the stores of [`the_scenario_holds_on_the_other_stores`].
const STORES_VAR: &str = "SIMBA_HISTORY_STORES";

/// The scenario on a store whose server is shared with earlier runs (MySQL/MariaDB, Redis,
/// ZooKeeper, etcd): in a namespace of its own, so that no record of an earlier run counts,
/// with the fenced ledger in a SQLite file of the run's own.
async fn on_server(name: &str) {
    let (_, label, var) = OTHER_STORES
        .iter()
        .find(|(n, ..)| *n == name)
        .unwrap_or_else(|| panic!("{STORES_VAR}: unknown store {name} (one of mysql, redis, zk, etcd)"));
    let url = simba_tests::servers::required_env(var);
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = dir.path().join("ledger.db");
    let s = Setup {
        dir: dir.path().to_owned(),
        url,
        ledger: ledger.display().to_string(),
        label,
        sqlite_files: vec![ledger],
        namespace: Some(format!("hist-{:012x}", rand::random::<u64>() >> 16)),
    };
    check(&s).await;
}

/// The same scenario on MySQL/MariaDB, Redis, ZooKeeper and etcd, all at the same time, each
/// in a namespace of its own. A run of its own (the servers must be running; it fails, and
/// never passes, without `SIMBA_HISTORY_STORES` naming the stores):
///
/// ```sh
/// eval "$(bash scripts/backends.sh start)"
/// SIMBA_HISTORY_STORES=mysql,redis,zk,etcd \
///   cargo test -p simba-tests --all-features --test faults history::the_scenario -- --ignored --nocapture
/// ```
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a run of its own: SIMBA_HISTORY_STORES=mysql,redis,zk,etcd cargo test -p simba-tests --all-features --test faults history::the_scenario -- --ignored --nocapture"]
async fn the_scenario_holds_on_the_other_stores() {
    let Ok(wanted) = std::env::var(STORES_VAR) else {
        panic!("{STORES_VAR} is not set: name the stores to run (mysql,redis,zk,etcd), with their servers started")
    };
    let names: Vec<&str> = wanted.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
    assert!(!names.is_empty(), "{STORES_VAR} names no store");
    let _serial = crate::SERIAL.lock().await;
    // Each store in a task of its own: one that fails (its panic prints its records) does not
    // stop the others, and the test fails after all ended.
    let runs = names.iter().map(|n| {
        let n = (*n).to_owned();
        tokio::spawn(async move { on_server(&n).await })
    });
    let ended = futures_util::future::join_all(runs).await;
    let failed: Vec<&str> = names.iter().zip(&ended).filter(|(_, e)| e.is_err()).map(|(n, _)| *n).collect();
    assert!(failed.is_empty(), "the scenario failed on {failed:?} (their records are printed above)");
}

/// Three nodes on `s.url`; the faults, the operator's commands; then the checks.
async fn check(s: &Setup) {
    let began = Instant::now();
    std::fs::write(
        s.dir.join("simba.toml"),
        format!(
            "[backend]\nurl = \"{}\"\n{}\n[session]\nlease_duration = \"{}ms\"\nrenew_interval = \"{}ms\"\n\
             retry_jitter = \"{}ms\"\n\n[history]\nretention = {RETENTION}\n",
            s.url,
            s.namespace.as_ref().map(|n| format!("namespace = \"{n}\"\n")).unwrap_or_default(),
            LEASE.as_millis(),
            RENEW.as_millis(),
            JITTER.as_millis()
        ),
    )
    .expect("write config");
    prefill(s).await;
    let t0 = now_ms();
    let mut nodes: Vec<Node> = NODES.iter().map(|n| s.spawn(n)).collect();
    let mut faults: Vec<Fault> = Vec::new();
    let ran = |h: &[Rec]| h.iter().filter(|r| r.outcome == "ran").count();
    wait_for(s, t0, "three runs", Duration::from_secs(30), |h| ran(h) >= 3).await;
    let took = balanced(s, &nodes, "at the start").await;
    eprintln!("{}: started, partitions 4/4/4 {took:?} after the third run", s.label);

    // 1. kill -9 the node in the middle of a run of `slow`: 150-300 ms into a second, the node
    // that logged the start of this second's run (its claim wrote the `running` record before
    // the run started) is still in its 400 ms run. The nodes' logs are read, not the store,
    // whose answer may come too late on a busy machine.
    let started = Instant::now();
    let (killed_rec, killed_node) = loop {
        let now = now_ms();
        if (150..300).contains(&now.rem_euclid(1000)) {
            let second = now - now.rem_euclid(1000);
            let logs = s.logs();
            let run = logs.runs.iter().find(|r| r.slot_ms == second && r.kind == "scheduled");
            if let Some(i) = run.and_then(|r| nodes.iter().position(|n| n.child.id() == r.pid))
                && now_ms() - second < 350
            {
                let r = run.expect("the run found");
                let rec = Rec {
                    slot_ms: second,
                    kind: "scheduled".to_owned(),
                    outcome: "running".to_owned(),
                    attempt: 1,
                    node: nodes[i].name.to_owned(),
                    token: r.token,
                    error: String::new(),
                };
                let (pid, mono, wall) = (nodes[i].child.id(), mono_ns(), now_ms());
                signal(&nodes[i], "KILL");
                let _ = nodes[i].child.wait();
                faults.push(Fault { what: "kill -9", pid, mono, wall, until: wall, exempt: None });
                break (rec, nodes.remove(i).name);
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{}: no run in flight to kill\n{}",
            s.label,
            table(&history(s, "slow", 20).await)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let h = wait_for(s, t0, "a run by the next holder", LEASE * 4, |h| {
        h.iter().any(|r| r.slot_ms > killed_rec.slot_ms && r.outcome == "ran")
    })
    .await;
    nodes.push(s.spawn(killed_node));

    // 2. SIGSTOP the next holder for longer than its lease; another node takes over.
    let holder = h.iter().rev().find(|r| r.outcome == "ran").map(|r| r.node.clone()).expect("a holder");
    let stopped_i = nodes.iter().position(|n| n.name == holder).expect("the holder is a live node");
    let (pid, mono, wall) = (nodes[stopped_i].child.id(), mono_ns(), now_ms());
    signal(&nodes[stopped_i], "STOP");
    assert!(stopped(pid).await, "{}: node {holder} did not stop", s.label);
    let exempt = s
        .sqlite_files
        .iter()
        .find(|f| holds_wal_write_lock(pid, f))
        .map(|f| format!("stopped holding the write lock of {}", f.display()));
    tokio::time::sleep(LEASE + Duration::from_millis(1500)).await;
    signal(&nodes[stopped_i], "CONT");
    let stopped_at = wall;
    faults.push(Fault { what: "SIGSTOP", pid, mono, wall, until: now_ms(), exempt });
    // Usually another node; the stopped one may win again if it held SQLite's write lock: in
    // either case a newer term.
    let holder_token = h.iter().rev().find(|r| r.outcome == "ran").map_or(0, |r| r.token);
    wait_for(s, t0, "a run in a newer term", LEASE * 4, |h| {
        h.iter().any(|r| r.slot_ms > stopped_at && r.outcome == "ran" && r.token > holder_token)
    })
    .await;

    // 3. Run now: the node holding the term runs it once, as a manual slot.
    let manual =
        |n: usize| move |h: &[Rec]| h.iter().filter(|r| r.kind == "manual" && r.outcome != "running").count() >= n;
    operator(s, "trigger", "slow").await;
    wait_for(s, t0, "the first manual run", Duration::from_secs(5), manual(1)).await;

    // 4. Pause for 4 s, with a run-now request made while paused, then resume: nothing runs
    // in between (within two renewal intervals of the change: SQLite does not broadcast it),
    // and the request runs once after the resume.
    // The pause takes effect when the store commits it, at some point while the command runs:
    // a slot from a second before the command's start (its claim may come later) until the
    // command returned (plus two renewal intervals) may or may not have run (on etcd the command takes about 20 ms, and a slot's claim right after
    // the commit is refused without a record).
    let pause_started = now_ms();
    operator(s, "pause", "slow").await;
    let (paused_at, paused_mono) = (now_ms(), mono_ns());
    tokio::time::sleep(Duration::from_secs(1)).await;
    operator(s, "trigger", "slow").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The resume takes effect when the store commits it, at some point while the command runs
    // (and the holder may start the pending request first): the pause window ends when the
    // command starts, and a slot until it returned (plus two renewal intervals) may or may
    // not have run.
    let (resumed_at, resumed_mono) = (now_ms(), mono_ns());
    operator(s, "resume", "slow").await;
    let resume_done = now_ms();
    wait_for(s, t0, "a run after the resume", Duration::from_secs(4), |h| {
        h.iter().any(|r| r.slot_ms > resumed_at && r.outcome == "ran")
    })
    .await;
    wait_for(s, t0, "the run requested while paused", Duration::from_secs(5), manual(2)).await;

    // 5. SIGTERM the ledger's holder (a graceful stop hands over), and start it again.
    quiet_moment().await;
    let ledger_pid = s.logs().ledger_holder().expect("a ledger holder");
    let i = nodes.iter().position(|n| n.child.id() == ledger_pid).expect("the ledger's holder is a live node");
    let (mono, wall) = (mono_ns(), now_ms());
    signal(&nodes[i], "TERM");
    exited(&mut nodes[i], Duration::from_secs(10)).await;
    faults.push(Fault { what: "SIGTERM", pid: ledger_pid, mono, wall, until: now_ms(), exempt: None });
    let name = nodes.remove(i).name;
    nodes.push(s.spawn(name));

    // 6. Run now again, and the partitions spread over the three nodes again.
    operator(s, "trigger", "slow").await;
    wait_for(s, t0, "the third manual run", Duration::from_secs(5), manual(3)).await;
    let took = balanced(s, &nodes, "at the end").await;
    eprintln!("{}: partitions 4/4/4 again {took:?} after the third run now", s.label);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Graceful stops: each hands over and closes its session.
    quiet_moment().await;
    let end_wall = now_ms();
    for n in &nodes {
        signal(n, "TERM");
    }
    for n in &mut nodes {
        exited(n, Duration::from_secs(10)).await;
    }
    let took = began.elapsed();
    let ctx = Context {
        t0,
        end_wall,
        pause_started,
        paused: (paused_at, paused_mono),
        resumed: (resumed_at, resumed_mono),
        resume_done,
    };
    verify(s, &ctx, &faults, &killed_rec, killed_node).await;
    crate::checker::check_run(&format!("history scenario, {}", s.label), &s.dir.join("history.log"));
    eprintln!("{}: the scenario took {took:?} (checks included: {:?})", s.label, began.elapsed());
}

/// When the run began and ended, when `slow` was paused (the command returned) and resumed
/// (the command started), in wall ms and host ns, and when the resume command returned.
struct Context {
    t0: i64,
    end_wall: i64,
    /// When the pause command started (wall ms).
    pause_started: i64,
    paused: (i64, u128),
    resumed: (i64, u128),
    resume_done: i64,
}

/// The checks after the nodes stopped.
async fn verify(s: &Setup, c: &Context, faults: &[Fault], killed_rec: &Rec, killed_node: &str) {
    let mut h = history(s, "slow", RETENTION + 10).await;
    let kept = h.len();
    h.retain(|r| r.slot_ms >= c.t0);
    let logs = s.logs();
    let runs = &logs.runs;
    let report = format!(
        "{} records:\n{}\nfaults: {faults:#?}\nruns started: {:?}\n{}",
        s.label,
        table(&h),
        runs.iter().map(|r| (r.slot_ms, r.kind.as_str(), r.node, r.pid)).collect::<Vec<_>>(),
        s.stderr_tail()
    );
    let window_start = h.iter().find(|r| r.kind == "scheduled").map(|r| r.slot_ms).unwrap_or_default();
    let window_end = h.iter().filter(|r| r.kind == "scheduled").map(|r| r.slot_ms).max().unwrap_or_default();
    let in_fault = |slot: i64, extra: i64| {
        faults.iter().any(|f| slot >= f.wall - 1000 && slot <= f.until + BOUND.as_millis() as i64 + 2000 + extra)
            || slot >= c.end_wall - 1000
    };
    let (paused_at, resumed_at) = (c.paused.0, c.resumed.0);

    // Every second of the window: one scheduled record, except while paused (none); anything
    // but `ran` only inside a fault window.
    let scheduled: BTreeMap<i64, &Rec> =
        h.iter().filter(|r| r.kind == "scheduled" || r.kind == "caught_up").map(|r| (r.slot_ms, r)).collect();
    let effect = (RENEW * 2).as_millis() as i64;
    let mut slot = window_start;
    while slot <= window_end {
        let paused = slot > paused_at + effect && slot < resumed_at;
        // A slot due within a second before the pause command may still wait for its claim
        // (behind a run in flight, such as the manual run just before): the pause may consume it.
        let fuzzy = (slot >= c.pause_started - 1000 && slot <= paused_at + effect)
            || (slot >= resumed_at && slot <= c.resume_done + effect);
        match scheduled.get(&slot) {
            None if !paused && !fuzzy => panic!("{}: slot {slot} has no record\n{report}", s.label),
            Some(r) if paused => {
                panic!("{}: slot {slot} has a record while the job was paused: {r:?}\n{report}", s.label)
            }
            Some(r) => {
                assert!(
                    ["ran", "cancelled", "missed", "declined"].contains(&r.outcome.as_str()),
                    "{}: slot {slot}: outcome {}\n{report}",
                    s.label,
                    r.outcome
                );
                assert!(
                    r.outcome == "ran" || in_fault(slot, 0),
                    "{}: slot {slot} is {} outside every fault window\n{report}",
                    s.label,
                    r.outcome
                );
            }
            None => {}
        }
        slot += 1000;
    }
    // No slot ran twice, and every `ran` record ran once, where it says.
    let mut seen = BTreeSet::new();
    for r in runs {
        assert!(
            seen.insert((r.slot_ms, r.kind.clone())),
            "{}: slot {} ({}) started twice (again on {})\n{report}",
            s.label,
            r.slot_ms,
            r.kind,
            r.node
        );
    }
    for r in h.iter().filter(|r| r.outcome == "ran") {
        assert!(
            runs.iter().any(|x| x.slot_ms == r.slot_ms && x.kind == r.kind && x.node == r.node),
            "{}: a `ran` record no node logged: {r:?}\n{report}",
            s.label
        );
    }
    // Nothing ran while paused (on the host's clock): no scheduled slot of the pause and no
    // run at all between two renewal intervals after the pause and the resume.
    let effect_ns = (RENEW * 2).as_nanos();
    for r in runs {
        let during = r.mono > c.paused.1 + effect_ns && r.mono < c.resumed.1;
        assert!(!during, "{}: {r:?} ran while `slow` was paused\n{report}", s.label);
    }
    // The killed run: closed by the next holder, nothing left running.
    let k = h
        .iter()
        .find(|r| r.slot_ms == killed_rec.slot_ms && r.kind == "scheduled")
        .unwrap_or_else(|| panic!("{}: the killed slot's record is gone\n{report}", s.label));
    assert_eq!((k.outcome.as_str(), k.node.as_str()), ("cancelled", killed_node), "{report}");
    assert!(k.error.starts_with(&format!("abandoned: node {killed_node}")), "{report}");
    assert!(h.iter().all(|r| r.outcome != "running"), "{}: a record left running\n{report}", s.label);
    // The failover after the kill left missed slots, recorded by the next term.
    assert!(h.iter().any(|r| r.outcome == "missed" && r.slot_ms > killed_rec.slot_ms), "{report}");
    // The three run-now requests ran once each, on the node holding the term then (its token
    // is that term's), and the one made while paused only after the resume.
    let manual: Vec<&Rec> = h.iter().filter(|r| r.kind == "manual").collect();
    assert_eq!(manual.len(), 3, "{}: three run-now requests\n{report}", s.label);
    for m in &manual {
        assert_eq!(m.outcome, "ran", "{}: {m:?}\n{report}", s.label);
        let started: Vec<_> = runs.iter().filter(|r| r.kind == "manual" && r.slot_ms == m.slot_ms).collect();
        assert_eq!(started.len(), 1, "{}: manual slot {} started {started:?}\n{report}", s.label, m.slot_ms);
        let holders = h
            .iter()
            .filter(|r| r.kind == "scheduled" && r.outcome == "ran" && (r.slot_ms - m.slot_ms).abs() < 2000)
            .map(|r| (r.node.clone(), r.token))
            .collect::<BTreeSet<_>>();
        let in_pause = m.slot_ms > paused_at && m.slot_ms < resumed_at;
        assert!(
            in_pause || holders.contains(&(m.node.clone(), m.token)),
            "{}: manual {m:?}, holders {holders:?}\n{report}",
            s.label
        );
        assert!(!in_pause || started[0].mono > c.resumed.1, "{}: {m:?} ran while paused\n{report}", s.label);
    }

    flaky(s, c, faults, &logs).await;
    ledger_and_failovers(s, faults, &logs, &report).await;

    // Retention: every job keeps at most `retention` records, and the run's are among them.
    for (job, _) in JOBS {
        let n = if job == "slow" { kept } else { history(s, job, RETENTION + 10).await.len() };
        assert!((PREFILL..=RETENTION).contains(&n), "{}: {job} keeps {n} records (retention {RETENTION})", s.label);
    }
    eprintln!(
        "{}: history at retention {RETENTION}: {} records of `slow` over {} s; outcomes {:?}",
        s.label,
        h.len(),
        (window_end - window_start) / 1000,
        h.iter().fold(BTreeMap::<&str, usize>::new(), |mut m, r| {
            *m.entry(r.outcome.as_str()).or_default() += 1;
            m
        })
    );
}

/// `flaky`: every slot of its window has one record; its attempt is the last the nodes ran;
/// outside the fault windows it ended as the slot's mode says.
async fn flaky(s: &Setup, c: &Context, faults: &[Fault], logs: &Logs) {
    let mut h = history(s, "flaky", 500).await;
    h.retain(|r| r.slot_ms >= c.t0);
    let report = format!("{} `flaky` records:\n{}\nfaults: {faults:#?}\n{}", s.label, table(&h), s.stderr_tail());
    let by_slot: BTreeMap<i64, &Rec> = h.iter().filter(|r| r.kind == "scheduled").map(|r| (r.slot_ms, r)).collect();
    let (Some(first), Some(last)) = (by_slot.keys().next().copied(), by_slot.keys().last().copied()) else {
        panic!("{}: `flaky` has no record\n{report}", s.label)
    };
    let in_fault = |slot: i64| {
        faults.iter().any(|f| slot >= f.wall - 2000 && slot <= f.until + BOUND.as_millis() as i64 + 4000)
            || slot >= c.end_wall - 2000
    };
    let mut ended_as_planned = [0usize; 3];
    let mut slot = first;
    while slot <= last {
        let r =
            by_slot.get(&slot).unwrap_or_else(|| panic!("{}: `flaky` slot {slot} has no record\n{report}", s.label));
        let tried = logs.tries.iter().filter(|t| t.slot_ms == slot).map(|t| t.attempt).max().unwrap_or(0);
        let pids: BTreeSet<u32> = logs.tries.iter().filter(|t| t.slot_ms == slot).map(|t| t.pid).collect();
        assert!(pids.len() <= 1, "{}: `flaky` slot {slot} ran on several processes {pids:?}\n{report}", s.label);
        assert_eq!(
            r.attempt, tried,
            "{}: `flaky` slot {slot}: the record names attempt {} of the {tried} run\n{report}",
            s.label, r.attempt
        );
        assert_ne!(r.outcome, "running", "{}: `flaky` slot {slot} left running\n{report}", s.label);
        let mode = (slot.div_euclid(1000) / 2).rem_euclid(3) as usize;
        let planned = if mode == 2 { ("failed", 3) } else { ("ran", 2) };
        if (r.outcome.as_str(), r.attempt) == planned {
            ended_as_planned[mode] += 1;
        } else {
            assert!(
                in_fault(slot),
                "{}: `flaky` slot {slot} (mode {mode}) ended {} at attempt {} outside every fault window, not {planned:?}\n{report}",
                s.label,
                r.outcome,
                r.attempt
            );
        }
        slot += 2000;
    }
    assert!(
        ended_as_planned.iter().all(|n| *n > 0),
        "{}: every mode of `flaky` ended as planned at least once (fail once, time out once, always fail): {ended_as_planned:?}\n{report}",
        s.label
    );
    eprintln!(
        "{}: `flaky` {} slots; ended as planned by mode {ended_as_planned:?}",
        s.label,
        (last - first) / 2000 + 1
    );
}

/// The fenced ledger's checks and the failover times of `ledger` and `slow` after each fault.
async fn ledger_and_failovers(s: &Setup, faults: &[Fault], logs: &Logs, report: &str) {
    let accepted = logs.writes.iter().filter(|w| w.accepted).count();
    assert!(accepted > 50, "{}: the ledger took {accepted} writes\n{report}", s.label);
    let violations = logs.fencing_violations();
    assert!(violations.is_empty(), "{}: fencing:\n{}\n{report}", s.label, violations.join("\n"));
    let highest = logs.writes.iter().filter(|w| w.accepted).map(|w| w.token).max().unwrap_or(0);
    let stored = read_ledger(s).await;
    assert_eq!(stored, highest, "{}: the ledger's token against the highest accepted write", s.label);
    let slot_bound = BOUND + SLACK + Duration::from_secs(1);
    for f in faults {
        let ledger = logs.ledger_failover(f.pid, f.mono);
        let cron = logs.cron_failover(f.pid, f.mono);
        eprintln!(
            "{}: {} of pid {}: ledger failover {ledger:?}, `slow` failover {cron:?} (bounds {:?}, {slot_bound:?}){}",
            s.label,
            f.what,
            f.pid,
            BOUND + SLACK,
            f.exempt.as_ref().map(|e| format!("; exempt: {e}")).unwrap_or_default()
        );
        if f.exempt.is_some() {
            continue;
        }
        for (what, took, bound) in [("ledger", ledger, BOUND + SLACK), ("slow", cron, slot_bound)] {
            match took {
                None => {}
                Some(Ok(d)) => {
                    assert!(d <= bound, "{}: {} failover of `{what}` took {d:?} > {bound:?}\n{report}", s.label, f.what)
                }
                Some(Err(token)) => {
                    panic!("{}: after {}, `{what}` never ran in a term newer than {token}\n{report}", s.label, f.what)
                }
            }
        }
    }
    eprintln!(
        "{}: ledger {accepted} writes accepted, {} refused, {} failed; highest token {highest}",
        s.label,
        logs.writes.len() - accepted,
        logs.write_errors.len()
    );
}

/// The ledger's highest accepted token, read from the ledger itself.
async fn read_ledger(s: &Setup) -> u64 {
    let read = if s.ledger.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(&s.ledger).await.expect("connect to the ledger");
        simba::fencing::PostgresFence::new(pool).await.expect("the ledger").read("history").await
    } else {
        let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", s.ledger)).await.expect("open the ledger");
        simba::fencing::SqliteFence::new(pool).await.expect("the ledger").read("history").await
    };
    read.expect("read the ledger").map_or(0, |(token, _)| token)
}
