use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *")]
async fn report(_term: &mut Term) {}

fn main() {}
