use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *", misfire = "catch_up")]
async fn report(_term: &Term) {}

fn main() {}
