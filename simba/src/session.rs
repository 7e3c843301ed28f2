//! The session actor: opens the client's one session, renews it with one keep-alive per
//! period whatever the number of held leases (S1), keeps the local deadline (D1-D5), and ends
//! every term of the session when it ends (S3, D3, T6).

use std::collections::HashSet;
use std::sync::Arc;

use tokio::time::{Instant, sleep, sleep_until, timeout};

use crate::RevokeReason;
use crate::backend::{BackendError, KeepAlive};
use crate::client::{CLOSE_TIMEOUT, Shared};
use crate::events::{Event, SessionStatus};
use crate::term::SessionCell;

/// How a live session stopped.
enum Ended {
    Lost(RevokeReason),
    Shutdown,
}

pub(crate) async fn run(shared: Arc<Shared>) {
    let t = shared.timing;
    let mut open_backoff = t.config.min_backoff();
    loop {
        if shared.shutdown.is_cancelled() {
            break;
        }
        set_status(&shared, SessionStatus::Opening);
        let sent_at = Instant::now();
        let ttl = t.config.lease_duration();
        let opened = tokio::select! {
            biased;
            _ = shared.shutdown.cancelled() => break,
            r = timeout(t.config.renew_interval(), shared.backend.open_session(ttl)) => r,
        };
        let grant = match opened {
            Ok(Ok(g)) => g,
            failed => {
                let error = match failed {
                    Ok(Err(e)) => error_chain(&e),
                    _ => format!("no answer within {:?}", t.config.renew_interval()),
                };
                tracing::warn!(backend = %shared.backend.describe(), %error, retry_in = ?open_backoff, "cannot open a session");
                shared.emit(Event::SessionOpenFailed { error });
                tokio::select! {
                    _ = shared.shutdown.cancelled() => break,
                    _ = sleep(open_backoff) => {}
                }
                open_backoff = (open_backoff * 2).min(t.config.renew_interval());
                continue;
            }
        };
        open_backoff = t.config.min_backoff();
        let now = Instant::now();
        let deadline = t.deadline(sent_at, grant.remaining);
        if deadline <= now {
            tracing::warn!(session = %grant.id, granted = ?grant.remaining, "session granted too little time to be used; opening another");
            close_in_background(&shared, grant.id.clone());
            continue;
        }
        let cell = Arc::new(SessionCell::new(grant.id.clone(), deadline));
        let mut plan = t.renew_plan(grant.remaining);
        tracing::info!(session = %cell.id, granted = ?grant.remaining, "session opened");
        shared.emit(Event::SessionOpened { session: cell.id.clone(), granted: grant.remaining });
        let mut shortened_reported = false;
        if plan.shortened {
            report_shortened(&shared, &cell, grant.remaining, plan.period);
            shortened_reported = true;
        }
        set_status(&shared, SessionStatus::Live);
        shared.session.send_replace(Some(Arc::clone(&cell)));

        let mut next = sent_at + plan.period;
        let mut suspended = false;
        let ended = loop {
            tokio::select! {
                biased;
                _ = shared.shutdown.cancelled() => break Ended::Shutdown,
                _ = sleep_until(cell.deadline()) => break Ended::Lost(RevokeReason::DeadlinePassed),
                _ = sleep_until(next) => {}
            }
            let sent_at = Instant::now();
            let digest = shared.digest(&cell);
            let call_timeout = t.call_timeout(plan.period, sent_at, Some(cell.deadline()));
            let reply = tokio::select! {
                biased;
                _ = shared.shutdown.cancelled() => break Ended::Shutdown,
                _ = sleep_until(cell.deadline()) => break Ended::Lost(RevokeReason::DeadlinePassed),
                r = timeout(call_timeout, shared.backend.keep_alive(&cell.id, digest)) => r,
            };
            let now = Instant::now();
            match reply {
                Ok(Ok(KeepAlive::Alive { remaining, digest_matches })) => {
                    // D1 from `sent_at`; D3: refused once the deadline passed.
                    if !cell.extend(t.deadline(sent_at, remaining), now) {
                        break Ended::Lost(RevokeReason::DeadlinePassed);
                    }
                    plan = t.renew_plan(remaining);
                    if plan.shortened && !shortened_reported {
                        report_shortened(&shared, &cell, remaining, plan.period);
                        shortened_reported = true;
                    }
                    next = sent_at + plan.period;
                    if suspended {
                        suspended = false;
                        tracing::info!(session = %cell.id, "session renewed again");
                        shared.emit(Event::SessionResumed { session: cell.id.clone() });
                        set_status(&shared, SessionStatus::Live);
                    }
                    if !digest_matches {
                        reconcile(&shared, &cell, plan.period).await;
                    }
                }
                Ok(Ok(KeepAlive::Expired)) => break Ended::Lost(RevokeReason::SessionExpired),
                failed => {
                    let error = match failed {
                        Ok(Err(e)) => error_chain(&e),
                        _ => format!("no answer within {call_timeout:?}"),
                    };
                    let backoff = t.backoff(now, cell.deadline());
                    tracing::warn!(session = %cell.id, %error, retry_in = ?backoff, "renewal failed");
                    if !suspended {
                        suspended = true;
                        set_status(&shared, SessionStatus::Suspended);
                        shared.emit(Event::SessionSuspended { session: cell.id.clone(), error });
                    }
                    next = now + backoff;
                }
            }
        };
        match ended {
            Ended::Lost(reason) => {
                end_session(&shared, &cell, reason);
                if reason != RevokeReason::SessionExpired {
                    // The backend may still list the session: close it so that its leases
                    // go to others now rather than at its expiry.
                    close_in_background(&shared, cell.id.clone());
                }
            }
            Ended::Shutdown => {
                end_session(&shared, &cell, RevokeReason::Stopped);
                match timeout(CLOSE_TIMEOUT, shared.backend.close_session(&cell.id)).await {
                    Ok(Ok(())) => tracing::info!(session = %cell.id, "session closed"),
                    Ok(Err(e)) => {
                        tracing::warn!(session = %cell.id, error = %error_chain(&e), "closing the session failed; it expires on its own")
                    }
                    Err(_) => {
                        tracing::warn!(session = %cell.id, "closing the session timed out; it expires on its own")
                    }
                }
                break;
            }
        }
    }
    set_status(&shared, SessionStatus::Closed);
    shared.session.send_replace(None);
    shared.emit(Event::Closed);
}

fn set_status(shared: &Shared, status: SessionStatus) {
    let mut st = shared.lock_state();
    if st.status != Some(SessionStatus::Closed) {
        st.status = Some(status);
    }
}

fn report_shortened(shared: &Shared, cell: &SessionCell, granted: std::time::Duration, period: std::time::Duration) {
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
/// are orphans of abandoned attempts, released with their token (K4).
async fn reconcile(shared: &Arc<Shared>, cell: &Arc<SessionCell>, period: std::time::Duration) {
    let asked_at = Instant::now();
    let call_timeout = shared.timing.call_timeout(period, asked_at, Some(cell.deadline()));
    let owned = match timeout(call_timeout, shared.backend.owned(&cell.id)).await {
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
            // A term that started after the list was asked for may be missing from it only
            // because the list is older than the term: not a takeover.
            .filter(|(_, t)| t.started_at() < asked_at)
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
