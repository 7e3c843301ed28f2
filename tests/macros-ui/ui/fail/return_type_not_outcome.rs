use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *")]
async fn report(_term: &Term) -> u32 {
    7
}

fn main() {}
