//! The client: one session per `Simba`, shared by every election and lock it starts.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::{Backend, HeldDigest, SessionId, SharedBackend};
use crate::core::Timing;
use crate::core::ledger::{Verdict, judge_win};
use crate::election::{Election, ElectionCtl};
use crate::events::{ElectionSnapshot, Event, SessionStatus, Snapshot, TermSnapshot};
use crate::lock::Lock;
use crate::term::SessionCell;
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

/// What the session actor, elections and locks share.
pub(crate) struct Shared {
    pub(crate) backend: SharedBackend,
    pub(crate) timing: Timing,
    /// The current session while it is live or suspended; `None` while opening or closed.
    pub(crate) session: watch::Sender<Option<Arc<SessionCell>>>,
    pub(crate) state: Mutex<ClientState>,
    pub(crate) events: broadcast::Sender<Event>,
    /// Names of released leases, fed by the backend where it broadcasts them (K2).
    pub(crate) releases: broadcast::Sender<String>,
    pub(crate) shutdown: CancellationToken,
    /// Woken when an acquisition stops being in flight (K3: the next one waits for it).
    pub(crate) attempt_done: tokio::sync::Notify,
    rng: Mutex<StdRng>,
    actor: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
pub(crate) struct ClientState {
    pub(crate) status: Option<SessionStatus>,
    /// Terms held now, including revoked ones whose release is still under way (so that a
    /// keep-alive does not mistake them for orphans).
    pub(crate) held: HashMap<Arc<str>, Term>,
    /// Names with an acquisition in flight.
    pub(crate) inflight: HashSet<Arc<str>>,
    /// Names in use by an election or a lock on this client (rule L4).
    pub(crate) claims: HashSet<Arc<str>>,
    pub(crate) elections: HashMap<Arc<str>, Arc<ElectionCtl>>,
    /// Local queues so that tasks of one process take a lock one at a time.
    pub(crate) lock_queues: HashMap<Arc<str>, Arc<tokio::sync::Mutex<()>>>,
    pub(crate) closed: bool,
}

impl Shared {
    pub(crate) fn lock_state(&self) -> MutexGuard<'_, ClientState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn emit(&self, e: Event) {
        let _ = self.events.send(e);
    }

    /// A uniform sample from `[0, 1)` for jitter.
    pub(crate) fn unit_random(&self) -> f64 {
        self.rng.lock().unwrap_or_else(PoisonError::into_inner).random::<f64>()
    }

    /// The digest of what this session holds, sent with each keep-alive.
    pub(crate) fn digest(&self, cell: &Arc<SessionCell>) -> HeldDigest {
        let st = self.lock_state();
        let mut d = HeldDigest::default();
        for t in st.held.values().filter(|t| Arc::ptr_eq(t.session(), cell)) {
            d.add(t.token());
        }
        d
    }

    /// The live session, or `None`.
    pub(crate) fn current_session(&self) -> Option<Arc<SessionCell>> {
        self.session.borrow().clone()
    }

    pub(crate) fn ensure_open(&self) -> Result<(), Error> {
        if self.lock_state().closed { Err(Error::Closed) } else { Ok(()) }
    }

    /// The backend answered a release of `name` with `token` made for `cell`: the session's
    /// K4 record of the name can go, unless an acquisition of it is in flight (see
    /// [`SessionCell::release_acknowledged`]). The state lock makes the in-flight check and the
    /// pruning one step with respect to an attempt entering `inflight`.
    pub(crate) fn release_acknowledged(&self, cell: &SessionCell, name: &str, token: u64) {
        let st = self.lock_state();
        cell.release_acknowledged(name, token, st.inflight.contains(name));
    }

    /// The acquisition of `name` made for `cell` ended with `won` (a token, or nothing): the
    /// one place where an attempt leaves `inflight` with its result taken (K3) and a win
    /// becomes a term or is released (K4, [`judge_win`]). Leaving `inflight` and entering
    /// `held` are one critical section: a keep-alive's reconcile in between would see the
    /// lease owned by the session but neither held nor in flight, and release it as an orphan
    /// (T6).
    pub(crate) fn settle_attempt(
        self: &Arc<Self>,
        cell: &Arc<SessionCell>,
        name: &Arc<str>,
        won: Option<u64>,
    ) -> Option<Term> {
        let now = Instant::now();
        let adopted = {
            let mut st = self.lock_state();
            st.inflight.remove(name);
            let adopted = won
                .filter(|&token| {
                    judge_win(token, cell.is_live_at(now), st.closed, cell.max_released(name)) == Verdict::Adopt
                })
                .map(|token| {
                    let term = Term::new(Arc::clone(name), token, Arc::clone(cell), now);
                    st.held.insert(Arc::clone(name), term.clone());
                    term
                });
            cell.attempt_ended(name);
            adopted
        };
        self.attempt_done.notify_waiters();
        if let (Some(token), None) = (won, &adopted) {
            tracing::debug!(lease = %name, token, "not adopting a won lease (late reply, ended session or stale token); releasing it");
            self.release_in_background(Arc::clone(cell), Arc::clone(name), token);
        }
        adopted
    }

