use simba::simba_scheduled;

#[simba_scheduled(cron = "0 */5 * * * *")]
async fn report(_term: &String) {}

fn main() {}
