use std::time::Duration;

use simba::job::{SCHEDULED_JOBS, Schedule};
use simba::{Term, simba_scheduled};

#[simba_scheduled(fixed_rate = "250ms")]
async fn fast(_term: &Term) {}

#[simba_scheduled(fixed_rate = "1h 30m 5s")]
async fn slow(_term: &Term) {}

fn main() {
    let job = SCHEDULED_JOBS.iter().find(|j| j.name == "fast").expect("registered");
    assert_eq!(job.schedule, Schedule::FixedRate(Duration::from_millis(250)));
    let job = SCHEDULED_JOBS.iter().find(|j| j.name == "slow").expect("registered");
    assert_eq!(job.schedule, Schedule::FixedRate(Duration::from_secs(5405)));
}
