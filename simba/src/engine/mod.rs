//! The engine: the async shell around [`simba_core`]. It owns what a client's session,
//! elections and locks share ([`Shared`]: the backend, the live session cell, the held terms,
//! the acquisitions in flight) and executes the core's decisions: `session` drives the
//! session machine, `contender` the election machine (for elections and locks alike), with
//! `attempt` (one acquisition in flight), `local` (a lock's local turn and claim) and
//! `callbacks` (an election's listener) beside it. Dependencies run one way: the handles
//! (`client`, `election`, `lock`) -> `engine` -> `core`; nothing here imports a handle.

pub(crate) mod attempt;
pub(crate) mod callbacks;
pub(crate) mod contender;
pub(crate) mod control;
pub(crate) mod idle;
pub(crate) mod local;
pub(crate) mod session;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;
use simba_core::Timing;
use simba_core::attempt::answers_current_attempt;
use simba_core::ledger::{Verdict, judge_win};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::control::ElectionCtl;
use crate::backend::{HeldDigest, SharedBackend};
use crate::events::{Event, SessionStatus};
use crate::term::SessionCell;
use crate::{Error, SimbaConfig, Term};

/// What the session actor, elections and locks share.
pub(crate) struct Shared {
    pub(crate) backend: SharedBackend,
    /// The client's configuration, as given.
    pub(crate) config: SimbaConfig,
    /// The core's timing rules over it.
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
    pub(crate) rng: Mutex<StdRng>,
    pub(crate) actor: Mutex<Option<JoinHandle<()>>>,
    /// How this client's terms are labelled in metrics (rule O4).
    pub(crate) lease_metrics: crate::metrics::LeaseMetrics,
}

/// How long a lock name has passed between tasks of this process without going to another
/// node: when this process took it from the store, when its last local
/// holder released it, and when its waiter last gave the name way to other nodes (cleared when
/// it takes the name from the store again).
#[derive(Debug, Default)]
pub(crate) struct LocalStreak {
    pub(crate) since: Option<tokio::time::Instant>,
    pub(crate) released_at: Option<tokio::time::Instant>,
    pub(crate) gave_way_at: Option<tokio::time::Instant>,
}

/// Where the client is, with its session's status (S5), as one state: a client whose
/// `close()` began refuses new work at once, while its session actor still reports the
/// session's status until it exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    /// The client takes new elections, locks and terms; its session is opening, live or
    /// suspended.
    Open(SessionStatus),
    /// `close()` began (or, in tests, the client crashed): new work is refused; the session
    /// is still in this status.
    Closing(SessionStatus),
    /// The session actor exited: the client is closed for good.
    Closed,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle::Open(SessionStatus::Opening)
    }
}

impl Lifecycle {
    /// Whether new work is refused ([`Error::Closed`]).
    pub(crate) fn is_closed(self) -> bool {
        !matches!(self, Lifecycle::Open(_))
    }

    /// The session's status, as a snapshot shows it.
    pub(crate) fn status(self) -> SessionStatus {
        match self {
            Lifecycle::Open(s) | Lifecycle::Closing(s) => s,
            Lifecycle::Closed => SessionStatus::Closed,
        }
    }

    /// The session actor reports `status`; `false` (and nothing changes) once closed for good.
    pub(crate) fn report(&mut self, status: SessionStatus) -> bool {
        *self = match (*self, status) {
            (Lifecycle::Closed, _) => return false,
            (_, SessionStatus::Closed) => Lifecycle::Closed,
            (Lifecycle::Open(_), s) => Lifecycle::Open(s),
            (Lifecycle::Closing(_), s) => Lifecycle::Closing(s),
        };
        true
    }

    /// `close()` begins; `false` when it had already begun.
    pub(crate) fn close(&mut self) -> bool {
        match *self {
            Lifecycle::Open(s) => {
                *self = Lifecycle::Closing(s);
                true
            }
            Lifecycle::Closing(_) | Lifecycle::Closed => false,
        }
    }
}

