//! The contender: the one async shell of the core's election machine
//! ([`simba_core::election`]), for an election, a lock's acquisition (with or without a
//! deadline, K5) and a lock's one attempt, and the H1 handover of a held lock. It waits for
//! what the machine's phase waits for (a live session, an attempt's end, a release heard or a
//! new session, the clock, a handle's command, the term lost, the task's return), feeds the
//! machine the event, and executes the commands it returns, in order. Elections and locks
//! differ only in what the machine was built for ([`Contention`]) and in what an election adds
//! around it: its handle's commands, its status, its callbacks and its task.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use simba_core::election::{Command, ElectionMachine, Status};
use simba_core::timing::defer_after_release;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use super::attempt::{Attempt, abandon, spawn_attempt};
use super::callbacks::Dispatcher;
use super::control::{Cmd, ElectionCtl, ElectionStatus, IN_ELECTION};
use super::local::{Claim, LocalTurn};
use super::session::error_chain;
use super::{Released, Shared, sleep_until_or_never};
use crate::backend::Acquire;
use crate::events::Event;
use crate::term::SessionCell;
use crate::{BoxError, Error, RevokeReason, Term};

/// A leader task's future.
pub(crate) type TaskFuture = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;
/// What starts an election's leader task for each of its terms.
pub(crate) type TaskFn = Box<dyn FnMut(Term) -> TaskFuture + Send>;

/// An election's own part around the machine.
pub(crate) struct Elector {
    /// What the handle and the client see of the election.
    pub(crate) ctl: Arc<ElectionCtl>,
    /// The handle's commands.
    pub(crate) cmds: mpsc::UnboundedReceiver<Cmd>,
    pub(crate) dispatcher: Dispatcher,
    /// A Mutex so that `&Contender` is Send across awaits; only the contender touches it.
    pub(crate) task_fn: Option<Mutex<TaskFn>>,
}

/// Starts the election of `elector` on its own task; it contends until stopped.
pub(crate) fn spawn_election(shared: &Arc<Shared>, elector: Elector) {
    let name = Arc::clone(&elector.ctl.name);
    let machine = ElectionMachine::new(shared.timing);
    let role = Role::Election(Box::new(Leader { elector, task: None, stop_reply: None, step_down_reply: None }));
    let contender = Contender::new(shared, &name, machine, None, role);
    let run = async move {
        contender.run().await;
    };
    tokio::spawn(tracing::Instrument::instrument(run, tracing::info_span!("election", lease = %name)));
}

/// A lock won by [`acquire`]: its term, its claim on the name (L4) and its local turn (K6).
pub(crate) struct Won {
    pub(crate) term: Term,
    pub(crate) claim: Claim,
    pub(crate) local: LocalTurn,
}

/// A lock's acquisition of `name` (K5): its local turn (K6) and courtesy (K7), its claim
/// (L4), then the machine until it wins or gives up: at `until` if set, or after its one
/// attempt when `once` (which never waits for the local queue nor for a session). `Ok(None)`
/// when it gave up; [`Error::Closed`] when the client closed first.
pub(crate) async fn acquire(
    shared: &Arc<Shared>,
    name: &str,
    until: Option<Instant>,
    once: bool,
) -> Result<Option<Won>, Error> {
    crate::validate_name(name)?;
    shared.ensure_open()?;
    let name: Arc<str> = name.into();
    let Some(mut local) = LocalTurn::take(shared, &name, until, !once).await else { return Ok(None) };
    if !once && shared.config.fair_locks() && !local.give_way(until).await? {
        return Ok(None);
    }
    let claim = Claim::take(shared, &name)?;
    let machine =
        if once { ElectionMachine::lock_once(shared.timing) } else { ElectionMachine::lock(shared.timing, until) };
    match Contender::new(shared, &name, machine, local.gave_way_at(), Role::Lock).run().await {
        Outcome::Won(term) => {
            let token = term.token();
            tracing::debug!(lease = %name, token, session = %term.session().id, "lock acquired");
            shared.emit(Event::Elected { name: name.to_string(), token });
            local.won(Instant::now());
            Ok(Some(Won { term, claim, local }))
        }
        Outcome::GaveUp => Ok(None),
        Outcome::Stopped | Outcome::Closed => Err(Error::Closed),
    }
}

