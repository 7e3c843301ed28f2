//! The function keeps its attributes, visibility and name, and can still be called directly.

use simba::job::SCHEDULED_JOBS;
use simba::{Term, simba_scheduled};

/// Documented.
#[simba_scheduled(cron = "*/10 * * * * *")]
#[inline(never)]
#[must_use = "the outcome"]
pub async fn documented(_term: &Term) -> Result<(), std::io::Error> {
    Ok(())
}

// A raw identifier: the job and lease are named `loop`.
#[simba_scheduled(fixed_rate = "1s")]
async fn r#loop(_term: &Term) {}

#[allow(dead_code)]
async fn call_directly(term: &Term) {
    documented(term).await.expect("runs");
    r#loop(term).await;
}

fn main() {
    let job = SCHEDULED_JOBS.iter().find(|j| j.name == "loop").expect("registered");
    assert_eq!(job.lease, "loop");
    assert!(SCHEDULED_JOBS.iter().any(|j| j.name == "documented"));
}
