//! Terms: one period during which this node owns a lease (rules T2 to T7).

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use simba_core::ledger::ReleasedTokens;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::Error;
use crate::backend::SessionId;

pub use simba_core::RevokeReason;

/// One session instance as the engine tracks it: its id, its local deadline and renewal
/// period as published to other tasks, and its K4 record of released tokens.
///
/// The session machine ([`simba_core::SessionMachine`]) owns the deadline and the period: it
/// alone computes them (D1, D4) and decides when the session ends (D3, S3). The cell is their
/// published copy, the one that terms, elections and call timeouts read from any task without
/// asking the session actor; only that actor writes it, from the machine's `BeginSession`,
/// `Extend` and `EndSession` commands. Publishing an `Extend` applies the machine's D3 rule
/// ([`simba_core::session::advance_deadline`]) once more against the readers' clock, so a
/// reader that saw the deadline pass never sees it revived; after the session ended the
/// deadline is frozen, so every term of this session stays ended (rule T4).
pub(crate) struct SessionCell {
    pub(crate) id: SessionId,
    deadline: Mutex<Instant>,
    /// The current renewal period: `renew_interval`, or less when the backend shortened the
    /// grant (D4). Every D2 timeout follows it.
    period: Mutex<Duration>,
    ended: AtomicBool,
    /// The K4 record: the highest token this session released per lease name, while it
    /// matters (`ReleasedTokens`).
    released: Mutex<ReleasedTokens>,
}

impl SessionCell {
    pub(crate) fn new(id: SessionId, deadline: Instant, period: Duration) -> Self {
        SessionCell {
            id,
            deadline: Mutex::new(deadline),
            period: Mutex::new(period),
            ended: AtomicBool::new(false),
            released: Mutex::default(),
        }
    }

    /// The current renewal period (D4).
    pub(crate) fn period(&self) -> Duration {
        *self.period.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the renewal period after a grant (D4).
    pub(crate) fn set_period(&self, period: Duration) {
        *self.period.lock().unwrap_or_else(PoisonError::into_inner) = period;
    }

    /// D2, the one place it is applied: a backend call made for this session at `now` times
    /// out after the CURRENT renewal period (shortened by D4 when the backend granted less),
    /// and never later than the session's local deadline.
    pub(crate) fn call_timeout(&self, now: Instant) -> Duration {
        simba_core::call_timeout(self.period(), now, self.deadline())
    }

    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the session is still live at `now` on the local clock.
    pub(crate) fn is_live_at(&self, now: Instant) -> bool {
        !self.ended.load(Ordering::Acquire) && now < self.deadline()
    }

    /// Publishes the machine's deadline `new` if the session is still live at `now`, by the
    /// machine's own D3 rule (a late reply never revives a passed deadline, and the deadline
    /// never moves back). Returns whether the session is still live.
    pub(crate) fn extend(&self, new: Instant, now: Instant) -> bool {
        let mut d = self.deadline.lock().unwrap_or_else(PoisonError::into_inner);
        if self.ended.load(Ordering::Acquire) {
            return false;
        }
        match simba_core::session::advance_deadline(*d, new, now) {
            Some(advanced) => {
                *d = advanced;
                true
            }
            None => false,
        }
    }

    /// Ends the session at `now`: its deadline is frozen at or before `now`.
    pub(crate) fn end(&self, now: Instant) {
        let mut d = self.deadline.lock().unwrap_or_else(PoisonError::into_inner);
        self.ended.store(true, Ordering::Release);
        if *d > now {
            *d = now;
        }
    }

    fn released(&self) -> std::sync::MutexGuard<'_, ReleasedTokens> {
        self.released.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that this session released (or is releasing) `name` with `token` (K4).
    pub(crate) fn note_released(&self, name: &str, token: u64) {
        self.released().note_released(name, token);
    }

    /// The highest token this session released for `name` while it still matters (K4).
    pub(crate) fn max_released(&self, name: &str) -> u64 {
        self.released().max_released(name)
    }

    /// The backend answered a release of `name` with `token` (K4 pruning; see
    /// [`ReleasedTokens::release_acknowledged`]). `in_flight` is read under the client's state
    /// lock, where attempts enter and leave `inflight` (K3).
    pub(crate) fn release_acknowledged(&self, name: &str, token: u64, in_flight: bool) {
        self.released().release_acknowledged(name, token, in_flight);
    }

    /// The acquisition of `name` in flight ended; called under the client's state lock, where
    /// the attempt leaves `inflight`.
    pub(crate) fn attempt_ended(&self, name: &str) {
        self.released().attempt_ended(name);
    }

    /// How many names this session keeps a K4 record for (tests).
    #[cfg(test)]
    pub(crate) fn released_len(&self) -> usize {
        self.released().len()
    }
}

static NEXT_TERM_ID: AtomicU64 = AtomicU64::new(1);

/// One period during which this node owns a lease (rule T2).
///
/// A `Term` is cheap to clone; clones are the same term. Winning the same name twice gives two
/// different terms, which compare unequal.
///
/// Validity is a pure function of the monotonic clock and the session's local deadline
/// (rule T4): no watchdog has to run first, so a process waking from a long pause reads
/// `is_valid() == false` at once, and an ended term never becomes valid again.
///
/// Validity only hints when to start a step. It never proves that nobody else owns the
/// lease: send [`token()`](Term::token) with every write, and let the resource refuse stale
/// tokens (rule F1).
#[derive(Clone)]
pub struct Term {
    inner: Arc<TermInner>,
}

struct TermInner {
    id: u64,
    name: Arc<str>,
    token: u64,
    session: Arc<SessionCell>,
    started_at: Instant,
    revoked: watch::Sender<Option<RevokeReason>>,
    /// When the term was revoked, on the local monotonic clock: set once, before the
    /// revocation is visible to `revoked()` waiters.
    ended_at: std::sync::OnceLock<Instant>,
    /// Cancelled with the revocation, for code that speaks `CancellationToken`.
    cancel: tokio_util::sync::CancellationToken,
    /// The labels of its `simba_terms_*` counters (rule O4).
    metric: crate::metrics::LeaseLabel,
}

impl Term {
    #[cfg(test)]
    pub(crate) fn new(name: Arc<str>, token: u64, session: Arc<SessionCell>, now: Instant) -> Self {
        Term::labelled(name, token, session, now, crate::metrics::LeaseLabel::default())
    }

