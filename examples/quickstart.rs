//! Simba's quickstart: two scheduled jobs and one partitioned group, on SQLite (`./simba.db`),
//! with no configuration file and no server. The quickstart names SQLite in code
//! (`Runtime::builder().default_backend_url(..)`); `simba::run()` alone names no store and
//! refuses to start until `simba.toml` or `SIMBA_BACKEND__URL` gives one.
//!
//! ```text
//! cargo run --example quickstart     # in two or three terminals: watch the jobs and partitions spread
//! ```
//!
//! Each job runs on one node at a time; the 8 partitions of `billing` spread over the running
//! nodes. Stop a node with Ctrl-C (it hands its work over at once) or kill it (the others take
//! over when its session expires). `SIMBA_QUICKSTART_SECS=20` stops it after 20 seconds.
//! Copy `examples/simba.toml` beside the binary to change anything.

use std::time::Duration;

use simba::{Runtime, Term, simba_partitioned, simba_scheduled};
use tracing::info;

/// Every 5 seconds, on whichever node holds the lease `report`.
#[simba_scheduled(cron = "*/5 * * * * *")]
async fn report(term: &Term) -> anyhow::Result<()> {
    // A step that must not start when the term is about to end.
    term.ensure_valid(Duration::from_millis(500))?;
    info!(job = "report", token = term.token(), "writing the report with fencing token {}", term.token());
    Ok(())
}

/// Every 2 seconds, exact on the monotonic clock.
#[simba_scheduled(fixed_rate = "2s", lease = "heartbeat")]
async fn heartbeat(term: &Term) -> anyhow::Result<()> {
    info!(job = "heartbeat", token = term.token(), remaining = ?term.remaining(), "heartbeat");
    Ok(())
}

/// One worker per partition this node holds; it runs until its term is cancelled.
#[simba_partitioned(group = "billing", partitions = 8)]
async fn billing(term: &Term, partition: u32) -> anyhow::Result<()> {
    info!(job = "billing", partition, token = term.token(), "partition worker started");
    let mut batch = 0u64;
    loop {
        tokio::select! {
            _ = term.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_secs(3)) => {}
        }
        batch += 1;
        info!(job = "billing", partition, token = term.token(), batch, "settled a batch");
    }
    info!(job = "billing", partition, "partition worker handed over");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    simba_examples::init_logging();
    // An application chooses the process's rustls provider; the Redis and ZooKeeper drivers read
    // it for `rediss://` and `tls=true` (simba installs none).
    #[cfg(any(feature = "redis", feature = "zookeeper", feature = "etcd"))]
    simba::backend::install_tls_provider();
    // A service names its store in simba.toml (or SIMBA_BACKEND__URL) and calls
    // `simba::run().await`, which refuses to start without one. The quickstart chooses SQLite
    // in ./simba.db in code, so that it runs with no file and no server (a file or the variable
    // still wins), and it can stop by itself.
    let builder = Runtime::builder().default_backend_url("sqlite://simba.db");
    match std::env::var("SIMBA_QUICKSTART_SECS").ok().and_then(|s| s.parse::<u64>().ok()) {
        Some(secs) => {
            let stop = async move {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(secs)) => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            };
            builder.shutdown_on(stop).run().await?;
        }
        None => builder.run().await?,
    }
    Ok(())
}
