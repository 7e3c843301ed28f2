//! Elections: contend for a lease, hold terms, run a task while leader, and hand over in the
//! H1 order (rules K1-K4, H1-H5, L1-L6).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use simba_core::election::{Command as MachineCommand, ElectionMachine, Status};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use crate::backend::Acquire;
use crate::engine::attempt::{Attempt, abandon, attempt_finished, spawn_attempt};
use crate::engine::control::{Cmd, ElectionCtl, ElectionStatus, IN_ELECTION, inside_election};
use crate::engine::{Released, Shared};
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

/// The election's own task: the async shell of the core's election machine
/// ([`simba_core::election`]). It waits for what the machine's phase waits for, feeds it the
/// event, and executes the commands it returns, in order.
struct Actor {
    shared: Arc<Shared>,
    ctl: Arc<ElectionCtl>,
    cmds: mpsc::UnboundedReceiver<Cmd>,
    dispatcher: Dispatcher,
    // A Mutex so that `&Actor` is Send across awaits; only the actor touches it.
    task: Option<Mutex<TaskFn>>,
}

/// What the shell holds for the machine: the session of the attempt or term, the attempt in
/// flight, the term and its task, and the answers owed.
#[derive(Default)]
struct Held {
    cell: Option<Arc<SessionCell>>,
    attempt: Option<Attempt>,
    term: Option<Term>,
    task: Option<JoinHandle<Result<(), BoxError>>>,
    /// Set by `Revoke`: whether this election revoked the term (else it was lost meanwhile,
    /// H3, and the session shell dropped it), and the reason the term ended with.
    revoked: Option<(bool, RevokeReason)>,
    stop_reply: Option<oneshot::Sender<()>>,
    step_down_reply: Option<oneshot::Sender<()>>,
}

/// What the actor waited for.
enum Waited {
    Commands(Vec<MachineCommand<Instant>>),
    /// The client shut down or its session channel closed: the election ends without a reply.
    Gone,
}

impl Actor {
    async fn run(mut self) {
        let mut releases = self.shared.releases.subscribe();
        let mut m = ElectionMachine::new(self.shared.timing);
        let mut h = Held::default();
        while !m.stopped() {
            let commands = match self.wait(&mut m, &mut h, &mut releases).await {
                Waited::Commands(c) => c,
                Waited::Gone => m.stop(Instant::now()),
            };
            self.execute(&mut m, &mut h, commands).await;
            if m.handing_over() {
                // The handover is done: its term is forgotten (an L6 one had no on_revoked).
                h.term = None;
                h.revoked = None;
                let after = m.handed_over(Instant::now(), || self.shared.unit_random());
                self.execute(&mut m, &mut h, after).await;
            }
        }
    }

