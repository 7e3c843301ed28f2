//! P14's node processes (BENCHMARKS.md), apart from the benchmark binary so that only they
//! count their allocations: this binary's global allocator is the system's, counting
//! (`stats_alloc`, a few atomic adds per allocation), which tells what a node's data keeps (its
//! live heap) apart from what the allocator keeps from the system (RSS). The other measures
//! run in `simba-bench`, on the plain system allocator. `simba-bench` starts this binary, found
//! beside its own executable (`cargo build --release -p simba-bench` builds both):
//!
//! - `simba-bench-node schedule-node URL NAMESPACE NODE LEASE_MS RENEW_MS`: one of P14's three
//!   nodes;
//! - `simba-bench-node held-heap N`: P14's node heap per schedule, in process.

#![allow(clippy::print_stdout)] // The figures go to the parent on standard output.

#[path = "../p14_common.rs"]
mod p14_common;

use std::alloc::System;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use simba::admin::Schedules;
use simba::job::{Handler, job_future};
use simba::runtime::{Runtime, RuntimeConfig};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tokio::time::{Instant, sleep, timeout};

use crate::p14_common::{COLD, PARTITIONS, create, id, rss};

/// The system allocator, counting; the binary's global allocator.
#[global_allocator]
static ALLOC: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The bytes allocated and not freed now (the sizes asked for, not the allocator's overhead).
fn live() -> u64 {
    let s = ALLOC.stats();
    // A reallocation's growth is counted in `bytes_allocated`, its shrinking in
    // `bytes_deallocated` (`bytes_reallocated` is their net, already included).
    u64::try_from(s.bytes_allocated.saturating_sub(s.bytes_deallocated)).unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match argv.first().map(String::as_str) {
        Some("schedule-node") => schedule_node(&argv[1..]).await,
        Some("held-heap") => held_heap(&argv[1..]).await,
        _ => bail!(
            "simba-bench-node is started by simba-bench: schedule-node URL NAMESPACE NODE LEASE_MS RENEW_MS, or held-heap N"
        ),
    }
}

/// `schedule-node URL NAMESPACE NODE LEASE_MS RENEW_MS`: runs a runtime
/// with the handler `tick` (which does nothing) until its standard input closes, printing
/// `session <id>` once its session is live.
async fn schedule_node(args: &[String]) -> Result<()> {
    // The node's log goes to its stderr file (`simba-bench-p14-NAMESPACE-NODE.stderr` in the
    // temporary directory): warnings and errors unless RUST_LOG says more.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).with_writer(std::io::stderr).init();
    let [url, ns, name, lease_ms, renew_ms] = args else {
        bail!("schedule-node needs URL NAMESPACE NODE LEASE_MS RENEW_MS");
    };
    let toml = format!(
        "[backend]\nurl = \"{url}\"\nnamespace = \"{ns}\"\n\n[session]\nlease_duration = \"{lease_ms}ms\"\n\
         renew_interval = \"{renew_ms}ms\"\n\n[schedules]\npartitions = {PARTITIONS}\n"
    );
    let cfg = RuntimeConfig::from_toml_str(&toml, "benchmark", Vec::new())?;
    let tick = Handler::from_closure("tick", |_term, _payload| job_future(async {}));
    let rt = Runtime::builder().config(cfg).node_name(name.clone()).without_registry().handler(tick).start().await?;
    let session = timeout(Duration::from_secs(30), rt.simba().live())
        .await
        .map_err(|_| anyhow!("no live session within 30 s"))??;
    println!("session {session}");
    // The live heap, for the parent's per-schedule figure.
    tokio::spawn(async {
        loop {
            println!("heap {}", live());
            sleep(Duration::from_millis(500)).await;
        }
    });
    // Until the parent closes the pipe (or dies).
    let _ = tokio::task::spawn_blocking(|| {
        use std::io::Read;
        let mut sink = Vec::new();
        std::io::stdin().read_to_end(&mut sink)
    })
    .await;
    rt.shutdown().await;
    Ok(())
}

/// P14's node heap per schedule, in process: `n` yearly schedules created in an in-memory
/// store with no node running, then one node (holding every partition) started; the growth of
/// its live heap once it has loaded them, less the growth of the same node over an empty
/// store, per schedule. The store's rows are allocated before the node starts, so the growth
/// is what the node keeps for the schedules it holds.
/// `held-heap N`: prints `held-heap BYTES RSS_BYTES`, the bytes per schedule of live heap and
/// of RSS (the process's own).
async fn held_heap(args: &[String]) -> Result<()> {
    let [n] = args else { bail!("held-heap needs the number of schedules") };
    let n: usize = n.parse().map_err(|_| anyhow!("held-heap: `{n}` is not a number of schedules"))?;
    let with = node_growth(n).await?;
    let without = node_growth(0).await?;
    let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / n.max(1) as f64;
    println!("held-heap {} {}", per(with.0, without.0), per(with.1, without.1));
    Ok(())
}

/// The growth of one node's live heap and of the process's RSS once it loaded `n` schedules
/// from an in-memory store.
async fn node_growth(n: usize) -> Result<(u64, u64)> {
    let store = simba::backend::memory::MemoryBackend::new();
    let api = Schedules::for_backend(&store)?.with_partitions(PARTITIONS)?.with_handlers(["tick"]);
    let ids: Vec<String> = (0..n).map(id).collect();
    create(&api, &ids, COLD).await?;
    let toml = format!(
        "[session]\nlease_duration = \"5s\"\nrenew_interval = \"1s\"\n\n[schedules]\npartitions = {PARTITIONS}\n"
    );
    let cfg = RuntimeConfig::from_toml_str(&toml, "benchmark", Vec::new())?;
    let tick = Handler::from_closure("tick", |_term, _payload| job_future(async {}));
    let before = (live(), rss(std::process::id())?);
    let rt = Runtime::builder().config(cfg).without_registry().backend(store.clone()).handler(tick).start().await?;
    let session = rt.simba().live().await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while (0..PARTITIONS)
        .any(|p| store.holder(&format!("simba.schedules.{p}")).and_then(|h| h.0).is_none_or(|h| h != session))
    {
        if Instant::now() > deadline {
            bail!("one node did not hold every partition within 120 s");
        }
        sleep(Duration::from_millis(100)).await;
    }
    // Loaded once the heap stops moving: three samples 200 ms apart within 0.5% of each other.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = [0u64; 3];
    for i in 0.. {
        sleep(Duration::from_millis(200)).await;
        last[i % 3] = live();
        let (lo, hi) = (last.iter().min().copied().unwrap_or(0), last.iter().max().copied().unwrap_or(0));
        if i >= 10 && lo > 0 && (hi - lo) * 200 <= hi || Instant::now() > deadline {
            break;
        }
    }
    let grown = (live().saturating_sub(before.0), rss(std::process::id())?.saturating_sub(before.1));
    rt.shutdown().await;
    Ok(grown)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_count_follows_what_is_kept() {
        let before = super::live();
        let kept = vec![1u8; 1 << 20];
        let during = super::live();
        drop(kept);
        // Other tests allocate at the same time: the megabyte dominates.
        assert!(during >= before + (1 << 20) - (64 << 10), "{before} -> {during}");
    }
}
