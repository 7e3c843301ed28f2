use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 * * * * *", backoff = "1s")]
async fn job(_term: &Term) {}

fn main() {}