/// Hands a held lock's `term` over with `reason` in the H1 order, with the commands of the
/// machine its acquisition left leading (a guard keeps no machine: P7): revoke; wait for
/// `work` until the deadline the term had when revoked, abort it then (H5); release with the
/// token (T7); report the end. The name is free again on this client once `claim` drops (L4).
pub(crate) async fn hand_over_lock<R>(
    claim: Claim,
    term: &Term,
    reason: RevokeReason,
    mut work: Option<JoinHandle<R>>,
) -> Result<(), Error> {
    let shared = Arc::clone(claim.shared());
    let mut machine = ElectionMachine::lock_leading(shared.timing);
    let mut commands = machine.hand_over(Instant::now(), reason);
    commands.extend(machine.handed_over(Instant::now(), || 0.0));
    let mut ending = None;
    let mut result = Ok(());
    for command in commands {
        match command {
            Command::Revoke(reason) => ending = Some(Ending::revoke(term, reason)),
            Command::AwaitTask => {
                if let (Some(w), Some(e)) = (work.as_mut(), ending) {
                    await_work(w, e.deadline, term).await;
                }
            }
            Command::Release => result = release(&shared, term, Ending::reason(ending, reason)).await,
            Command::DeliverRevoked(reason) => report_revoked(&shared, term, Ending::reason(ending, reason)),
            Command::Stopped => break,
            // The status, callbacks and replies are an election's.
            _ => {}
        }
    }
    drop(claim);
    result
}

/// A held lock dropped without a handover: its term ends (`Stopped`) and its lease is
/// released in the background, best effort (T7; it frees with the session otherwise).
pub(crate) fn drop_lock(claim: Claim, term: &Term) {
    let shared = claim.shared();
    if term.revoke(RevokeReason::Stopped) {
        report_revoked(shared, term, RevokeReason::Stopped);
        if tokio::runtime::Handle::try_current().is_ok() {
            shared.release_in_background(Arc::clone(term.session()), Arc::clone(term.lease()), term.token());
        }
    }
    shared.forget_held(term);
}

/// How a contender's run ended.
enum Outcome {
    /// A lock's acquisition won this term.
    Won(Term),
    /// A lock's acquisition gave up without a term.
    GaveUp,
    /// The machine stopped: an election ended.
    Stopped,
    /// The client shut down, or the handle and the client are gone, before that.
    Closed,
}

/// What the contender contends for.
enum Role {
    /// A lock's acquisition: it ends when it wins or gives up.
    Lock,
    /// An election, with what the shell holds for it between commands.
    Election(Box<Leader>),
}

/// An election's part, with its task and the answers owed.
struct Leader {
    elector: Elector,
    task: Option<JoinHandle<Result<(), BoxError>>>,
    stop_reply: Option<oneshot::Sender<()>>,
    step_down_reply: Option<oneshot::Sender<()>>,
}

impl Role {
    /// The next command of an election's handle (`None` once every handle and the client are
    /// gone); a lock has no handle commands, so this never completes for it.
    async fn command(&mut self) -> Option<Cmd> {
        match self {
            Role::Election(l) => l.elector.cmds.recv().await,
            Role::Lock => std::future::pending().await,
        }
    }

    fn leader(&mut self) -> Option<&mut Leader> {
        match self {
            Role::Election(l) => Some(l),
            Role::Lock => None,
        }
    }
}

/// A term being handed over (H1): the reason it ended with (its own, or the one it was lost
/// with meanwhile, H3) and the deadline it had when it was revoked (H5).
#[derive(Clone, Copy)]
struct Ending {
    reason: RevokeReason,
    deadline: Instant,
}

