use simba::{Term, simba_partitioned};

// 126 characters: `{group}.9` has 128, but `{group}.10` has 129.
#[simba_partitioned(
    group = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    partitions = 11
)]
async fn bill(_term: &Term, _partition: u32) {}

fn main() {}
