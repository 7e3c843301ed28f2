use simba::{Term, simba_handler};

#[simba_handler]
async fn report(_term: &Term) {}

fn main() {}
