//! The multi-process history check of issue 12 ("Done when"): three `simba-history-node`
//! processes on one SQLite file, then on one PostgreSQL database, run a 400 ms cron job every second, with the jobs store
//! recording every slot. The test kills the node running a slot with SIGKILL in the middle of
//! the run, stops (SIGSTOP) the next holder for longer than its lease, asks for a run now and
//! pauses then resumes the job with the `simba` tool, stops the nodes, and reads
//! `simba history --json`. Then: every whole second of the window has exactly one scheduled
//! record (ran, cancelled, missed or declined) except while paused, where none has; no slot
//! ran twice (the nodes' own logs); the killed run was closed `cancelled` by the next holder
//! (abandoned) and no record is left `running`; the slots of the failover are `missed`; the
//! run-now request ran once, on the node holding the term; nothing ran while paused.

#![allow(clippy::print_stderr)] // The record table is printed when a check fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const NODES: [&str; 3] = ["a", "b", "c"];
const LEASE: Duration = Duration::from_secs(3);
const RENEW: Duration = Duration::from_secs(1);

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
    let stderr = std::fs::File::create(dir.join(format!("{name}.stderr"))).expect("node stderr file");
    let child = Command::new(env!("CARGO_BIN_EXE_simba-history-node"))
        .current_dir(dir)
        .env("SIMBA_CONFIG", dir.join("simba.toml"))
        .env("SIMBA_NODE", name)
        .env("SIMBA_NODE_LOG", dir.join(format!("{name}.log")))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn simba-history-node");
    Node { name, child }
}

/// `kill -SIG` of one node process.
fn signal(node: &Node, sig: &str) {
    let done = Command::new("kill").arg(format!("-{sig}")).arg(node.child.id().to_string()).status();
    assert!(done.is_ok_and(|s| s.success()), "kill -{sig} {} ({}) failed", node.child.id(), node.name);
}

/// Runs the tool in-process: `(exit code, stdout)`.
async fn simba(args: &[&str]) -> (u8, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut argv = vec!["simba"];
    argv.extend_from_slice(args);
    let code = simba::cli::run(argv, &mut out, &mut err).await;
    (code, String::from_utf8_lossy(&out).into_owned() + &String::from_utf8_lossy(&err))
}

/// One record of `simba history --json`.
#[derive(Debug, Clone)]
struct Rec {
    slot_ms: i64,
    kind: String,
    outcome: String,
    node: String,
    token: u64,
    error: String,
}

/// The job's history, oldest first, as `simba history slow --json` prints it.
async fn history(url: &str) -> Vec<Rec> {
    let (code, out) = simba(&["--backend", url, "history", "slow", "--limit", "1000", "--json"]).await;
    if code == 2 && (out.contains("unknown job `slow`") || out.contains("no database file")) {
        return Vec::new(); // No node has created the file or recorded a slot yet.
    }
    assert_eq!(code, 0, "simba history: {out}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    let mut recs: Vec<Rec> = v["records"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| Rec {
                    slot_ms: r["slot_ms"].as_i64().unwrap_or_default(),
                    kind: r["kind"].as_str().unwrap_or_default().to_owned(),
                    outcome: r["outcome"].as_str().unwrap_or_default().to_owned(),
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
        .map(|r| format!("{} {:9} {:9} {} {} {}\n", r.slot_ms, r.kind, r.outcome, r.node, r.token, r.error))
        .collect()
}

async fn wait_for(url: &str, what: &str, within: Duration, f: impl Fn(&[Rec]) -> bool) -> Vec<Rec> {
    let start = Instant::now();
    loop {
        let h = history(url).await;
        if f(&h) {
            return h;
        }
        assert!(start.elapsed() < within, "{what}: not within {within:?}\n{}", table(&h));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `(slot_ms, kind)` of every run the nodes started, with the node's name.
fn started_runs(dir: &Path) -> Vec<(i64, String, &'static str)> {
    let mut runs = Vec::new();
    for name in NODES {
        let text = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.first() == Some(&"run")
                && let Some(slot) = f.get(2).and_then(|s| s.parse::<i64>().ok())
            {
                runs.push((slot, f.get(3).copied().unwrap_or_default().to_owned(), name));
            }
        }
    }
    runs
}

/// Issue 12 "Done when" (history across kill -9, SIGSTOP, run now and pause), on SQLite: one
/// database file shared by the three processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_slot_is_accounted_for_once_across_kill_pause_trigger_and_pause() {
    let _serial = crate::SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("simba.db");
    let url = format!("sqlite://{}", db.display());
    check(dir.path(), &url).await;
}

/// Issue 12 "Done when" ("a multi-process test on PostgreSQL"), the same check on the
/// PostgreSQL test server, whose jobs store is on by default and claims with one call of
/// `simba_claim_run_v1` (ADR 0012, amendment "the SQL claim in one round trip"). Each run
/// gets a database of its own, dropped at the end, so no record of an earlier run counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_slot_is_accounted_for_once_on_postgres() {
    let Some(server) = simba_tests::server_url("SIMBA_TEST_POSTGRES_URL") else { return };
    let _serial = crate::SERIAL.lock().await;
    let admin = sqlx::PgPool::connect(&server).await.expect("connect to the PostgreSQL test server");
    let database = format!("simba_history_{:016x}", rand::random::<u64>());
    simba_tests::servers::exec(&admin, format!("CREATE DATABASE {database}")).await;
    let user = server.split_once("://").and_then(|(_, r)| r.split_once('@')).map_or("postgres", |(u, _)| u);
    let url = simba_tests::servers::url_for("postgres", &server, user, &database);
    let dir = tempfile::tempdir().expect("tempdir");
    check(dir.path(), &url).await;
    simba_tests::servers::exec(&admin, format!("DROP DATABASE {database} WITH (FORCE)")).await;
}

