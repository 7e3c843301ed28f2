use simba::{Term, simba_scheduled};

#[simba_scheduled("0 */5 * * * *")]
async fn report(_term: &Term) {}

fn main() {}
