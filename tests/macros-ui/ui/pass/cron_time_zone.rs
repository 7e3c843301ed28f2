use simba::job::{SCHEDULED_JOBS, Schedule};
use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 0 2 * * MON-FRI", time_zone = "Europe/Berlin")]
async fn nightly(_term: &Term) {}

#[simba_scheduled(time_zone = "UTC", cron = "@hourly")]
async fn hourly(_term: &Term) {}

fn main() {
    let job = SCHEDULED_JOBS.iter().find(|j| j.name == "nightly").expect("registered");
    assert_eq!(job.schedule, Schedule::cron_in("0 0 2 * * MON-FRI", "Europe/Berlin"));
    let job = SCHEDULED_JOBS.iter().find(|j| j.name == "hourly").expect("registered");
    assert_eq!(job.schedule, Schedule::cron_in("@hourly", "UTC"));
}
