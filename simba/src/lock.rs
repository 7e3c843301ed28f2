//! Locks: a term held by code rather than by an election, released with its token.

use std::sync::Arc;
use std::time::Duration;

use simba_core::election::{Command as MachineCommand, Contention, ElectionMachine};
use simba_core::timing::{Courtesy, courtesy, defer_after_release};
use tokio::sync::OwnedMutexGuard;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use crate::backend::Acquire;
use crate::engine::attempt::{Attempt, abandon, spawn_attempt};
use crate::engine::{LocalStreak, Released, Shared, sleep_until_or_never};
use crate::events::Event;
use crate::term::SessionCell;
use crate::{Error, RevokeReason, Term};

/// A distributed lock on one lease name.
///
/// Tasks of one process that lock the same name queue locally first, so at most one of them
/// contends at a time. A name held by an election on this client cannot be locked
/// ([`Error::AlreadyStarted`]).
pub struct Lock {
    shared: Arc<Shared>,
    name: String,
}

impl Lock {
    pub(crate) fn new(shared: Arc<Shared>, name: String) -> Self {
        Lock { shared, name }
    }

    /// The lease name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits until this node holds the lock.
    pub async fn acquire(&self) -> Result<LockGuard, Error> {
        match self.acquire_until(None).await? {
            Some(g) => Ok(g),
            None => Err(Error::Closed),
        }
    }

    /// Tries to take the lock for at most `timeout`; `Ok(None)` when it could not.
    pub async fn try_acquire(&self, timeout: Duration) -> Result<Option<LockGuard>, Error> {
        self.acquire_until(Some(Instant::now() + timeout)).await
    }

    /// One attempt, without waiting: the lock if the lease is free now, `None` otherwise (also
    /// when no session is live, or another task of this process holds or waits for it). For
    /// callers that decide themselves when to try again, as partition groups do.
    pub async fn try_acquire_now(&self) -> Result<Option<LockGuard>, Error> {
        self.acquire_inner(None, true).await
    }

    async fn acquire_until(&self, until: Option<Instant>) -> Result<Option<LockGuard>, Error> {
        self.acquire_inner(until, false).await
    }

    async fn acquire_inner(&self, until: Option<Instant>, once: bool) -> Result<Option<LockGuard>, Error> {
        crate::validate_name(&self.name)?;
        self.shared.ensure_open()?;
        let name: Arc<str> = self.name.as_str().into();
        let Some(mut local) = self.local_turn(&name, until).await else { return Ok(None) };
        if !once && self.shared.config.fair_locks() && !self.give_way(&mut local, until).await? {
            return Ok(None);
        }
        let claim = self.claim(&name)?;
        let timing = self.shared.timing;
        let mut m = if once { ElectionMachine::lock_once(timing) } else { ElectionMachine::lock(timing, until) };
        let mut run = Contending { cell: None, attempt: None, term: None };
        let mut releases = self.shared.releases.subscribe();
        let gave_way_at = local.guard.as_deref().and_then(|s| s.gave_way_at);
        loop {
            let commands = match self.wait(&mut m, &mut run, &mut releases, &name, gave_way_at).await {
                Some(c) => c,
                None => {
                    if let Some(a) = run.attempt.take() {
                        abandon(a);
                    }
                    return Err(Error::Closed);
                }
            };
            for command in commands {
                match command {
                    MachineCommand::Attempt => {
                        if let Some(cell) = &run.cell {
                            run.attempt = Some(spawn_attempt(&self.shared, cell, &name));
                        }
                    }
                    MachineCommand::Abandon => {
                        if let Some(a) = run.attempt.take() {
                            abandon(a);
                        }
                    }
                    MachineCommand::Elect => {
                        let Some(term) = run.term.take() else { return Ok(None) };
                        let token = term.token();
                        tracing::debug!(lease = %name, token, session = %term.session().id, "lock acquired");
                        self.shared.emit(Event::Elected { name: name.to_string(), token });
                        local.won(Instant::now());
                        return Ok(Some(LockGuard { term, claim: Some(claim), _local: local }));
                    }
                    MachineCommand::GiveUp => return Ok(None),
                    // Only a term's handover, a cooldown or an election's end bring the rest.
                    _ => {}
                }
            }
        }
    }

