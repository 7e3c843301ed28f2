use simba::{State, Term, simba_scheduled};

struct NotClone;

#[simba_scheduled(cron = "0 * * * * *")]
async fn job(_term: &Term, _s: State<NotClone>) {}

fn main() {}
