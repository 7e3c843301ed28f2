use simba::{Term, simba_handler};

struct Report;

#[simba_handler]
async fn report(_term: &Term, _payload: Report) {}

fn main() {}
