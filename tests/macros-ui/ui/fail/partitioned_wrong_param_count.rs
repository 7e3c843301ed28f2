use simba::{Term, simba_partitioned};

#[simba_partitioned(group = "billing", partitions = 16)]
async fn bill(_term: &Term) {}

fn main() {}
