//! An election's callbacks, run one at a time, in order, on a task of their own (rules L2,
//! L3, L6). The listener is the handle's; the engine only sees a function of a [`Callback`].

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{mpsc, oneshot};

use super::control::IN_ELECTION;
use crate::{RevokeReason, Term};

/// One callback of an election's listener.
pub(crate) enum Callback {
    /// `on_elected(term)`.
    Elected(Term),
    /// `on_revoked(term, reason)`.
    Revoked(Term, RevokeReason),
    /// Nothing to call: answered once every callback queued before it ran.
    Barrier(oneshot::Sender<()>),
}

/// What calls the listener: a function of the callback to run.
pub(crate) type Listen = Box<dyn Fn(&Callback) + Send + Sync>;

/// Runs one election's callbacks one at a time, in order (rule L2).
pub(crate) struct Dispatcher {
    tx: mpsc::UnboundedSender<Callback>,
    pending: Arc<AtomicUsize>,
    capacity: usize,
}

impl Dispatcher {
    /// Starts the task that calls `listen` for election `election` (marked as inside it, L5);
    /// at most `capacity` callbacks wait (L6).
    pub(crate) fn spawn(listen: Listen, election: u64, capacity: usize) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Callback>();
        let pending = Arc::new(AtomicUsize::new(0));
        let p = Arc::clone(&pending);
        tokio::spawn(IN_ELECTION.scope(election, async move {
            while let Some(cb) = rx.recv().await {
                if std::panic::catch_unwind(AssertUnwindSafe(|| listen(&cb))).is_err() {
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
    pub(crate) fn elected(&self, term: &Term) -> bool {
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

    /// Queues `on_revoked` (L1: every `on_elected` has one).
    pub(crate) fn revoked(&self, term: &Term, reason: RevokeReason) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        let _ = self.tx.send(Callback::Revoked(term.clone(), reason));
    }

    /// Completes after every callback queued so far ran.
    pub(crate) async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        self.pending.fetch_add(1, Ordering::AcqRel);
        if self.tx.send(Callback::Barrier(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}
