use simba::{Term, simba_scheduled};

#[simba_scheduled(fixed_rate = "30 parsecs")]
async fn report(_term: &Term) {}

fn main() {}
