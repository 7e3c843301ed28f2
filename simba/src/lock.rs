//! Locks: a term held by code rather than by an election, released with its token (rules
//! K5-K7). The acquisition and the handover are the engine's contender
//! (`engine::contender`), the same shell that drives an election.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::engine::Shared;
use crate::engine::contender::{Won, acquire, drop_lock, hand_over_lock};
use crate::engine::local::{Claim, LocalTurn};
use crate::{Error, RevokeReason, Term};

/// A distributed lock on one lease name.
///
/// Tasks of one process that lock the same name queue locally first, so at most one of them
/// contends at a time. A name held by an election on this client cannot be locked
/// ([`Error::AlreadyStarted`]).
pub struct Lock {
    shared: Arc<Shared>,
    name: String,
}

impl Lock {
    pub(crate) fn new(shared: Arc<Shared>, name: String) -> Self {
        Lock { shared, name }
    }

    /// The lease name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits until this node holds the lock.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future (a `select!` branch that lost, a `timeout`) never leaves the lock
    /// held or the name stuck: its place in the process's local queue goes with it; an
    /// acquisition already sent to the store stays in flight until its reply or its timeout
    /// (K3), and a win that arrives for a dropped future is released with its token (K4).
    /// The next acquisition of the name waits for that. The same holds for
    /// [`try_acquire`](Lock::try_acquire) and [`try_acquire_now`](Lock::try_acquire_now).
    pub async fn acquire(&self) -> Result<LockGuard, Error> {
        match self.acquire_until(None).await? {
            Some(g) => Ok(g),
            None => Err(Error::Closed),
        }
    }

    /// Tries to take the lock for at most `timeout`; `Ok(None)` when it could not.
    /// Cancel safe, as [`acquire`](Lock::acquire).
    pub async fn try_acquire(&self, timeout: Duration) -> Result<Option<LockGuard>, Error> {
        self.acquire_until(Some(Instant::now() + timeout)).await
    }

    /// One attempt, without waiting: the lock if the lease is free now, `None` otherwise (also
    /// when no session is live, or another task of this process holds or waits for it). For
    /// callers that decide themselves when to try again, as partition groups do.
    pub async fn try_acquire_now(&self) -> Result<Option<LockGuard>, Error> {
        self.acquire_inner(None, true).await
    }

    async fn acquire_until(&self, until: Option<Instant>) -> Result<Option<LockGuard>, Error> {
        self.acquire_inner(until, false).await
    }

    async fn acquire_inner(&self, until: Option<Instant>, once: bool) -> Result<Option<LockGuard>, Error> {
        let won = acquire(&self.shared, &self.name, until, once).await?;
        Ok(won.map(|Won { term, claim, local }| LockGuard { term, claim: Some(claim), _local: local }))
    }
}

/// A held lock: its term, released with its token on [`release`](LockGuard::release) or,
/// in the background, on drop.
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    term: Term,
    claim: Option<Claim>,
    _local: LocalTurn,
}

impl LockGuard {
    /// The lock's term: check [`Term::is_valid`] before each step and send
    /// [`Term::token`] with every write.
    pub fn term(&self) -> &Term {
        &self.term
    }

    /// Revokes the term, then releases the lease with its token (T7).
    pub async fn release(self) -> Result<(), Error> {
        self.release_as(RevokeReason::Stopped).await
    }

    /// Ends the term locally with `reason` (unless it already ended), without releasing the
    /// lease yet: [`Term::cancelled`] resolves, so the work under it stops. The first step of a
    /// graceful handover (H1): revoke, wait for the work to return, then
    /// [`release`](Self::release) (which keeps this reason). Returns whether it revoked.
    pub fn revoke(&self, reason: RevokeReason) -> bool {
        self.term.revoke(reason)
    }

    /// Hands the lock over gracefully with `work`, the task running under its term, in the H1
    /// order of an election's handover: revokes the term with `reason` (unless it already
    /// ended), so [`Term::cancelled`] resolves; waits until `work` returns, or aborts it once
    /// the deadline the term had when it was revoked passes (H5); then releases the lease with
    /// its token (T7). A term lost meanwhile (deadline, expiry, takeover) is not released:
    /// the store already gave it up. Partition groups hand their partitions over this way.
    pub async fn hand_over<R>(mut self, reason: RevokeReason, work: JoinHandle<R>) -> Result<(), Error> {
        self.execute_handover(reason, Some(work)).await
    }

