//! The release watch of the SQL stores that cannot broadcast (SQLite, MySQL/MariaDB): what
//! [`Backend::subscribe_releases`](crate::backend::Backend::subscribe_releases) streams there
//! (K2; BENCHMARKS.md P4).
//!
//! One task per backend instance (a node), whatever the number of leases. It runs only while
//! a candidate of this node waits: every acquisition answered `Held` adds the name to the
//! node's *wanted* set (a `Won` removes it); while the set is empty the task sleeps on a
//! [`Notify`] and sends no query at all. While it is not empty, every tick it asks its
//! [`Probe`] whether the store changed (SQLite: `PRAGMA data_version` on a connection of its
//! own, no I/O), and if so reads which of the wanted names are free now (released, or held by
//! a session that is gone): one indexed read of those rows. Each free name is sent to the
//! subscribers and leaves the set; a candidate that loses the race gets `Held` again and puts
//! it back.
//!
//! A release made through this backend instance is sent at once, without a query. A name
//! that no acquisition asked for again within [`WANT_TTL`] leaves the set (its candidate
//! stopped waiting); a candidate that retries less often than that is only woken by its own
//! attempts, as before. The broadcast is only a hint: the candidate's acquisition decides.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, broadcast};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::backend::{Acquire, BackendResult};

/// How long a name stays wanted after the last acquisition of it answered `Held`. Candidates
/// retry every `renew_interval / 2 + jitter` (K1), 2.5 to 5 s with the default timing.
pub(crate) const WANT_TTL: Duration = Duration::from_secs(60);

/// How long the task waits after a failed query before the next one.
const ERROR_PAUSE: Duration = Duration::from_secs(1);

/// At most this many names in one read of the wanted rows.
pub(crate) const CHUNK: usize = 256;

/// What the watch asks of the store.
pub(crate) trait Probe: Send + 'static {
    /// Whether the store may have changed since the last call (`true` when it cannot tell).
    fn changed(&mut self) -> impl Future<Output = BackendResult<bool>> + Send;

    /// Of `names` (at most [`CHUNK`]), those whose lease is free now: released, or held by a
    /// session that is missing or expired.
    fn free(&mut self, names: &[String]) -> impl Future<Output = BackendResult<Vec<String>>> + Send;
}

/// `SELECT name FROM simba_lease ... WHERE name IN (?, ..)` for `n` names, with `now` the
/// dialect's "now" in milliseconds; positional `?` placeholders (SQLite and MySQL).
pub(crate) fn free_sql(now: &str, n: usize) -> String {
    let marks = vec!["?"; n].join(", ");
    format!(
        "SELECT name FROM simba_lease l WHERE name IN ({marks}) AND (l.session_id IS NULL OR NOT EXISTS \
         (SELECT 1 FROM simba_session s WHERE s.id = l.session_id AND s.expires_at > {now}))"
    )
}

/// The state shared by a backend's clones and its watch task.
struct State {
    tx: broadcast::Sender<String>,
    wanted: Mutex<Wanted>,
    wake: Notify,
    /// Queries the task has sent (probes and reads), for benchmarks.
    queries: AtomicU64,
}

#[derive(Default)]
struct Wanted {
    /// Name -> when an acquisition of it last answered `Held`.
    names: HashMap<String, Instant>,
    /// A name was (re)added since the last read: read even if the probe saw no change, since
    /// its release may have been committed before the probe's last look.
    fresh: bool,
}

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A backend's release watch. Cheap to clone; the task ends when the last clone is dropped.
#[derive(Clone)]
pub(crate) struct ReleaseWatch {
    state: Arc<State>,
    /// The task, until the first `Held` starts it.
    task: Arc<Mutex<Option<Task>>>,
    _stop: Arc<DropGuard>,
}

impl std::fmt::Debug for ReleaseWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseWatch").field("queries", &self.queries()).finish_non_exhaustive()
    }
}

impl ReleaseWatch {
    /// A watch that looks at the store through `probe` every `tick` while a name is wanted.
    pub(crate) fn new<P: Probe>(probe: P, tick: Duration) -> Self {
        let state = Arc::new(State {
            tx: broadcast::channel(1024).0,
            wanted: Mutex::new(Wanted::default()),
            wake: Notify::new(),
            queries: AtomicU64::new(0),
        });
        let stop = CancellationToken::new();
        let task: Task = Box::pin(run(Arc::clone(&state), probe, stop.clone(), tick));
        ReleaseWatch { state, task: Arc::new(Mutex::new(Some(task))), _stop: Arc::new(stop.drop_guard()) }
    }

