use simba::{Term, simba_scheduled};

#[simba_scheduled(fixed_rate = "10s", retry = 101)]
async fn job(_term: &Term) {}

fn main() {}