    /// Waits for the next event of the acquisition machine's phase and feeds it to the
    /// machine; `None` when the client shut down. A release of `name` nudges the machine at
    /// once, or after a courtesy when this process gave the name way at `gave_way_at`
    /// ([`defer_after_release`]).
    async fn wait(
        &self,
        m: &mut ElectionMachine<Instant>,
        run: &mut Contending,
        releases: &mut tokio::sync::broadcast::Receiver<String>,
        name: &Arc<str>,
        gave_way_at: Option<Instant>,
    ) -> Option<Vec<MachineCommand<Instant>>> {
        if m.wants_session() {
            return self.wait_session(m, run).await;
        }
        if m.attempting() {
            let (Some(attempt), Some(cell)) = (run.attempt.as_mut(), run.cell.clone()) else {
                return Some(m.attempt_ended(Instant::now(), false, || self.shared.unit_random()));
            };
            let outcome = tokio::select! {
                r = attempt => r.ok(),
                _ = sleep_until_or_never(m.next_wakeup()) => return Some(m.tick(Instant::now())),
                _ = self.shared.shutdown.cancelled() => return None,
            };
            run.attempt = None;
            let won = match outcome {
                Some(Ok(Acquire::Won(token))) => Some(token),
                _ => None,
            };
            run.term = self.shared.settle_attempt(&cell, name, won);
            let adopted = run.term.is_some();
            return Some(m.attempt_ended(Instant::now(), adopted, || self.shared.unit_random()));
        }
        // K1/K2: the candidate delay (cut at `until`), or less when `name` is released.
        let at = m.next_wakeup()?;
        let renew = self.shared.config.renew_interval();
        let mut nudge_at = None;
        loop {
            let released = tokio::select! {
                _ = sleep_until(at) => return Some(m.tick(Instant::now())),
                _ = sleep_until_or_never(nudge_at) => return Some(m.nudge(Instant::now())),
                r = releases.recv() => match r {
                    Ok(n) => *n == **name,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => false,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                },
                _ = self.shared.shutdown.cancelled() => return None,
            };
            if released && nudge_at.is_none() {
                let now = Instant::now();
                match defer_after_release(gave_way_at, now, renew) {
                    Some(wait) => nudge_at = Some(now + wait),
                    None => return Some(m.nudge(now)),
                }
            }
        }
    }

    /// A candidate waits for a live session (a lock's one attempt does not wait), or for its
    /// `until`.
    async fn wait_session(
        &self,
        m: &mut ElectionMachine<Instant>,
        run: &mut Contending,
    ) -> Option<Vec<MachineCommand<Instant>>> {
        let mut rx = self.shared.session.subscribe();
        loop {
            if let Some(c) = rx.borrow_and_update().clone().filter(|c| c.is_live_at(Instant::now())) {
                run.cell = Some(c);
                return Some(m.session_live(Instant::now()));
            }
            if m.contention() == Contention::Once {
                return Some(m.no_session(Instant::now()));
            }
            tokio::select! {
                r = rx.changed() => if r.is_err() { return None },
                _ = sleep_until_or_never(m.next_wakeup()) => return Some(m.tick(Instant::now())),
                _ = self.shared.shutdown.cancelled() => return None,
            }
        }
    }

    /// Waits for this task's turn in the local queue of `name`; `None` when `until` came
    /// first (the turn then drops the queue if nobody else waits on it).
    async fn local_turn(&self, name: &Arc<str>, until: Option<Instant>) -> Option<LocalTurn> {
        let mut local =
            LocalTurn { shared: Arc::clone(&self.shared), name: Arc::clone(name), guard: None, held: false };
        let queue = {
            let mut st = self.shared.lock_state();
            Arc::clone(st.lock_queues.entry(Arc::clone(name)).or_default())
        };
        let waited = match until {
            None => Ok(queue.lock_owned().await),
            Some(u) => tokio::time::timeout_at(u, queue.lock_owned()).await,
        };
        local.guard = Some(waited.ok()?);
        Some(local)
    }

