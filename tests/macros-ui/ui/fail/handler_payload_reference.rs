use simba::{Term, simba_handler};

#[simba_handler]
async fn report(_term: &Term, _payload: &str) {}

fn main() {}