    /// Revokes the term with `reason` (unless it already ended), then releases the lease with
    /// its token (T7).
    pub(crate) async fn release_as(mut self, reason: RevokeReason) -> Result<(), Error> {
        self.execute_handover::<()>(reason, None).await
    }

    /// Hands the term over in the H1 order (the contender's, as an election's handover);
    /// nothing when it was handed over already.
    async fn execute_handover<R>(&mut self, reason: RevokeReason, work: Option<JoinHandle<R>>) -> Result<(), Error> {
        let Some(claim) = self.claim.take() else { return Ok(()) };
        hand_over_lock(claim, &self.term, reason, work).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(claim) = self.claim.take() {
            drop_lock(claim, &self.term);
        }
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard").field("term", &self.term).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::backend::memory::MemoryBackend;
    use crate::{Simba, SimbaConfig};

    /// P7 (memory per held lease): a held lock is its term, its claim and its place in the
    /// local queue, nothing more. The guard once kept its acquisition's election machine (a
    /// copy of the whole configuration), and P7 went from 747 to 956 bytes per lease; the
    /// release now rebuilds the machine (`ElectionMachine::lock_leading`). This bound fails
    /// if a field that size comes back.
    #[test]
    fn p7_a_held_lock_stays_small() {
        let size = std::mem::size_of::<super::LockGuard>();
        assert!(size <= 80, "a LockGuard is {size} bytes: every held lock pays it (P7)");
        assert!(std::mem::size_of::<simba_core::election::ElectionMachine<tokio::time::Instant>>() > 80);
    }

    /// `lock_queues` shrinks when a name's queue empties,
    /// so a service locking names made on the fly does not grow: after 10,000 distinct names
    /// (released, dropped, timed out while queued) the map is empty.
    #[tokio::test(start_paused = true)]
    async fn issue13_4_lock_queues_shrink() {
        let simba = Simba::new(MemoryBackend::new(), SimbaConfig::default()).expect("client");
        for i in 0..10_000 {
            let lock = simba.lock(format!("q.{i}"));
            let guard = lock.acquire().await.expect("acquire");
            match i % 3 {
                0 => guard.release().await.expect("release"),
                1 => drop(guard),
                _ => {
                    // Another task of this process queues behind the holder and gives up.
                    let waited = simba.lock(format!("q.{i}")).try_acquire(Duration::from_millis(1)).await;
                    assert!(waited.expect("try_acquire").is_none());
                    assert_eq!(simba.shared.lock_state().lock_queues.len(), 1, "the holder's queue stays");
                    drop(guard);
                }
            }
        }
        assert!(simba.shared.lock_state().lock_queues.is_empty(), "lock_queues must shrink");
        // A name is still queued while held and waited for, and the queue still serialises.
        let held = simba.lock("q.again").acquire().await.expect("acquire");
        let other = simba.clone();
        let waiter = tokio::spawn(async move { other.lock("q.again").acquire().await.map(|g| g.term().token()) });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished(), "the second task waits for its turn");
        let first = held.term().token();
        held.release().await.expect("release");
        let second = waiter.await.expect("join").expect("acquire");
        assert!(second > first);
        assert!(simba.shared.lock_state().lock_queues.is_empty());
        simba.close().await;
    }

    /// The session's record of released tokens does not grow with every
    /// name it ever released: an acknowledged release forgets its name (the soak's leak).
    #[tokio::test(start_paused = true)]
    async fn issue16_7_released_token_records_are_pruned() {
        let simba = Simba::new(MemoryBackend::new(), SimbaConfig::default()).expect("client");
        for i in 0..5_000 {
            let guard = simba.lock(format!("k4.{i}")).acquire().await.expect("acquire");
            if i % 2 == 0 { guard.release().await.expect("release") } else { drop(guard) }
        }
        // Dropped guards release in the background.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let cell = simba.shared.current_session().expect("a live session");
        assert_eq!(cell.released_len(), 0, "every release was acknowledged: no K4 record is needed");
        // K4 still holds for a name whose release is not acknowledged yet: the record is
        // written before the release is sent.
        let guard = simba.lock("k4.again").acquire().await.expect("acquire");
        let token = guard.term().token();
        cell.note_released("k4.again", token);
        assert_eq!(cell.max_released("k4.again"), token);
        guard.release().await.expect("release");
        assert_eq!(cell.released_len(), 0);
        let again = simba.lock("k4.again").acquire().await.expect("acquire");
        assert!(again.term().token() > token, "a new term of a released name has a greater token");
        again.release().await.expect("release");
        simba.close().await;
    }
}
