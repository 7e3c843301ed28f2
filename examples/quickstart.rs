//! Three nodes contend for one lease on SQLite (`./simba.db`, no server): each prints who
//! holds the lease and with which fencing token, and the leader steps down every few seconds
//! so you can watch the handover. Ctrl-C stops every node cleanly.
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! `SIMBA_QUICKSTART_SECS=20` stops it after 20 seconds instead of waiting for Ctrl-C.

use std::time::Duration;

use simba::{FnListener, Simba, SimbaConfig, Term};
use tracing::info;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    simba_examples::init_logging();
    let config = SimbaConfig::builder().lease_duration(Duration::from_secs(6)).build()?;
    let url = std::env::var("SIMBA_QUICKSTART_DB").unwrap_or_else(|_| "sqlite://simba.db".to_owned());

    let mut nodes = Vec::new();
    for node in ["node-a", "node-b", "node-c"] {
        let simba = Simba::connect(&url, config).await?;
        let election = simba.election("report");
        let listener = FnListener::new(
            move |t: &Term| info!(node, lease = t.name(), token = t.token(), "elected"),
            move |t: &Term, reason| info!(node, lease = t.name(), token = t.token(), %reason, "revoked"),
        );
        election.run_while_leader_with(move |term: Term| leader_task(node, term), listener)?;
        nodes.push((node, simba, election));
    }

    let stop_after = std::env::var("SIMBA_QUICKSTART_SECS").ok().and_then(|s| s.parse::<u64>().ok());
    let mut tick = tokio::time::interval(Duration::from_secs(4));
    tick.tick().await;
    let stop = async {
        match stop_after {
            Some(secs) => tokio::time::sleep(Duration::from_secs(secs)).await,
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {
                // Move leadership off the current leader, as before a deploy.
                for (node, _, election) in &nodes {
                    if election.is_leader() {
                        info!(node, "stepping down for 3 s");
                        election.step_down(Duration::from_secs(3)).await?;
                        break;
                    }
                }
            }
        }
    }
    info!("stopping: each node hands over and closes its session");
    for (_, simba, _) in &nodes {
        simba.close().await;
    }
    Ok(())
}

/// The work a leader does: one step per second, each checked against the term and tagged
/// with its fencing token.
async fn leader_task(node: &'static str, term: Term) -> anyhow::Result<()> {
    let mut step = 0u32;
    loop {
        tokio::select! {
            _ = term.cancelled() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        term.ensure_valid(Duration::from_millis(500))?;
        step += 1;
        info!(node, lease = term.name(), token = term.token(), step, remaining = ?term.remaining(), "leader working");
    }
}