    /// After a long enough local streak, this local waiter lets other nodes'
    /// candidates (woken by the release just made) try first ([`simba_core::timing::courtesy`]).
    /// `false` when `until` came first.
    async fn give_way(&self, local: &mut LocalTurn, until: Option<Instant>) -> Result<bool, Error> {
        let renew = self.shared.config.renew_interval();
        let now = Instant::now();
        let Some(streak) = local.guard.as_deref_mut() else { return Ok(true) };
        let wait = match courtesy(streak.since, streak.released_at, now, renew) {
            Courtesy::Keep => return Ok(true),
            Courtesy::StartAnew => {
                streak.since = None;
                return Ok(true);
            }
            Courtesy::GiveWay(wait) => {
                streak.since = None;
                streak.gave_way_at = Some(now);
                wait
            }
        };
        tracing::debug!(lease = %self.name, "giving way to other nodes after a local streak");
        tokio::select! {
            _ = sleep_until(now + wait) => {}
            _ = sleep_until_or_never(until) => return Ok(false),
            _ = self.shared.shutdown.cancelled() => return Err(Error::Closed),
        }
        Ok(until.is_none_or(|u| Instant::now() < u))
    }

    /// Claims `name` on this client (L4): refused while an election or another lock uses it.
    fn claim(&self, name: &Arc<str>) -> Result<Claim, Error> {
        let mut st = self.shared.lock_state();
        if st.closed {
            return Err(Error::Closed);
        }
        if !st.claims.insert(Arc::clone(name)) {
            return Err(Error::AlreadyStarted { name: self.name.clone() });
        }
        Ok(Claim { shared: Arc::clone(&self.shared), name: Arc::clone(name) })
    }
}

/// What a lock's acquisition holds while its machine contends: the live session it
/// attempts under, the attempt in flight, and the term a won attempt adopted.
struct Contending {
    cell: Option<Arc<SessionCell>>,
    attempt: Option<Attempt>,
    term: Option<Term>,
}

/// This task's place in the local queue of a name: the queue's guard once it is this task's
/// turn. Dropping it passes the turn on and removes the queue from `lock_queues` when no other
/// task holds or waits for it, so names locked once do not stay in memory.
struct LocalTurn {
    shared: Arc<Shared>,
    name: Arc<str>,
    guard: Option<OwnedMutexGuard<LocalStreak>>,
    /// Whether this turn won the lock (its end is then a local release).
    held: bool,
}

impl LocalTurn {
    /// This turn won the lock at `now`: a streak starts unless one runs.
    fn won(&mut self, now: Instant) {
        self.held = true;
        if let Some(streak) = self.guard.as_deref_mut() {
            streak.since.get_or_insert(now);
            streak.gave_way_at = None;
        }
    }
}

impl Drop for LocalTurn {
    fn drop(&mut self) {
        if self.held
            && let Some(streak) = self.guard.as_deref_mut()
        {
            streak.released_at = Some(Instant::now());
        }
        // The guard holds a reference to the queue: drop it first.
        drop(self.guard.take());
        let mut st = self.shared.lock_state();
        // Every other reference is a task holding or waiting for the queue, and new ones are
        // only taken under the state lock: with the map's the only one left, nobody needs it.
        if st.lock_queues.get(&self.name).is_some_and(|q| Arc::strong_count(q) == 1) {
            st.lock_queues.remove(&self.name);
        }
    }
}

/// The local claim on a name; dropping it lets an election or another lock use the name.
struct Claim {
    shared: Arc<Shared>,
    name: Arc<str>,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.shared.lock_state().claims.remove(&self.name);
    }
}

/// A held lock: its term, released with its token on [`release`](LockGuard::release) or,
/// in the background, on drop.
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    term: Term,
    claim: Option<Claim>,
    _local: LocalTurn,
}

impl LockGuard {
    /// The lock's term: check [`Term::is_valid`] before each step and send
    /// [`Term::token`] with every write.
    pub fn term(&self) -> &Term {
        &self.term
    }

    /// Revokes the term, then releases the lease with its token (T7).
    pub async fn release(self) -> Result<(), Error> {
        self.release_as(RevokeReason::Stopped).await
    }

