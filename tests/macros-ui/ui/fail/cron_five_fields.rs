use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "*/5 * * * *")]
async fn report(_term: &Term) {}

fn main() {}