impl Ending {
    /// H1's first step: revokes `term` with `reason` unless it already ended.
    fn revoke(term: &Term, reason: RevokeReason) -> Ending {
        let deadline = term.deadline();
        term.revoke(reason);
        Ending { reason: term.revoke_reason().unwrap_or(reason), deadline }
    }

    /// The reason the term ended with, `otherwise` when it was not revoked here.
    fn reason(ending: Option<Ending>, otherwise: RevokeReason) -> RevokeReason {
        ending.map_or(otherwise, |e| e.reason)
    }
}

/// The machine and what the shell holds for it: the session of the attempt or term, the
/// attempt in flight, the term, and the handover under way.
struct Contender {
    shared: Arc<Shared>,
    name: Arc<str>,
    m: ElectionMachine<Instant>,
    /// Names of released leases (K2).
    releases: broadcast::Receiver<String>,
    cell: Option<Arc<SessionCell>>,
    attempt: Option<Attempt>,
    term: Option<Term>,
    /// Set by `Revoke`, until the handover is done.
    ending: Option<Ending>,
    /// K7: when this process gave a lock's name way to other nodes (never for an election).
    gave_way_at: Option<Instant>,
    role: Role,
}

impl Contender {
    fn new(
        shared: &Arc<Shared>,
        name: &Arc<str>,
        m: ElectionMachine<Instant>,
        gave_way_at: Option<Instant>,
        role: Role,
    ) -> Self {
        Contender {
            shared: Arc::clone(shared),
            name: Arc::clone(name),
            m,
            releases: shared.releases.subscribe(),
            cell: None,
            attempt: None,
            term: None,
            ending: None,
            gave_way_at,
            role,
        }
    }

    /// Runs the machine until it stops, or until a lock wins or gives up.
    async fn run(mut self) -> Outcome {
        let mut closed = false;
        while !self.m.stopped() {
            let commands = match self.wait().await {
                Some(c) => c,
                None => {
                    closed = true;
                    self.m.stop(Instant::now())
                }
            };
            if let Some(end) = self.execute(commands).await {
                return end;
            }
            if self.m.handing_over() {
                // The handover is done: its term is forgotten (an L6 one had no on_revoked).
                self.term = None;
                self.ending = None;
                let after = self.m.handed_over(Instant::now(), || self.shared.unit_random());
                if let Some(end) = self.execute(after).await {
                    return end;
                }
            }
        }
        if closed { Outcome::Closed } else { Outcome::Stopped }
    }

    /// Waits for the next event of the machine's phase and feeds it to the machine; `None`
    /// when the client shut down.
    async fn wait(&mut self) -> Option<Vec<Command<Instant>>> {
        if self.m.wants_session() {
            self.wait_session().await
        } else if self.m.attempting() {
            self.wait_attempt().await
        } else if self.m.leading() {
            self.wait_leading().await
        } else {
            self.wait_retry().await
        }
    }

    /// A candidate waits for a live session (a lock's one attempt does not wait), or for a
    /// lock's `until`.
    async fn wait_session(&mut self) -> Option<Vec<Command<Instant>>> {
        let mut rx = self.shared.session.subscribe();
        loop {
            let now = Instant::now();
            if let Some(c) = rx.borrow_and_update().clone().filter(|c| c.is_live_at(now)) {
                self.cell = Some(c);
                return Some(self.m.session_live(now));
            }
            let none = self.m.no_session(now);
            if self.m.stopped() {
                return Some(none);
            }
            tokio::select! {
                r = rx.changed() => if r.is_err() { return None },
                _ = sleep_until_or_never(self.m.next_wakeup()) => return Some(self.m.tick(Instant::now())),
                _ = self.shared.shutdown.cancelled() => return None,
                cmd = self.role.command() => return Some(self.command(cmd)),
            }
        }
    }

