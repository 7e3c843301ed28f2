//! The client: one session per `Simba`, shared by every election and lock it starts.

use std::sync::{Arc, Mutex, PoisonError};

use rand::SeedableRng;
use rand::rngs::StdRng;
use simba_core::Timing;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::namespace::{Namespace, Namespaced};
use crate::backend::{Backend, BackendUrl, ConnectOptions, SessionId, SharedBackend};
use crate::election::Election;
use crate::engine::{ClientState, Shared};
use crate::events::{ElectionSnapshot, Event, Snapshot, TermSnapshot};
use crate::lock::Lock;
use crate::{Error, SimbaConfig, Term};

/// A simba client: one session on one backend (rule S1), and the elections and locks that
/// live and die with it.
///
/// Cheap to clone; clones share the session. Create one per process, and call
/// [`close`](Simba::close) when done: the session, its elections and their tasks run in the
/// background until then (dropping the handles does not stop them).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), simba::Error> {
/// use simba::{backend::memory::MemoryBackend, Simba, SimbaConfig};
///
/// let simba = Simba::new(MemoryBackend::new(), SimbaConfig::default())?;
/// let guard = simba.lock("nightly-report").acquire().await?;
/// assert!(guard.term().is_valid());
/// println!("holding {} with token {}", guard.term().name(), guard.term().token());
/// guard.release().await?;
/// simba.close().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Simba {
    pub(crate) shared: Arc<Shared>,
}

/// Builds a [`Simba`] client: on a backend value with [`backend`](SimbaBuilder::backend)
/// then [`build`](SimbaBuilder::build), or on a URL with [`url`](SimbaBuilder::url) then
/// [`connect`](SimbaBuilder::connect).
///
/// ```no_run
/// # async fn demo() -> Result<(), simba::Error> {
/// use std::time::Duration;
/// use simba::backend::namespace::Namespace;
/// use simba::{Simba, SimbaConfig};
///
/// let simba = Simba::builder()
///     .url("postgres://simba@db-host/simba")
///     .namespace(Namespace::new("billing-svc")?)
///     .config(SimbaConfig::builder().lease_duration(Duration::from_secs(15)).build()?)
///     .connect()
///     .await?;
/// simba.close().await;
/// # Ok(())
/// # }
/// ```
#[must_use = "a builder does nothing until `build` or `connect` is called"]
pub struct SimbaBuilder {
    config: SimbaConfig,
    backend: Option<SharedBackend>,
    url: Option<BackendUrl>,
    seed: Option<u64>,
    namespace: Option<Namespace>,
    lease_labels: crate::metrics::LeaseLabels,
}

impl SimbaBuilder {
    /// The timing configuration (default: [`SimbaConfig::default`]).
    pub fn config(mut self, config: SimbaConfig) -> Self {
        self.config = config;
        self
    }

    /// The backend, for [`build`](SimbaBuilder::build) (or [`url`](SimbaBuilder::url) for
    /// [`connect`](SimbaBuilder::connect)).
    pub fn backend<B: Backend>(mut self, backend: B) -> Self {
        self.backend = Some(Arc::new(backend));
        self
    }

    /// The backend's URL, for [`connect`](SimbaBuilder::connect): `memory://`,
    /// `sqlite://path/to/file.db`, `postgres://...`, `mysql://...`, `redis://...`,
    /// `zk://host:port/chroot` or `etcd://host:port`, each with its cargo feature (see
    /// [`Simba::connect`]).
    pub fn url(mut self, url: impl AsRef<str>) -> Self {
        self.url = Some(BackendUrl::new(url.as_ref()));
        self
    }

    /// [`url`](SimbaBuilder::url), parsed already.
    pub(crate) fn backend_url(mut self, url: BackendUrl) -> Self {
        self.url = Some(url);
        self
    }

    /// Which terms carry their lease name as a metrics label (rule O4; default
    /// [`LeaseLabels::Jobs`](crate::metrics::LeaseLabels::Jobs)). `[metrics] lease_labels` in
    /// `simba.toml`.
    pub fn lease_labels(mut self, lease_labels: crate::metrics::LeaseLabels) -> Self {
        self.lease_labels = lease_labels;
        self
    }

