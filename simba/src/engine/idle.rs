//! The removal of idle lease records (rule B3): now and then a client asks its store to remove
//! the lease records that nobody holds and nobody acquired for
//! [`SimbaConfig::remove_idle_leases_after`](crate::SimbaConfig::remove_idle_leases_after);
//! the store raises its token floor in the same step, so tokens never go back (T3).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::sleep;

use super::Shared;

/// A client removes idle records every this many renewal intervals (5 minutes at the default
/// timing), and again at once while a removal finds a full batch: a service that uses more
/// new names a second than one batch a period is not outrun.
pub(crate) const EVERY_RENEWALS: u32 = 60;

/// The most records one removal takes out.
pub(crate) const BATCH: usize = 1000;

/// The wait before the next removal, after one that removed `removed` records.
pub(crate) fn next_wait(renew_interval: Duration, removed: usize) -> Duration {
    if removed >= BATCH { Duration::ZERO } else { renew_interval * EVERY_RENEWALS }
}

/// Removes idle lease records until the client shuts down; returns at once when removal is
/// off. The first removal comes one period after the start, not at it: a fleet that starts
/// together does not sweep together, and a short-lived client never sweeps. A call is bounded
/// by `lease_duration` and given up at the client's shutdown, so a store that does not answer
/// never keeps this task (or the client's state it holds) alive.
pub(crate) async fn run(shared: Arc<Shared>) {
    let Some(idle) = shared.config.remove_idle_leases_after() else { return };
    let renew = shared.config.renew_interval();
    let mut wait = next_wait(renew, 0);
    loop {
        tokio::select! {
            () = sleep(wait) => {}
            () = shared.shutdown.cancelled() => return,
        }
        let call =
            tokio::time::timeout(shared.config.lease_duration(), shared.backend.remove_idle_leases("", idle, BATCH));
        let answer = tokio::select! {
            answer = call => answer,
            () = shared.shutdown.cancelled() => return,
        };
        let removed = match answer {
            Ok(Ok(n)) => {
                if n > 0 {
                    tracing::debug!(removed = n, "removed idle lease records");
                }
                n
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %super::session::error_chain(&e), "removing idle lease records failed; trying again later");
                0
            }
            Err(_) => {
                tracing::debug!(
                    "removing idle lease records got no answer within the lease duration; trying again later"
                );
                0
            }
        };
        wait = next_wait(renew, removed);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::{Simba, SimbaConfig};

    /// B3: a client removes an idle lease record at the first removal that finds it idle for
    /// `remove_idle_leases_after`; removals come every `EVERY_RENEWALS` renewal intervals (at
    /// once after a full batch), the first one a period after the start. Renewal every
    /// second, removal after 90 s idle: the sweep at 60 s keeps the record released at 0 s,
    /// the one at 120 s removes it, and the name starts above its old token.
    #[tokio::test(start_paused = true)]
    async fn b3_the_client_removes_idle_lease_records_on_its_period() {
        assert_eq!(next_wait(Duration::from_secs(1), 0), Duration::from_secs(60));
        assert_eq!(next_wait(Duration::from_secs(1), BATCH - 1), Duration::from_secs(60));
        assert_eq!(next_wait(Duration::from_secs(1), BATCH), Duration::ZERO);
        let store = MemoryBackend::new();
        let config = SimbaConfig::builder()
            .lease_duration(Duration::from_secs(3))
            .remove_idle_leases_after(Some(Duration::from_secs(90)))
            .build()
            .expect("config");
        let simba = Simba::new(store.clone(), config).expect("client");
        let guard = simba.lock("b3.x").acquire().await.expect("acquire");
        let first = guard.term().token();
        guard.release().await.expect("release");
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert!(store.holder("b3.x").is_some(), "idle for 61 s of 90: kept at the sweep of 60 s");
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(store.holder("b3.x").is_none(), "idle for 121 s: removed at the sweep of 120 s");
        let again = simba.lock("b3.x").acquire().await.expect("acquire");
        assert!(again.term().token() > first, "T3 across the removal");
        again.release().await.expect("release");
        simba.close().await;
    }

    /// B3: a removal the store never answers is given up after `lease_duration`, and the next
    /// one comes a period later: with the call hanging, the second call is made at 60 s + 3 s +
    /// 60 s, not never.
    #[cfg(feature = "tck")]
    #[tokio::test(start_paused = true)]
    async fn b3_a_removal_that_hangs_is_given_up() {
        use crate::tck::{Fault, FaultyBackend, Op};
        let (store, faults) = FaultyBackend::new(MemoryBackend::new());
        faults.set(Op::RemoveIdle, Fault::Hang);
        let config = SimbaConfig::builder().lease_duration(Duration::from_secs(3)).build().expect("config");
        let simba = Simba::new(store, config).expect("client");
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!(faults.calls(Op::RemoveIdle), 1, "the first removal at 60 s");
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!(faults.calls(Op::RemoveIdle), 1, "the hanging call is given up at 63 s");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(faults.calls(Op::RemoveIdle), 2, "the next removal at 123 s");
        simba.close().await;
    }

    /// B3: `remove_idle_leases_after(None)` keeps every record.
    #[tokio::test(start_paused = true)]
    async fn b3_no_removal_when_it_is_off() {
        let store = MemoryBackend::new();
        let config = SimbaConfig::builder().remove_idle_leases_after(None).build().expect("config");
        let simba = Simba::new(store.clone(), config).expect("client");
        simba.lock("b3.kept").acquire().await.expect("acquire").release().await.expect("release");
        tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
        assert!(store.holder("b3.kept").is_some(), "kept for a day with removal off");
        simba.close().await;
    }
}