#[derive(Default)]
pub(crate) struct ClientState {
    /// Where the client is, and its session's status.
    pub(crate) lifecycle: Lifecycle,
    /// Terms held now, including revoked ones whose release is still under way (so that a
    /// keep-alive does not mistake them for orphans). In name order, so that a session's end
    /// revokes its terms in the same order every run (a seeded simulation replays, ADR 0021).
    pub(crate) held: BTreeMap<Arc<str>, Term>,
    /// Names with an acquisition in flight.
    pub(crate) inflight: HashSet<Arc<str>>,
    /// Names in use by an election or a lock on this client (rule L4).
    pub(crate) claims: HashSet<Arc<str>>,
    /// The running elections, in name order (stopped in that order on close).
    pub(crate) elections: BTreeMap<Arc<str>, Arc<ElectionCtl>>,
    /// Local queues so that tasks of one process take a lock one at a time, each with the
    /// name's local streak.
    pub(crate) lock_queues: HashMap<Arc<str>, Arc<tokio::sync::Mutex<LocalStreak>>>,
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
        if self.lock_state().lifecycle.is_closed() { Err(Error::Closed) } else { Ok(()) }
    }

    /// The backend answered a release of `name` with `token` made for `cell`: the session's
    /// K4 record of the name can go, unless an acquisition of it is in flight (see
    /// [`SessionCell::release_acknowledged`]). The state lock makes the in-flight check and the
    /// pruning one step with respect to an attempt entering `inflight`.
    pub(crate) fn release_acknowledged(&self, cell: &SessionCell, name: &str, token: u64) {
        let st = self.lock_state();
        cell.release_acknowledged(name, token, st.inflight.contains(name));
    }

    /// The acquisition of `name` made for `cell` ended with `won` (a token, or nothing) and its
    /// election took the result: the one place where an attempt leaves `inflight` with its
    /// result taken (K3) and a win becomes a term or is released (K4: [`settle`](Self::settle)).
    pub(crate) fn settle_attempt(
        self: &Arc<Self>,
        cell: &Arc<SessionCell>,
        name: &Arc<str>,
        won: Option<u64>,
    ) -> Option<Term> {
        self.settle(cell, name, won, true)
    }

    /// The acquisition of `name` made for `cell` ended with `won` after its election abandoned
    /// it (K3 kept it in flight until now): it answers no current attempt (K4), so what it won
    /// is released.
    pub(crate) fn settle_abandoned(self: &Arc<Self>, cell: &Arc<SessionCell>, name: &Arc<str>, won: Option<u64>) {
        // A term only comes back if the core's K4 rule is broken on purpose (the mutant
        // `AdoptLateReply`); no election leads it then.
        let _ = self.settle(cell, name, won, false);
    }

    /// An acquisition's end: it leaves `inflight` (K3); its win becomes a term of the session
    /// live now only if the reply answers the current attempt (`awaited` and made for that
    /// session: [`answers_current_attempt`]) and [`judge_win`] adopts it; otherwise it is
    /// released. Leaving `inflight` and entering `held` are one critical section: a
    /// keep-alive's reconcile in between would see the lease owned by the session but neither
    /// held nor in flight, and release it as an orphan (T6).
    fn settle(
        self: &Arc<Self>,
        cell: &Arc<SessionCell>,
        name: &Arc<str>,
        won: Option<u64>,
        awaited: bool,
    ) -> Option<Term> {
        let now = Instant::now();
        // Read before the state lock: a session that ends meanwhile is no longer live below.
        let current = self.current_session();
        let answers = answers_current_attempt(awaited, current.as_ref().is_some_and(|c| Arc::ptr_eq(c, cell)));
        let adopted = {
            let mut st = self.lock_state();
            st.inflight.remove(name);
            let adopted = match (won, current.filter(|_| answers)) {
                (Some(token), Some(session))
                    if judge_win(
                        token,
                        session.is_live_at(now),
                        st.lifecycle.is_closed(),
                        session.max_released(name),
                    ) == Verdict::Adopt =>
                {
                    let metric = self.lease_metrics.label(name, st.elections.contains_key(name));
                    let term = Term::labelled(Arc::clone(name), token, session, now, metric);
                    st.held.insert(Arc::clone(name), term.clone());
                    Some(term)
                }
                _ => None,
            };
            if let (Some(token), None) = (won, &adopted) {
                // K4: the release is noted before anyone else sees the name out of `inflight`
                // (the state lock is still held), so a next attempt can never adopt the token
                // this release is about to give back.
                cell.note_released(name, token);
            }
            cell.attempt_ended(name);
            adopted
        };
        self.attempt_done.notify_waiters();
        if let (Some(token), None) = (won, &adopted) {
            tracing::debug!(lease = %name, token, "not adopting a won lease (late reply, abandoned attempt, ended session or stale token); releasing it");
            self.release_in_background(Arc::clone(cell), Arc::clone(name), token);
        }
        adopted
    }

    /// T7, the one release of a term's lease with its token, for elections, lock guards and
    /// unadopted wins alike. The session's K4 record of the release is written at once (so an
    /// acquisition settled after this call cannot adopt `token`); the returned future then
    /// sends the release within the D2 call timeout, if the session is still live (otherwise
    /// the lease frees with the session), and prunes the K4 record once the backend answered.
    pub(crate) fn release(
        self: &Arc<Self>,
        cell: &Arc<SessionCell>,
        name: &Arc<str>,
        token: u64,
    ) -> impl Future<Output = Released> + Send + 'static {
        cell.note_released(name, token);
        let (shared, cell, name) = (Arc::clone(self), Arc::clone(cell), Arc::clone(name));
        async move {
            let now = Instant::now();
            if !cell.is_live_at(now) {
                return Released::NotSent;
            }
            match tokio::time::timeout(cell.call_timeout(now), shared.backend.release(&cell.id, &name, token)).await {
                Ok(Ok(_)) => {
                    shared.release_acknowledged(&cell, &name, token);
                    Released::Acknowledged
                }
                Ok(Err(e)) => Released::Failed(e),
                Err(_) => Released::TimedOut,
            }
        }
    }

    /// Releases `name` with `token` in the background, best effort (the lease expires with
    /// the session anyway).
    pub(crate) fn release_in_background(self: &Arc<Self>, cell: Arc<SessionCell>, name: Arc<str>, token: u64) {
        let release = self.release(&cell, &name, token);
        tokio::spawn(async move {
            match release.await {
                Released::Acknowledged | Released::NotSent => {}
                Released::Failed(e) => tracing::debug!(lease = %name, token, error = %e, "background release failed"),
                Released::TimedOut => tracing::debug!(lease = %name, token, "background release timed out"),
            }
        });
    }

    /// Forgets `term` as held, unless the name is held by another term by now.
    pub(crate) fn forget_held(&self, term: &Term) {
        let mut st = self.lock_state();
        if st.held.get(term.name()).is_some_and(|t| t == term) {
            st.held.remove(term.name());
        }
    }
}

