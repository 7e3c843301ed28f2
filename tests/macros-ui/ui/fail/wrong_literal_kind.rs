use simba::{Term, simba_scheduled};

#[simba_scheduled(fixed_rate = 30)]
async fn report(_term: &Term) {}

fn main() {}
