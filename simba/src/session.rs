//! The session actor: opens the client's one session, renews it with one keep-alive per
//! period whatever the number of held leases (S1), keeps the local deadline (D1-D5), and ends
//! every term of the session when it ends (S3, D3, T6).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, sleep, sleep_until, timeout};
use tracing::Instrument;

use crate::RevokeReason;
use crate::backend::{BackendError, KeepAlive, SessionGrant};
use crate::client::{CLOSE_TIMEOUT, Shared};
use crate::events::{Event, SessionStatus};
use crate::term::SessionCell;

/// How a live session stopped.
enum Ended {
    Lost(RevokeReason),
    Shutdown,
}

/// A session the backend opened: what it granted and when the request was sent (D1).
struct Opened {
    grant: SessionGrant,
    sent_at: Instant,
}

/// The session actor: opens a session, keeps it until it ends, and opens the next one until
/// the client shuts down.
///
/// Logs of the opening phase carry the span `simba{backend}`; those of each live session a
/// fresh span `simba{backend, session}` with that session's id alone, both children of
/// `parent` (the span current when the client was built).
pub(crate) async fn run(shared: Arc<Shared>, parent: tracing::Span) {
    let backend = shared.backend.describe();
    let opening = tracing::info_span!(parent: &parent, "simba", backend = %backend);
    let mut open_backoff = shared.timing.config.min_backoff();
    loop {
        let Some(opened) = open(&shared, &mut open_backoff).instrument(opening.clone()).await else { break };
        let span = tracing::info_span!(parent: &parent, "simba", backend = %backend, session = %opened.grant.id);
        let stop = async {
            let cell = start_session(&shared, &opened);
            let ended = keep(&shared, &cell, opened.sent_at, opened.grant.remaining).await;
            finish_session(&shared, &cell, ended).await
        };
        if stop.instrument(span).await {
            break;
        }
    }
    set_status(&shared, SessionStatus::Closed);
    shared.session.send_replace(None);
    shared.emit(Event::Closed);
}

/// Opens a session whose grant can be used, retrying with a doubling backoff (capped at
/// `renew_interval`) after a failure and after a grant too short to be used, so a backend
/// that grants less than the margin is not asked again in a loop. `None` on shutdown.
async fn open(shared: &Arc<Shared>, open_backoff: &mut Duration) -> Option<Opened> {
    let t = shared.timing;
    loop {
        if shared.shutdown.is_cancelled() {
            return None;
        }
        set_status(shared, SessionStatus::Opening);
        let sent_at = Instant::now();
        let reply = tokio::select! {
            biased;
            _ = shared.shutdown.cancelled() => return None,
            r = timeout(t.config.renew_interval(), shared.backend.open_session(t.config.lease_duration())) => r,
        };
        match reply {
            Ok(Ok(grant)) if t.deadline(sent_at, grant.remaining) > Instant::now() => {
                *open_backoff = t.config.min_backoff();
                return Some(Opened { grant, sent_at });
            }
            Ok(Ok(grant)) => {
                tracing::warn!(session = %grant.id, granted = ?grant.remaining, retry_in = ?*open_backoff, "session granted too little time to be used (less than the margin after drift); opening another later (raise the server's session cap, or lower `margin`)");
                close_in_background(shared, grant.id);
            }
            failed => {
                let error = match failed {
                    Ok(Err(e)) => error_chain(&e),
                    _ => format!("no answer within {:?}", t.config.renew_interval()),
                };
                tracing::warn!(backend = %shared.backend.describe(), %error, retry_in = ?*open_backoff, "cannot open a session");
                shared.emit(Event::SessionOpenFailed { error });
            }
        }
        tokio::select! {
            _ = shared.shutdown.cancelled() => return None,
            _ = sleep(*open_backoff) => {}
        }
        *open_backoff = (*open_backoff * 2).min(t.config.renew_interval());
    }
}

/// Publishes a freshly opened session as the live one.
fn start_session(shared: &Shared, opened: &Opened) -> Arc<SessionCell> {
    let t = shared.timing;
    let grant = &opened.grant;
    let plan = t.renew_plan(grant.remaining);
    let cell = Arc::new(SessionCell::new(grant.id.clone(), t.deadline(opened.sent_at, grant.remaining), plan.period));
    tracing::info!(session = %cell.id, granted = ?grant.remaining, "session opened");
    shared.emit(Event::SessionOpened { session: cell.id.clone(), granted: grant.remaining });
    set_status(shared, SessionStatus::Live);
    shared.session.send_replace(Some(Arc::clone(&cell)));
    cell
}

