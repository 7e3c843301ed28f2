use simba::job::SCHEDULED_JOBS;
use simba::{Term, simba_scheduled};

#[simba_scheduled(fixed_rate = "30s", lease = "reports:daily.v2-x_y")]
async fn reports(_term: &Term) {}

fn main() {
    let job = SCHEDULED_JOBS.iter().find(|j| j.name == "reports").expect("registered");
    assert_eq!(job.lease, "reports:daily.v2-x_y");
}
