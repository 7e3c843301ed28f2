//! simba's benchmarks beside their anchors: runs P1-P14 against the servers of
//! `scripts/backends.sh` and writes `BENCHMARKS.md` and `benches/*.svg`.
//!
//! Run it with `bash scripts/bench.sh` (starts the servers, builds in release, runs this,
//! stops the servers). `SIMBA_BENCH_QUICK=1` (or `--quick`) makes a smoke run with small sizes;
//! `--only p1,p3` runs some measures; `--backends sqlite,redis` (or `SIMBA_BENCH_BACKENDS`)
//! runs P5 and P6 on some backends only; `--out DIR` writes there instead of the current
//! directory. P14's node processes are the binary `simba-bench-node` (`bin/simba-bench-node.rs`),
//! which the benchmark finds beside its own executable and starts itself. Design: docs/adr/0009-benchmarks.md.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod counting;
mod fairness;
mod fleet;
mod history;
mod measures;
mod p14_common;
mod report;
mod scale;
mod startup;
mod stats;

use std::time::Duration;

use anyhow::{Result, anyhow};
use measures::{Kind, Plan, Target};
use tokio::time::Instant;

use crate::report::Results;

fn targets() -> Result<Vec<Target>> {
    let mut v = Vec::new();
    for (kind, var) in [
        (Kind::Redis, "SIMBA_TEST_REDIS_URL"),
        (Kind::Postgres, "SIMBA_TEST_POSTGRES_URL"),
        (Kind::MySql, "SIMBA_TEST_MYSQL_URL"),
        (Kind::ZooKeeper, "SIMBA_TEST_ZK_URL"),
        (Kind::Etcd, "SIMBA_TEST_ETCD_URL"),
    ] {
        match std::env::var(var) {
            Ok(url) if !url.is_empty() => v.push(Target { kind, url }),
            _ => {
                return Err(anyhow!(
                    "{var} is not set: run `bash scripts/bench.sh`, or start the servers with `eval \"$(bash scripts/backends.sh start)\"` first"
                ));
            }
        }
    }
    let dir = std::env::temp_dir().join(format!("simba-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    v.push(Target { kind: Kind::Sqlite, url: format!("sqlite://{}", dir.join("bench.db").display()) });
    Ok(v)
}

fn target(ts: &[Target], kind: Kind) -> Result<&Target> {
    ts.iter().find(|t| t.kind == kind).ok_or_else(|| anyhow!("no {kind:?} target"))
}

struct Args {
    quick: bool,
    only: Option<Vec<String>>,
    /// `--backends sqlite,redis` (or `SIMBA_BENCH_BACKENDS`): P5 and P6 on these only.
    backends: Option<Vec<String>>,
    out: std::path::PathBuf,
}

/// Whether P5 and P6 run on `kind` (`--backends`, labels or URL schemes, any case).
fn wants_backend(args: &Args, kind: Kind) -> bool {
    let names: &[&str] = match kind {
        Kind::Redis => &["redis"],
        Kind::Postgres => &["postgresql", "postgres", "pg"],
        Kind::MySql => &["mariadb", "mysql"],
        Kind::ZooKeeper => &["zookeeper", "zk"],
        Kind::Etcd => &["etcd"],
        Kind::Sqlite => &["sqlite"],
    };
    args.backends.as_ref().is_none_or(|b| b.iter().any(|x| names.contains(&x.as_str())))
}

/// A list argument, lower-cased.
fn list(v: &str) -> Vec<String> {
    v.split(',').map(|s| s.trim().to_lowercase()).filter(|s| !s.is_empty()).collect()
}

/// P6: the 64-partition case (3 -> 4 -> 3 members, goal 2 renewal intervals) and the fleet
/// case (1,024 partitions, 16 -> 17 -> 16 members, goal 3), at each renewal period of
/// `SIMBA_BENCH_P6_RENEW_MS` (default: 5000, the default timing; another period `r` runs with
/// a lease of `5 r`, as P1's 600 ms period with its 3 s lease), on every backend.
async fn p6(ts: &[Target], args: &Args, plan: Plan, run: &str, r: &mut Results, step: &impl Fn(&str)) -> Result<()> {
    let periods: Vec<u64> = match std::env::var("SIMBA_BENCH_P6_RENEW_MS") {
        Ok(v) => list(&v).iter().map(|x| x.parse()).collect::<Result<_, _>>()?,
        Err(_) => vec![5000],
    };
    let cases = [
        measures::P6Case { partitions: 64, members: 3, goal_intervals: 2.0 },
        measures::P6Case { partitions: 1024, members: 16, goal_intervals: 3.0 },
    ];
    for ms in periods {
        let renew = Duration::from_millis(ms);
        let cfg = if renew == simba::SimbaConfig::default().renew_interval() {
            simba::SimbaConfig::default()
        } else {
            measures::config(renew * 5, renew)?
        };
        for case in cases {
            for t in ts {
                if !wants_backend(args, t.kind) || (plan.quick && t.kind != Kind::Redis) {
                    continue;
                }
                step(&format!(
                    "P6 partition rebalance, {}: {} partitions, {} -> {} -> {} members, renewal every {renew:?}",
                    t.kind.label(),
                    case.partitions,
                    case.members,
                    case.members + 1,
                    case.members
                ));
                match measures::p6(t, case, cfg, run).await {
                    Ok((rows, map)) => {
                        r.p6.extend(rows);
                        r.p6_maps.push(map);
                    }
                    Err(e) => r.error(&format!("P6 {} {} partitions", t.kind.label(), case.partitions), e),
                }
            }
        }
    }
    Ok(())
}

/// P14: `SIMBA_BENCH_P14_SCHEDULES` schedules (default 100,000; quick 2,000), of them
/// `SIMBA_BENCH_P14_HOT` (default 2,500; quick 200) every second, on PostgreSQL and Redis, or
/// on the stores `--backends` names (`SIMBA_BENCH_P14_SCHEDULES_<STORE>`, e.g. `_SQLITE`, sets
/// one store's size). First the node's heap per schedule in process
/// (`SIMBA_BENCH_P14_HEAP_SCHEDULES`, default 20,000; quick 2,000); `--only p14-heap` runs that
/// alone.
async fn p14(ts: &[Target], args: &Args, plan: Plan, run: &str, r: &mut Results, step: &impl Fn(&str)) {
    let num = |var: &str, default: usize| {
        std::env::var(var).ok().and_then(|v| v.trim().replace(['_', ','], "").parse().ok()).unwrap_or(default)
    };
    let (all, hot) = if plan.quick { (2_000, 200) } else { (100_000, 2_500) };
    let (all, hot) = (num("SIMBA_BENCH_P14_SCHEDULES", all), num("SIMBA_BENCH_P14_HOT", hot));
    // In process over the in-memory store, whose partition reads scan every row: a smaller
    // size than the stores' (the figure is per schedule).
    let in_process = num("SIMBA_BENCH_P14_HEAP_SCHEDULES", if plan.quick { 2_000 } else { 20_000 });
    step(&format!("P14 node heap in process: {in_process} schedules"));
    match scale::held_heap(in_process).await {
        Ok((b, rss)) => r.p14_heap = Some((in_process, b, rss)),
        Err(e) => r.error("P14 node heap", e),
    }
    for t in ts.iter().filter(|_| args.only.as_ref().is_none_or(|o| o.iter().any(|x| x == "p14"))) {
        let default = matches!(t.kind, Kind::Postgres | Kind::Redis);
        if !(wants_backend(args, t.kind) && (default || args.backends.is_some())) {
            continue;
        }
        let own = format!("SIMBA_BENCH_P14_SCHEDULES_{}", t.kind.label().to_uppercase());
        let schedules = num(&own, all);
        let sizes = scale::Sizes {
            schedules,
            hot: hot.min(schedules),
            window: if plan.quick { Duration::from_secs(8) } else { Duration::from_secs(30) },
            lease: Duration::from_secs(5),
            renew: Duration::from_secs(1),
        };
        step(&format!(
            "P14 schedules at scale, {}: {schedules} schedules, {} every second, 3 node processes",
            t.kind.label(),
            sizes.hot
        ));
        match scale::p14(t, sizes, run, step).await {
            Ok(row) => r.p14.push(row),
            Err(e) => r.error(&format!("P14 {}", t.kind.label()), e),
        }
    }
}

fn args() -> Result<Args> {
    let mut a = Args {
        quick: std::env::var("SIMBA_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0"),
        only: None,
        backends: std::env::var("SIMBA_BENCH_BACKENDS").ok().map(|v| list(&v)),
        out: ".".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        match x.as_str() {
            "--quick" => a.quick = true,
            "--only" => {
                let v = it.next().ok_or_else(|| anyhow!("--only needs a list such as p1,p3"))?;
                a.only = Some(v.split(',').map(|s| s.trim().to_lowercase()).collect());
            }
            "--backends" => {
                let v = it.next().ok_or_else(|| anyhow!("--backends needs a list such as sqlite,redis"))?;
                a.backends = Some(list(&v));
            }
            "--out" => a.out = it.next().ok_or_else(|| anyhow!("--out needs a directory"))?.into(),
            other => {
                return Err(anyhow!(
                    "unknown argument `{other}`: use --quick, --only p1,p2,..., --backends sqlite,redis,... or --out DIR (SIMBA_BENCH_QUICK=1 = --quick)"
                ));
            }
        }
    }
    Ok(a)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().is_some_and(|a| a == "--startup-child") {
        return startup::child(&argv[1..]).await;
    }
    let args = args()?;
    let ts = targets()?;
    let started = Instant::now();
    let run = format!("{:08x}", rand::random::<u32>());
    let plan = if args.quick {
        Plan { quick: true, reps: 2, rep_len: Duration::from_millis(500) }
    } else {
        Plan { quick: false, reps: 3, rep_len: Duration::from_millis(1500) }
    };
    let wants = |m: &str| args.only.as_ref().is_none_or(|o| o.iter().any(|x| x == m));
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!(
        "simba benchmarks: {} mode, {cores} cores, run {run}{}",
        if plan.quick { "quick" } else { "full" },
        args.only.as_ref().map(|o| format!(", only {}", o.join(","))).unwrap_or_default()
    );
    let mut r = Results::new(plan, cores);
    let step = |name: &str| println!("[{:>6.1} s] {name}", started.elapsed().as_secs_f64());

    if wants("p7") {
        let window = if plan.quick { Duration::from_secs(3) } else { Duration::from_secs(20) };
        // etcd too: its backend mirrors what its sessions hold (one entry per lease). At a
        // tenth of the leases: this etcd (Debian's 3.4 on 2 cores) commits about 120 writes a
        // second serially, and after 100,000 lease keys (and the revoke of the first session's
        // 100,000) its apply loop fell behind for longer than the 15 s lease ("waiting for the
        // applied index took too long" on every keep-alive), so the second phase's terms were
        // lost to the store, not to the client (BENCHMARKS.md, P7).
        for (kind, scale) in [(Kind::Redis, 1), (Kind::Etcd, 10)] {
            let (leases, idle) =
                if plan.quick { (5_000 / scale, 1_000 / scale) } else { (100_000 / scale, 10_000 / scale) };
            step(&format!("P7 memory per lease and idle CPU ({})", kind.label()));
            match measures::p7(target(&ts, kind)?, leases, idle, window, &run).await {
                Ok(p) => r.p7.push(p),
                Err(e) => r.error(&format!("P7 {}", kind.label()), e),
            }
        }
    }
    if wants("p1") {
        let levels: Vec<usize> = match std::env::var("SIMBA_BENCH_P1_LEVELS") {
            Ok(v) => v.split(',').map(|x| x.trim().parse()).collect::<Result<_, _>>()?,
            Err(_) if plan.quick => vec![1, 100, 1000],
            Err(_) => vec![1, 1000, 10_000, 100_000],
        };
        let levels = levels.as_slice();
        for kind in [Kind::Redis, Kind::Postgres, Kind::ZooKeeper, Kind::Etcd] {
            step(&format!("P1 renewal cost, {}", kind.label()));
            match measures::p1(target(&ts, kind)?, levels, &run).await {
                Ok(rows) => r.p1.extend(rows),
                Err(e) => r.error(&format!("P1 {}", kind.label()), e),
            }
        }
        step("P1 anchor: Redlock-style extend per lock (Redis)");
        match measures::p1_anchor(&target(&ts, Kind::Redis)?.url, levels, &run).await {
            Ok(rows) => r.p1.extend(rows),
            Err(e) => r.error("P1 anchor", e),
        }
    }
    if wants("p2") {
        for t in &ts {
            step(&format!("P2 acquire+release throughput, {}", t.kind.label()));
            match measures::p2(t, plan, &run).await {
                Ok(row) => r.p2.push(row),
                Err(e) => r.error(&format!("P2 {}", t.kind.label()), e),
            }
        }
    }
    // P4 runs before P3: a crashed client of P3 leaves its driver tasks behind (as a hung
    // process would), which would add noise to P4's millisecond figures.
    if wants("p4") {
        let cfg = simba::SimbaConfig::default();
        let trials = if plan.quick { 4 } else { 20 };
        for t in &ts {
            step(&format!("P4 graceful handover, {} ({trials} trials)", t.kind.label()));
            match measures::handovers(t, cfg, trials, 4, false, &run).await {
                Ok(v) => r.p4.push((t.kind.label().to_owned(), v)),
                Err(e) => r.error(&format!("P4 {}", t.kind.label()), e),
            }
        }
    }
    if wants("p3") {
        let cfg = measures::config(Duration::from_secs(1), Duration::from_millis(333))?;
        let trials = if plan.quick { 6 } else { 50 };
        for t in &ts {
            step(&format!("P3 crash failover, {} ({trials} trials, lease 1 s)", t.kind.label()));
            match measures::handovers(t, cfg, trials, 10, true, &run).await {
                Ok(v) => {
                    r.p3.push((t.kind.label().to_owned(), v.iter().map(|h| h.ms).collect(), cfg.failover_bound()));
                }
                Err(e) => r.error(&format!("P3 {}", t.kind.label()), e),
            }
        }
    }
    if wants("p6") {
        p6(&ts, &args, plan, &run, &mut r, &step).await?;
    }
    if wants("p8") {
        let (sessions, per, window) =
            if plan.quick { (50, 20, Duration::from_secs(5)) } else { (500, 20, Duration::from_secs(30)) };
        let period = Duration::from_secs(5);
        for kind in [Kind::Postgres, Kind::Redis] {
            step(&format!(
                "P8 a fleet: {sessions} sessions x {per} leases on {}, beside one extend per lock",
                kind.label()
            ));
            match fleet::p8(target(&ts, kind)?, sessions, per, period, window, &run).await {
                Ok(row) => r.p8.push(row),
                Err(e) => r.error(&format!("P8 {}", kind.label()), e),
            }
        }
    }
    if wants("p10") {
        let sections: usize = match std::env::var("SIMBA_BENCH_P10_SECTIONS") {
            Ok(v) => v.trim().parse().map_err(|e| anyhow!("SIMBA_BENCH_P10_SECTIONS={v}: {e}"))?,
            Err(_) if plan.quick => 20,
            Err(_) => 100,
        };
        let (clients, tasks, iterations) = (3, 4, sections);
        for t in &ts {
            for fair in [false, true] {
                step(&format!(
                    "P10 lock fairness, {}: {clients} clients x {tasks} tasks x {iterations} sections, fair_locks {fair}",
                    t.kind.label()
                ));
                match fairness::p10(t, fair, clients, tasks, iterations, &run).await {
                    Ok(row) => r.p10.push(row),
                    Err(e) => r.error(&format!("P10 {}", t.kind.label()), e),
                }
            }
        }
    }
    // P5 last, one backend at a time, each in a quiet phase of its own (issue 15 item 4):
    // nothing else of the benchmark runs while a backend's cron job fires, and
    // tokio-cron-scheduler fires beside it in the same phase.
    if wants("p5") {
        let slots: u64 = match std::env::var("SIMBA_BENCH_P5_SLOTS") {
            Ok(v) => v.trim().parse().map_err(|e| anyhow!("SIMBA_BENCH_P5_SLOTS={v}: {e}"))?,
            Err(_) if plan.quick => 10,
            Err(_) => 60,
        };
        for t in &ts {
            if !wants_backend(&args, t.kind) {
                continue;
            }
            step(&format!(
                "P5 cron lateness, {}: {slots} one-second slots beside tokio-cron-scheduler, alone",
                t.kind.label()
            ));
            match measures::p5(t, slots, &run).await {
                Ok(p) => r.p5.push(p),
                Err(e) => r.error(&format!("P5 {}", t.kind.label()), e),
            }
        }
    }
    // P9 after P5, in quiet phases too: history on and off side by side, one backend at a time.
    if wants("p9") {
        let (slots, calls): (u64, usize) = match std::env::var("SIMBA_BENCH_P9_SLOTS") {
            Ok(v) => (v.trim().parse().map_err(|e| anyhow!("SIMBA_BENCH_P9_SLOTS={v}: {e}"))?, 100),
            Err(_) if plan.quick => (10, 20),
            Err(_) => (60, 100),
        };
        for t in &ts {
            if !wants_backend(&args, t.kind) {
                continue;
            }
            step(&format!(
                "P9 the cost of history, {}: {calls} counted claims on and off, {slots} slots side by side",
                t.kind.label()
            ));
            match measures::p9(t, slots, calls, &run).await {
                Ok(p) => r.p9.push(p),
                Err(e) => r.error(&format!("P9 {}", t.kind.label()), e),
            }
        }
    }
    // P11: start-up, one child process after the other (issue 15 item 8), on SQLite and
    // PostgreSQL as the issue asks and on the other stores beside them.
    if wants("p11") {
        let trials = if plan.quick { 3 } else { 20 };
        for t in &ts {
            if !wants_backend(&args, t.kind) {
                continue;
            }
            step(&format!(
                "P11 start-up, {}: {trials} processes, each to its first run and its group share",
                t.kind.label()
            ));
            match startup::p11(t, trials, 8, &run).await {
                Ok(row) => r.p11.push(row),
                Err(e) => r.error(&format!("P11 {}", t.kind.label()), e),
            }
        }
    }
    // P12 and P13 (issue 38): renewal latency beside history at full retention, and run-now
    // latency, one backend at a time (SQLite, PostgreSQL and Redis unless --backends says).
    if wants("p12") || wants("p13") {
        let secs = if plan.quick { 5 } else { 30 };
        let triggers = if plan.quick { 5 } else { 20 };
        for t in &ts {
            let default = matches!(t.kind, Kind::Sqlite | Kind::Postgres | Kind::Redis);
            if !(wants_backend(&args, t.kind) && (default || args.backends.is_some())) {
                continue;
            }
            if wants("p12") {
                step(&format!(
                    "P12 renewal latency, {}: history at retention 10,000 and a 100 ms job, {secs} s on, {secs} s off",
                    t.kind.label()
                ));
                match history::p12(t, secs, &run).await {
                    Ok(row) => r.p12.push(row),
                    Err(e) => r.error(&format!("P12 {}", t.kind.label()), e),
                }
            }
            if wants("p13") {
                step(&format!("P13 run-now latency, {}: {triggers} requests", t.kind.label()));
                match history::p13(t, triggers, &run).await {
                    Ok(row) => r.p13.push(row),
                    Err(e) => r.error(&format!("P13 {}", t.kind.label()), e),
                }
            }
        }
    }
    // P14 (issue 36 item 6): schedules as data at scale, three node processes per store, one
    // store at a time, after everything else (it loads the machine for minutes); PostgreSQL
    // and Redis unless --backends says.
    if wants("p14") || wants("p14-heap") {
        p14(&ts, &args, plan, &run, &mut r, &step).await;
    }
    r.wall = started.elapsed();
    step("writing BENCHMARKS.md and benches/*.svg");
    println!("{}", r.table());
    r.write(&args.out)?;
    if !r.errors.is_empty() {
        return Err(anyhow!("{} measure(s) failed: {}", r.errors.len(), r.errors.join("; ")));
    }
    Ok(())
}
