use simba::{Term, simba_partitioned};

#[simba_partitioned(group = "shards", partitions = 4, overlap = "allow_all")]
async fn shard(_term: &Term, _partition: u32) {}

fn main() {}
