//! Option errors and signature errors are reported together.

use simba::{Term, simba_scheduled};

#[simba_scheduled(cron = "*/5 * * * *", misfire = "never")]
fn report(_term: &Term) {}

fn main() {}
