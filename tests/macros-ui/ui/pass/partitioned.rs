use simba::job::{Misfire, PARTITIONED_JOBS};
use simba::{Term, simba_partitioned};

/// Runs once per term and loops until the term ends.
#[simba_partitioned(group = "billing", partitions = 16)]
async fn bill(term: &Term, partition: u32) -> anyhow::Result<()> {
    while term.is_valid() {
        let _ = partition;
        term.cancelled().await;
    }
    Ok(())
}

#[simba_partitioned(partitions = 1, group = "single")]
async fn single(_term: &Term, _partition: core::primitive::u32) {}

fn main() {
    let job = PARTITIONED_JOBS.iter().find(|j| j.name == "bill").expect("registered");
    assert_eq!(job.group, "billing");
    assert_eq!(job.partitions, 16);
    assert_eq!(job.schedule, None);
    assert_eq!(job.misfire, Misfire::Skip);
    let job = PARTITIONED_JOBS.iter().find(|j| j.name == "single").expect("registered");
    assert_eq!(job.partitions, 1);
}
