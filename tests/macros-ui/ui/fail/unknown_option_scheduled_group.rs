use simba::{Term, simba_scheduled};

#[simba_scheduled(fixed_rate = "1s", group = "billing")]
async fn report(_term: &Term) {}

fn main() {}
