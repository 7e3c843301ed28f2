//! Multi-process tests (J5, J6, failure table "leader process crashes"): three OS processes of
//! `simba-test-node` on one SQLite file. Each logs its cron runs and partition terms on the
//! host's monotonic clock; the test kills one with SIGKILL and starts another, then checks
//! that every cron slot ran on exactly one process, that a new holder took over within the
//! failover bound, that partitions spread 6/5/5 -> 8/8 -> 6/5/5, and that no two processes
//! ever held one partition at the same time.

#![allow(clippy::print_stderr)] // The figures are printed for the report.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(3);
const RENEW: Duration = Duration::from_secs(1);
const JITTER: Duration = Duration::from_millis(500);

fn mono_ns() -> u128 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u128 * 1_000_000_000 + t.tv_nsec as u128
}

struct Node {
    child: Child,
    log: PathBuf,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(dir: &Path, name: &str) -> Node {
    let log = dir.join(format!("{name}.log"));
    // Warnings and errors go to `<name>.stderr`, printed when a wait fails.
    let stderr = std::fs::File::create(dir.join(format!("{name}.stderr"))).expect("node stderr file");
    let child = Command::new(env!("CARGO_BIN_EXE_simba-test-node"))
        .current_dir(dir)
        .env("SIMBA_CONFIG", dir.join("simba.toml"))
        .env("SIMBA_NODE_LOG", &log)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn simba-test-node");
    Node { child, log }
}

/// The first and last lines each node wrote to its stderr, for a failure message.
fn node_stderr(dir: &Path) -> String {
    let mut out = String::new();
    for name in ["a", "b", "c", "d"] {
        let Ok(text) = std::fs::read_to_string(dir.join(format!("{name}.stderr"))) else { continue };
        let lines: Vec<&str> = text.lines().collect();
        out.push_str(&format!("--- node {name} stderr ({} lines; first 8, last 8)\n", lines.len()));
        let head = lines.len().min(8);
        let tail = lines.len().saturating_sub(8).max(head);
        for l in lines[..head].iter().chain(&lines[tail..]) {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

#[derive(Debug, Default)]
struct Logs {
    /// (mono, slot, token, pid)
    ticks: Vec<(u128, i64, u64, u32)>,
    /// (partition, token, pid) -> (start, end or last known deadline, ended)
    terms: BTreeMap<(u32, u64, u32), (u128, u128, bool)>,
}

fn read_logs(nodes: &[PathBuf]) -> Logs {
    let mut l = Logs::default();
    for path in nodes {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let n = |i: usize| f.get(i).and_then(|s| s.parse::<u128>().ok()).unwrap_or(0);
            match f.first().copied() {
                Some("tick") => l.ticks.push((n(1), n(2) as i64, n(3) as u64, n(4) as u32)),
                Some("part-start") => {
                    l.terms.insert((n(2) as u32, n(3) as u64, n(4) as u32), (n(1), n(1), false));
                }
                Some("part-valid") => {
                    if let Some(t) = l.terms.get_mut(&(n(2) as u32, n(3) as u64, n(5) as u32))
                        && !t.2
                    {
                        t.1 = t.1.max(n(4));
                    }
                }
                Some("part-end") => {
                    if let Some(t) = l.terms.get_mut(&(n(2) as u32, n(3) as u64, n(4) as u32)) {
                        // Valid until the worker ended, and never past its last deadline.
                        t.1 = if t.1 > t.0 { t.1.min(n(1)) } else { n(1) };
                        t.2 = true;
                    }
                }
                _ => {}
            }
        }
    }
    l
}

/// Partitions held now per live pid.
fn shares(logs: &Logs, live: &[u32]) -> Vec<usize> {
    let mut v: Vec<usize> = live
        .iter()
        .map(|pid| logs.terms.iter().filter(|((_, _, p), (_, _, ended))| p == pid && !ended).count())
        .collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v
}

fn wait_for(dir: &Path, what: &str, within: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < within, "{what}: not within {within:?}\n{}", node_stderr(dir));
        std::thread::sleep(Duration::from_millis(100));
    }
    start.elapsed()
}

#[test]
fn three_processes_cron_failover_and_partitions() {
    let _serial = crate::SERIAL.blocking_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("simba.toml"),
        format!(
            "[backend]\nurl = \"sqlite://{}\"\n\n[session]\nlease_duration = \"3s\"\nrenew_interval = \"1s\"\nretry_jitter = \"500ms\"\n",
            dir.path().join("simba.db").display()
        ),
    )
    .expect("write config");
    let mut nodes = vec![spawn(dir.path(), "a"), spawn(dir.path(), "b"), spawn(dir.path(), "c")];
    let paths = |nodes: &[Node]| nodes.iter().map(|n| n.log.clone()).collect::<Vec<_>>();
    let mut all_logs: Vec<PathBuf> = paths(&nodes);
    let pids = |nodes: &[Node]| nodes.iter().map(|n| n.child.id()).collect::<Vec<_>>();