    /// Ends the term locally with `reason` (unless it already ended), without releasing the
    /// lease yet: [`Term::cancelled`] resolves, so the work under it stops. The first step of a
    /// graceful handover (H1): revoke, wait for the work to return, then
    /// [`release`](Self::release) (which keeps this reason). Returns whether it revoked.
    pub fn revoke(&self, reason: RevokeReason) -> bool {
        self.term.revoke(reason)
    }

    /// Hands the lock over gracefully with `work`, the task running under its term, in the H1
    /// order of an election's handover: revokes the term with `reason` (unless it already
    /// ended), so [`Term::cancelled`] resolves; waits until `work` returns, or aborts it once
    /// the deadline the term had when it was revoked passes (H5); then releases the lease with
    /// its token (T7). A term lost meanwhile (deadline, expiry, takeover) is not released:
    /// the store already gave it up. Partition groups hand their partitions over this way.
    pub async fn hand_over<R>(mut self, reason: RevokeReason, work: JoinHandle<R>) -> Result<(), Error> {
        self.execute_handover(reason, Some(work)).await
    }

    /// Revokes the term with `reason` (unless it already ended), then releases the lease with
    /// its token (T7).
    pub(crate) async fn release_as(mut self, reason: RevokeReason) -> Result<(), Error> {
        self.execute_handover::<()>(reason, None).await
    }

    /// Executes the machine's H1 commands for `reason` (the same list an election's handover
    /// runs), then its end.
    async fn execute_handover<R>(
        &mut self,
        reason: RevokeReason,
        mut work: Option<JoinHandle<R>>,
    ) -> Result<(), Error> {
        let Some(claim) = self.claim.take() else { return Ok(()) };
        let shared = Arc::clone(&claim.shared);
        let term = self.term.clone();
        let deadline = term.deadline();
        let mut ended = reason;
        let mut result = Ok(());
        // The acquisition's machine as it left it, leading (kept by no guard: P7's memory).
        let mut machine = ElectionMachine::lock_leading(shared.timing);
        let mut commands = machine.hand_over(Instant::now(), reason);
        commands.extend(machine.handed_over(Instant::now(), || 0.0));
        for command in commands {
            match command {
                MachineCommand::Revoke(reason) => {
                    term.revoke(reason);
                    ended = term.revoke_reason().unwrap_or(reason);
                }
                MachineCommand::AwaitTask => {
                    let Some(w) = work.as_mut() else { continue };
                    tokio::select! {
                        _ = &mut *w => {}
                        _ = sleep_until(deadline) => {
                            tracing::warn!(lease = term.name(), token = term.token(), "work under the lock ignored cancellation until the local deadline; aborting it");
                            w.abort();
                        }
                    }
                }
                MachineCommand::Release => result = release_with_token(&shared, &term, ended).await,
                MachineCommand::DeliverRevoked(_) => {
                    shared.forget_held(&term);
                    shared.emit(Event::Revoked { name: term.name().to_owned(), token: term.token(), reason: ended });
                }
                // The name is free again on this client (L4).
                MachineCommand::Stopped => break,
                // The status, callbacks and replies are an election's.
                _ => {}
            }
        }
        drop(claim);
        result
    }
}

