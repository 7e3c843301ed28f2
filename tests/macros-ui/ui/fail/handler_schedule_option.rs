use simba::{Term, simba_handler};

#[simba_handler(cron = "0 * * * * *")]
async fn report(_term: &Term, _tenant: u64) {}

fn main() {}
