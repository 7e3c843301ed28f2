use simba::job::{Misfire, SCHEDULED_JOBS, Schedule};
use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *")]
async fn every_five_minutes(term: &Term) {
    let _ = term.token();
}

fn main() {
    let job = SCHEDULED_JOBS.iter().find(|j| j.name == "every_five_minutes").expect("registered");
    assert_eq!(job.lease, "every_five_minutes");
    assert_eq!(job.schedule, Schedule::cron("0 */5 * * * *"));
    assert_eq!(job.misfire, Misfire::Skip);
}