    /// Seeds the candidates' retry jitter, for reproducible tests.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Puts every lease, group and job name of this client in `namespace` (ADR 0013):
    /// applications in different namespaces share one store without their names
    /// colliding. Without it (the default), the client reads and writes the store's default
    /// namespace, as before namespaces existed. `[backend] namespace` in `simba.toml`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), simba::Error> {
    /// use simba::backend::{memory::MemoryBackend, namespace::Namespace};
    /// use simba::Simba;
    ///
    /// let simba = Simba::builder().backend(MemoryBackend::new()).namespace(Namespace::new("billing-svc")?).build()?;
    /// simba.close().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.namespace = Some(namespace);
        self
    }

    /// Connects to the backend named by [`url`](SimbaBuilder::url) and starts the client, as
    /// [`build`](SimbaBuilder::build) does. A backend given with
    /// [`backend`](SimbaBuilder::backend) is used as is, without a URL.
    pub async fn connect(mut self) -> Result<Simba, Error> {
        if self.backend.is_some() {
            return self.build();
        }
        let Some(url) = self.url.take() else {
            return Err(crate::ConfigError::new(
                "no backend: call `SimbaBuilder::url` (e.g. \"postgres://user@host/db\") or `SimbaBuilder::backend`",
            )
            .with_key("SimbaBuilder::url")
            .into());
        };
        match crate::backend::connect::connect_known(&url, ConnectOptions::default()).await {
            Ok(Some(c)) => {
                self.backend = Some(c.backend());
                self.build()
            }
            Ok(None) => Err(crate::ConfigError::new(format!(
                "unsupported backend URL `{}`: use memory://, sqlite://PATH, postgres://, mysql://, redis://, zk:// or etcd:// (each needs its cargo feature: sqlite, postgres, mysql, redis, zookeeper, etcd)",
                url.scheme()
            ))
            .with_key("backend.url")
            .into()),
            Err(source) => Err(Error::Backend { op: "connect", name: None, source }),
        }
    }

    /// Starts the client: its session actor opens a session in the background. Must be
    /// called inside a Tokio runtime.
    pub fn build(self) -> Result<Simba, Error> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let backend = self.backend.ok_or_else(|| {
            crate::ConfigError::new(
                "no backend: call `SimbaBuilder::backend`, or `SimbaBuilder::url` then `connect().await` instead of \
                 `build()`",
            )
            .with_key("SimbaBuilder::backend")
        })?;
        crate::metrics::build_info(&backend.describe());
        let backend: SharedBackend = match self.namespace {
            Some(ns) => Arc::new(Namespaced::shared(backend, Some(ns))),
            None => backend,
        };
        let rng = match self.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_rng(&mut rand::rng()),
        };
        let (releases, _) = broadcast::channel(1024);
        let (events, _) = broadcast::channel(1024);
        let shared = Arc::new(Shared {
            config: self.config,
            timing: Timing::new(self.config.into()),
            session: watch::channel(None).0,
            state: Mutex::new(ClientState::default()),
            events,
            releases,
            shutdown: CancellationToken::new(),
            attempt_done: tokio::sync::Notify::new(),
            rng: Mutex::new(rng),
            actor: Mutex::new(None),
            backend,
            lease_metrics: crate::metrics::LeaseMetrics::new(self.lease_labels),
        });
        if let Some(mut rx) = shared.backend.subscribe_releases() {
            let tx = shared.releases.clone();
            let stop = shared.shutdown.clone();
            handle.spawn(async move {
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        r = rx.recv() => match r {
                            Ok(name) => { let _ = tx.send(name); }
                            Err(broadcast::error::RecvError::Lagged(_)) => {}
                            Err(broadcast::error::RecvError::Closed) => break,
                        }
                    }
                }
            });
        }
        // The actor logs under `simba{backend}` while opening and under a fresh
        // `simba{backend, session}` per session, children of the span current here.
        let actor = handle.spawn(crate::engine::session::run(Arc::clone(&shared), tracing::Span::current()));
        handle.spawn(tracing::Instrument::in_current_span(crate::engine::idle::run(Arc::clone(&shared))));
        *shared.actor.lock().unwrap_or_else(PoisonError::into_inner) = Some(actor);
        Ok(Simba { shared })
    }
}

impl Simba {
    /// A builder.
    pub fn builder() -> SimbaBuilder {
        SimbaBuilder {
            config: SimbaConfig::default(),
            backend: None,
            url: None,
            seed: None,
            namespace: None,
            lease_labels: crate::metrics::LeaseLabels::default(),
        }
    }

    /// A client on `backend` with `config`.
    pub fn new<B: Backend>(backend: B, config: SimbaConfig) -> Result<Simba, Error> {
        Simba::builder().backend(backend).config(config).build()
    }

