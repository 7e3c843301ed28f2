//! The refresh loop: one reader per dashboard, however many pages are open. It reads the
//! source every [`REFRESH`] while a page is live (an open event stream), and only when asked
//! otherwise (a page or probe request, an action): a dashboard nobody looks at puts no load on
//! the store (rule O13). The token history therefore holds what was seen while someone looked.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::history::Tracker;
use super::model::{self, Model};
use super::source::Source;

/// Time between reads while a page is open: a change shows within this plus one read.
pub(crate) const REFRESH: Duration = Duration::from_millis(500);
/// How long a request waits for a fresh reading before it shows the last one.
const FRESH_WAIT: Duration = Duration::from_secs(4);

/// The latest model, shared by every request and event stream.
pub(crate) struct Hub {
    tx: watch::Sender<Arc<Model>>,
    wake: Notify,
    /// Notified after each read: a request waits on it without counting as a viewer.
    read_done: Notify,
}

impl Hub {
    pub(crate) fn new(backend: String, actions: bool) -> Arc<Hub> {
        let first =
            Model { backend, now: SystemTime::now(), error: None, last_ok: None, actions, cluster: None, jobs: None };
        Arc::new(Hub { tx: watch::channel(Arc::new(first)).0, wake: Notify::new(), read_done: Notify::new() })
    }

    /// Asks for a read now (after an action, so that the page shows its effect at once).
    pub(crate) fn poke(&self) {
        self.wake.notify_one();
    }

    /// A live viewer: the loop reads every [`REFRESH`] while one exists.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Arc<Model>> {
        let rx = self.tx.subscribe();
        self.wake.notify_one();
        rx
    }

    /// The latest model as it is, without asking for a read (the schedules pages use only its
    /// header facts: they read the schedule store themselves).
    pub(crate) fn latest(&self) -> Arc<Model> {
        Arc::clone(&self.tx.borrow())
    }

    /// The latest model, after waiting for a new reading if it is older than [`REFRESH`] (a
    /// page opened on an idle dashboard shows the present, not the last time someone looked).
    pub(crate) async fn fresh(&self) -> Arc<Model> {
        let current = Arc::clone(&self.tx.borrow());
        let age = SystemTime::now().duration_since(current.now).unwrap_or_default();
        if age < REFRESH && current.cluster.is_some() {
            return current;
        }
        // Registered before the wake, so the read's notification cannot be missed; not a
        // receiver of the model, so a request never counts as a viewer (rule O13).
        let done = self.read_done.notified();
        tokio::pin!(done);
        done.as_mut().enable();
        self.wake.notify_one();
        match tokio::time::timeout(FRESH_WAIT, done).await {
            Ok(()) => Arc::clone(&self.tx.borrow()),
            Err(_) => current,
        }
    }

    /// Reads `source` until `stop`: every [`REFRESH`] while a viewer is subscribed, else
    /// only when woken (rule O13).
    pub(crate) async fn run(self: Arc<Self>, source: Arc<dyn Source>, stop: CancellationToken) {
        let mut tracker = Tracker::default();
        // Idle from the start: the first page or probe request asks for the first read.
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = self.wake.notified() => {}
        }
        loop {
            let started = Instant::now();
            let result = tokio::select! {
                _ = stop.cancelled() => return,
                r = source.read() => r,
            };
            let now = SystemTime::now();
            let previous = Arc::clone(&self.tx.borrow());
            let mut next = Model { now, ..(*previous).clone() };
            match result {
                Ok(reading) => {
                    tracker.observe(&reading.cluster, now);
                    next.cluster = Some(model::cluster(&reading, &tracker, now));
                    next.jobs = Some(super::jobs::view(&reading, now));
                    next.last_ok = Some(now);
                    next.error = None;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "dashboard: read failed");
                    next.error = Some(e);
                }
            }
            self.tx.send_replace(Arc::new(next));
            self.read_done.notify_waiters();
            let viewers = self.tx.receiver_count() > 0;
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep_until(started + REFRESH), if viewers => {}
                // A new viewer or a page request: read now (but not more often than REFRESH).
                _ = self.wake.notified() => {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep_until(started + REFRESH) => {}
                    }
                }
            }
        }
    }
}
