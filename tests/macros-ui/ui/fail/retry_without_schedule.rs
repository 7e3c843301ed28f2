use simba::{Term, simba_partitioned};

#[simba_partitioned(group = "g", partitions = 2, retry = 1)]
async fn job(_term: &Term, _partition: u32) {}

fn main() {}
