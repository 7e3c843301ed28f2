use simba::{Term, simba_scheduled};

#[simba_scheduled(fixed_rate = "0s")]
async fn report(_term: &Term) {}

fn main() {}
