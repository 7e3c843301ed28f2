use simba::{Term, simba_partitioned};

#[simba_partitioned(group = "billing", partitions = 16, time_zone = "Europe/Berlin")]
async fn bill(_term: &Term, _partition: u32) {}

fn main() {}
