use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *", lease = "a", lease = "b")]
async fn report(_term: &Term) {}

fn main() {}