/// T7: releases `term`'s lease with its token if the term was handed over (`ended` is
/// `Stopped` or `SteppedDown`); a term lost to the session (deadline, expiry, takeover) is not
/// ours to release. The session's K4 record of the token is written in every case.
async fn release_with_token(shared: &Arc<Shared>, term: &Term, ended: RevokeReason) -> Result<(), Error> {
    let name: Arc<str> = Arc::from(term.name());
    let release = shared.release(term.session(), &name, term.token());
    if !matches!(ended, RevokeReason::Stopped | RevokeReason::SteppedDown) {
        return Ok(());
    }
    match release.await {
        Released::Acknowledged | Released::NotSent => Ok(()),
        Released::Failed(source) => Err(Error::Backend { op: "release", name: Some(term.name().to_owned()), source }),
        Released::TimedOut => {
            tracing::warn!(
                lease = term.name(),
                token = term.token(),
                "release timed out; the lease frees with the session"
            );
            Ok(())
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(claim) = self.claim.take() else { return };
        let shared = Arc::clone(&claim.shared);
        let term = self.term.clone();
        if term.revoke(RevokeReason::Stopped) {
            shared.emit(Event::Revoked {
                name: term.name().to_owned(),
                token: term.token(),
                reason: RevokeReason::Stopped,
            });
            if tokio::runtime::Handle::try_current().is_ok() {
                shared.release_in_background(Arc::clone(term.session()), term.name().into(), term.token());
            }
        }
        shared.forget_held(&term);
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard").field("term", &self.term).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::backend::memory::MemoryBackend;
    use crate::{Simba, SimbaConfig};

    /// P7 (memory per held lease): a held lock is its term, its claim and its place in the
    /// local queue, nothing more. The guard once kept its acquisition's election machine (a
    /// copy of the whole configuration), and P7 went from 747 to 956 bytes per lease; the
    /// release now rebuilds the machine (`ElectionMachine::lock_leading`). This bound fails
    /// if a field that size comes back.
    #[test]
    fn p7_a_held_lock_stays_small() {
        let size = std::mem::size_of::<super::LockGuard>();
        assert!(size <= 80, "a LockGuard is {size} bytes: every held lock pays it (P7)");
        assert!(std::mem::size_of::<simba_core::election::ElectionMachine<tokio::time::Instant>>() > 80);
    }

    /// `lock_queues` shrinks when a name's queue empties,
    /// so a service locking names made on the fly does not grow: after 10,000 distinct names
    /// (released, dropped, timed out while queued) the map is empty.
    #[tokio::test(start_paused = true)]
    async fn issue13_4_lock_queues_shrink() {
        let simba = Simba::new(MemoryBackend::new(), SimbaConfig::default()).expect("client");
        for i in 0..10_000 {
            let lock = simba.lock(format!("q.{i}"));
            let guard = lock.acquire().await.expect("acquire");
            match i % 3 {
                0 => guard.release().await.expect("release"),
                1 => drop(guard),
                _ => {
                    // Another task of this process queues behind the holder and gives up.
                    let waited = simba.lock(format!("q.{i}")).try_acquire(Duration::from_millis(1)).await;
                    assert!(waited.expect("try_acquire").is_none());
                    assert_eq!(simba.shared.lock_state().lock_queues.len(), 1, "the holder's queue stays");
                    drop(guard);
                }
            }
        }
        assert!(simba.shared.lock_state().lock_queues.is_empty(), "lock_queues must shrink");
        // A name is still queued while held and waited for, and the queue still serialises.
        let held = simba.lock("q.again").acquire().await.expect("acquire");
        let other = simba.clone();
        let waiter = tokio::spawn(async move { other.lock("q.again").acquire().await.map(|g| g.term().token()) });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished(), "the second task waits for its turn");
        let first = held.term().token();
        held.release().await.expect("release");
        let second = waiter.await.expect("join").expect("acquire");
        assert!(second > first);
        assert!(simba.shared.lock_state().lock_queues.is_empty());
        simba.close().await;
    }

    /// The session's record of released tokens does not grow with every
    /// name it ever released: an acknowledged release forgets its name (the soak's leak).
    #[tokio::test(start_paused = true)]
    async fn issue16_7_released_token_records_are_pruned() {
        let simba = Simba::new(MemoryBackend::new(), SimbaConfig::default()).expect("client");
        for i in 0..5_000 {
            let guard = simba.lock(format!("k4.{i}")).acquire().await.expect("acquire");
            if i % 2 == 0 { guard.release().await.expect("release") } else { drop(guard) }
        }
        // Dropped guards release in the background.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let cell = simba.shared.current_session().expect("a live session");
        assert_eq!(cell.released_len(), 0, "every release was acknowledged: no K4 record is needed");
        // K4 still holds for a name whose release is not acknowledged yet: the record is
        // written before the release is sent.
        let guard = simba.lock("k4.again").acquire().await.expect("acquire");
        let token = guard.term().token();
        cell.note_released("k4.again", token);
        assert_eq!(cell.max_released("k4.again"), token);
        guard.release().await.expect("release");
        assert_eq!(cell.released_len(), 0);
        let again = simba.lock("k4.again").acquire().await.expect("acquire");
        assert!(again.term().token() > token, "a new term of a released name has a greater token");
        again.release().await.expect("release");
        simba.close().await;
    }
}