    /// A term counted under `metric` (rule O4).
    pub(crate) fn labelled(
        name: Arc<str>,
        token: u64,
        session: Arc<SessionCell>,
        now: Instant,
        metric: crate::metrics::LeaseLabel,
    ) -> Self {
        let (revoked, _) = watch::channel(None);
        crate::metrics::term_gained(&metric);
        Term {
            inner: Arc::new(TermInner {
                id: NEXT_TERM_ID.fetch_add(1, Ordering::Relaxed),
                name,
                token,
                session,
                started_at: now,
                revoked,
                ended_at: std::sync::OnceLock::new(),
                cancel: tokio_util::sync::CancellationToken::new(),
                metric,
            }),
        }
    }

    /// The lease name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The fencing token (rule T3): greater than zero, constant during the term, strictly
    /// increasing between terms of the same name and never reset. Send it with every write
    /// to the resource this term protects.
    pub fn token(&self) -> u64 {
        self.inner.token
    }

    /// The session that holds this term.
    pub fn session_id(&self) -> &SessionId {
        &self.inner.session.id
    }

    /// When the term started, on the local monotonic clock.
    pub fn started_at(&self) -> Instant {
        self.inner.started_at
    }

    /// Whether the term is still valid: not revoked and the session's local deadline has not
    /// passed (rule T4).
    pub fn is_valid(&self) -> bool {
        self.is_valid_at(Instant::now())
    }

    pub(crate) fn is_valid_at(&self, now: Instant) -> bool {
        self.inner.revoked.borrow().is_none() && self.inner.session.is_live_at(now)
    }

    /// The latest instant at which the term can still be valid unless a renewal moves it:
    /// the session's local deadline while the term lasts. Once the term ended it is frozen at
    /// the earlier of the revocation instant and the session's deadline, so a revoked term
    /// never reports validity that a later renewal of its session gave (T4).
    pub fn deadline(&self) -> Instant {
        let session = self.inner.session.deadline();
        match self.inner.ended_at.get() {
            Some(&ended) => ended.min(session),
            None => session,
        }
    }

    /// How long one backend call made for this term may take: the session's current renewal
    /// period (rule D2), shorter when the backend granted a shorter session (D4). Bound a
    /// fenced write to the store by it, so that a call that hangs cannot outlive the term.
    pub fn call_timeout(&self) -> Duration {
        self.inner.session.call_timeout(Instant::now())
    }

    /// Time until the session's local deadline; `Duration::ZERO` once the term ended (T4).
    pub fn remaining(&self) -> Duration {
        let now = Instant::now();
        if !self.is_valid_at(now) {
            return Duration::ZERO;
        }
        self.inner.session.deadline().saturating_duration_since(now)
    }

    /// Fails with [`Error::TermExpired`] unless the term stays valid for more than
    /// `min_remaining` (rule T5). Call it before a step that must not start when the term is
    /// about to end, with the step's expected duration.
    ///
    /// This narrows the window in which a stale holder starts new work; it cannot close it.
    /// A pause can still happen after the check, which is why the resource must check the
    /// token.
    pub fn ensure_valid(&self, min_remaining: Duration) -> Result<(), Error> {
        if self.remaining() > min_remaining {
            Ok(())
        } else {
            Err(Error::TermExpired { name: self.name().to_owned(), token: self.token(), min_remaining })
        }
    }

    /// The reason the term ended, if it has.
    pub fn revoke_reason(&self) -> Option<RevokeReason> {
        *self.inner.revoked.borrow()
    }

