//! Elections: contend for a lease, hold terms, run a task while leader, and hand over in the
//! H1 order (rules K1-K4, H1-H5, L1-L6).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use crate::backend::Acquire;
use crate::engine::Shared;
use crate::engine::attempt::{abandon, attempt_finished, spawn_attempt};
use crate::engine::control::{Cmd, ElectionCtl, ElectionStatus, IN_ELECTION, inside_election};
use crate::events::Event;
use crate::term::SessionCell;
use crate::{Error, RevokeReason, Term};

/// The error type a leader task may return.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

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

type TaskFuture = std::pin::Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;
type TaskFn = Box<dyn FnMut(Term) -> TaskFuture + Send>;

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
            if st.closed {
                return Err(Error::Closed);
            }
            if !st.claims.insert(Arc::clone(&name)) {
                return Err(Error::AlreadyStarted { name: self.name.clone() });
            }
            st.elections.insert(Arc::clone(&name), Arc::clone(&ctl));
        }
        *self.ctl.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&ctl));
        let dispatcher = Dispatcher::spawn(listener, ctl.id, self.callback_capacity);
        let actor = Actor { shared: Arc::clone(&self.shared), ctl, cmds: rx, dispatcher, task: task.map(Mutex::new) };
        tokio::spawn(tracing::Instrument::instrument(actor.run(), tracing::info_span!("election", lease = %name)));
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
            return Err(Error::InvalidConfig(format!(
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

enum Callback {
    Elected(Term),
    Revoked(Term, RevokeReason),
    Barrier(oneshot::Sender<()>),
}

/// Runs one election's callbacks one at a time, in order (rule L2).
struct Dispatcher {
    tx: mpsc::UnboundedSender<Callback>,
    pending: Arc<AtomicUsize>,
    capacity: usize,
}

impl Dispatcher {
    fn spawn(listener: Arc<dyn ElectionListener>, election: u64, capacity: usize) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Callback>();
        let pending = Arc::new(AtomicUsize::new(0));
        let p = Arc::clone(&pending);
        tokio::spawn(IN_ELECTION.scope(election, async move {
            while let Some(cb) = rx.recv().await {
                let run = AssertUnwindSafe(|| match &cb {
                    Callback::Elected(t) => listener.on_elected(t),
                    Callback::Revoked(t, r) => listener.on_revoked(t, *r),
                    Callback::Barrier(_) => {}
                });
                if std::panic::catch_unwind(run).is_err() {
                    tracing::error!("an election callback panicked");
                }
                if let Callback::Barrier(done) = cb {
                    let _ = done.send(());
                }
                p.fetch_sub(1, Ordering::AcqRel);
            }
        }));
        Dispatcher { tx, pending, capacity }
    }

    /// Queues `on_elected`, unless the runner is gone or full (rule L6).
    fn elected(&self, term: &Term) -> bool {
        if self.pending.load(Ordering::Acquire) >= self.capacity {
            return false;
        }
        self.pending.fetch_add(1, Ordering::AcqRel);
        if self.tx.send(Callback::Elected(term.clone())).is_err() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    fn revoked(&self, term: &Term, reason: RevokeReason) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        let _ = self.tx.send(Callback::Revoked(term.clone(), reason));
    }

    /// Completes after every callback queued so far ran.
    async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        self.pending.fetch_add(1, Ordering::AcqRel);
        if self.tx.send(Callback::Barrier(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

/// The election's own task.
struct Actor {
    shared: Arc<Shared>,
    ctl: Arc<ElectionCtl>,
    cmds: mpsc::UnboundedReceiver<Cmd>,
    dispatcher: Dispatcher,
    // A Mutex so that `&Actor` is Send across awaits; only the actor touches it.
    task: Option<Mutex<TaskFn>>,
}

/// A command received while not leading: a stop, or a step-down (answered at once) into a
/// cooldown (H4).
fn idle_command(cmd: Option<Cmd>) -> LeaderExit {
    match cmd {
        None => LeaderExit::Stop(None),
        Some(Cmd::Stop(r)) => LeaderExit::Stop(Some(r)),
        Some(Cmd::StepDown(d, r)) => {
            let _ = r.send(());
            LeaderExit::Continue(Some(Instant::now() + d))
        }
    }
}

/// What ended a leader phase.
enum LeaderExit {
    /// Contend again (after a cooldown, if any).
    Continue(Option<Instant>),
    /// The election stopped; reply when done.
    Stop(Option<oneshot::Sender<()>>),
}

impl Actor {
    async fn run(mut self) {
        let mut releases = self.shared.releases.subscribe();
        let mut cooldown: Option<Instant> = None;
        let stop_reply = loop {
            // Cooling down after step_down (H4).
            if let Some(until) = cooldown.take()
                && let Err(reply) = self.cool_down(until).await
            {
                break reply;
            }
            self.ctl.set(ElectionStatus::Candidate);
            match self.contend(&mut releases).await {
                LeaderExit::Continue(c) => cooldown = c,
                LeaderExit::Stop(r) => break r,
            }
        };
        self.stopped(stop_reply).await;
    }

    /// H4: waits out a cooldown; a step-down meanwhile is answered and changes nothing.
    /// `Err` with the reply to send when the election is stopped meanwhile.
    async fn cool_down(&mut self, until: Instant) -> Result<(), Option<oneshot::Sender<()>>> {
        self.ctl.set(ElectionStatus::CoolingDown(until));
        loop {
            tokio::select! {
                _ = sleep_until(until) => return Ok(()),
                cmd = self.cmds.recv() => match cmd {
                    None => return Err(None),
                    Some(Cmd::Stop(r)) => return Err(Some(r)),
                    Some(Cmd::StepDown(_, r)) => { let _ = r.send(()); }
                }
            }
        }
    }

    /// One round as a candidate: waits for a live session, sends one attempt (K3), leads if it
    /// won, then waits to try again (K1, K2).
    async fn contend(&mut self, releases: &mut tokio::sync::broadcast::Receiver<String>) -> LeaderExit {
        let cell = match self.live_session().await {
            Ok(cell) => cell,
            Err(exit) => return exit,
        };
        let mut attempt = spawn_attempt(&self.shared, &cell, &self.ctl.name);
        let outcome = tokio::select! {
            r = &mut attempt => r.ok(),
            cmd = self.cmds.recv() => {
                abandon(attempt);
                return idle_command(cmd);
            }
        };
        match outcome {
            Some(Ok(Acquire::Won(token))) => {
                if let Some(term) = self.adopt(&cell, token) {
                    match self.lead(term, &cell).await {
                        LeaderExit::Continue(None) => {}
                        exit => return exit,
                    }
                }
            }
            Some(Ok(Acquire::Held | Acquire::Expired)) => self.done_attempt(&cell),
            Some(Err(e)) => {
                self.done_attempt(&cell);
                tracing::debug!(lease = %self.ctl.name, error = %crate::engine::session::error_chain(&e), "acquire failed");
            }
            None => self.done_attempt(&cell),
        }
        self.wait_retry(releases).await
    }

    /// The live session, once there is one; `Err` when a command or the shutdown comes first.
    async fn live_session(&mut self) -> Result<Arc<SessionCell>, LeaderExit> {
        loop {
            let mut rx = self.shared.session.subscribe();
            let current = rx.borrow_and_update().clone();
            if let Some(c) = current.filter(|c| c.is_live_at(Instant::now())) {
                return Ok(c);
            }
            tokio::select! {
                r = rx.changed() => if r.is_err() { return Err(LeaderExit::Stop(None)) },
                _ = self.shared.shutdown.cancelled() => return Err(LeaderExit::Stop(None)),
                cmd = self.cmds.recv() => return Err(idle_command(cmd)),
            }
        }
    }

    /// K1: waits `renew_interval / 2 + jitter` before the next attempt, or less when the lease
    /// is released (K2) or the session changes.
    async fn wait_retry(&mut self, releases: &mut tokio::sync::broadcast::Receiver<String>) -> LeaderExit {
        let retry_at = Instant::now() + self.shared.timing.candidate_delay(self.shared.unit_random());
        let mut session_rx = self.shared.session.subscribe();
        loop {
            tokio::select! {
                _ = sleep_until(retry_at) => return LeaderExit::Continue(None),
                r = releases.recv() => match r {
                    Ok(n) if *n == *self.ctl.name => return LeaderExit::Continue(None),
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return LeaderExit::Continue(None),
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {}
                },
                _ = session_rx.changed() => return LeaderExit::Continue(None),
                cmd = self.cmds.recv() => return idle_command(cmd),
            }
        }
    }

    /// Stopped: no callback after this (L3). Frees the name, answers the stop and anybody
    /// still waiting.
    async fn stopped(&mut self, stop_reply: Option<oneshot::Sender<()>>) {
        {
            let mut st = self.shared.lock_state();
            st.claims.remove(&self.ctl.name);
            if st.elections.get(&self.ctl.name).is_some_and(|c| Arc::ptr_eq(c, &self.ctl)) {
                st.elections.remove(&self.ctl.name);
            }
        }
        self.dispatcher.flush().await;
        if let Some(r) = stop_reply {
            let _ = r.send(());
        }
        self.cmds.close();
        while let Ok(cmd) = self.cmds.try_recv() {
            match cmd {
                Cmd::Stop(r) | Cmd::StepDown(_, r) => {
                    let _ = r.send(());
                }
            }
        }
    }

    fn done_attempt(&self, cell: &SessionCell) {
        attempt_finished(&self.shared, cell, &self.ctl.name);
    }

    /// K4: adopts a won lease as a term, or releases it ([`Shared::settle_attempt`]).
    fn adopt(&self, cell: &Arc<SessionCell>, token: u64) -> Option<Term> {
        self.shared.settle_attempt(cell, &self.ctl.name, Some(token))
    }

    /// Holds `term` until it is lost, stopped or stepped down.
    async fn lead(&mut self, term: Term, cell: &Arc<SessionCell>) -> LeaderExit {
        let name = Arc::clone(&self.ctl.name);
        if !self.dispatcher.elected(&term) {
            // L6: nobody knows this term: give the lease up for one lease period, without
            // an on_revoked.
            tracing::warn!(lease = %name, token = term.token(), "on_elected could not be dispatched; giving the lease up for one lease period");
            term.revoke(RevokeReason::SteppedDown);
            self.release(&term, cell).await;
            return LeaderExit::Continue(Some(Instant::now() + self.shared.timing.config.lease_duration()));
        }
        tracing::info!(lease = %name, token = term.token(), session = %cell.id, "elected");
        self.shared.emit(Event::Elected { name: name.to_string(), token: term.token() });
        self.ctl.set(ElectionStatus::Leader(term.clone()));
        let mut task: Option<JoinHandle<Result<(), BoxError>>> = self.task.as_mut().map(|f| {
            let f = f.get_mut().unwrap_or_else(PoisonError::into_inner);
            let span = tracing::info_span!("leader", lease = %name, token = term.token(), session = %cell.id);
            tokio::spawn(tracing::Instrument::instrument(IN_ELECTION.scope(self.ctl.id, f(term.clone())), span))
        });

        let exit = tokio::select! {
            reason = term.revoked() => {
                // H3: lost; the backend may already have given the lease away. Do not wait.
                if let Some(t) = task.take() {
                    t.abort();
                }
                self.finish(&term, reason).await;
                return LeaderExit::Continue(None);
            }
            cmd = self.cmds.recv() => match cmd {
                None | Some(Cmd::Stop(_)) => {
                    let reply = match cmd { Some(Cmd::Stop(r)) => Some(r), _ => None };
                    self.hand_over(&term, cell, task.take(), RevokeReason::Stopped).await;
                    LeaderExit::Stop(reply)
                }
                Some(Cmd::StepDown(d, r)) => {
                    self.hand_over(&term, cell, task.take(), RevokeReason::SteppedDown).await;
                    let _ = r.send(());
                    LeaderExit::Continue(Some(Instant::now() + d))
                }
            },
            res = async { match task.as_mut() { Some(t) => t.await, None => std::future::pending().await } } => {
                task = None;
                match res {
                    Ok(Ok(())) => tracing::info!(lease = %name, token = term.token(), "leader task returned; stepping down"),
                    Ok(Err(e)) => tracing::warn!(lease = %name, token = term.token(), error = %e, "leader task failed; stepping down"),
                    Err(e) => tracing::error!(lease = %name, token = term.token(), error = %e, "leader task panicked; stepping down"),
                }
                self.hand_over(&term, cell, None, RevokeReason::SteppedDown).await;
                LeaderExit::Continue(None)
            }
        };
        drop(task);
        exit
    }

    /// H1: revoke and signal; wait for the task or the deadline; release with the token;
    /// deliver on_revoked and wait until it ran.
    async fn hand_over(
        &self,
        term: &Term,
        cell: &Arc<SessionCell>,
        task: Option<JoinHandle<Result<(), BoxError>>>,
        reason: RevokeReason,
    ) {
        let revoked_now = term.revoke(reason);
        let reason = if revoked_now { reason } else { term.revoke_reason().unwrap_or(reason) };
        if let Some(mut t) = task {
            tokio::select! {
                _ = &mut t => {}
                _ = sleep_until(cell.deadline()) => {
                    tracing::warn!(lease = %self.ctl.name, token = term.token(), "leader task ignored cancellation until the local deadline; aborting it");
                    t.abort();
                }
            }
        }
        if revoked_now {
            self.release(term, cell).await;
        } else {
            // Lost meanwhile (H3): the session actor already dropped it.
            self.shared.lock_state().held.remove(&self.ctl.name);
        }
        self.finish(term, reason).await;
    }

    /// Releases the term's lease with its token (T7) and forgets it.
    async fn release(&self, term: &Term, cell: &Arc<SessionCell>) {
        let name = &self.ctl.name;
        cell.note_released(name, term.token());
        if cell.is_live_at(Instant::now()) {
            let to = cell.call_timeout(Instant::now());
            match tokio::time::timeout(to, self.shared.backend.release(&cell.id, name, term.token())).await {
                Ok(Ok(_)) => self.shared.release_acknowledged(cell, name, term.token()),
                Ok(Err(e)) => {
                    tracing::warn!(lease = %name, token = term.token(), error = %crate::engine::session::error_chain(&e), "release failed; the lease frees with the session")
                }
                Err(_) => {
                    tracing::warn!(lease = %name, token = term.token(), "release timed out; the lease frees with the session")
                }
            }
        }
        let mut st = self.shared.lock_state();
        if st.held.get(name).is_some_and(|t| t == term) {
            st.held.remove(name);
        }
    }

    /// Delivers on_revoked and waits until it ran (L1, L3).
    async fn finish(&self, term: &Term, reason: RevokeReason) {
        tracing::info!(lease = %self.ctl.name, token = term.token(), %reason, "term ended");
        self.shared.emit(Event::Revoked { name: self.ctl.name.to_string(), token: term.token(), reason });
        self.ctl.set(ElectionStatus::Candidate);
        self.dispatcher.revoked(term, reason);
        self.dispatcher.flush().await;
    }
}
