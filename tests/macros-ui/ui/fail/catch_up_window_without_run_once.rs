use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *", catch_up_window = "10m")]
async fn report(_term: &Term) {}

fn main() {}
