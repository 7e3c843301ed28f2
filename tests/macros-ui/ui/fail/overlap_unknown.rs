use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *", overlap = "replace")]
async fn report(_term: &Term) {}

fn main() {}
