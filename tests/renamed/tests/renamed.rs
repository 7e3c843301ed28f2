//! Issue 13 item 6: `crate = "..."` lets the macros work through a renamed dependency (or a
//! facade crate that re-exports simba), as `#[tokio::main(crate = "...")]` does.

use facade::job::{PARTITIONED_JOBS, SCHEDULED_JOBS};

#[test]
fn issue13_6_macros_work_through_a_renamed_dependency() {
    // Keep the library's jobs linked in.
    let _ = simba_renamed::renamed_report;
    let report = SCHEDULED_JOBS.iter().find(|j| j.name == "renamed_report").expect("the scheduled job is registered");
    assert_eq!(report.lease, "renamed.report");
    let billing =
        PARTITIONED_JOBS.iter().find(|j| j.name == "renamed_billing").expect("the partitioned job is registered");
    assert_eq!((&*billing.group, billing.partitions), ("renamed.billing", 4));
}
