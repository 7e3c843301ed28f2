use simba::simba_scheduled;

#[simba_scheduled(cron = "0 */5 * * * *")]
struct Report;

fn main() {}
