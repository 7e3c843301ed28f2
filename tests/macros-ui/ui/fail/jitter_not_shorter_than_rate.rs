use simba::{Term, simba_scheduled};

#[simba_scheduled(fixed_rate = "10s", jitter = "10s")]
async fn report(_term: &Term) {}

fn main() {}
