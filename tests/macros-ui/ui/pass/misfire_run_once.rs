use simba::job::{Misfire, SCHEDULED_JOBS};
use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 0 * * * *", misfire = "run_once")]
async fn catch_up(_term: &Term) {}

#[simba_scheduled(cron = "0 0 * * * *", misfire = "skip")]
async fn skip_missed(_term: &Term) {}

fn main() {
    let job = SCHEDULED_JOBS.iter().find(|j| j.name == "catch_up").expect("registered");
    assert_eq!(job.misfire, Misfire::RunOnce);
    let job = SCHEDULED_JOBS.iter().find(|j| j.name == "skip_missed").expect("registered");
    assert_eq!(job.misfire, Misfire::Skip);
}