    /// Releases `name` with `token` in the background, best effort (the lease expires with
    /// the session anyway).
    pub(crate) fn release_in_background(self: &Arc<Self>, cell: Arc<SessionCell>, name: Arc<str>, token: u64) {
        cell.note_released(&name, token);
        let shared = Arc::clone(self);
        tokio::spawn(async move {
            let to = cell.call_timeout(Instant::now());
            match tokio::time::timeout(to, shared.backend.release(&cell.id, &name, token)).await {
                Ok(Ok(_)) => shared.release_acknowledged(&cell, &name, token),
                Ok(Err(e)) => tracing::debug!(lease = %name, token, error = %e, "background release failed"),
                Err(_) => tracing::debug!(lease = %name, token, "background release timed out"),
            }
        });
    }
}

/// Builds a [`Simba`] client.
pub struct SimbaBuilder {
    config: SimbaConfig,
    backend: Option<SharedBackend>,
    seed: Option<u64>,
}

impl SimbaBuilder {
    /// The timing configuration (default: [`SimbaConfig::default`]).
    pub fn config(mut self, config: SimbaConfig) -> Self {
        self.config = config;
        self
    }

    /// The backend (required).
    pub fn backend<B: Backend>(mut self, backend: B) -> Self {
        self.backend = Some(Arc::new(backend));
        self
    }

    /// Seeds the candidates' retry jitter, for reproducible tests.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Starts the client: its session actor opens a session in the background. Must be
    /// called inside a Tokio runtime.
    pub fn build(self) -> Result<Simba, Error> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let backend = self.backend.ok_or_else(|| {
            Error::InvalidConfig("no backend: call `SimbaBuilder::backend` or use `Simba::connect(url, ..)`".into())
        })?;
        let rng = match self.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_rng(&mut rand::rng()),
        };
        let (releases, _) = broadcast::channel(1024);
        let (events, _) = broadcast::channel(1024);
        let shared = Arc::new(Shared {
            timing: Timing::new(self.config),
            session: watch::channel(None).0,
            state: Mutex::new(ClientState { status: Some(SessionStatus::Opening), ..Default::default() }),
            events,
            releases,
            shutdown: CancellationToken::new(),
            attempt_done: tokio::sync::Notify::new(),
            rng: Mutex::new(rng),
            actor: Mutex::new(None),
            backend,
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
        let actor = handle.spawn(crate::session::run(Arc::clone(&shared), tracing::Span::current()));
        *shared.actor.lock().unwrap_or_else(PoisonError::into_inner) = Some(actor);
        Ok(Simba { shared })
    }
}

impl Simba {
    /// A builder.
    pub fn builder() -> SimbaBuilder {
        SimbaBuilder { config: SimbaConfig::default(), backend: None, seed: None }
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
        match crate::backend::connect_url(url).await {
            Ok(Some(backend)) => SimbaBuilder { config, backend: Some(backend), seed: None }.build(),
            Ok(None) => Err(Error::InvalidConfig(format!(
                "unsupported backend URL `{}`: use memory://, sqlite://PATH, postgres://, mysql://, redis://, zk:// or etcd:// (each needs its cargo feature: sqlite, postgres, mysql, redis, zookeeper, etcd)",
                crate::backend::url_scheme(url)
            ))),
            Err(source) => Err(Error::Backend { op: "connect", name: None, source }),
        }
    }

    /// The backend's jobs store (run history and job control, issue 12), where the backend
    /// has one.
    pub fn job_store(&self) -> Option<crate::job_store::SharedJobStore> {
        self.shared.backend.job_store()
    }

    /// The timing configuration.
    pub fn config(&self) -> &SimbaConfig {
        &self.shared.timing.config
    }

    /// An election for lease `name`. Nothing happens until it is started.
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election::new(Arc::clone(&self.shared), name.into())
    }

    /// A lock on lease `name`.
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(Arc::clone(&self.shared), name.into())
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
            status: st.status.unwrap_or(SessionStatus::Opening),
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
            if st.closed {
                None
            } else {
                st.closed = true;
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
        self.shared.lock_state().closed = true;
    }

    async fn wait_actor(&self) {
        let actor = self.shared.actor.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(a) = actor {
            if crate::election::inside_engine_task() {
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

/// How long a close waits for the backend.
pub(crate) const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
