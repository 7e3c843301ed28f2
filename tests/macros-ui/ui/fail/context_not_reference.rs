use simba::job::JobContext;
use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 * * * * *")]
async fn job(_term: &Term, _ctx: JobContext) {}

fn main() {}
