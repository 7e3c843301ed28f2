//! The run context: which slot a run is for, its attempt and its node, so a
//! job can key idempotent side effects by slot rather than rebuild it from the wall clock.

use std::future::Future;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::state::StateMap;
use crate::job_store::SlotKind;

tokio::task_local! {
    static CONTEXT: JobContext;
}

/// What a run is for. A job receives it as an optional second parameter
/// (`async fn report(term: &Term, ctx: &JobContext)`), or reads it with
/// [`JobContext::current`] from inside a run.
#[derive(Debug, Clone)]
pub struct JobContext {
    pub(crate) slot: DateTime<Utc>,
    pub(crate) kind: SlotKind,
    pub(crate) attempt: u32,
    pub(crate) attempts: u32,
    pub(crate) node: Arc<str>,
    pub(crate) cancel: CancellationToken,
    /// The application's state the runtime was given.
    pub(crate) state: Arc<StateMap>,
}

impl JobContext {
    /// The slot's instant: the cron instant or fixed-rate tick it runs for, or the time of
    /// the run-now request for a manual run. Key idempotent side effects by it.
    pub fn slot(&self) -> DateTime<Utc> {
        self.slot
    }

    /// Why the run happens: scheduled, manual (`simba trigger`) or caught up (misfire).
    pub fn kind(&self) -> SlotKind {
        self.kind
    }

    /// This attempt, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// How many attempts the slot gets (`retry` + 1).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The node name this run's records carry (`SIMBA_NODE`, else `host:pid`).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Completes when the run should stop: its `timeout` passed or its term ended. The run
    /// is dropped shortly after a timeout.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await;
    }

    /// Whether [`cancelled`](JobContext::cancelled) has completed.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// The context of the run this task executes; `None` outside a run.
    pub fn current() -> Option<JobContext> {
        CONTEXT.try_with(Clone::clone).ok()
    }

    /// A context for calling a job function by hand (tests, a service's own "run now").
    pub fn manual(slot: DateTime<Utc>, node: &str) -> JobContext {
        JobContext {
            slot,
            kind: SlotKind::Manual,
            attempt: 1,
            attempts: 1,
            node: node.into(),
            cancel: CancellationToken::new(),
            state: Arc::default(),
        }
    }

    /// This context with `value` as the state of type `T`, for calling a job that takes
    /// [`State<T>`](crate::State) by hand (its generated wrapper reads the state from the
    /// context it runs in, [`scope`](JobContext::scope)).
    pub fn with_state<T: Clone + Send + Sync + 'static>(mut self, value: T) -> JobContext {
        Arc::make_mut(&mut self.state).insert(value);
        self
    }

    /// A clone of the application's state of type `T`, when the runtime was given one
    /// ([`RuntimeBuilder::state`](crate::RuntimeBuilder::state)). A job usually takes it as a
    /// parameter instead, [`State<T>`](crate::State), which the runtime checks at start.
    pub fn state<T: Clone + Send + Sync + 'static>(&self) -> Option<T> {
        self.state.get::<T>()
    }

    /// Runs `fut` with this context as [`JobContext::current`] (how a job function called by
    /// hand gets its context and its state).
    pub fn scope<F: Future>(self, fut: F) -> impl Future<Output = F::Output> {
        CONTEXT.scope(self, fut)
    }
}
