use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 0 3 * * *", crate = "my simba")]
async fn report(_term: &Term) {}

fn main() {}
