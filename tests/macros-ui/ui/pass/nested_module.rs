use simba::job::{PARTITIONED_JOBS, SCHEDULED_JOBS};

mod jobs {
    pub mod inner {
        use simba::{Term, simba_partitioned, simba_scheduled};

        #[simba_scheduled(fixed_rate = "1m")]
        pub(crate) async fn cleanup(_term: &Term) {}

        #[simba_partitioned(group = "inner", partitions = 2)]
        async fn worker(_term: &Term, _partition: u32) {}
    }
}

fn main() {
    // A job declared inside a function body registers too.
    #[simba::simba_scheduled(cron = "0 0 * * * *")]
    async fn in_a_body(_term: &simba::Term) {}

    assert!(SCHEDULED_JOBS.iter().any(|j| j.name == "in_a_body"));
    assert!(SCHEDULED_JOBS.iter().any(|j| j.name == "cleanup" && j.lease == "cleanup"));
    assert!(PARTITIONED_JOBS.iter().any(|j| j.name == "worker" && j.group == "inner"));
    // The function stays callable where it is visible.
    let _ = jobs::inner::cleanup;
}
