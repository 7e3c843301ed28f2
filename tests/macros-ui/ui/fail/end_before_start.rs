use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *", start = "2027-06-01T00:00:00Z", end = "2027-01-01T00:00:00Z")]
async fn report(_term: &Term) {}

fn main() {}
