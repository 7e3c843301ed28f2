//! The soak node (issue 16 item 7, `bash scripts/soak.sh`): one runtime with a cron job every
//! second and a 16-partition group; it holds `SIMBA_SOAK_HELD` (default 1,000) locks for the
//! whole run, takes and releases a lock under a new name every `SIMBA_SOAK_LOCK_MS` (default
//! 15 ms: about 120,000 names in 30 minutes), as a service locking per request does, and every
//! `SIMBA_SOAK_CHURN_S` (default 60) seconds starts a second runtime (its own session) that
//! joins the group for half that time and leaves, so the first one's partitions move away and
//! back. With `[metrics] listen` and `[dashboard] listen` in its configuration (the soak script
//! sets both), it scrapes its own `/metrics` and reads the dashboard's `/api/state` at every
//! sample, as Prometheus and an open page would. Every 10 s it prints one line, for
//! `SIMBA_SOAK_SECS` (default 1800), then shuts down gracefully:
//!
//! ```text
//! soak <elapsed_s> <rss_kib> <open_fds> <locks_taken> <cron_runs> <partition_terms> <group_joins> <metrics_bytes> <metrics_series> <state_bytes>
//! ```
//!
//! `metrics_bytes` and `metrics_series` are the size of the `/metrics` answer and its number of
//! series (lines that are no comment), `state_bytes` the size of `/api/state`; each is 0 where
//! nothing is served.

#![allow(clippy::print_stdout)] // The figures are the point.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use simba::{Runtime, Term, simba_partitioned, simba_scheduled};

/// With the `mimalloc` feature (`SIMBA_SOAK_ALLOC=mimalloc bash scripts/soak.sh`), the soak runs
/// on mimalloc instead of glibc's malloc, to tell the allocator's own growth from the node's.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// With the `jemalloc` feature (`SIMBA_SOAK_ALLOC=jemalloc`), on jemalloc, which returns freed
/// pages to the system on a timer (its decay), where glibc's thread arenas keep them.
#[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

/// The body of `GET path` on `addr`, empty when nothing answers.
async fn http_get(addr: Option<std::net::SocketAddr>, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(addr) = addr else { return String::new() };
    let Ok(mut conn) = tokio::net::TcpStream::connect(addr).await else { return String::new() };
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    let mut reply = Vec::new();
    if conn.write_all(request.as_bytes()).await.is_err() || conn.read_to_end(&mut reply).await.is_err() {
        return String::new();
    }
    let reply = String::from_utf8_lossy(&reply);
    reply.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default()
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let secs = env_u64("SIMBA_SOAK_SECS", 1800);
    let held_n = env_u64("SIMBA_SOAK_HELD", 1000);
    let every = Duration::from_millis(env_u64("SIMBA_SOAK_LOCK_MS", 15).max(1));
    let churn_every = Duration::from_secs(env_u64("SIMBA_SOAK_CHURN_S", 60).max(2));
    // SIMBA_SOAK_URL may be a TLS URL: as an application, choose the rustls provider the Redis
    // and ZooKeeper drivers read (simba installs none).
    simba::backend::install_tls_provider();
    let rt = Runtime::builder().shutdown_on(std::future::pending()).start().await?;
    let simba = rt.simba().clone();
    simba.live().await?;
    let mut held = Vec::new();
    for i in 0..held_n {
        held.push(simba.lock(format!("soak-held.{i}")).acquire().await?);
    }
    let taken = Arc::new(AtomicU64::new(0));
    let churn = {
        let taken = Arc::clone(&taken);
        let simba = simba.clone();
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
    let joins = Arc::new(AtomicU64::new(0));
    let groups = {
        let joins = Arc::clone(&joins);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(churn_every / 2).await;
                let Ok(other) = Runtime::builder().shutdown_on(std::future::pending()).start().await else { continue };
                joins.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(churn_every / 2).await;
                other.shutdown().await;
            }
        })
    };
    let start = Instant::now();
    let mut report = tokio::time::interval(Duration::from_secs(10));
    let (metrics_at, dashboard_at) = (rt.metrics_addr(), rt.dashboard_addr());
    while start.elapsed() < Duration::from_secs(secs) {
        report.tick().await;
        let metrics = http_get(metrics_at, "/metrics").await;
        let series = metrics.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).count();
        let state = http_get(dashboard_at, "/api/state").await;
        println!(
            "soak {} {} {} {} {} {} {} {} {} {}",
            start.elapsed().as_secs(),
            rss_kib(),
            open_fds(),
            taken.load(Ordering::Relaxed),
            RUNS.load(Ordering::Relaxed),
            TERMS.load(Ordering::Relaxed),
            joins.load(Ordering::Relaxed),
            metrics.len(),
            series,
            state.len()
        );
    }
    churn.abort();
    groups.abort();
    let still = held.iter().filter(|g| g.term().is_valid()).count();
    println!("soak held {still} of {held_n} locks to the end");
    drop(held);
    rt.shutdown().await;
    Ok(())
}