    /// A client on the backend named by `url`: `memory://`, `sqlite://path/to/file.db`
    /// (feature `sqlite`), `postgres://...` (feature `postgres`), `mysql://...` (feature
    /// `mysql`), `redis://...` (feature `redis`), `zk://host:port/chroot` (feature
    /// `zookeeper`) or `etcd://host:port` (feature `etcd`).
    pub async fn connect(url: &str, config: SimbaConfig) -> Result<Simba, Error> {
        Simba::connect_in(url, None, config).await
    }

    /// [`connect`](Simba::connect) in `namespace` (`None`: the default namespace); see
    /// [`SimbaBuilder::namespace`].
    pub async fn connect_in(url: &str, namespace: Option<Namespace>, config: SimbaConfig) -> Result<Simba, Error> {
        Simba::connect_url(&BackendUrl::new(url), namespace, config).await
    }

    /// [`connect_in`](Simba::connect_in) to a parsed URL.
    pub async fn connect_url(
        url: &BackendUrl,
        namespace: Option<Namespace>,
        config: SimbaConfig,
    ) -> Result<Simba, Error> {
        let b = Simba::builder().config(config).backend_url(url.clone());
        match namespace {
            Some(ns) => b.namespace(ns).connect().await,
            None => b.connect().await,
        }
    }

    /// The backend's jobs store (run history and job control), where the backend
    /// has one.
    pub fn job_store(&self) -> Option<crate::job_store::SharedJobStore> {
        self.shared.backend.job_store()
    }

    /// The backend's schedule store (schedules stored as data), where the backend has one.
    pub fn schedule_store(&self) -> Option<crate::schedule_store::SharedScheduleStore> {
        self.shared.backend.schedule_store()
    }

    /// The backend's description, for errors (no secrets).
    pub(crate) fn backend_description(&self) -> String {
        self.shared.backend.describe()
    }

    /// The timing configuration.
    pub fn config(&self) -> &SimbaConfig {
        &self.shared.config
    }

