//! The refresh loop: one reader per dashboard, however many pages are open. It reads the
//! source every [`REFRESH`] while a page is live (an open event stream) and every
//! [`IDLE_REFRESH`] otherwise, so that the token history stays current without putting a
//! viewer's load on the store when nobody looks.

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
/// Time between reads while no page is open.
pub(crate) const IDLE_REFRESH: Duration = Duration::from_secs(5);
/// How long a request waits for a fresh reading before it shows the last one.
const FRESH_WAIT: Duration = Duration::from_secs(4);

/// The latest model, shared by every request and event stream.
pub(crate) struct Hub {
    tx: watch::Sender<Arc<Model>>,
    wake: Notify,
}

impl Hub {
    pub(crate) fn new(backend: String, actions: bool) -> Arc<Hub> {
        let first =
            Model { backend, now: SystemTime::now(), error: None, last_ok: None, actions, cluster: None, jobs: None };
        Arc::new(Hub { tx: watch::channel(Arc::new(first)).0, wake: Notify::new() })
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

    /// The latest model, after waiting for a new reading if it is older than [`REFRESH`] (a
    /// page opened on an idle dashboard shows the present, not five seconds ago).
    pub(crate) async fn fresh(&self) -> Arc<Model> {
        let mut rx = self.tx.subscribe();
        let current = Arc::clone(&rx.borrow_and_update());
        let age = SystemTime::now().duration_since(current.now).unwrap_or_default();
        if age < REFRESH && current.cluster.is_some() {
            return current;
        }
        self.wake.notify_one();
        match tokio::time::timeout(FRESH_WAIT, rx.changed()).await {
            Ok(Ok(())) => Arc::clone(&rx.borrow()),
            _ => current,
        }
    }

    /// Reads `source` until `stop`.
    pub(crate) async fn run(self: Arc<Self>, source: Arc<dyn Source>, stop: CancellationToken) {
        let mut tracker = Tracker::default();
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
            let period = if self.tx.receiver_count() > 0 { REFRESH } else { IDLE_REFRESH };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep_until(started + period) => {}
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