    /// The acquisition in flight ends (K4 settled by the ledger), or a lock's `until`, the
    /// client's shutdown or an election's command comes first.
    async fn wait_attempt(&mut self) -> Option<Vec<Command<Instant>>> {
        let (Some(attempt), Some(cell)) = (self.attempt.as_mut(), self.cell.clone()) else {
            return Some(self.m.attempt_ended(Instant::now(), false, || self.shared.unit_random()));
        };
        let outcome = tokio::select! {
            r = attempt => r.ok(),
            _ = sleep_until_or_never(self.m.next_wakeup()) => return Some(self.m.tick(Instant::now())),
            _ = self.shared.shutdown.cancelled() => return None,
            cmd = self.role.command() => return Some(self.command(cmd)),
        };
        self.attempt = None;
        tracing::trace!(lease = %self.name, ?outcome, "acquire answered");
        let won = match outcome {
            Some(Ok(Acquire::Won(token))) => Some(token),
            Some(Err(e)) => {
                tracing::debug!(lease = %self.name, error = %error_chain(&e), "acquire failed");
                None
            }
            _ => None,
        };
        // The one exit of an attempt whose result was taken, won or not (K3, K4).
        self.term = self.shared.settle_attempt(&cell, &self.name, won);
        self.ending = None;
        let adopted = self.term.is_some();
        Some(self.m.attempt_ended(Instant::now(), adopted, || self.shared.unit_random()))
    }

    /// An election's leader waits for its term to be lost (H3), a command, or its task's
    /// return.
    async fn wait_leading(&mut self) -> Option<Vec<Command<Instant>>> {
        let Some(term) = self.term.clone() else {
            return Some(self.m.term_lost(Instant::now(), RevokeReason::Stopped, || self.shared.unit_random()));
        };
        // A lock's contender ends when it wins: only an election leads here.
        let leader = self.role.leader()?;
        let returned = tokio::select! {
            reason = term.revoked() => {
                return Some(self.m.term_lost(Instant::now(), reason, || self.shared.unit_random()));
            }
            cmd = leader.elector.cmds.recv() => return Some(self.command(cmd)),
            res = async { match leader.task.as_mut() { Some(t) => t.await, None => std::future::pending().await } } => res,
        };
        leader.task = None;
        let (name, token) = (&self.name, term.token());
        match returned {
            Ok(Ok(())) => tracing::info!(lease = %name, token, "leader task returned; stepping down"),
            Ok(Err(e)) => tracing::warn!(lease = %name, token, error = %e, "leader task failed; stepping down"),
            Err(e) => tracing::error!(lease = %name, token, error = %e, "leader task panicked; stepping down"),
        }
        Some(self.m.task_returned(Instant::now()))
    }

    /// K1, H4: waits for a retry, sooner on a release of the name heard or a new session
    /// (K2; a lock whose process gave the name way defers after a release, K7), or for the
    /// end of a cooldown (only the clock and commands end it).
    async fn wait_retry(&mut self) -> Option<Vec<Command<Instant>>> {
        let at = self.m.next_wakeup()?;
        let retrying = !self.m.cooling_down();
        let mut session_rx = self.shared.session.subscribe();
        let renew = self.shared.config.renew_interval();
        let mut nudge_at = None;
        loop {
            let released = tokio::select! {
                _ = sleep_until(at) => return Some(self.m.tick(Instant::now())),
                _ = sleep_until_or_never(nudge_at) => return Some(self.m.nudge(Instant::now())),
                r = self.releases.recv(), if retrying => match r {
                    Ok(n) => *n == *self.name,
                    Err(RecvError::Closed) => false,
                    Err(RecvError::Lagged(_)) => true,
                },
                _ = session_rx.changed(), if retrying => return Some(self.m.nudge(Instant::now())),
                _ = self.shared.shutdown.cancelled() => return None,
                cmd = self.role.command() => return Some(self.command(cmd)),
            };
            if released && nudge_at.is_none() {
                let now = Instant::now();
                match defer_after_release(self.gave_way_at, now, renew) {
                    Some(wait) => nudge_at = Some(now + wait),
                    None => return Some(self.m.nudge(now)),
                }
            }
        }
    }

