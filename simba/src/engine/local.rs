//! What a lock holds on this client besides its term: its turn in the name's local queue
//! (rule K6) with the name's local streak and the courtesy it owes other nodes (K7), and its
//! claim on the name (L4).

use std::sync::Arc;

use simba_core::timing::{Courtesy, courtesy};
use tokio::sync::OwnedMutexGuard;
use tokio::time::{Instant, sleep_until};

use super::{LocalStreak, Shared, sleep_until_or_never};
use crate::Error;

/// This task's place in the local queue of a name: the queue's guard once it is this task's
/// turn. Dropping it passes the turn on and removes the queue from `lock_queues` when no other
/// task holds or waits for it, so names locked once do not stay in memory.
pub(crate) struct LocalTurn {
    shared: Arc<Shared>,
    name: Arc<str>,
    guard: Option<OwnedMutexGuard<LocalStreak>>,
    /// Whether this turn won the lock (its end is then a local release).
    held: bool,
}

impl LocalTurn {
    /// Waits for this task's turn in the local queue of `name` (K6); `None` when `until` came
    /// first, or at once when `wait` is false and another task holds or waits for the name
    /// (a lock's one attempt never waits, K5). The turn then drops the queue if nobody else
    /// waits on it.
    pub(crate) async fn take(
        shared: &Arc<Shared>,
        name: &Arc<str>,
        until: Option<Instant>,
        wait: bool,
    ) -> Option<Self> {
        let mut local = LocalTurn { shared: Arc::clone(shared), name: Arc::clone(name), guard: None, held: false };
        let queue = {
            let mut st = shared.lock_state();
            Arc::clone(st.lock_queues.entry(Arc::clone(name)).or_default())
        };
        let guard = match until {
            _ if !wait => queue.try_lock_owned().ok(),
            None => Some(queue.lock_owned().await),
            Some(u) => tokio::time::timeout_at(u, queue.lock_owned()).await.ok(),
        };
        local.guard = Some(guard?);
        Some(local)
    }

    /// When this process last gave the name way to other nodes, if it has not taken it from
    /// the store since (K7: [`simba_core::timing::defer_after_release`]).
    pub(crate) fn gave_way_at(&self) -> Option<Instant> {
        self.guard.as_deref().and_then(|s| s.gave_way_at)
    }

    /// After a long enough local streak, this local waiter lets other nodes' candidates (woken
    /// by the release just made) try first ([`simba_core::timing::courtesy`], K7). `false` when
    /// `until` came first.
    pub(crate) async fn give_way(&mut self, until: Option<Instant>) -> Result<bool, Error> {
        let renew = self.shared.config.renew_interval();
        let now = Instant::now();
        let Some(streak) = self.guard.as_deref_mut() else { return Ok(true) };
        let wait = match courtesy(streak.since, streak.released_at, now, renew) {
            Courtesy::Keep => return Ok(true),
            Courtesy::StartAnew => {
                streak.since = None;
                return Ok(true);
            }
            Courtesy::GiveWay(wait) => {
                streak.since = None;
                streak.gave_way_at = Some(now);
                wait
            }
        };
        tracing::debug!(lease = %self.name, "giving way to other nodes after a local streak");
        tokio::select! {
            _ = sleep_until(now + wait) => {}
            _ = sleep_until_or_never(until) => return Ok(false),
            _ = self.shared.shutdown.cancelled() => return Err(Error::Closed),
        }
        Ok(until.is_none_or(|u| Instant::now() < u))
    }

    /// This turn won the lock at `now`: a streak starts unless one runs.
    pub(crate) fn won(&mut self, now: Instant) {
        self.held = true;
        if let Some(streak) = self.guard.as_deref_mut() {
            streak.since.get_or_insert(now);
            streak.gave_way_at = None;
        }
    }
}

impl Drop for LocalTurn {
    fn drop(&mut self) {
        if self.held
            && let Some(streak) = self.guard.as_deref_mut()
        {
            streak.released_at = Some(Instant::now());
        }
        // The guard holds a reference to the queue: drop it first.
        drop(self.guard.take());
        let mut st = self.shared.lock_state();
        // Every other reference is a task holding or waiting for the queue, and new ones are
        // only taken under the state lock: with the map's the only one left, nobody needs it.
        if st.lock_queues.get(&self.name).is_some_and(|q| Arc::strong_count(q) == 1) {
            st.lock_queues.remove(&self.name);
        }
    }
}

/// The local claim on a name (L4); dropping it lets an election or another lock use the name.
pub(crate) struct Claim {
    shared: Arc<Shared>,
    name: Arc<str>,
}

impl Claim {
    /// Claims `name` on this client: refused while an election or another lock uses it (L4),
    /// or once the client is closed.
    pub(crate) fn take(shared: &Arc<Shared>, name: &Arc<str>) -> Result<Self, Error> {
        let mut st = shared.lock_state();
        if st.lifecycle.is_closed() {
            return Err(Error::Closed);
        }
        if !st.claims.insert(Arc::clone(name)) {
            return Err(Error::AlreadyStarted { name: name.to_string() });
        }
        Ok(Claim { shared: Arc::clone(shared), name: Arc::clone(name) })
    }

    /// The client this claim was made on.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.shared.lock_state().claims.remove(&self.name);
    }
}
