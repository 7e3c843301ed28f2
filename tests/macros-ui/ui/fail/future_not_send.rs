use std::rc::Rc;

use simba::{Term, simba_scheduled};

#[simba_scheduled(fixed_rate = "1s")]
async fn report(term: &Term) {
    let local = Rc::new(1);
    term.cancelled().await;
    drop(local);
}

fn main() {}