    /// A command from an election's handle; `None` when every handle and the client are gone.
    fn command(&mut self, cmd: Option<Cmd>) -> Vec<Command<Instant>> {
        let now = Instant::now();
        let leader = self.role.leader();
        match (cmd, leader) {
            (Some(Cmd::Stop(r)), Some(l)) => {
                l.stop_reply = Some(r);
                self.m.stop(now)
            }
            (Some(Cmd::StepDown(d, r)), Some(l)) => {
                l.step_down_reply = Some(r);
                self.m.step_down(now, d)
            }
            _ => self.m.stop(now),
        }
    }

    /// Executes the machine's commands in order; the outcome when a lock's acquisition ends.
    async fn execute(&mut self, commands: Vec<Command<Instant>>) -> Option<Outcome> {
        let mut queue: VecDeque<_> = commands.into();
        while let Some(command) = queue.pop_front() {
            match command {
                Command::Status(status) => self.show(status),
                Command::Attempt => {
                    if let Some(cell) = &self.cell {
                        self.attempt = Some(spawn_attempt(&self.shared, cell, &self.name));
                    }
                }
                Command::Abandon => {
                    if let Some(a) = self.attempt.take() {
                        abandon(a);
                    }
                }
                Command::Elect if matches!(self.role, Role::Lock) => {
                    return Some(self.term.take().map_or(Outcome::GaveUp, Outcome::Won));
                }
                Command::Elect => {
                    if !self.elect() {
                        // L6: nobody knows this term: give the lease up without an on_revoked.
                        queue.extend(self.m.elect_failed(Instant::now()));
                    }
                }
                Command::GiveUp => return Some(Outcome::GaveUp),
                Command::Stopped => self.stopped().await,
                handover => self.hand_over(handover).await,
            }
        }
        None
    }

    /// Publishes an election's status.
    fn show(&mut self, status: Status<Instant>) {
        if let Some(l) = self.role.leader() {
            l.elector.ctl.set(match status {
                Status::Candidate => ElectionStatus::Candidate,
                Status::CoolingDown(until) => ElectionStatus::CoolingDown(until),
            });
        }
    }

    /// Dispatches `on_elected` for the adopted term, then shows it and starts the task;
    /// `false` when the dispatch failed (L6).
    fn elect(&mut self) -> bool {
        let (Some(term), Some(cell)) = (self.term.clone(), self.cell.clone()) else { return false };
        let Some(leader) = self.role.leader() else { return false };
        let (name, e) = (&self.name, &mut leader.elector);
        if !e.dispatcher.elected(&term) {
            tracing::warn!(lease = %name, token = term.token(), "on_elected could not be dispatched; giving the lease up for one lease period");
            return false;
        }
        tracing::info!(lease = %name, token = term.token(), session = %cell.id, "elected");
        self.shared.emit(Event::Elected { name: name.to_string(), token: term.token() });
        e.ctl.set(ElectionStatus::Leader(term.clone()));
        leader.task = e.task_fn.as_mut().map(|f| {
            let f = f.get_mut().unwrap_or_else(PoisonError::into_inner);
            let span = tracing::info_span!("leader", lease = %name, token = term.token(), session = %cell.id);
            tokio::spawn(tracing::Instrument::instrument(IN_ELECTION.scope(e.ctl.id, f(term.clone())), span))
        });
        true
    }

