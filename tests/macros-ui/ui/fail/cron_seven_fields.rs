use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 0 0 1 1 * 2030")]
async fn report(_term: &Term) {}

fn main() {}
