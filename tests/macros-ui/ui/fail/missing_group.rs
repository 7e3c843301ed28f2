use simba::{Term, simba_partitioned};

#[simba_partitioned(partitions = 16)]
async fn bill(_term: &Term, _partition: u32) {}

fn main() {}
