//! Acquisitions in flight (rules K3, K4): one per name at a time, abandoned safely.

use std::future::Future;
use std::sync::Arc;

use simba_core::attempt::AttemptSlot;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::Shared;
use crate::backend::{Acquire, BackendResult};
use crate::term::SessionCell;

/// An acquisition in flight, as the election or the lock sees it: a future of its result.
/// Dropping it before the result was taken abandons the attempt (see [`abandon`]), so that a
/// caller that gives up (a stop, a step-down, a dropped `lock()` future) never leaves the
/// name marked in flight for good.
pub(crate) struct Attempt {
    rx: oneshot::Receiver<BackendResult<Acquire>>,
    shared: Arc<Shared>,
    cell: Arc<SessionCell>,
    name: Arc<str>,
    taken: bool,
}

impl Future for Attempt {
    type Output = Result<BackendResult<Acquire>, oneshot::error::RecvError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let r = std::task::ready!(std::pin::Pin::new(&mut self.rx).poll(cx));
        self.taken = true;
        std::task::Poll::Ready(r)
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        self.rx.close();
        // A result that already arrived is ours to handle; otherwise the attempt's task
        // handles it when its reply or its timeout comes (K3).
        if let Ok(r) = self.rx.try_recv() {
            if tokio::runtime::Handle::try_current().is_ok() {
                self.shared.settle_abandoned(&self.cell, &self.name, won(&r));
            } else {
                // No runtime to release in (shutting down): the lease expires with the session.
                attempt_finished(&self.shared, &self.cell, &self.name);
            }
            return;
        }
        // Still under way: the core's K3 slot says whether giving it up frees the name (it
        // does not: the attempt's task frees it at its reply or its timeout).
        let mut slot = AttemptSlot::InFlight;
        slot.abandon();
        if slot.may_begin() {
            attempt_finished(&self.shared, &self.cell, &self.name);
        }
    }
}

/// Sends one acquisition for `name` with the D2 timeout. Its result arrives through the
/// returned [`Attempt`]; if the election abandoned the attempt meanwhile, whatever it won is
/// released (K4).
///
/// K3: the name stays in `inflight` until the receiver took the result or, for an abandoned
/// attempt, until its reply or its timeout; a new attempt waits for that before it is sent,
/// so a late `Won` of an abandoned attempt never releases a term adopted by the next one.
pub(crate) fn spawn_attempt(shared: &Arc<Shared>, cell: &Arc<SessionCell>, name: &Arc<str>) -> Attempt {
    let (tx, rx) = oneshot::channel();
    let attempt =
        Attempt { rx, shared: Arc::clone(shared), cell: Arc::clone(cell), name: Arc::clone(name), taken: false };
    let (shared, cell, name) = (Arc::clone(shared), Arc::clone(cell), Arc::clone(name));
    tokio::spawn(async move {
        loop {
            let done = shared.attempt_done.notified();
            {
                let mut st = shared.lock_state();
                let mut slot = if st.inflight.contains(&name) { AttemptSlot::InFlight } else { AttemptSlot::Free };
                if slot.begin() {
                    st.inflight.insert(Arc::clone(&name));
                    break;
                }
            }
            done.await;
        }
        if tx.is_closed() {
            attempt_finished(&shared, &cell, &name);
            return;
        }
        let to = cell.call_timeout(Instant::now());
        tracing::trace!(lease = %name, "acquire sent");
        let r = match tokio::time::timeout(to, shared.backend.acquire(&cell.id, &name)).await {
            Ok(r) => r,
            Err(_) => Err(crate::backend::BackendError::Unavailable {
                message: format!("acquire got no answer within {to:?}"),
                source: None,
            }),
        };
        if let Err(r) = tx.send(r) {
            // Abandoned: it was in flight until now; K4 says what becomes of its win.
            shared.settle_abandoned(&cell, &name, won(&r));
        }
    });
    attempt
}

/// The token an acquisition's result won, if it won.
fn won(r: &BackendResult<Acquire>) -> Option<u64> {
    match r {
        Ok(Acquire::Won(token)) => Some(*token),
        _ => None,
    }
}

/// The attempt for `name` made for `cell` is no longer in flight; a waiting attempt may go
/// (K3), and a K4 record whose release was acknowledged meanwhile goes (K4 pruning).
pub(crate) fn attempt_finished(shared: &Shared, cell: &SessionCell, name: &str) {
    {
        let mut st = shared.lock_state();
        st.inflight.remove(name);
        cell.attempt_ended(name);
    }
    shared.attempt_done.notify_waiters();
}

/// Gives up an attempt in flight; a win that already arrived is released (K4). An attempt
/// still under way stays in flight until its reply or its timeout (K3).
pub(crate) fn abandon(attempt: Attempt) {
    drop(attempt);
}