    /// Executes one step of an election's handover (H1), of a lost term's end (H3) or of an
    /// undeliverable term's (L6).
    async fn hand_over(&mut self, command: Command<Instant>) {
        let Some(leader) = self.role.leader() else { return };
        match command {
            Command::Revoke(reason) => self.ending = self.term.as_ref().map(|t| Ending::revoke(t, reason)),
            Command::AwaitTask => {
                if let (Some(mut task), Some(term), Some(e)) = (leader.task.take(), &self.term, self.ending) {
                    await_work(&mut task, e.deadline, term).await;
                }
            }
            Command::AbortTask => {
                if let Some(t) = leader.task.take() {
                    t.abort();
                }
            }
            Command::Release => {
                let Some(term) = &self.term else { return };
                if let Err(e) = release(&self.shared, term, Ending::reason(self.ending, RevokeReason::Stopped)).await {
                    tracing::warn!(lease = %self.name, token = term.token(), error = %error_chain(&e), "release failed; the lease frees with the session");
                }
            }
            Command::DeliverRevoked(reason) => {
                let reason = Ending::reason(self.ending.take(), reason);
                if let Some(term) = self.term.take() {
                    tracing::info!(lease = %self.name, token = term.token(), %reason, "term ended");
                    report_revoked(&self.shared, &term, reason);
                    leader.elector.dispatcher.revoked(&term, reason);
                }
            }
            Command::Flush => leader.elector.dispatcher.flush().await,
            Command::ReplyStepDown => {
                if let Some(r) = leader.step_down_reply.take() {
                    let _ = r.send(());
                }
            }
            _ => {}
        }
    }

    /// An election stopped: no callback after this (L3). Frees the name (L4), answers the stop
    /// and anybody still waiting. (A lock's machine only stops on the client's shutdown; its
    /// claim is freed with the acquisition.)
    async fn stopped(&mut self) {
        let Some(leader) = self.role.leader() else { return };
        let e = &mut leader.elector;
        {
            let mut st = self.shared.lock_state();
            st.claims.remove(&self.name);
            if st.elections.get(&self.name).is_some_and(|c| Arc::ptr_eq(c, &e.ctl)) {
                st.elections.remove(&self.name);
            }
        }
        e.dispatcher.flush().await;
        if let Some(r) = leader.stop_reply.take() {
            let _ = r.send(());
        }
        e.cmds.close();
        while let Ok(cmd) = e.cmds.try_recv() {
            match cmd {
                Cmd::Stop(r) | Cmd::StepDown(_, r) => {
                    let _ = r.send(());
                }
            }
        }
    }
}

/// H1, H5: waits until `work` returns or `deadline` (the term's when it was revoked) passes;
/// aborts it then.
async fn await_work<R>(work: &mut JoinHandle<R>, deadline: Instant, term: &Term) {
    tokio::select! {
        _ = &mut *work => {}
        _ = sleep_until(deadline) => {
            tracing::warn!(lease = term.name(), token = term.token(), "the task under the term ignored cancellation until the local deadline; aborting it");
            work.abort();
        }
    }
}

/// T7: releases `term`'s lease with its token if the term was handed over (`ended` is
/// `Stopped` or `SteppedDown`); a term lost to the session (deadline, expiry, takeover, H3) is
/// not ours to release. The session's K4 record of the token is written in every case, and
/// the term is no longer held.
async fn release(shared: &Arc<Shared>, term: &Term, ended: RevokeReason) -> Result<(), Error> {
    let release = shared.release(term.session(), term.lease(), term.token());
    let result = if matches!(ended, RevokeReason::Stopped | RevokeReason::SteppedDown) {
        match release.await {
            Released::Acknowledged | Released::NotSent => Ok(()),
            Released::Failed(source) => {
                Err(Error::Backend { op: "release", name: Some(term.name().to_owned()), source })
            }
            Released::TimedOut => {
                tracing::warn!(
                    lease = term.name(),
                    token = term.token(),
                    "release timed out; the lease frees with the session"
                );
                Ok(())
            }
        }
    } else {
        Ok(())
    };
    shared.forget_held(term);
    result
}

/// The term's end, as an event.
fn report_revoked(shared: &Shared, term: &Term, reason: RevokeReason) {
    shared.emit(Event::Revoked { name: term.name().to_owned(), token: term.token(), reason });
}