    /// Waits for the next event of the machine's phase and feeds it to the machine.
    async fn wait(
        &mut self,
        m: &mut ElectionMachine<Instant>,
        h: &mut Held,
        releases: &mut tokio::sync::broadcast::Receiver<String>,
    ) -> Waited {
        if m.wants_session() {
            return self.wait_session(m, h).await;
        }
        if m.attempting() {
            return self.wait_attempt(m, h).await;
        }
        if m.leading() {
            return self.wait_leading(m, h).await;
        }
        let Some(at) = m.next_wakeup() else { return Waited::Gone };
        // K1, H4: waiting for a retry (sooner on a release heard or a new session, K2) or for
        // the end of a cooldown (only the clock and commands end it).
        let retrying = !m.cooling_down();
        let mut session_rx = self.shared.session.subscribe();
        loop {
            tokio::select! {
                _ = sleep_until(at) => return Waited::Commands(m.tick(Instant::now())),
                r = releases.recv(), if retrying => match r {
                    Ok(n) if *n == *self.ctl.name => return Waited::Commands(m.nudge(Instant::now())),
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Closed) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return Waited::Commands(m.nudge(Instant::now())),
                },
                _ = session_rx.changed(), if retrying => return Waited::Commands(m.nudge(Instant::now())),
                cmd = self.cmds.recv() => return self.command(m, h, cmd),
            }
        }
    }

    /// A candidate waits for a live session (or a command, or the client's shutdown).
    async fn wait_session(&mut self, m: &mut ElectionMachine<Instant>, h: &mut Held) -> Waited {
        loop {
            let mut rx = self.shared.session.subscribe();
            let current = rx.borrow_and_update().clone();
            if let Some(c) = current.filter(|c| c.is_live_at(Instant::now())) {
                h.cell = Some(c);
                return Waited::Commands(m.session_live(Instant::now()));
            }
            tokio::select! {
                r = rx.changed() => if r.is_err() { return Waited::Gone },
                _ = self.shared.shutdown.cancelled() => return Waited::Gone,
                cmd = self.cmds.recv() => return self.command(m, h, cmd),
            }
        }
    }

    /// The acquisition in flight ends (K4 settled by the ledger), or a command comes first.
    async fn wait_attempt(&mut self, m: &mut ElectionMachine<Instant>, h: &mut Held) -> Waited {
        let (Some(attempt), Some(cell)) = (h.attempt.as_mut(), h.cell.clone()) else {
            return Waited::Commands(m.attempt_ended(Instant::now(), false, || self.shared.unit_random()));
        };
        let outcome = tokio::select! {
            r = attempt => r.ok(),
            cmd = self.cmds.recv() => return self.command(m, h, cmd),
        };
        h.attempt = None;
        tracing::trace!(lease = %self.ctl.name, ?outcome, "acquire answered");
        let adopted = match outcome {
            Some(Ok(Acquire::Won(token))) => self.shared.settle_attempt(&cell, &self.ctl.name, Some(token)),
            other => {
                attempt_finished(&self.shared, &cell, &self.ctl.name);
                if let Some(Err(e)) = other {
                    tracing::debug!(lease = %self.ctl.name, error = %crate::engine::session::error_chain(&e), "acquire failed");
                }
                None
            }
        };
        let won = adopted.is_some();
        h.term = adopted;
        h.revoked = None;
        Waited::Commands(m.attempt_ended(Instant::now(), won, || self.shared.unit_random()))
    }

    /// The leader waits for its term to be lost (H3), a command, or its task's return.
    async fn wait_leading(&mut self, m: &mut ElectionMachine<Instant>, h: &mut Held) -> Waited {
        let Some(term) = h.term.clone() else {
            return Waited::Commands(m.term_lost(Instant::now(), RevokeReason::Stopped, || self.shared.unit_random()));
        };
        let name = &self.ctl.name;
        tokio::select! {
            reason = term.revoked() => Waited::Commands(m.term_lost(Instant::now(), reason, || self.shared.unit_random())),
            cmd = self.cmds.recv() => self.command(m, h, cmd),
            res = async { match h.task.as_mut() { Some(t) => t.await, None => std::future::pending().await } } => {
                h.task = None;
                match res {
                    Ok(Ok(())) => tracing::info!(lease = %name, token = term.token(), "leader task returned; stepping down"),
                    Ok(Err(e)) => tracing::warn!(lease = %name, token = term.token(), error = %e, "leader task failed; stepping down"),
                    Err(e) => tracing::error!(lease = %name, token = term.token(), error = %e, "leader task panicked; stepping down"),
                }
                Waited::Commands(m.task_returned(Instant::now()))
            }
        }
    }

    /// A command from the handle; `None` when every handle and the client are gone.
    fn command(&self, m: &mut ElectionMachine<Instant>, h: &mut Held, cmd: Option<Cmd>) -> Waited {
        let now = Instant::now();
        Waited::Commands(match cmd {
            None => m.stop(now),
            Some(Cmd::Stop(r)) => {
                h.stop_reply = Some(r);
                m.stop(now)
            }
            Some(Cmd::StepDown(d, r)) => {
                h.step_down_reply = Some(r);
                m.step_down(now, d)
            }
        })
    }

    /// Executes the machine's commands in order.
    async fn execute(
        &mut self,
        m: &mut ElectionMachine<Instant>,
        h: &mut Held,
        commands: Vec<MachineCommand<Instant>>,
    ) {
        let mut queue: std::collections::VecDeque<_> = commands.into();
        while let Some(command) = queue.pop_front() {
            match command {
                MachineCommand::Status(status) => self.ctl.set(match status {
                    Status::Candidate => ElectionStatus::Candidate,
                    Status::CoolingDown(until) => ElectionStatus::CoolingDown(until),
                }),
                MachineCommand::Attempt => {
                    if let Some(cell) = &h.cell {
                        h.attempt = Some(spawn_attempt(&self.shared, cell, &self.ctl.name));
                    }
                }
                MachineCommand::Abandon => {
                    if let Some(a) = h.attempt.take() {
                        abandon(a);
                    }
                }
                MachineCommand::Elect => {
                    if !self.elect(h) {
                        // L6: nobody knows this term: give the lease up without an on_revoked.
                        queue.extend(m.elect_failed(Instant::now()));
                    }
                }
                MachineCommand::Revoke(reason) => {
                    if let Some(term) = &h.term {
                        let first = term.revoke(reason);
                        h.revoked = Some((first, if first { reason } else { term.revoke_reason().unwrap_or(reason) }));
                    }
                }
                MachineCommand::AwaitTask => self.await_task(h).await,
                MachineCommand::AbortTask => {
                    if let Some(t) = h.task.take() {
                        t.abort();
                    }
                }
                MachineCommand::Release => self.release_or_forget(h).await,
                MachineCommand::DeliverRevoked(reason) => {
                    let reason = h.revoked.take().map_or(reason, |(_, r)| r);
                    if let Some(term) = h.term.take() {
                        tracing::info!(lease = %self.ctl.name, token = term.token(), %reason, "term ended");
                        self.shared.emit(Event::Revoked {
                            name: self.ctl.name.to_string(),
                            token: term.token(),
                            reason,
                        });
                        self.dispatcher.revoked(&term, reason);
                    }
                }
                MachineCommand::Flush => self.dispatcher.flush().await,
                MachineCommand::ReplyStepDown => {
                    if let Some(r) = h.step_down_reply.take() {
                        let _ = r.send(());
                    }
                }
                MachineCommand::Stopped => self.stopped(h.stop_reply.take()).await,
                // Only a lock's machine gives up; an election contends until stopped.
                MachineCommand::GiveUp => {}
            }
        }
    }

    /// Dispatches `on_elected` for the adopted term, then shows it and starts the task;
    /// `false` when the dispatch failed (L6).
    fn elect(&mut self, h: &mut Held) -> bool {
        let (Some(term), Some(cell)) = (h.term.clone(), h.cell.clone()) else { return false };
        let name = Arc::clone(&self.ctl.name);
        if !self.dispatcher.elected(&term) {
            tracing::warn!(lease = %name, token = term.token(), "on_elected could not be dispatched; giving the lease up for one lease period");
            return false;
        }
        tracing::info!(lease = %name, token = term.token(), session = %cell.id, "elected");
        self.shared.emit(Event::Elected { name: name.to_string(), token: term.token() });
        self.ctl.set(ElectionStatus::Leader(term.clone()));
        h.task = self.task.as_mut().map(|f| {
            let f = f.get_mut().unwrap_or_else(PoisonError::into_inner);
            let span = tracing::info_span!("leader", lease = %name, token = term.token(), session = %cell.id);
            tokio::spawn(tracing::Instrument::instrument(IN_ELECTION.scope(self.ctl.id, f(term.clone())), span))
        });
        true
    }

    /// H1, H5: waits until the task returns or the session's local deadline passes; aborts it
    /// then.
    async fn await_task(&self, h: &mut Held) {
        let (Some(mut t), Some(cell)) = (h.task.take(), h.cell.as_ref()) else { return };
        tokio::select! {
            _ = &mut t => {}
            _ = sleep_until(cell.deadline()) => {
                let token = h.term.as_ref().map_or(0, Term::token);
                tracing::warn!(lease = %self.ctl.name, token, "leader task ignored cancellation until the local deadline; aborting it");
                t.abort();
            }
        }
    }

    /// T7: releases the term's lease with its token if this election revoked it; a term lost
    /// meanwhile (H3) is only forgotten (the session shell already dropped it).
    async fn release_or_forget(&self, h: &mut Held) {
        let (Some(term), Some(cell)) = (h.term.as_ref(), h.cell.as_ref()) else { return };
        match h.revoked {
            Some((false, _)) => {
                self.shared.lock_state().held.remove(&self.ctl.name);
            }
            _ => self.release(term, cell).await,
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

    /// Releases the term's lease with its token (T7) and forgets it.
    async fn release(&self, term: &Term, cell: &Arc<SessionCell>) {
        let name = &self.ctl.name;
        match self.shared.release(cell, name, term.token()).await {
            Released::Acknowledged | Released::NotSent => {}
            Released::Failed(e) => {
                tracing::warn!(lease = %name, token = term.token(), error = %crate::engine::session::error_chain(&e), "release failed; the lease frees with the session")
            }
            Released::TimedOut => {
                tracing::warn!(lease = %name, token = term.token(), "release timed out; the lease frees with the session")
            }
        }
        self.shared.forget_held(term);
    }
}
