use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *", start = "2027-06-01 00:00")]
async fn report(_term: &Term) {}

fn main() {}