/// Renews `cell` once per period (S1) until it ends: D1 deadlines from each send, D2 call
/// timeouts from the current period, D3 no revival, D4 a shortened period, D5 backoff.
async fn keep(shared: &Arc<Shared>, cell: &Arc<SessionCell>, opened_at: Instant, granted: Duration) -> Ended {
    let t = shared.timing;
    let mut shortened_reported = false;
    let mut next = renewed(shared, cell, opened_at, granted, &mut shortened_reported);
    let mut suspended = false;
    loop {
        tokio::select! {
            biased;
            _ = shared.shutdown.cancelled() => return Ended::Shutdown,
            _ = sleep_until(cell.deadline()) => return Ended::Lost(RevokeReason::DeadlinePassed),
            _ = sleep_until(next) => {}
        }
        let sent_at = Instant::now();
        let digest = shared.digest(cell);
        let call_timeout = cell.call_timeout(sent_at);
        let reply = tokio::select! {
            biased;
            _ = shared.shutdown.cancelled() => return Ended::Shutdown,
            _ = sleep_until(cell.deadline()) => return Ended::Lost(RevokeReason::DeadlinePassed),
            r = timeout(call_timeout, shared.backend.keep_alive(&cell.id, digest)) => r,
        };
        let now = Instant::now();
        match reply {
            Ok(Ok(KeepAlive::Alive { remaining, digest_matches })) => {
                crate::metrics::renewal(now - sent_at);
                // D1 from `sent_at`; D3: refused once the deadline passed.
                if !cell.extend(t.deadline(sent_at, remaining), now) {
                    return Ended::Lost(RevokeReason::DeadlinePassed);
                }
                next = renewed(shared, cell, sent_at, remaining, &mut shortened_reported);
                if suspended {
                    suspended = false;
                    tracing::info!(session = %cell.id, "session renewed again");
                    shared.emit(Event::SessionResumed { session: cell.id.clone() });
                    set_status(shared, SessionStatus::Live);
                }
                if !digest_matches {
                    reconcile(shared, cell).await;
                }
            }
            Ok(Ok(KeepAlive::Expired)) => return Ended::Lost(RevokeReason::SessionExpired),
            failed => {
                let error = match failed {
                    Ok(Err(e)) => error_chain(&e),
                    _ => format!("no answer within {call_timeout:?}"),
                };
                let backoff = t.backoff(now, cell.deadline());
                crate::metrics::renewal_failed();
                tracing::warn!(session = %cell.id, %error, retry_in = ?backoff, "renewal failed");
                if !suspended {
                    suspended = true;
                    set_status(shared, SessionStatus::Suspended);
                    shared.emit(Event::SessionSuspended { session: cell.id.clone(), error });
                }
                next = now + backoff;
            }
        }
    }
}

/// A grant of `remaining` arrived for a request sent at `sent_at`: sets the renewal period
/// (D4; every D2 timeout follows it), reports a shortened grant once per session, and
/// returns when to renew next.
fn renewed(shared: &Shared, cell: &SessionCell, sent_at: Instant, remaining: Duration, reported: &mut bool) -> Instant {
    let plan = shared.timing.renew_plan(remaining);
    cell.set_period(plan.period);
    if plan.shortened && !*reported {
        report_shortened(shared, cell, remaining, plan.period);
        *reported = true;
    }
    sent_at + plan.period
}

/// Ends a session that stopped; returns whether the actor stops too (shutdown).
async fn finish_session(shared: &Arc<Shared>, cell: &Arc<SessionCell>, ended: Ended) -> bool {
    match ended {
        Ended::Lost(reason) => {
            end_session(shared, cell, reason);
            if reason != RevokeReason::SessionExpired {
                // The backend may still list the session: close it so that its leases
                // go to others now rather than at its expiry.
                close_in_background(shared, cell.id.clone());
            }
            false
        }
        Ended::Shutdown => {
            end_session(shared, cell, RevokeReason::Stopped);
            match timeout(CLOSE_TIMEOUT, shared.backend.close_session(&cell.id)).await {
                Ok(Ok(())) => tracing::info!(session = %cell.id, "session closed"),
                Ok(Err(e)) => {
                    tracing::warn!(session = %cell.id, error = %error_chain(&e), "closing the session failed; it expires on its own")
                }
                Err(_) => {
                    tracing::warn!(session = %cell.id, "closing the session timed out; it expires on its own")
                }
            }
            true
        }
    }
}

fn set_status(shared: &Shared, status: SessionStatus) {
    let mut st = shared.lock_state();
    if st.status != Some(SessionStatus::Closed) {
        st.status = Some(status);
        crate::metrics::session_state(status);
    }
}

fn report_shortened(shared: &Shared, cell: &SessionCell, granted: Duration, period: Duration) {
    tracing::warn!(
        session = %cell.id,
        granted = ?granted,
        lease_duration = ?shared.timing.config.lease_duration(),
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
    let owned_set: HashSet<(&str, u64)> = owned.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    let (taken, orphans) = {
        let mut st = shared.lock_state();
        let taken_names: Vec<_> = st
            .held
            .iter()
            .filter(|(_, t)| Arc::ptr_eq(t.session(), cell) && t.revoke_reason().is_none())
            .filter(|(n, t)| covered.contains(&(Arc::clone(n), t.token())))
            .filter(|(n, t)| !owned_set.contains(&(&***n, t.token())))
            .map(|(n, _)| n.clone())
            .collect();
        let taken: Vec<_> = taken_names.iter().filter_map(|n| st.held.remove(n)).collect();
        let orphans: Vec<(String, u64)> = owned
            .iter()
            .filter(|(n, _)| !st.held.contains_key(n.as_str()) && !st.inflight.contains(n.as_str()))
            .cloned()
            .collect();
        (taken, orphans)
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
pub(crate) fn error_chain(e: &BackendError) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}
