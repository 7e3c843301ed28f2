use simba::{Term, simba_scheduled};

#[simba_scheduled(fixed_rate = "1m", misfire = "run_once", catch_up_window = "10m")]
async fn report(_term: &Term) {}

fn main() {}
