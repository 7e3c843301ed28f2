use simba::{Term, simba_scheduled};

#[simba_scheduled(cron)]
async fn report(_term: &Term) {}

fn main() {}
