use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *")]
async fn report<T: Default>(_term: &Term) {
    let _ = T::default();
}

fn main() {}