    /// An election for lease `name`. Nothing happens until it is started.
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election::new(Arc::clone(&self.shared), name.into())
    }

    /// A lock on lease `name`.
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(Arc::clone(&self.shared), name.into())
    }

    /// Records that `term` ran cron slot `slot_ms` (unix milliseconds) of its lease, fenced
    /// like a write: `Ok(true)` only while `term`'s session holds the lease with its token and
    /// no later or equal slot was recorded before (a slot runs at most once across the cluster,
    /// whatever the nodes' clocks say). One backend call, bounded by the renewal period (D2);
    /// `Ok(false)` also when it timed out. What the scheduler uses without a jobs store.
    pub async fn claim_slot(&self, term: &Term, slot_ms: i64) -> Result<bool, Error> {
        let cell = term.session();
        let to = cell.call_timeout(Instant::now());
        let call = self.shared.backend.claim_slot(&cell.id, term.name(), term.token(), slot_ms);
        match tokio::time::timeout(to, call).await {
            Ok(Ok(claimed)) => Ok(claimed),
            Ok(Err(source)) => Err(Error::Backend { op: "claim_slot", name: Some(term.name().to_owned()), source }),
            Err(_) => Ok(false),
        }
    }

    /// A number in `[0, 1)` from this client's random generator, for jitter (retry backoffs):
    /// reproducible under [`SimbaBuilder::seed`], as the engine's own jitter is.
    pub fn random_unit(&self) -> f64 {
        self.shared.unit_random()
    }

    /// Subscribes to the client's events.
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.shared.events.subscribe()
    }

    /// The current session id, if a session is open.
    pub fn session_id(&self) -> Option<SessionId> {
        self.shared.current_session().map(|c| c.id.clone())
    }

    /// Waits until a session is live. Fails with [`Error::Closed`] if the client is closed
    /// first.
    pub async fn live(&self) -> Result<SessionId, Error> {
        let mut rx = self.shared.session.subscribe();
        loop {
            self.shared.ensure_open()?;
            if let Some(c) = rx.borrow_and_update().clone().filter(|c| c.is_live_at(Instant::now())) {
                return Ok(c.id.clone());
            }
            tokio::select! {
                r = rx.changed() => if r.is_err() { return Err(Error::Closed) },
                _ = self.shared.shutdown.cancelled() => return Err(Error::Closed),
            }
        }
    }

    /// The session's status now (what the probes answer; a cheap read, no snapshot).
    #[cfg(any(feature = "prometheus", feature = "dashboard"))]
    pub(crate) fn session_status(&self) -> crate::SessionStatus {
        self.shared.lock_state().lifecycle.status()
    }

    /// The session's state, time to deadline, and every election and held term (rule S5).
    pub fn snapshot(&self) -> Snapshot {
        let now = Instant::now();
        let cell = self.shared.current_session();
        let st = self.shared.lock_state();
        let mut elections: Vec<ElectionSnapshot> =
            st.elections.values().map(|e| ElectionSnapshot { name: e.name.to_string(), state: e.state(now) }).collect();
        elections.sort_by(|a, b| a.name.cmp(&b.name));
        let mut terms: Vec<TermSnapshot> = st
            .held
            .values()
            .map(|t| TermSnapshot {
                name: t.name().to_owned(),
                token: t.token(),
                remaining: t.remaining(),
                valid: t.is_valid_at(now),
            })
            .collect();
        terms.sort_by(|a, b| a.name.cmp(&b.name));
        Snapshot {
            status: st.lifecycle.status(),
            session: cell.as_ref().map(|c| c.id.clone()),
            time_to_deadline: cell.as_ref().map(|c| c.deadline().saturating_duration_since(now)),
            elections,
            terms,
        }
    }

    /// Closes the client (rule S4): stops every election (handing over in the H1 order),
    /// releases every lock, then closes the session so the backend frees everything the node
    /// held at once. Later calls on this client fail with [`Error::Closed`].
    ///
    /// Called from inside a leader task or a callback, it does not wait for that task (L5).
    pub async fn close(&self) {
        let elections: Option<Vec<Election>> = {
            let mut st = self.shared.lock_state();
            if !st.lifecycle.close() {
                None
            } else {
                Some(
                    st.elections
                        .values()
                        .map(|c| Election::from_ctl(Arc::clone(&self.shared), Arc::clone(c)))
                        .collect(),
                )
            }
        };
        let Some(elections) = elections else {
            self.wait_actor().await;
            return;
        };
        futures_util::future::join_all(elections.iter().map(Election::stop)).await;
        self.shared.shutdown.cancel();
        self.wait_actor().await;
    }

    /// Test hook: stops the session actor as a crash would: no more renewals, no close, no
    /// release; the session expires on the backend by itself.
    #[cfg(feature = "tck")]
    pub fn crash_for_tests(&self) {
        if let Some(a) = self.shared.actor.lock().unwrap_or_else(PoisonError::into_inner).take() {
            a.abort();
        }
        self.shared.lock_state().lifecycle.close();
    }

    async fn wait_actor(&self) {
        let actor = self.shared.actor.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(a) = actor {
            if crate::engine::control::inside_engine_task() {
                // Waiting for the actor from inside a task it may wait for would deadlock
                // (L5); it finishes on its own.
                return;
            }
            let _ = a.await;
        }
    }
}

impl std::fmt::Debug for Simba {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simba")
            .field("backend", &self.shared.backend.describe())
            .field("session", &self.session_id())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Rule O10: `url(..).connect()` applies the builder's settings as `backend(..).build()`
    /// does, and refuses a missing or unsupported URL with the fix.
    #[tokio::test]
    async fn o10_the_builder_connects_by_url_with_its_settings() -> Result<(), Error> {
        let config = SimbaConfig::builder().lease_duration(Duration::from_secs(9)).build()?;
        let simba = Simba::builder()
            .url("memory://")
            .namespace(Namespace::new("billing-svc")?)
            .config(config)
            .lease_labels(crate::metrics::LeaseLabels::All)
            .connect()
            .await?;
        assert_eq!(simba.config(), &config);
        assert!(simba.shared.backend.describe().contains("namespace billing-svc"), "{:?}", simba);
        let label = simba.shared.lease_metrics.label(&"order-1".into(), false);
        assert_eq!(
            label,
            crate::metrics::lease_label(crate::metrics::LeaseLabels::All, &"order-1".into(), None, false)
        );
        let guard = simba.lock("order-1").acquire().await?;
        guard.release().await?;
        simba.close().await;

        let e = Simba::builder().connect().await.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("SimbaBuilder::url"), "{e}");
        let e = Simba::builder().url("gopher://x").connect().await.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("unsupported backend URL `gopher`") && e.contains("postgres://"), "{e}");
        Ok(())
    }
}