/// Three nodes on `url`; the faults, run now and pause; then every slot accounted for once.
async fn check(dir: &Path, url: &str) {
    let url = url.to_owned();
    std::fs::write(
        dir.join("simba.toml"),
        format!(
            "[backend]\nurl = \"{url}\"\n\n[session]\nlease_duration = \"{}s\"\nrenew_interval = \"{}s\"\n\
             retry_jitter = \"500ms\"\n\n[history]\nretention = 1000\n",
            LEASE.as_secs(),
            RENEW.as_secs()
        ),
    )
    .expect("write config");
    let mut nodes: Vec<Node> = NODES.iter().map(|n| spawn(dir, n)).collect();
    let ran = |h: &[Rec]| h.iter().filter(|r| r.outcome == "ran").count();
    let h = wait_for(&url, "three runs", Duration::from_secs(20), |h| ran(h) >= 3).await;
    let window_start = h.iter().find(|r| r.kind == "scheduled").map(|r| r.slot_ms).unwrap_or_default();

    // 1. kill -9 the node in the middle of a run: the newest record is this second's, running,
    // and the 400 ms run is still going when the answer is back. The look is timed to come
    // back 150-300 ms into a second: reading the history takes a connection (about 20 ms on
    // SQLite, 300-500 ms on PostgreSQL, whose connect also checks the schema).
    let started = Instant::now();
    let mut look = Duration::ZERO;
    let killed = loop {
        let now = now_ms();
        let back = (now + look.as_millis() as i64).rem_euclid(1000);
        if (150..300).contains(&back) {
            let asked = Instant::now();
            let h = history(&url).await;
            look = asked.elapsed();
            let after = now_ms();
            let in_run = after.rem_euclid(1000) < 350;
            if let Some(r) =
                h.last().filter(|r| in_run && r.outcome == "running" && r.slot_ms == after - after.rem_euclid(1000))
            {
                let i = nodes.iter().position(|n| n.name == r.node).expect("the node of a record");
                signal(&nodes[i], "KILL");
                let _ = nodes[i].child.wait();
                break (r.clone(), nodes.remove(i).name);
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no run in flight to kill\n{}",
            table(&history(&url).await)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (killed_rec, killed_node) = killed;
    let h = wait_for(&url, "a run by the next holder", LEASE * 3, |h| {
        h.iter().any(|r| r.slot_ms > killed_rec.slot_ms && r.outcome == "ran")
    })
    .await;

    // 2. SIGSTOP the next holder for longer than its lease; the third node takes over.
    let holder = h.iter().rev().find(|r| r.outcome == "ran").map(|r| r.node.clone()).expect("a holder");
    let stopped = nodes.iter().position(|n| n.name == holder).expect("the holder is a live node");
    signal(&nodes[stopped], "STOP");
    let stopped_at = now_ms();
    tokio::time::sleep(LEASE + Duration::from_millis(1500)).await;
    signal(&nodes[stopped], "CONT");
    // Usually the third node; the stopped one may win again if it was stopped inside a write
    // transaction (it then held SQLite's write lock): in either case a newer term.
    let holder_token = h.iter().rev().find(|r| r.outcome == "ran").map_or(0, |r| r.token);
    wait_for(&url, "a run in a newer term", LEASE * 3, |h| {
        h.iter().any(|r| r.slot_ms > stopped_at && r.outcome == "ran" && r.token > holder_token)
    })
    .await;

    // 3. Run now: the node holding the term runs it once, as a manual slot.
    let (code, out) = simba(&["--backend", &url, "trigger", "slow"]).await;
    assert_eq!(code, 0, "simba trigger: {out}");
    let h =
        wait_for(&url, "the manual run", RENEW * 4, |h| h.iter().any(|r| r.kind == "manual" && r.outcome != "running"))
            .await;
    let manual = h.iter().find(|r| r.kind == "manual").cloned().expect("a manual record");

    // 4. Pause for 4 s, then resume: nothing runs in between (within one renewal interval of
    // the change: SQLite does not broadcast it).
    let (code, out) = simba(&["--backend", &url, "pause", "slow"]).await;
    assert_eq!(code, 0, "simba pause: {out}");
    let paused_at = now_ms();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (code, out) = simba(&["--backend", &url, "resume", "slow"]).await;
    assert_eq!(code, 0, "simba resume: {out}");
    let resumed_at = now_ms();
    wait_for(&url, "a run after the resume", RENEW * 4, |h| {
        h.iter().any(|r| r.slot_ms > resumed_at && r.outcome == "ran")
    })
    .await;

    // Graceful stops: each hands over and closes its session.
    for n in &nodes {
        signal(n, "TERM");
    }
    for n in &mut nodes {
        let _ = n.child.wait();
    }
    let h = history(&url).await;
    let runs = started_runs(dir);
    let report = format!("records:\n{}\nruns started: {runs:?}", table(&h));
    let window_end = h.iter().filter(|r| r.kind == "scheduled").map(|r| r.slot_ms).max().unwrap_or_default();

    // Every second of the window: one scheduled record, except while paused (none).
    let scheduled: BTreeMap<i64, &Rec> =
        h.iter().filter(|r| r.kind == "scheduled" || r.kind == "caught_up").map(|r| (r.slot_ms, r)).collect();
    let effect = (RENEW * 2).as_millis() as i64;
    let mut slot = window_start;
    while slot <= window_end {
        let paused = slot > paused_at + effect && slot < resumed_at;
        let fuzzy =
            (slot >= paused_at && slot <= paused_at + effect) || (slot >= resumed_at && slot <= resumed_at + effect);
        match scheduled.get(&slot) {
            None if !paused && !fuzzy => panic!("slot {slot} has no record\n{report}"),
            Some(r) if paused => panic!("slot {slot} has a record while the job was paused: {r:?}\n{report}"),
            Some(r) => assert!(
                ["ran", "cancelled", "missed", "declined"].contains(&r.outcome.as_str()),
                "slot {slot}: outcome {}\n{report}",
                r.outcome
            ),
            None => {}
        }
        slot += 1000;
    }
    // No slot ran twice, and every `ran` record ran once, where it says.
    let mut seen = BTreeSet::new();
    for (slot, kind, node) in &runs {
        assert!(seen.insert((*slot, kind.clone())), "slot {slot} ({kind}) started twice (again on {node})\n{report}");
    }
    for r in h.iter().filter(|r| r.outcome == "ran") {
        assert!(
            runs.iter().any(|(s, k, n)| *s == r.slot_ms && *k == r.kind && *n == r.node),
            "a `ran` record no node logged: {r:?}\n{report}"
        );
    }
    // The killed run: closed by the next holder, nothing left running.
    let k =
        h.iter().find(|r| r.slot_ms == killed_rec.slot_ms && r.kind == "scheduled").expect("the killed slot's record");
    assert_eq!((k.outcome.as_str(), k.node.as_str()), ("cancelled", killed_node), "{report}");
    assert!(k.error.starts_with(&format!("abandoned: node {killed_node}")), "{report}");
    assert!(h.iter().all(|r| r.outcome != "running"), "a record left running\n{report}");
    // The failover after the kill left missed slots, recorded by the next term.
    assert!(h.iter().any(|r| r.outcome == "missed" && r.slot_ms > killed_rec.slot_ms), "{report}");
    // The manual run ran once, on the node holding the term then (its token is that term's).
    assert_eq!(h.iter().filter(|r| r.kind == "manual").count(), 1, "{report}");
    assert_eq!(manual.outcome, "ran", "{report}");
    let holder_then = h
        .iter()
        .filter(|r| r.kind == "scheduled" && r.outcome == "ran" && (r.slot_ms - manual.slot_ms).abs() < 2000)
        .map(|r| (r.node.clone(), r.token))
        .collect::<BTreeSet<_>>();
    assert!(
        holder_then.contains(&(manual.node.clone(), manual.token)),
        "manual {manual:?}, holders {holder_then:?}\n{report}"
    );
    eprintln!(
        "killed {killed_node} in slot {}; stopped {holder} at {stopped_at}; paused {paused_at}..{resumed_at}\n{}",
        killed_rec.slot_ms,
        table(&h)
    );
    eprintln!(
        "history across kill -9, SIGSTOP, trigger and pause: {} records over {} s; outcomes {:?}",
        h.len(),
        (window_end - window_start) / 1000,
        h.iter().fold(BTreeMap::<&str, usize>::new(), |mut m, r| {
            *m.entry(r.outcome.as_str()).or_default() += 1;
            m
        })
    );
}
