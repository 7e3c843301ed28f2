use simba::{Term, simba_scheduled};

#[simba_scheduled(fixed_rate = "30s", time_zone = "Europe/Berlin")]
async fn report(_term: &Term) {}

fn main() {}
