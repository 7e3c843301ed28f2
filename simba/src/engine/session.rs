//! The session actor: the async shell of the core's session machine
//! ([`simba_core::session`]). It opens the client's one session, renews it with one
//! keep-alive per period whatever the number of held leases (S1), keeps the local deadline the
//! machine computes (D1-D5), and ends every term of the session when it ends (S3, D3, T6).

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use simba_core::ledger::{self, HeldTerm};
use simba_core::{Close, Command, SessionMachine};
use tokio::time::{Instant, timeout};
use tracing::Instrument;

use super::{CLOSE_TIMEOUT, Shared};
use crate::backend::{BackendError, KeepAlive, SessionGrant};
use crate::events::{Event, SessionStatus};
use crate::term::SessionCell;
use crate::{RevokeReason, Term};

/// A backend call of the session machine, with its D2 timeout applied.
type Call = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// The answer to a call of the session machine; `Err(timeout)` when none came in time.
enum Reply {
    Open(Result<Result<SessionGrant, BackendError>, Duration>),
    KeepAlive(Instant, Result<Result<KeepAlive, BackendError>, Duration>),
}

/// The session actor: the async shell around [`SessionMachine`]. It executes the machine's
/// commands (the open and keep-alive calls with their timeouts, the session cell that terms
/// read, events, logs, metrics) and feeds the machine the clock and the replies, until the
/// client shuts down.
///
/// Logs of the opening phase carry the span `simba{backend}`; those of each live session a
/// fresh span `simba{backend, session}` with that session's id alone, both children of
/// `parent` (the span current when the client was built).
pub(crate) async fn run(shared: Arc<Shared>, parent: tracing::Span) {
    let backend = shared.backend.describe();
    let opening = tracing::info_span!(parent: &parent, "simba", backend = %backend);
    let mut shell = Shell {
        shared: Arc::clone(&shared),
        parent,
        opening: opening.clone(),
        span: opening,
        cell: None,
        grant: None,
        call: None,
    };
    let mut machine = SessionMachine::new(shared.timing);
    let mut commands = machine.start(Instant::now());
    loop {
        if shell.execute(commands).await {
            break;
        }
        let wake = machine.next_wakeup();
        commands = tokio::select! {
            biased;
            _ = shared.shutdown.cancelled() => machine.shutdown(Instant::now()),
            _ = super::sleep_until_or_never(wake) => machine.tick(Instant::now()),
            reply = shell.reply() => shell.answer(&mut machine, reply),
        };
    }
}

/// What the shell keeps between commands.
struct Shell {
    shared: Arc<Shared>,
    parent: tracing::Span,
    opening: tracing::Span,
    /// The span of the current phase: `opening`, or the live session's.
    span: tracing::Span,
    /// The live session as terms and elections see it.
    cell: Option<Arc<SessionCell>>,
    /// The last session the backend granted, until the machine says what it is.
    grant: Option<SessionGrant>,
    call: Option<Call>,
}

impl Shell {
    /// The reply of the call in flight (never completes while there is none).
    async fn reply(&mut self) -> Reply {
        match self.call.as_mut() {
            Some(call) => {
                let reply = call.await;
                self.call = None;
                reply
            }
            None => std::future::pending().await,
        }
    }

    /// Feeds a reply to the machine.
    fn answer(&mut self, machine: &mut SessionMachine<Instant>, reply: Reply) -> Vec<Command<Instant>> {
        let now = Instant::now();
        match reply {
            Reply::Open(Ok(Ok(grant))) => {
                let granted = grant.remaining;
                self.grant = Some(grant);
                machine.opened(now, granted)
            }
            Reply::Open(failed) => machine.open_failed(now, failure(failed)),
            Reply::KeepAlive(sent_at, Ok(Ok(KeepAlive::Alive { remaining, digest_matches }))) => {
                crate::metrics::renewal(now - sent_at);
                tracing::trace!(took = ?(now - sent_at), ?remaining, digest_matches, "renewed");
                machine.renewed(now, remaining, digest_matches)
            }
            Reply::KeepAlive(_, Ok(Ok(KeepAlive::Expired))) => machine.expired(now),
            Reply::KeepAlive(_, failed) => {
                crate::metrics::renewal_failed();
                machine.renew_failed(now, failure(failed))
            }
        }
    }

    /// Executes `commands` in order; returns whether the actor stops.
    async fn execute(&mut self, commands: Vec<Command<Instant>>) -> bool {
        for command in commands {
            let span = self.span.clone();
            if self.command(command).instrument(span).await {
                return true;
            }
        }
        false
    }

