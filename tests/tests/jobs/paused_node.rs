//! What the paused-time job tests share: short session timing, a fixed wall-clock origin,
//! a node on the in-memory store, and a job's history oldest first.

use chrono::{DateTime, Utc};
use simba::backend::memory::MemoryBackend;
use simba::job::{ScheduledJob, WallClock};
use simba::job_store::{JobStore, RunRecord};
use simba::runtime::RunningRuntime;
use simba::{Runtime, RuntimeConfig};

/// Short session timing: renewals every 500 ms.
pub(crate) const TOML: &str = "[session]\nlease_duration = \"3s\"\nrenew_interval = \"500ms\"\n";

/// The wall-clock origin of the tests.
pub(crate) fn base() -> DateTime<Utc> {
    DateTime::from_timestamp(1_780_000_000, 0).expect("valid")
}

/// A live node running `job` on `clock` with [`TOML`] plus `toml` (every node of a test
/// shares one clock: `base()` at the Tokio instant the test started).
pub(crate) async fn node(
    store: &MemoryBackend,
    seed: u64,
    clock: WallClock,
    job: &ScheduledJob,
    toml: &str,
) -> RunningRuntime {
    let config = RuntimeConfig::from_toml_str(&format!("{TOML}{toml}"), "test.toml", Vec::new()).expect("config");
    let b = Runtime::builder().config(config).without_registry().backend(store.clone()).seed(seed).wall_clock(clock);
    let r = b.job(job.clone()).start().await.expect("start");
    r.simba().live().await.expect("live");
    r
}

/// `job`'s history, oldest first.
pub(crate) async fn history(store: &MemoryBackend, job: &str) -> Vec<RunRecord> {
    let mut h = store.jobs().history(job, 1000).await.map_err(|e| e.to_string()).expect("history");
    h.reverse();
    h
}
