//! P11, start-up (issue 15 item 8): from a process's start to its first job run, and to holding
//! its share of a partition group, when the lease is free. The benchmark starts itself again
//! as a child (`simba-bench --startup-child URL LEASE GROUP PARTITIONS`): the child builds a
//! `Runtime` with one fixed-rate job (every 10 ms: its first slot is due 10 ms after its term
//! starts) on a fresh lease and one partitioned job on a fresh
//! group, and prints a line to its standard output at the start of `main`, at the first run of
//! the job and when it holds every partition of the group (its share: it is the group's only
//! member). The parent times each line from just before it spawned the child, on its own
//! monotonic clock (a pipe's latency is microseconds), so no clock is compared across
//! processes. The child then shuts down gracefully (releasing its leases) and exits.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use simba::Term;
use simba::job::{JobFuture, PartitionedJob, Schedule, ScheduledJob, job_future};
use simba::runtime::{Runtime, RuntimeConfig};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::{Instant, timeout};

use crate::measures::Target;
use crate::stats;

/// The fixed-rate job's period: its first slot is due one period after its term starts, so
/// this much of the time to the first run is the schedule's, not the start-up's.
pub(crate) const FIRST_SLOT: Duration = Duration::from_millis(10);

/// The child's marker lines.
const MAIN: &str = "startup main";
const FIRST_RUN: &str = "startup first-run";
const SHARE: &str = "startup share";

/// One backend's P11 figures, ms from spawning the process.
#[derive(Debug, Clone)]
pub(crate) struct P11Row {
    pub(crate) system: String,
    pub(crate) partitions: u32,
    /// Until the child's `main` ran (exec, loader, Tokio's start): the floor of any process.
    pub(crate) to_main: Vec<f64>,
    /// Until the job's first run started.
    pub(crate) to_first_run: Vec<f64>,
    /// Until the child held every partition of its group.
    pub(crate) to_share: Vec<f64>,
}

impl P11Row {
    /// Goal (issue 15 item 8): the first run within 100 ms of the process's start on SQLite
    /// (p50); the other backends are reported beside it.
    pub(crate) const GOAL_MS: f64 = 100.0;

    /// Whether the goal applies to this row.
    pub(crate) fn has_goal(&self) -> bool {
        self.system == "SQLite"
    }

    /// Whether the median first run came within the goal.
    pub(crate) fn met(&self) -> bool {
        stats::median(&self.to_first_run) < Self::GOAL_MS
    }
}

/// `trials` child processes on `t`, one after the other, each on a fresh lease and group.
pub(crate) async fn p11(t: &Target, trials: usize, partitions: u32, run: &str) -> Result<P11Row> {
    let exe = std::env::current_exe().context("the benchmark's own executable")?;
    let label = t.kind.label();
    let mut row = P11Row {
        system: label.to_owned(),
        partitions,
        to_main: Vec::new(),
        to_first_run: Vec::new(),
        to_share: Vec::new(),
    };
    for i in 0..trials {
        let lease = format!("p11.{}.{run}.{i}", label.to_lowercase());
        let group = format!("p11g.{}.{run}.{i}", label.to_lowercase());
        let started = Instant::now();
        let mut child = tokio::process::Command::new(&exe)
            .args(["--startup-child", &t.url, &lease, &group, &partitions.to_string()])
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("start the benchmark's child process")?;
        let out = child.stdout.take().ok_or_else(|| anyhow!("the child has no standard output"))?;
        let mut lines = BufReader::new(out).lines();
        let (mut main, mut first, mut share) = (None, None, None);
        let wait = timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                let at = started.elapsed().as_secs_f64() * 1e3;
                match line.as_str() {
                    MAIN => main = Some(at),
                    FIRST_RUN => first = Some(at),
                    SHARE => share = Some(at),
                    _ => {}
                }
            }
            anyhow::Ok(())
        })
        .await;
        let status = timeout(Duration::from_secs(30), child.wait()).await;
        wait.map_err(|_| anyhow!("{label}: the child printed nothing for 30 s"))??;
        let status = status.map_err(|_| anyhow!("{label}: the child did not exit within 30 s"))??;
        match (main, first, share) {
            (Some(m), Some(f), Some(s)) if status.success() => {
                row.to_main.push(m);
                row.to_first_run.push(f);
                row.to_share.push(s);
            }
            _ => {
                return Err(anyhow!(
                    "{label}: trial {i}: the child exited {status} with markers main {main:?}, first run {first:?}, share {share:?} ms"
                ));
            }
        }
    }
    Ok(row)
}

/// The job's first run and the partitions held so far, in the child.
static HELD: Mutex<Option<(BTreeSet<u32>, u32, bool)>> = Mutex::new(None);

fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn first_run(_term: Term) -> JobFuture {
    job_future(async move {
        let mut h = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, _, ran)) = h.as_mut()
            && !*ran
        {
            *ran = true;
            say(FIRST_RUN);
        }
    })
}

fn partition(term: Term, i: u32) -> JobFuture {
    job_future(async move {
        {
            let mut h = HELD.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((held, of, _)) = h.as_mut() {
                let before = held.len() as u32;
                held.insert(i);
                if before < *of && held.len() as u32 == *of {
                    say(SHARE);
                }
            }
        }
        term.cancelled().await;
    })
}

/// The child: `URL LEASE GROUP PARTITIONS`. Prints its markers, then shuts down once both
/// came (or after 20 s) and exits.
pub(crate) async fn child(args: &[String]) -> Result<()> {
    say(MAIN);
    let [url, lease, group, partitions] = args else {
        return Err(anyhow!("--startup-child needs URL LEASE GROUP PARTITIONS"));
    };
    let partitions: u32 = partitions.parse().context("PARTITIONS")?;
    *HELD.lock().unwrap_or_else(PoisonError::into_inner) = Some((BTreeSet::new(), partitions, false));
    let job = ScheduledJob::new("p11_first", Schedule::FixedRate(FIRST_SLOT), &first_run).with_lease(lease.clone());
    let part = PartitionedJob::new("p11_part", partitions, &partition).with_group(group.clone());
    let cfg = RuntimeConfig::from_toml_str(&format!("[backend]\nurl = \"{url}\"\n"), "benchmark", Vec::new())?;
    let rt = Runtime::builder().config(cfg).without_registry().job(job).partitioned(part).start().await?;
    let done = async {
        loop {
            let ready = HELD
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .is_some_and(|(held, of, ran)| *ran && held.len() as u32 == *of);
            if ready {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    let _ = timeout(Duration::from_secs(20), done).await;
    rt.shutdown().await;
    Ok(())
}
