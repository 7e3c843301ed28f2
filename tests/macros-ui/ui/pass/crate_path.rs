//! Issue 13 item 6: `crate = "..."` takes a path with several segments, such as a facade
//! crate's re-export of simba (`tests/renamed` covers a renamed dependency).

mod facade {
    pub use simba as engine;
}

use simba::job::{Misfire, PARTITIONED_JOBS, SCHEDULED_JOBS, Schedule};
use simba::Term;

#[simba::simba_scheduled(cron = "0 0 3 * * *", time_zone = "Europe/Berlin", crate = "crate::facade::engine")]
async fn through_a_facade(_term: &Term) {}

#[simba::simba_partitioned(group = "facade", partitions = 2, fixed_rate = "1s", crate = "facade::engine")]
async fn partitions_through_a_facade(_term: &Term, _partition: u32) {}

fn main() {
    let job = SCHEDULED_JOBS.iter().find(|j| j.name == "through_a_facade").expect("registered");
    assert_eq!(job.schedule, Schedule::cron_in("0 0 3 * * *", "Europe/Berlin"));
    assert_eq!(job.misfire, Misfire::Skip);
    let group = PARTITIONED_JOBS.iter().find(|j| j.name == "partitions_through_a_facade").expect("registered");
    assert_eq!(group.schedule, Some(Schedule::FixedRate(std::time::Duration::from_secs(1))));
}