/// How [`Shared::release`] ended.
#[derive(Debug)]
pub(crate) enum Released {
    /// The backend answered the release.
    Acknowledged,
    /// The session was no longer live: the lease frees with it, nothing was sent.
    NotSent,
    /// The backend refused or failed the call.
    Failed(crate::backend::BackendError),
    /// No answer within the call timeout (D2); the lease frees with the session.
    TimedOut,
}

/// Completes at `at`, or never without one.
pub(crate) async fn sleep_until_or_never(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// How long a close waits for the backend.
pub(crate) const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::Lifecycle;
    use crate::SessionStatus;

    /// S4, S5: `close()` refuses new work at once while the snapshot still shows the session's
    /// status as the actor reports it; the actor's `Closed` is final, and a second `close()`
    /// finds the client closing.
    #[test]
    fn s4_s5_closing_keeps_the_sessions_status_until_it_is_closed() {
        let mut l = Lifecycle::default();
        assert_eq!((l.is_closed(), l.status()), (false, SessionStatus::Opening));
        assert!(l.report(SessionStatus::Live));
        assert_eq!((l.is_closed(), l.status()), (false, SessionStatus::Live));
        assert!(l.close());
        assert!(!l.close(), "close() began once");
        assert_eq!((l.is_closed(), l.status()), (true, SessionStatus::Live));
        assert!(l.report(SessionStatus::Suspended));
        assert_eq!((l.is_closed(), l.status()), (true, SessionStatus::Suspended));
        assert!(l.report(SessionStatus::Closed));
        assert!(!l.report(SessionStatus::Live), "nothing after the actor exited");
        assert_eq!((l.is_closed(), l.status()), (true, SessionStatus::Closed));
        assert!(!l.close());
    }
}
