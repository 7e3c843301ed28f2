use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *")]
async fn report(_term: &Term, _extra: u32, _more: u32) {}

fn main() {}
