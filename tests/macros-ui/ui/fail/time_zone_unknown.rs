use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 0 2 * * *", time_zone = "Europe/Berln")]
async fn report(_term: &Term) {}

fn main() {}
