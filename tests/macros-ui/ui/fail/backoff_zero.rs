use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 * * * * *", retry = 2, backoff = "0s")]
async fn job(_term: &Term) {}

fn main() {}