    // 16 partitions spread 6/5/5.
    let took = wait_for(dir.path(), "6/5/5", Duration::from_secs(30), || {
        shares(&read_logs(&all_logs), &pids(&nodes)) == vec![6, 5, 5]
    });
    eprintln!("balanced 6/5/5 after {took:?}");

    // Every cron slot ran on exactly one process.
    std::thread::sleep(Duration::from_secs(4));
    let logs = read_logs(&all_logs);
    let mut slots = BTreeMap::new();
    for (_, slot, _, pid) in &logs.ticks {
        assert!(slots.insert(*slot, *pid).is_none(), "slot {slot} ran twice");
    }
    assert!(slots.len() >= 4, "{} slots ran", slots.len());

    // Kill -9 the holder of the cron job's lease.
    let (_, _, token_before, holder) = *logs.ticks.last().expect("ticks");
    let idx = nodes.iter().position(|n| n.child.id() == holder).expect("holder is ours");
    let killed_at = mono_ns();
    let mut victim = nodes.remove(idx);
    victim.child.kill().expect("kill -9");
    let _ = victim.child.wait();
    wait_for(dir.path(), "cron failover", Duration::from_secs(15), || {
        read_logs(&all_logs).ticks.iter().any(|(t, _, _, pid)| *t > killed_at && *pid != holder)
    });
    let logs = read_logs(&all_logs);
    let (took_over_at, _, token_after, _) =
        *logs.ticks.iter().find(|(t, _, _, pid)| *t > killed_at && *pid != holder).expect("a new holder");
    let failover = Duration::from_nanos((took_over_at - killed_at) as u64);
    let bound = LEASE + RENEW / 2 + JITTER;
    eprintln!("cron failover after kill -9: {failover:?} (bound {bound:?} + up to 1 s to the next slot)");
    assert!(failover <= bound + Duration::from_millis(1500), "failover took {failover:?}");
    assert!(token_after > token_before, "token went from {token_before} to {token_after}");

    // Partitions rebalance to 8/8 on the two survivors.
    let took = wait_for(dir.path(), "8/8", Duration::from_secs(30), || {
        shares(&read_logs(&all_logs), &pids(&nodes)) == vec![8, 8]
    });
    eprintln!("rebalanced 8/8 {took:?} after the failover");

    // A node returns: back to 6/5/5.
    nodes.push(spawn(dir.path(), "d"));
    all_logs = {
        let mut v = all_logs.clone();
        v.extend(paths(&nodes[nodes.len() - 1..]));
        v
    };
    let took = wait_for(dir.path(), "6/5/5 again", Duration::from_secs(30), || {
        shares(&read_logs(&all_logs), &pids(&nodes)) == vec![6, 5, 5]
    });
    eprintln!("balanced 6/5/5 again {took:?} after a node returned");
    std::thread::sleep(Duration::from_secs(2));
    drop(nodes);

    // Never two holders: the validity intervals of one partition's terms never overlap, and
    // tokens grow.
    let logs = read_logs(&all_logs);
    let mut by_partition: BTreeMap<u32, Vec<(u128, u128, u64, u32)>> = BTreeMap::new();
    for ((p, token, pid), (start, end, _)) in &logs.terms {
        by_partition.entry(*p).or_default().push((*start, *end, *token, *pid));
    }
    let mut handovers = 0;
    for (p, mut v) in by_partition {
        v.sort();
        for w in v.windows(2) {
            assert!(
                w[0].1 <= w[1].0,
                "partition {p}: terms {} (pid {}) and {} (pid {}) overlap",
                w[0].2,
                w[0].3,
                w[1].2,
                w[1].3
            );
            assert!(w[1].2 > w[0].2, "partition {p}: token went from {} to {}", w[0].2, w[1].2);
            handovers += 1;
        }
    }
    let all_slots: BTreeSet<i64> = logs.ticks.iter().map(|t| t.1).collect();
    assert_eq!(all_slots.len(), logs.ticks.len(), "a cron slot ran twice");
    eprintln!("checked {handovers} partition handovers and {} cron slots: no overlap, no slot twice", all_slots.len());
}
