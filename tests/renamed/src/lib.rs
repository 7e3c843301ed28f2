//! Jobs declared through simba renamed to `facade`: the macros' `crate = "facade"` makes the
//! generated code name `facade` instead of `::simba`, which does not resolve here.

use facade::{Term, simba_partitioned, simba_scheduled};

/// A scheduled job registered through the renamed crate.
#[simba_scheduled(cron = "0 */5 * * * *", lease = "renamed.report", crate = "facade")]
pub async fn renamed_report(term: &Term) {
    let _ = term.token();
}

/// A partitioned job registered through the renamed crate.
#[simba_partitioned(group = "renamed.billing", partitions = 4, crate = "facade")]
pub async fn renamed_billing(term: &Term, partition: u32) -> Result<(), facade::BoxError> {
    let _ = (term.token(), partition);
    Ok(())
}
