use simba::{Term, simba_scheduled};

#[simba_scheduled(lease = "reports")]
async fn report(_term: &Term) {}

fn main() {}
