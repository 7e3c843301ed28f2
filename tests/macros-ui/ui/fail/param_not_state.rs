use simba::{Term, simba_scheduled};

#[derive(Clone)]
struct Db;

#[simba_scheduled(cron = "0 * * * * *")]
async fn job(_term: &Term, _db: Db) {}

fn main() {}
