//! Elections: contend for a lease, hold terms, run a task while leader, and hand over in the
//! H1 order (rules K1-K4, H1-H5, L1-L6).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::engine::Shared;
use crate::engine::callbacks::{Callback, Dispatcher};
use crate::engine::contender::{Elector, TaskFn, spawn_election};
use crate::engine::control::{Cmd, ElectionCtl, ElectionStatus, inside_election};
use crate::{BoxError, Error, RevokeReason, Term};

/// Callbacks of one election (rules L1-L3).
///
/// Every `on_elected(term)` is followed by exactly one `on_revoked(term, reason)` for the same
/// term. Callbacks of one election run one at a time, in order, on a task of their own; no
/// internal lock is held while they run. Keep them short: spawn work that takes long.
pub trait ElectionListener: Send + Sync + 'static {
    /// A term started.
    fn on_elected(&self, term: &Term) {
        let _ = term;
    }
    /// A term ended.
    fn on_revoked(&self, term: &Term, reason: RevokeReason) {
        let _ = (term, reason);
    }
}

/// A listener that does nothing.
impl ElectionListener for () {}

/// A listener made of two closures.
pub struct FnListener<E, R> {
    elected: E,
    revoked: R,
}

impl<E, R> FnListener<E, R>
where
    E: Fn(&Term) + Send + Sync + 'static,
    R: Fn(&Term, RevokeReason) + Send + Sync + 'static,
{
    /// Calls `elected` on each new term and `revoked` when it ends.
    pub fn new(elected: E, revoked: R) -> Self {
        FnListener { elected, revoked }
    }
}

impl<E, R> ElectionListener for FnListener<E, R>
where
    E: Fn(&Term) + Send + Sync + 'static,
    R: Fn(&Term, RevokeReason) + Send + Sync + 'static,
{
    fn on_elected(&self, term: &Term) {
        (self.elected)(term)
    }
    fn on_revoked(&self, term: &Term, reason: RevokeReason) {
        (self.revoked)(term, reason)
    }
}

/// How many callbacks may wait for the listener before `on_elected` counts as undeliverable
/// (rule L6).
const CALLBACK_CAPACITY: usize = 1024;

static NEXT_ELECTION_ID: AtomicU64 = AtomicU64::new(1);

/// An election for one lease name on one client.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), simba::Error> {
/// use simba::{backend::memory::MemoryBackend, Simba, SimbaConfig, Term};
///
/// let simba = Simba::new(MemoryBackend::new(), SimbaConfig::default())?;
/// let election = simba.election("report");
/// election.run_while_leader(|term: Term| async move {
///     // Work while leader; stop when the term ends.
///     term.cancelled().await;
///     Ok::<(), simba::BoxError>(())
/// })?;
/// # simba.live().await?;
/// # tokio::time::sleep(std::time::Duration::from_millis(50)).await;
/// election.stop().await;
/// simba.close().await;
/// # Ok(())
/// # }
/// ```
pub struct Election {
    shared: Arc<Shared>,
    name: String,
    ctl: Mutex<Option<Arc<ElectionCtl>>>,
    callback_capacity: usize,
}

impl Election {
    pub(crate) fn new(shared: Arc<Shared>, name: String) -> Self {
        Election { shared, name, ctl: Mutex::new(None), callback_capacity: CALLBACK_CAPACITY }
    }

    pub(crate) fn from_ctl(shared: Arc<Shared>, ctl: Arc<ElectionCtl>) -> Self {
        Election {
            shared,
            name: ctl.name.to_string(),
            ctl: Mutex::new(Some(ctl)),
            callback_capacity: CALLBACK_CAPACITY,
        }
    }

    /// The lease name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many callbacks may wait for the listener (default 1024). When that many are
    /// queued or running, a new term's `on_elected` cannot be dispatched: the election gives
    /// the lease up for one lease period instead of running a term nobody knows about (L6).
    pub fn callback_capacity(mut self, capacity: usize) -> Self {
        self.callback_capacity = capacity;
        self
    }

    /// Starts contending; `listener` hears of every term. Without a task, a term is released
    /// at once when the election stops or steps down (rule H2).
    ///
    /// Fails with [`Error::InvalidName`] (T1), [`Error::AlreadyStarted`] (L4) or
    /// [`Error::Closed`]; nothing is started then.
    pub fn start(&self, listener: impl ElectionListener) -> Result<(), Error> {
        self.spawn(Arc::new(listener), None)
    }

