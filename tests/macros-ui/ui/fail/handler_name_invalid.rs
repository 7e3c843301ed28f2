use simba::{Term, simba_handler};

#[simba_handler(name = "tenant/report")]
async fn report(_term: &Term, _tenant: u64) {}

fn main() {}
