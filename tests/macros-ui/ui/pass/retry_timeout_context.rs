use std::time::Duration;

use simba::job::{JOB_POLICIES, JobContext};
use simba::{Term, simba_partitioned, simba_scheduled};

#[simba_scheduled(cron = "0 * * * * *", retry = 3, backoff = "500ms", timeout = "30s")]
async fn with_context(_term: &Term, ctx: &JobContext) -> Result<(), std::io::Error> {
    let _slot = ctx.slot();
    Ok(())
}

#[simba_scheduled(fixed_rate = "1s", timeout = "2s")]
async fn timeout_only(_term: &Term) {}

#[simba_partitioned(group = "g", partitions = 2, fixed_rate = "1s", retry = 1)]
async fn partitioned_with_context(_term: &Term, _partition: u32, _ctx: &JobContext) {}

fn main() {
    let p = JOB_POLICIES.iter().find(|p| p.name == "with_context").expect("registered");
    assert_eq!((p.retry, p.backoff, p.timeout), (3, Some(Duration::from_millis(500)), Some(Duration::from_secs(30))));
    let p = JOB_POLICIES.iter().find(|p| p.name == "timeout_only").expect("registered");
    assert_eq!((p.retry, p.backoff, p.timeout), (0, None, Some(Duration::from_secs(2))));
    assert!(JOB_POLICIES.iter().any(|p| p.name == "partitioned_with_context" && p.retry == 1));
}
