//! The soak node (issue 16 item 7, `bash scripts/soak.sh`): one runtime with a cron job every
//! second and a 16-partition group, plus a task that takes and releases a lock under a new
//! name every `SIMBA_SOAK_LOCK_MS` (default 50 ms), as a service locking per request does.
//! Every 10 s it prints one line with its resident memory, for `SIMBA_SOAK_SECS` (default
//! 1800), then shuts down gracefully:
//!
//! ```text
//! soak <elapsed_s> <rss_kib> <locks_taken> <cron_runs> <partition_terms>
//! ```

#![allow(clippy::print_stdout)] // The figures are the point.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use simba::{Runtime, Term, simba_partitioned, simba_scheduled};

static RUNS: AtomicU64 = AtomicU64::new(0);
static TERMS: AtomicU64 = AtomicU64::new(0);

#[simba_scheduled(cron = "* * * * * *")]
async fn soak_tick(_term: &Term) {
    RUNS.fetch_add(1, Ordering::Relaxed);
}

#[simba_partitioned(group = "soak", partitions = 16)]
async fn soak_parts(term: &Term, _partition: u32) {
    TERMS.fetch_add(1, Ordering::Relaxed);
    term.cancelled().await;
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let secs = env_u64("SIMBA_SOAK_SECS", 1800);
    let every = Duration::from_millis(env_u64("SIMBA_SOAK_LOCK_MS", 50).max(1));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let rt = Runtime::builder()
        .shutdown_on(async move {
            let _ = stop_rx.await;
        })
        .start()
        .await?;
    let simba = rt.simba().clone();
    let taken = std::sync::Arc::new(AtomicU64::new(0));
    let churn = {
        let taken = std::sync::Arc::clone(&taken);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            for n in 0u64.. {
                tick.tick().await;
                if let Ok(guard) = simba.lock(format!("soak-lock.{n}")).acquire().await {
                    drop(guard);
                    taken.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let start = Instant::now();
    let mut report = tokio::time::interval(Duration::from_secs(10));
    while start.elapsed() < Duration::from_secs(secs) {
        report.tick().await;
        println!(
            "soak {} {} {} {} {}",
            start.elapsed().as_secs(),
            rss_kib(),
            taken.load(Ordering::Relaxed),
            RUNS.load(Ordering::Relaxed),
            TERMS.load(Ordering::Relaxed)
        );
    }
    churn.abort();
    let _ = stop_tx.send(());
    rt.shutdown().await;
    Ok(())
}