    async fn command(&mut self, command: Command<Instant>) -> bool {
        let shared = &self.shared;
        match command {
            Command::Status(status) => set_status(shared, status),
            Command::OpenSession { lease, timeout } => {
                let backend = Arc::clone(&shared.backend);
                let call = async move { Reply::Open(bounded(timeout, backend.open_session(lease)).await) };
                self.call = Some(Box::pin(call.instrument(self.span.clone())));
            }
            Command::OpenFailed { error, retry_in } => {
                tracing::warn!(backend = %shared.backend.describe(), %error, ?retry_in, "cannot open a session");
                shared.emit(Event::SessionOpenFailed { error });
            }
            Command::DiscardGrant { granted, retry_in } => {
                if let Some(grant) = self.grant.take() {
                    tracing::warn!(session = %grant.id, ?granted, ?retry_in, "session granted too little time to be used (less than the margin after drift); opening another later (raise the server's session cap, or lower `margin`)");
                    close_in_background(shared, grant.id);
                }
            }
            Command::BeginSession { granted, deadline, period, .. } => self.begin(granted, deadline, period),
            Command::Shortened { granted, period } => {
                if let Some(cell) = &self.cell {
                    report_shortened(shared, cell, granted, period);
                }
            }
            Command::KeepAlive { timeout } => self.keep_alive(timeout),
            Command::Extend { deadline, period } => {
                if let Some(cell) = &self.cell {
                    cell.set_period(period);
                    cell.extend(deadline, Instant::now());
                }
            }
            Command::RenewalFailed { error, retry_in } => {
                tracing::warn!(session = %self.session_id(), %error, ?retry_in, "renewal failed");
            }
            Command::Suspended { error } => {
                if let Some(cell) = &self.cell {
                    shared.emit(Event::SessionSuspended { session: cell.id.clone(), error });
                }
            }
            Command::Resumed => {
                if let Some(cell) = &self.cell {
                    tracing::info!(session = %cell.id, "session renewed again");
                    shared.emit(Event::SessionResumed { session: cell.id.clone() });
                }
            }
            Command::Reconcile => {
                if let Some(cell) = self.cell.clone() {
                    reconcile(shared, &cell).await;
                }
            }
            Command::EndSession { reason, close, .. } => self.end(reason, close).await,
            Command::Exit => {
                set_status(shared, SessionStatus::Closed);
                shared.session.send_replace(None);
                shared.emit(Event::Closed);
                return true;
            }
        }
        false
    }

    /// Publishes a freshly opened session as the live one, under a span of its own.
    fn begin(&mut self, granted: Duration, deadline: Instant, period: Duration) {
        let Some(grant) = self.grant.take() else { return };
        let shared = &self.shared;
        let backend = shared.backend.describe();
        self.span = tracing::info_span!(parent: &self.parent, "simba", backend = %backend, session = %grant.id);
        let cell = Arc::new(SessionCell::new(grant.id, deadline, period));
        self.span.in_scope(|| tracing::info!(session = %cell.id, ?granted, "session opened"));
        shared.emit(Event::SessionOpened { session: cell.id.clone(), granted });
        set_status(shared, SessionStatus::Live);
        shared.session.send_replace(Some(Arc::clone(&cell)));
        self.cell = Some(cell);
    }

    /// Sends one keep-alive with the digest of the session's terms (S1).
    fn keep_alive(&mut self, timeout: Duration) {
        let Some(cell) = self.cell.clone() else { return };
        let backend = Arc::clone(&self.shared.backend);
        let digest = self.shared.digest(&cell);
        let sent_at = Instant::now();
        let call =
            async move { Reply::KeepAlive(sent_at, bounded(timeout, backend.keep_alive(&cell.id, digest)).await) };
        self.call = Some(Box::pin(call.instrument(self.span.clone())));
    }

    /// Ends the live session: its call in flight is dropped, its terms revoked, and it is
    /// closed as the machine says.
    async fn end(&mut self, reason: RevokeReason, close: Close) {
        self.call = None;
        let Some(cell) = self.cell.take() else { return };
        end_session(&self.shared, &cell, reason);
        match close {
            Close::Background => close_in_background(&self.shared, cell.id.clone()),
            Close::Await => match timeout(CLOSE_TIMEOUT, self.shared.backend.close_session(&cell.id)).await {
                Ok(Ok(())) => tracing::info!(session = %cell.id, "session closed"),
                Ok(Err(e)) => {
                    tracing::warn!(session = %cell.id, error = %error_chain(&e), "closing the session failed; it expires on its own")
                }
                Err(_) => tracing::warn!(session = %cell.id, "closing the session timed out; it expires on its own"),
            },
            Close::No => {}
        }
        self.span = self.opening.clone();
    }

    fn session_id(&self) -> String {
        self.cell.as_ref().map(|c| c.id.to_string()).unwrap_or_default()
    }
}

/// `call`, given up after `limit` (D2): `Err(limit)` when no answer came in time.
async fn bounded<R>(limit: Duration, call: impl Future<Output = R>) -> Result<R, Duration> {
    timeout(limit, call).await.map_err(|_| limit)
}

