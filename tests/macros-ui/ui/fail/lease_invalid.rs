use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *", lease = "reports/daily")]
async fn report(_term: &Term) {}

fn main() {}
