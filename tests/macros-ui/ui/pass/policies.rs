use std::time::Duration;

use simba::job::{Overlap, PARTITIONED_JOBS, Policies, SCHEDULED_JOBS};
use simba::{Term, simba_partitioned, simba_scheduled};

#[simba_scheduled(
    cron = "0 */5 * * * *",
    misfire = "run_once",
    overlap = "buffer_one",
    catch_up_window = "10m",
    jitter = "30s",
    start = "2027-01-01T00:00:00Z",
    end = "2027-12-31T23:59:59+01:00"
)]
async fn every_policy(_term: &Term) {}

#[simba_scheduled(fixed_rate = "10s", overlap = "cancel_running", jitter = "9s")]
async fn replaced(_term: &Term) {}

#[simba_scheduled(fixed_rate = "10s")]
async fn defaults(_term: &Term) {}

#[simba_partitioned(group = "shards", partitions = 4, cron = "0 * * * * *", overlap = "allow_all")]
async fn shard(_term: &Term, _partition: u32) {}

fn main() {
    let job = SCHEDULED_JOBS.iter().find(|j| j.name == "every_policy").expect("registered");
    let p = job.policies;
    assert_eq!(p.overlap, Overlap::BufferOne);
    assert_eq!(p.catch_up_window, Some(Duration::from_secs(600)));
    assert_eq!(p.jitter, Some(Duration::from_secs(30)));
    assert_eq!(p.start.map(|t| t.to_rfc3339()).as_deref(), Some("2027-01-01T00:00:00+00:00"));
    assert_eq!(p.end.map(|t| t.to_rfc3339()).as_deref(), Some("2027-12-31T22:59:59+00:00"));
    let job = SCHEDULED_JOBS.iter().find(|j| j.name == "replaced").expect("registered");
    assert_eq!((job.policies.overlap, job.policies.jitter), (Overlap::CancelRunning, Some(Duration::from_secs(9))));
    let job = SCHEDULED_JOBS.iter().find(|j| j.name == "defaults").expect("registered");
    assert_eq!(job.policies, Policies::new());
    let group = PARTITIONED_JOBS.iter().find(|j| j.name == "shard").expect("registered");
    assert_eq!(group.policies.overlap, Overlap::AllowAll);
}