/// The text of a failed call.
fn failure<R>(failed: Result<Result<R, BackendError>, Duration>) -> String {
    match failed {
        Ok(Err(e)) => error_chain(&e),
        Err(limit) => format!("no answer within {limit:?}"),
        Ok(Ok(_)) => String::from("unexpected answer"),
    }
}

fn set_status(shared: &Shared, status: SessionStatus) {
    if shared.lock_state().lifecycle.report(status) {
        crate::metrics::session_state(status);
    }
}

fn report_shortened(shared: &Shared, cell: &SessionCell, granted: Duration, period: Duration) {
    tracing::warn!(
        session = %cell.id,
        granted = ?granted,
        lease_duration = ?shared.config.lease_duration(),
        renew_every = ?period,
        "the backend granted a shorter session than lease_duration; renewing every third of the local validity (raise the server's session cap, e.g. ZooKeeper maxSessionTimeout)"
    );
    shared.emit(Event::SessionLeaseShortened { session: cell.id.clone(), granted, renew_every: period });
}

/// Ends `cell`: freezes its deadline and revokes every term it held with `reason`, under the
/// state lock so that no election adopts a term of this session afterwards.
fn end_session(shared: &Shared, cell: &Arc<SessionCell>, reason: RevokeReason) {
    let lost = {
        let mut st = shared.lock_state();
        cell.end(Instant::now());
        let names: Vec<_> =
            st.held.iter().filter(|(_, t)| Arc::ptr_eq(t.session(), cell)).map(|(n, _)| n.clone()).collect();
        names.into_iter().filter_map(|n| st.held.remove(&n)).collect::<Vec<_>>()
    };
    shared.session.send_if_modified(|s| {
        if s.as_ref().is_some_and(|c| Arc::ptr_eq(c, cell)) {
            *s = None;
            true
        } else {
            false
        }
    });
    for term in &lost {
        term.revoke(reason);
    }
    if reason == RevokeReason::Stopped {
        tracing::info!(session = %cell.id, terms = lost.len(), "session ended");
    } else {
        tracing::warn!(session = %cell.id, %reason, terms = lost.len(), "session ended");
    }
    shared.emit(Event::SessionEnded { session: cell.id.clone(), reason });
}

/// A keep-alive digest did not match: ask the backend what the session owns. Held terms it
/// no longer lists were taken over (T6); leases it lists that no term or acquisition knows
/// are orphans of abandoned attempts, released with their token (K4). Only the terms held
/// when the listing is asked for are judged by it: a term adopted while it is under way may
/// be missing from it, and revoking it would let the election win the same token again as a
/// new term (T2, T3).
async fn reconcile(shared: &Arc<Shared>, cell: &Arc<SessionCell>) {
    let covered: HashSet<(Arc<str>, u64)> = {
        let st = shared.lock_state();
        st.held
            .iter()
            .filter(|(_, t)| Arc::ptr_eq(t.session(), cell))
            .map(|(n, t)| (Arc::clone(n), t.token()))
            .collect()
    };
    let owned = match timeout(cell.call_timeout(Instant::now()), shared.backend.owned(&cell.id)).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => {
            tracing::warn!(session = %cell.id, error = %error_chain(&e), "listing owned leases failed; will check again at the next renewal");
            return;
        }
        Err(_) => {
            tracing::warn!(session = %cell.id, "listing owned leases timed out; will check again at the next renewal");
            return;
        }
    };
    let (taken, orphans) = {
        let mut st = shared.lock_state();
        let asked: HashSet<(&str, u64)> = covered.iter().map(|(n, t)| (&**n, *t)).collect();
        let terms: Vec<Term> = st.held.values().filter(|t| Arc::ptr_eq(t.session(), cell)).cloned().collect();
        let held: Vec<HeldTerm<'_>> = terms
            .iter()
            .map(|t| HeldTerm { name: t.name(), token: t.token(), revoked: t.revoke_reason().is_some() })
            .collect();
        let judged = ledger::reconcile(&asked, &held, &owned, |n| st.held.contains_key(n) || st.inflight.contains(n));
        let taken: Vec<Term> = judged.taken.iter().filter_map(|n| st.held.remove(*n)).collect();
        (taken, judged.orphans)
    };
    for term in taken {
        tracing::warn!(session = %cell.id, lease = term.name(), token = term.token(), "lease taken over");
        term.revoke(RevokeReason::TakenOver);
    }
    for (name, token) in orphans {
        tracing::info!(session = %cell.id, lease = %name, token, "releasing a lease won by an abandoned attempt");
        shared.release_in_background(Arc::clone(cell), name.into(), token);
    }
}

fn close_in_background(shared: &Arc<Shared>, id: crate::backend::SessionId) {
    let backend = Arc::clone(&shared.backend);
    tokio::spawn(async move {
        if let Ok(Err(e)) = timeout(CLOSE_TIMEOUT, backend.close_session(&id)).await {
            tracing::debug!(session = %id, error = %error_chain(&e), "closing an ended session failed");
        }
    });
}

/// An error and its sources on one line.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}