    /// Starts contending and runs `task` during each term, with the term (rule H1). The task
    /// should return when [`Term::cancelled`] completes. When it returns on its own, the term
    /// ends with [`RevokeReason::SteppedDown`] and the election contends again.
    pub fn run_while_leader<F, Fut, E>(&self, task: F) -> Result<(), Error>
    where
        F: FnMut(Term) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError>,
    {
        self.run_while_leader_with(task, ())
    }

    /// [`run_while_leader`](Election::run_while_leader) with a listener.
    pub fn run_while_leader_with<F, Fut, E>(&self, mut task: F, listener: impl ElectionListener) -> Result<(), Error>
    where
        F: FnMut(Term) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError>,
    {
        let f: TaskFn = Box::new(move |term| {
            let fut = task(term);
            Box::pin(async move { fut.await.map_err(Into::into) })
        });
        self.spawn(Arc::new(listener), Some(f))
    }

    fn spawn(&self, listener: Arc<dyn ElectionListener>, task: Option<TaskFn>) -> Result<(), Error> {
        crate::validate_name(&self.name)?;
        let name: Arc<str> = self.name.as_str().into();
        let (tx, rx) = mpsc::unbounded_channel();
        let ctl = Arc::new(ElectionCtl {
            id: NEXT_ELECTION_ID.fetch_add(1, Ordering::Relaxed),
            name: Arc::clone(&name),
            cmds: tx,
            state: Mutex::new(ElectionStatus::Candidate),
        });
        {
            let mut st = self.shared.lock_state();
            if st.lifecycle.is_closed() {
                return Err(Error::Closed);
            }
            if !st.claims.insert(Arc::clone(&name)) {
                return Err(Error::AlreadyStarted { name: self.name.clone() });
            }
            st.elections.insert(Arc::clone(&name), Arc::clone(&ctl));
        }
        *self.ctl.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&ctl));
        let listen = Box::new(move |cb: &Callback| match cb {
            Callback::Elected(t) => listener.on_elected(t),
            Callback::Revoked(t, r) => listener.on_revoked(t, *r),
            Callback::Barrier(_) => {}
        });
        let dispatcher = Dispatcher::spawn(listen, ctl.id, self.callback_capacity);
        spawn_election(&self.shared, Elector { ctl, cmds: rx, dispatcher, task_fn: task.map(Mutex::new) });
        Ok(())
    }

    fn ctl(&self) -> Option<Arc<ElectionCtl>> {
        self.ctl.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The current term, if this election holds the lease.
    pub fn term(&self) -> Option<Term> {
        let ctl = self.ctl()?;
        let st = ctl.state.lock().unwrap_or_else(PoisonError::into_inner);
        match &*st {
            ElectionStatus::Leader(t) if t.is_valid() => Some(t.clone()),
            _ => None,
        }
    }

    /// Whether this election holds a valid term now.
    pub fn is_leader(&self) -> bool {
        self.term().is_some()
    }

    /// Ends the election, handing the lease over in the H1 order: revoke the term and signal
    /// the task; wait until the task returns or the local deadline passes; release with the
    /// token; deliver `on_revoked(term, Stopped)`; complete. After it completes the listener
    /// gets no more callbacks (L3). Called from the election's own task or callback, it does
    /// not wait (L5). Stopping an election that is not started does nothing.
    ///
    /// It cannot fail: a release the backend refuses or does not answer is logged, and the
    /// lease then frees with the session (T7), so there is no error to return.
    pub async fn stop(&self) {
        let Some(ctl) = self.ctl() else { return };
        let (tx, rx) = oneshot::channel();
        if ctl.cmds.send(Cmd::Stop(tx)).is_err() {
            return;
        }
        if inside_election(ctl.id) {
            return;
        }
        let _ = rx.await;
    }

    /// Gives the lease up in the H1 order (reason [`RevokeReason::SteppedDown`]) and stays out
    /// of contention for `cooldown` (rule H4): move leadership off a node before a deploy, or
    /// drain it. The election stays started.
    pub async fn step_down(&self, cooldown: Duration) -> Result<(), Error> {
        let Some(ctl) = self.ctl() else {
            return Err(Error::invalid_config(format!(
                "election `{}` is not started: start it before stepping down",
                self.name
            )));
        };
        let (tx, rx) = oneshot::channel();
        if ctl.cmds.send(Cmd::StepDown(cooldown, tx)).is_err() {
            return Err(Error::Closed);
        }
        if inside_election(ctl.id) {
            return Ok(());
        }
        let _ = rx.await;
        Ok(())
    }
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election").field("name", &self.name).field("term", &self.term()).finish()
    }
}
