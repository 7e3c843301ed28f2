use simba::{Term, simba_scheduled};

struct Reports;

impl Reports {
    #[simba_scheduled(cron = "0 */5 * * * *")]
    async fn report(&self, _term: &Term) {}
}

fn main() {}
