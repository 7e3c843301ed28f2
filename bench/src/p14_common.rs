//! What P14's parent (`simba-bench`, `scale.rs`) and its node processes (`simba-bench-node`)
//! share: the partitions, the cold schedules' cron, their ids, how they are created, and a
//! process's RSS. Both binaries compile this file.

use anyhow::{Result, anyhow, bail};
use futures_util::StreamExt;
use simba::admin::Schedules;
use simba::schedule_store::{Schedule, ScheduleSpec};
use tokio::time::Instant;

/// The nodes' partitions of `simba.schedules` (the default).
pub(crate) const PARTITIONS: u32 = 64;
/// Creates in flight.
pub(crate) const CREATES_IN_FLIGHT: usize = 64;
/// A cron that never fires during a run: the cold schedules.
pub(crate) const COLD: &str = "0 0 0 1 1 *";

/// The RSS of process `pid`, bytes.
pub(crate) fn rss(pid: u32) -> Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| anyhow!("no VmRSS for {pid}"))?;
    Ok(kb * 1024)
}

/// Schedule `i`'s id.
pub(crate) fn id(i: usize) -> String {
    format!("tenant-{i:06}")
}

/// Creates schedules `ids` on `spec`, `CREATES_IN_FLIGHT` at a time; returns the seconds taken.
pub(crate) async fn create(api: &Schedules, ids: &[String], spec: &str) -> Result<f64> {
    let started = Instant::now();
    let results: Vec<_> = futures_util::stream::iter(ids.iter().cloned())
        .map(|id| {
            let s = Schedule::new(id.clone(), "tick", ScheduleSpec::cron(spec, "UTC"))
                .with_payload(format!(r#"{{"tenant": "{id}"}}"#));
            async move { api.create(s, "simba-bench").await }
        })
        .buffer_unordered(CREATES_IN_FLIGHT)
        .collect()
        .await;
    if let Some(e) = results.into_iter().find_map(Result::err) {
        bail!("create: {e}");
    }
    Ok(started.elapsed().as_secs_f64())
}
