use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 * * * * *", timeout = "soon")]
async fn job(_term: &Term) {}

fn main() {}
