use simba::{Term, simba_scheduled};

const EVERY_FIVE: &str = "0 */5 * * * *";

#[simba_scheduled(cron = EVERY_FIVE)]
async fn report(_term: &Term) {}

fn main() {}
