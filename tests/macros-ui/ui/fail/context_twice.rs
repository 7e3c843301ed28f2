use simba::job::JobContext;
use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 * * * * *")]
async fn job(_term: &Term, _a: &JobContext, _b: &JobContext) {}

fn main() {}
