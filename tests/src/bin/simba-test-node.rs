//! A node for the multi-process tests: one cron job every second and a 16-partition group,
//! run by `simba::run()`. It appends what it does to the file named by `SIMBA_NODE_LOG`, with
//! timestamps on the host's monotonic clock (shared by every process on the host):
//!
//! ```text
//! tick <mono_ns> <slot_unix_s> <token> <pid>
//! part-start <mono_ns> <partition> <token> <pid>
//! part-valid <mono_ns> <partition> <token> <deadline_mono_ns> <pid>
//! part-end <mono_ns> <partition> <token> <pid>
//! ```

use std::time::Duration;

use simba::{Term, simba_partitioned, simba_scheduled};
use simba_tests::node_log::{log, mono_ns};

/// The deadline of `term` on the shared monotonic clock.
fn deadline_mono(term: &Term) -> u128 {
    let left = term.deadline().saturating_duration_since(tokio::time::Instant::now());
    mono_ns() + left.as_nanos()
}

#[simba_scheduled(cron = "* * * * * *")]
async fn tick(term: &Term) -> anyhow::Result<()> {
    let slot = chrono::Utc::now().timestamp();
    log(format!("tick {} {slot} {}", mono_ns(), term.token()));
    Ok(())
}

#[simba_partitioned(group = "parts", partitions = 16)]
async fn parts(term: &Term, partition: u32) -> anyhow::Result<()> {
    struct End(u32, u64);
    impl Drop for End {
        fn drop(&mut self) {
            log(format!("part-end {} {} {}", mono_ns(), self.0, self.1));
        }
    }
    log(format!("part-start {} {partition} {}", mono_ns(), term.token()));
    let _end = End(partition, term.token());
    let mut last = 0;
    loop {
        // Log the validity deadline whenever a renewal moves it, so that the test knows how
        // long a killed node's term could have been valid.
        let d = deadline_mono(term);
        if d.abs_diff(last) > 1_000_000 {
            log(format!("part-valid {} {partition} {} {d}", mono_ns(), term.token()));
            last = d;
        }
        tokio::select! {
            _ = term.cancelled() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    simba::run().await?;
    Ok(())
}
