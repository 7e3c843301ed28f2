//! A node for the multi-process history test (issue 12, "Done when"): one cron job every
//! second whose run takes 400 ms (so that a `kill -9` can land in the middle of one), run by
//! `simba::run()` with the jobs store recording every slot. It appends each run's start to the
//! file named by `SIMBA_NODE_LOG`, so the test can tell which slots really ran, and where:
//!
//! ```text
//! run <mono_ns> <slot_ms> <kind> <token> <pid>
//! ```

use std::time::Duration;

use simba::job::JobContext;
use simba::{Term, simba_scheduled};
use simba_tests::node_log::{log, mono_ns};

#[simba_scheduled(cron = "* * * * * *")]
async fn slow(term: &Term, ctx: &JobContext) -> anyhow::Result<()> {
    log(format!("run {} {} {} {}", mono_ns(), ctx.slot().timestamp_millis(), ctx.kind(), term.token()));
    tokio::time::sleep(Duration::from_millis(400)).await;
    // A run that outlived its term says so (recorded `cancelled`, not `ran`).
    term.ensure_valid(Duration::from_millis(20))?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    simba::run().await?;
    Ok(())
}
