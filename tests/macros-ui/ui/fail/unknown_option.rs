use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *", leese = "reports")]
async fn report(_term: &Term) {}

fn main() {}
