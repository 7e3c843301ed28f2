//! The schedules' change counters as one node reads them (rule A11): one read of every
//! partition's counter per renewal interval, shared by the workers of all the partitions the
//! node holds, so a node holding 64 partitions asks the store once per interval, not 64 times.
//! Where the store broadcasts changes ([`SharedScheduleStore::subscribe_changes`]) a message
//! naming the node's space makes the next read at once. The read runs while at least one
//! worker listens and stops with the last one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use crate::schedule_store::SharedScheduleStore;

/// Every partition's change counter, as read last (partitions never written are absent: 0).
pub(crate) type Counters = Arc<Vec<(u32, u64)>>;

/// One node's reader of the change counters.
pub(crate) struct ChangeFeed {
    store: SharedScheduleStore,
    every: Duration,
    timeout: Duration,
    tx: watch::Sender<Option<Counters>>,
    reading: AtomicBool,
}

impl ChangeFeed {
    /// Reads `store`'s counters every `every` (each read given up after `timeout`) while
    /// someone listens.
    pub(crate) fn new(store: SharedScheduleStore, every: Duration, timeout: Duration) -> Arc<Self> {
        let (tx, _) = watch::channel(None);
        Arc::new(ChangeFeed { store, every, timeout, tx, reading: AtomicBool::new(false) })
    }

    /// A listener: it sees the counters of the last read (`None` until the first one answers)
    /// and is woken when a read finds them moved. Starts the reads if none run.
    pub(crate) fn listen(self: &Arc<Self>) -> watch::Receiver<Option<Counters>> {
        let rx = self.tx.subscribe();
        if !self.reading.swap(true, Ordering::SeqCst) {
            tokio::spawn(Arc::clone(self).read_while_listened());
        }
        rx
    }

    /// The reads: one per interval, published only when the counters moved (or at the first),
    /// until no listener is left. A read that fails keeps the last counters (the workers keep
    /// the schedules they have) and is retried at the next interval.
    ///
    /// A broadcast change is read at once after a quiet spell; while broadcasts keep moving the
    /// counters (a burst of writes: thousands of schedules created), each further read waits
    /// twice as long after the one before, from a sixteenth of the interval up to one interval,
    /// so a burst costs the nodes one read of each moved partition per interval at most, not
    /// one per write, and every write is still read within one interval (A11).
    async fn read_while_listened(self: Arc<Self>) {
        let mut broadcast = self.store.subscribe_changes();
        let mut gap = Duration::ZERO;
        loop {
            if self.tx.receiver_count() == 0 {
                self.reading.store(false, Ordering::SeqCst);
                // A listener that came between the count and the store found `reading` still
                // set and started nothing: go on for it, unless another reader started.
                if self.tx.receiver_count() == 0 || self.reading.swap(true, Ordering::SeqCst) {
                    return;
                }
            }
            let read_at = tokio::time::Instant::now();
            let mut moved = false;
            match tokio::time::timeout(self.timeout, self.store.changes()).await {
                Ok(Ok(mut counters)) => {
                    counters.sort_unstable();
                    self.tx.send_if_modified(|last| {
                        moved = last.as_deref() != Some(&counters);
                        if moved {
                            *last = Some(Arc::new(counters));
                        }
                        moved
                    });
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot read the schedules' change counters; trying again"),
                Err(_) => {
                    tracing::warn!(timeout = ?self.timeout, "the schedules' change counters were not read in time; trying again")
                }
            }
            let by_broadcast = self.wait(&mut broadcast, read_at, gap).await;
            gap = if by_broadcast && moved { (gap * 2).clamp(self.every / 16, self.every) } else { Duration::ZERO };
        }
    }

    /// Until the next read: one interval after `read_at`, or sooner when the store broadcasts
    /// a change of this node's space, but not before `read_at + gap`. `true` when a broadcast
    /// (or a lag of the receiver, which missed messages) ends the wait. A closed receiver is
    /// dropped (the interval only, from then on).
    async fn wait(
        &self,
        broadcast: &mut Option<tokio::sync::broadcast::Receiver<String>>,
        read_at: tokio::time::Instant,
        gap: Duration,
    ) -> bool {
        use tokio::sync::broadcast::error::RecvError;
        let next = read_at + self.every;
        let Some(rx) = broadcast else {
            tokio::time::sleep_until(next).await;
            return false;
        };
        let sleep = tokio::time::sleep_until(next);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                () = &mut sleep => return false,
                got = rx.recv() => match got {
                    Ok(space) if space == self.store.space() => break,
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => {
                        *broadcast = None;
                        sleep.await;
                        return false;
                    }
                },
            }
        }
        // A change came: read it at once, or once the burst's gap since the last read passed.
        tokio::time::sleep_until((read_at + gap).min(next)).await;
        true
    }
}

/// Partition `partition`'s counter in `counters` (0 when it was never written).
pub(crate) fn counter_of(counters: &[(u32, u64)], partition: u32) -> u64 {
    counters.iter().find(|(p, _)| *p == partition).map_or(0, |(_, c)| *c)
}
