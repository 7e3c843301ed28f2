use std::time::Duration;

use simba::job::{Misfire, PARTITIONED_JOBS, Schedule};
use simba::{Term, simba_partitioned};

#[simba_partitioned(group = "sync", partitions = 4, cron = "0 * * * * *", time_zone = "America/New_York", misfire = "run_once")]
async fn sync_shard(_term: &Term, _partition: u32) {}

#[simba_partitioned(group = "poll", partitions = 100000, fixed_rate = "500ms")]
async fn poll(_term: &Term, _partition: u32) -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {
    let job = PARTITIONED_JOBS.iter().find(|j| j.name == "sync_shard").expect("registered");
    assert_eq!(job.schedule, Some(Schedule::cron_in("0 * * * * *", "America/New_York")));
    assert_eq!(job.misfire, Misfire::RunOnce);
    let job = PARTITIONED_JOBS.iter().find(|j| j.name == "poll").expect("registered");
    assert_eq!(job.partitions, 100_000);
    assert_eq!(job.schedule, Some(Schedule::FixedRate(Duration::from_millis(500))));
}
