use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *")]
async fn rapport_journalier_café(_term: &Term) {}

fn main() {}