    /// Completes exactly once, when the term ends, with its reason (rule T6). Every call
    /// returns the same reason.
    pub async fn revoked(&self) -> RevokeReason {
        let mut rx = self.inner.revoked.subscribe();
        loop {
            if let Some(r) = *rx.borrow_and_update() {
                return r;
            }
            // The sender lives in `self`, so the channel cannot close while we wait.
            if rx.changed().await.is_err() {
                return RevokeReason::Stopped;
            }
        }
    }

    /// Completes when the term ends: the task's cancellation signal (rule H5). A leader task
    /// should stop its work when this completes; one that ignores it is aborted when the
    /// session's local deadline passes.
    pub async fn cancelled(&self) {
        self.revoked().await;
    }

    /// A [`CancellationToken`](tokio_util::sync::CancellationToken) cancelled when the term
    /// ends, as [`cancelled`](Term::cancelled) completes (rule H5), for code that already
    /// takes one (a `select!` over several, `run_until_cancelled`, a library's shutdown
    /// argument). It is a child of the term's own token: cancelling it ends nothing but what
    /// it was handed to; only the engine ends a term.
    pub fn cancellation_token(&self) -> tokio_util::sync::CancellationToken {
        self.inner.cancel.child_token()
    }

    /// Ends the term with `reason` unless it already ended. Returns whether this call ended
    /// it.
    pub(crate) fn revoke(&self, reason: RevokeReason) -> bool {
        let now = Instant::now();
        let first = self.inner.revoked.send_if_modified(|r| {
            if r.is_none() {
                let _ = self.inner.ended_at.set(now);
                *r = Some(reason);
                true
            } else {
                false
            }
        });
        if first {
            self.inner.cancel.cancel();
            crate::metrics::term_lost(&self.inner.metric, reason);
        }
        first
    }

    pub(crate) fn session(&self) -> &Arc<SessionCell> {
        &self.inner.session
    }

    /// The lease name, shared (a release names it without a copy).
    pub(crate) fn lease(&self) -> &Arc<str> {
        &self.inner.name
    }
}

impl PartialEq for Term {
    fn eq(&self, other: &Self) -> bool {
        self.inner.id == other.inner.id
    }
}

impl Eq for Term {}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Term")
            .field("name", &self.name())
            .field("token", &self.token())
            .field("session", &self.inner.session.id)
            .field("valid", &self.is_valid())
            .field("revoked", &self.revoke_reason())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell() -> SessionCell {
        let now = Instant::now();
        SessionCell::new(SessionId::new("s1"), now + Duration::from_secs(10), Duration::from_secs(1))
    }

    /// T4: once revoked, a term's deadline is frozen at its revocation instant, while its
    /// session goes on renewing (a step-down, a `TakenOver`): it never reports validity the
    /// session gained after the term ended. Before the revocation it follows the session.
    #[tokio::test(start_paused = true)]
    async fn t4_a_revoked_terms_deadline_is_its_end() {
        let c = Arc::new(cell());
        let start = Instant::now();
        let term = Term::new("a".into(), 1, Arc::clone(&c), start);
        assert_eq!(term.deadline(), start + Duration::from_secs(10));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(c.extend(start + Duration::from_secs(12), Instant::now()));
        assert_eq!(term.deadline(), start + Duration::from_secs(12), "a live term follows its session");
        let revoked_at = Instant::now();
        assert!(term.revoke(RevokeReason::SteppedDown));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(c.extend(start + Duration::from_secs(20), Instant::now()));
        assert_eq!(term.deadline(), revoked_at, "the session renewed, the revoked term did not");
        assert!(!term.revoke(RevokeReason::TakenOver));
        assert_eq!(term.deadline(), revoked_at);
        assert_eq!(term.remaining(), Duration::ZERO);
        // A session that ended before the term's revocation keeps the earlier instant.
        let c2 = Arc::new(cell());
        let t2 = Term::new("b".into(), 2, Arc::clone(&c2), Instant::now());
        c2.end(Instant::now());
        let ended = c2.deadline();
        tokio::time::advance(Duration::from_secs(1)).await;
        t2.revoke(RevokeReason::DeadlinePassed);
        assert_eq!(t2.deadline(), ended);
    }

    /// H5: the term's cancellation token fires when the term ends, with `cancelled()`, and
    /// cancelling a handed-out token ends nothing.
    #[tokio::test(start_paused = true)]
    async fn h5_the_terms_cancellation_token_fires_when_it_ends() {
        let term = Term::new("a".into(), 1, Arc::new(cell()), Instant::now());
        let (token, other) = (term.cancellation_token(), term.cancellation_token());
        other.cancel();
        assert!(!token.is_cancelled() && term.is_valid(), "a child's cancel ends neither the term nor its siblings");
        let waiter = tokio::spawn({
            let token = token.clone();
            async move { token.cancelled().await }
        });
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished());
        assert!(term.revoke(RevokeReason::SteppedDown));
        assert!(token.is_cancelled());
        assert!(tokio::time::timeout(Duration::from_secs(1), waiter).await.is_ok_and(|r| r.is_ok()));
        assert!(term.cancellation_token().is_cancelled(), "a token taken after the end is cancelled");
    }
}
