use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *")]
async unsafe fn report(_term: &Term) {}

fn main() {}
