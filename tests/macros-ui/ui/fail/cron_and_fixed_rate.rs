use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *", fixed_rate = "5m")]
async fn report(_term: &Term) {}

fn main() {}
