//! A node for the multi-process schedules test (issue 36, "Done when"), run by `simba::run()`
//! with one handler, `tick`, and no job: every slot it runs is a schedule's. It appends each
//! run to the file named by `SIMBA_NODE_LOG`, on the host's monotonic clock (each line ends
//! with the pid), so the test can tell which slots really ran, where, and with which payload:
//!
//! ```text
//! fire <mono_ns> <schedule id> <slot_ms> <kind> <token> <payload v> <pid>
//! node <mono_ns> <pid>                                    the process started
//! ```
//!
//! A run takes 50 ms (so that a `kill -9` can land in the middle of one), then checks its term.

use std::time::Duration;

use simba::job::JobContext;
use simba::{Term, simba_handler};
use simba_tests::node_log::{log, mono_ns, trace_to_stderr};

/// A schedule's payload: its own id, and a version that an edit or a run-now request changes.
#[derive(serde::Deserialize)]
struct Tick {
    id: String,
    v: u64,
}

#[simba_handler]
async fn tick(term: &Term, tick: Tick, ctx: &JobContext) -> anyhow::Result<()> {
    let slot = ctx.slot().timestamp_millis();
    log(format!("fire {} {} {slot} {} {} {}", mono_ns(), tick.id, ctx.kind(), term.token(), tick.v));
    tokio::time::sleep(Duration::from_millis(50)).await;
    term.ensure_valid(Duration::from_millis(20))?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    log(format!("node {}", mono_ns()));
    trace_to_stderr();
    simba::run().await?;
    Ok(())
}