    /// A new subscriber to the names of released leases.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<String> {
        self.state.tx.subscribe()
    }

    /// Queries the watch has sent so far.
    pub(crate) fn queries(&self) -> u64 {
        self.state.queries.load(Ordering::Relaxed)
    }

    /// Notes the answer to an acquisition of `name`.
    pub(crate) fn acquired(&self, name: &str, answer: &BackendResult<Acquire>) {
        match answer {
            Ok(Acquire::Held) => self.held(name),
            Ok(Acquire::Won(_)) => {
                self.lock().names.remove(name);
            }
            _ => {}
        }
    }

    /// A release of `name` through this backend succeeded: tell local candidates at once.
    pub(crate) fn released(&self, name: &str) {
        self.lock().names.remove(name);
        let _ = self.state.tx.send(name.to_owned());
    }

    fn held(&self, name: &str) {
        {
            let mut w = self.lock();
            w.names.insert(name.to_owned(), Instant::now());
            w.fresh = true;
        }
        self.state.wake.notify_one();
        let task = self.task.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(task) = task {
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => {
                    handle.spawn(task);
                }
                Err(_) => {
                    // Outside a runtime (never from the engine): try again at the next `Held`.
                    *self.task.lock().unwrap_or_else(PoisonError::into_inner) = Some(task);
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Wanted> {
        self.state.wanted.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// The wanted names (dropping those wanted for too long) and whether one is fresh.
    fn snapshot(&self) -> (Vec<String>, bool) {
        let mut w = self.wanted.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        w.names.retain(|_, at| now.saturating_duration_since(*at) < WANT_TTL);
        let fresh = std::mem::take(&mut w.fresh);
        (w.names.keys().cloned().collect(), fresh)
    }

    fn is_idle(&self) -> bool {
        self.wanted.lock().unwrap_or_else(PoisonError::into_inner).names.is_empty()
    }

    fn count(&self) {
        self.queries.fetch_add(1, Ordering::Relaxed);
    }
}

async fn run<P: Probe>(state: Arc<State>, mut probe: P, stop: CancellationToken, tick: Duration) {
    loop {
        // Nothing wanted: no query until an acquisition answers `Held`.
        while state.is_idle() {
            tokio::select! {
                () = state.wake.notified() => {}
                () = stop.cancelled() => return,
            }
        }
        tokio::select! {
            () = tokio::time::sleep(tick) => {}
            () = stop.cancelled() => return,
        }
        let (names, fresh) = state.snapshot();
        if names.is_empty() {
            continue;
        }
        state.count();
        match probe.changed().await {
            Ok(false) if !fresh => continue,
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "release watch: cannot tell whether the store changed; reading"),
        }
        for chunk in names.chunks(CHUNK) {
            state.count();
            match probe.free(chunk).await {
                Ok(free) => {
                    if !free.is_empty() {
                        let mut w = state.wanted.lock().unwrap_or_else(PoisonError::into_inner);
                        for name in &free {
                            w.names.remove(name);
                        }
                    }
                    for name in free {
                        let _ = state.tx.send(name);
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, retry_in = ?ERROR_PAUSE, "release watch: cannot read the wanted leases");
                    // The next look reads again, whatever the probe says.
                    state.wanted.lock().unwrap_or_else(PoisonError::into_inner).fresh = true;
                    tokio::select! {
                        () = tokio::time::sleep(ERROR_PAUSE) => {}
                        () = stop.cancelled() => return,
                    }
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// A store of free names; `changed` answers whether `free` changed since the last look.
    #[derive(Clone, Default)]
    struct Fake {
        free: Arc<Mutex<Vec<String>>>,
        changed: Arc<AtomicBool>,
        looks: Arc<AtomicU64>,
    }

    impl Probe for Fake {
        async fn changed(&mut self) -> BackendResult<bool> {
            self.looks.fetch_add(1, Ordering::Relaxed);
            Ok(self.changed.swap(false, Ordering::Relaxed))
        }
        async fn free(&mut self, names: &[String]) -> BackendResult<Vec<String>> {
            Ok(self.free.lock().unwrap().iter().filter(|n| names.contains(n)).cloned().collect())
        }
    }

    /// BENCHMARKS.md P4: no query while nothing is wanted; a wanted name freed in the store is
    /// broadcast once and leaves the set; a local release is sent at once.
    #[tokio::test(start_paused = true)]
    async fn watches_only_wanted_names_and_only_while_wanted() {
        let fake = Fake::default();
        let w = ReleaseWatch::new(fake.clone(), Duration::from_millis(5));
        let mut rx = w.subscribe();
        w.acquired("a", &Ok(Acquire::Won(1)));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(w.queries(), 0, "queries while nothing is wanted");

        w.acquired("a", &Ok(Acquire::Held));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let before = w.queries();
        assert!(before > 0, "the watch never looked");
        // Freed in the store: the probe reports a change, the read finds it.
        fake.free.lock().unwrap().push("a".into());
        fake.changed.store(true, Ordering::Relaxed);
        let heard = tokio::time::timeout(Duration::from_millis(20), rx.recv()).await.unwrap().unwrap();
        assert_eq!(heard, "a");
        // Not wanted any more: the watch goes idle.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let idle = w.queries();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(w.queries(), idle, "queries after the wanted name was freed");

        w.released("b");
        assert_eq!(rx.try_recv().unwrap(), "b");
    }

    /// A name made wanted after the probe last looked is read once even if the probe saw no
    /// change (its release may predate the probe's look); a name not asked for again within
    /// WANT_TTL is dropped.
    #[tokio::test(start_paused = true)]
    async fn fresh_names_are_read_and_stale_ones_dropped() {
        let fake = Fake::default();
        fake.free.lock().unwrap().push("x".into());
        let w = ReleaseWatch::new(fake.clone(), Duration::from_millis(5));
        let mut rx = w.subscribe();
        w.acquired("x", &Ok(Acquire::Held));
        let heard = tokio::time::timeout(Duration::from_millis(20), rx.recv()).await.unwrap().unwrap();
        assert_eq!(heard, "x");

        w.acquired("y", &Ok(Acquire::Held));
        tokio::time::sleep(WANT_TTL + Duration::from_secs(1)).await;
        let after = w.queries();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(w.queries(), after, "a stale name is still watched");
    }

    #[test]
    fn free_sql_has_one_placeholder_per_name() {
        let sql = free_sql("NOW", 3);
        assert!(sql.contains("IN (?, ?, ?)"), "{sql}");
        assert!(sql.contains("expires_at > NOW"), "{sql}");
    }
}
