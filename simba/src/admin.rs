//! Operating jobs from a service's own code: the operations of `simba jobs`,
//! `simba history`, `simba pause`, `simba resume` and `simba trigger`, for an admin endpoint;
//! and schedules stored as data ([`Schedules`]: `simba schedules ...`).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use simba::admin::Jobs;
//! use simba::backend::memory::MemoryBackend;
//!
//! let backend = MemoryBackend::new();
//! let jobs = Jobs::for_backend(&backend).expect("the memory backend has a jobs store").with_registered(["report"]);
//! assert!(jobs.pause("report").await?.changed);
//! assert!(!jobs.pause("report").await?.changed, "pausing twice says it was paused");
//! assert!(jobs.pause("reprot").await.is_err_and(|e| e.to_string().contains("`report`")));
//! # Ok(())
//! # }
//! ```

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Backend, BackendError};
use crate::job::RegistryReport;

mod schedules;

use crate::job_store::{JobState, RunRecord, SharedJobStore, group_of};
pub use schedules::{MAX_FIRES, MAX_PAGE, Page, ScheduleError, Schedules};

/// Why an operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// No job of that name is known to the store or registered.
    #[error("unknown job `{name}`{}", match nearest { Some(n) => format!(": did you mean `{n}`?"), None => ": `simba jobs` lists the known jobs".to_owned() })]
    UnknownJob {
        /// The name as given.
        name: String,
        /// The nearest known name.
        nearest: Option<String>,
    },
    /// The store failed.
    #[error("the jobs store failed: {0}")]
    Store(#[from] BackendError),
    /// A pause, resume or run-now request did not reach the store within the wait, and reading
    /// the job back showed that nothing changed: running the command again is safe.
    #[error(
        "nothing changed: could not {action} `{job}` within {waited:?} ({error}); run it again (it is safe to \
         repeat), or give it longer (`--timeout`)"
    )]
    NotApplied {
        /// The job as given.
        job: String,
        /// `pause`, `resume` or `request a run of`.
        action: &'static str,
        /// How long the operation kept trying.
        waited: Duration,
        /// The last error of the store.
        error: BackendError,
    },
    /// A pause, resume or run-now request failed in a way that hides whether the store took
    /// it, and the job could not be read back to tell.
    #[error(
        "could not tell whether the attempt to {action} `{job}` took effect: {error}; then reading the job back failed: \
         {read_back}. `simba jobs` shows its state once the store answers (pause and resume are safe to repeat; \
         a repeated run-now request that is still pending joins the first one)"
    )]
    Unconfirmed {
        /// The job as given.
        job: String,
        /// `pause`, `resume` or `request a run of`.
        action: &'static str,
        /// The error of the operation.
        error: BackendError,
        /// Why reading the job back failed.
        read_back: String,
    },
}

/// What a pause or resume did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Toggle {
    /// Whether the state changed (`false`: it was already paused, or already running).
    pub changed: bool,
    /// The state now.
    pub paused: bool,
    /// Set when the store's answer was lost (the error) and the state was confirmed by
    /// reading the job back.
    pub confirmed_after: Option<String>,
}

/// What a run-now request did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Requested {
    /// The request's id (strictly increasing per job); `None` when the store's answer was lost
    /// and the request was confirmed by reading the job back.
    pub id: Option<u64>,
    /// The request's time, unix milliseconds (its manual slot's instant).
    pub at_ms: i64,
    /// Set when the store's answer was lost (the error) and the request was confirmed by
    /// reading the job back.
    pub confirmed_after: Option<String>,
}

impl Requested {
    /// What the operator is told about the request (the `simba trigger` line, the dashboard's
    /// answer).
    pub fn message(&self, job: &str) -> String {
        match (self.id, &self.confirmed_after) {
            (Some(id), _) => format!(
                "run of `{job}` requested (request {id}): the node holding its term runs it at once where the store \
                 broadcasts, within one renewal interval elsewhere, or the next holder does"
            ),
            (None, e) => format!(
                "run of `{job}` requested: the store's answer was lost ({}), and reading the job back shows the \
                 request pending or taken; do not repeat it",
                e.as_deref().unwrap_or("")
            ),
        }
    }
}

/// How long [`Jobs`] keeps trying a pause, resume or run-now request by default: one try.
pub const DEFAULT_CONTROL_WAIT: Duration = Duration::ZERO;

/// The longest pause between two tries of a control change.
const RETRY_CAP: Duration = Duration::from_millis(500);

/// How long reading a job back after a failed control change may take.
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(5);

/// The jobs of one store: list, history, pause, resume, run now.
#[derive(Clone)]
pub struct Jobs {
    store: SharedJobStore,
    registered: BTreeSet<String>,
    wait: Duration,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs").field("store", &self.store.describe()).finish_non_exhaustive()
    }
}

impl Jobs {
    /// The operations on `store`.
    pub fn new(store: SharedJobStore) -> Self {
        Jobs { store, registered: BTreeSet::new(), wait: DEFAULT_CONTROL_WAIT }
    }

    /// Keeps trying a pause, resume or run-now request for up to `wait` while the store is
    /// unavailable (a SQLite file whose write lock another process holds, a server
    /// restarting), each try bounded by what is left of `wait`. A change that still failed is
    /// read back, so the error says whether it took effect ([`AdminError::NotApplied`],
    /// [`AdminError::Unconfirmed`]). The default, [`DEFAULT_CONTROL_WAIT`], is one try.
    #[must_use]
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The operations on a client's backend; `None` when the backend has no jobs store.
    pub fn for_client(simba: &crate::Simba) -> Option<Self> {
        simba.job_store().map(Jobs::new)
    }

    /// The operations on `backend`'s jobs store; `None` when it has none.
    pub fn for_backend<B: Backend>(backend: &B) -> Option<Self> {
        backend.job_store().map(Jobs::new)
    }

    /// Also accepts these job names (the service's registered jobs, which may not have run
    /// yet), besides those the store knows.
    #[must_use]
    pub fn with_registered<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Self {
        self.registered.extend(names.into_iter().map(Into::into));
        self
    }

    /// The registry of this binary (`#[simba_scheduled]` / `#[simba_partitioned]`) as
    /// registered names.
    #[must_use]
    pub fn with_linked_registry(self) -> Self {
        let names = crate::job::SCHEDULED_JOBS
            .iter()
            .map(|j| &*j.name)
            .chain(crate::job::PARTITIONED_JOBS.iter().map(|j| &*j.name))
            .map(str::to_owned)
            .collect::<Vec<_>>();
        self.with_registered(names)
    }

    /// The store this operates on.
    pub fn store(&self) -> &SharedJobStore {
        &self.store
    }

    /// Every job the store knows, ordered by name.
    pub async fn list(&self) -> Result<Vec<JobState>, AdminError> {
        Ok(self.store.jobs().await?)
    }

    /// The newest `limit` records of `job`, newest first.
    pub async fn history(&self, job: &str, limit: usize) -> Result<Vec<RunRecord>, AdminError> {
        self.check(job).await?;
        Ok(self.store.history(job, limit).await?)
    }

    /// Pauses `job` (a group pauses every partition) cluster-wide.
    pub async fn pause(&self, job: &str) -> Result<Toggle, AdminError> {
        self.toggle(job, true).await
    }

    /// Resumes `job`.
    pub async fn resume(&self, job: &str) -> Result<Toggle, AdminError> {
        self.toggle(job, false).await
    }

    async fn toggle(&self, job: &str, paused: bool) -> Result<Toggle, AdminError> {
        self.check(job).await?;
        let action = if paused { "pause" } else { "resume" };
        let done = |s: Option<&JobState>| s.is_some_and(|s| s.paused) == paused;
        match self.settle(job, action, || self.store.set_paused(job, paused), done).await? {
            Settled::Answered(was) => {
                if was != paused {
                    tracing::info!(job, paused, "job {action}d");
                }
                Ok(Toggle { changed: was != paused, paused, confirmed_after: None })
            }
            Settled::Confirmed(error) => {
                tracing::info!(job, paused, %error, "job {action}d (confirmed by reading it back after an error)");
                // Which call changed it is unknown: this one, or another whose answer came first.
                Ok(Toggle { changed: true, paused, confirmed_after: Some(error) })
            }
        }
    }

    /// Asks the holder of `job`'s term to run it once now (recorded as a `manual` slot); if
    /// nobody holds it, the next holder runs it.
    pub async fn trigger(&self, job: &str) -> Result<Requested, AdminError> {
        self.trigger_at(job, chrono::Utc::now()).await
    }

    /// [`trigger`](Self::trigger) with the request's time given (the manual slot's instant):
    /// for a wall clock that is not the system's, as in `simba::testing`.
    ///
    /// A request whose answer was lost is not sent again blindly: the job is read back first,
    /// and a request found pending at or after `at`, or already taken (a manual record at or
    /// after `at`), counts as made.
    pub async fn trigger_at(&self, job: &str, at: chrono::DateTime<chrono::Utc>) -> Result<Requested, AdminError> {
        self.check(job).await?;
        let at_ms = at.timestamp_millis();
        let done = |s: Option<&JobState>| s.is_some_and(|s| made(s, at_ms));
        match self.settle(job, "request a run of", || self.store.trigger(job, at_ms), done).await? {
            Settled::Answered(id) => {
                tracing::info!(job, id, "run requested");
                Ok(Requested { id: Some(id), at_ms, confirmed_after: None })
            }
            Settled::Confirmed(error) => {
                tracing::info!(job, %error, "run requested (confirmed by reading the job back after an error)");
                Ok(Requested { id: None, at_ms, confirmed_after: Some(error) })
            }
        }
    }

    /// Runs the control change `op` until the store answers, within the wait. After a failure
    /// the job is read back first: when `done` says the change is there (the answer was lost),
    /// it is not sent again; when it is not there and the store was unavailable, `op` is
    /// tried again while the wait lasts.
    async fn settle<T, F>(
        &self,
        job: &str,
        action: &'static str,
        op: impl Fn() -> F,
        done: impl Fn(Option<&JobState>) -> bool,
    ) -> Result<Settled<T>, AdminError>
    where
        F: std::future::Future<Output = Result<T, BackendError>>,
    {
        let deadline = Instant::now() + self.wait;
        let mut pause = Duration::from_millis(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let error = match bounded(left, op()).await {
                Ok(v) => return Ok(Settled::Answered(v)),
                Err(e) => e,
            };
            match self.read_back(job).await {
                Ok(state) if done(state.as_ref()) => return Ok(Settled::Confirmed(error.to_string())),
                Ok(_) if retryable(&error) && Instant::now() + pause < deadline => {
                    tracing::debug!(job, %error, "the jobs store is unavailable; trying again");
                }
                Ok(_) => return Err(AdminError::NotApplied { job: job.to_owned(), action, waited: self.wait, error }),
                Err(read_back) => {
                    return Err(AdminError::Unconfirmed { job: job.to_owned(), action, error, read_back });
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_CAP);
        }
    }

    /// The job as the store has it now, to tell whether a failed change took effect.
    async fn read_back(&self, job: &str) -> Result<Option<JobState>, String> {
        match tokio::time::timeout(READ_BACK_TIMEOUT, self.store.job(job)).await {
            Ok(Ok(state)) => Ok(state),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {READ_BACK_TIMEOUT:?}")),
        }
    }

    /// What the live nodes published about the jobs they run, compared: the
    /// same report as `simba check` and `simba jobs` give.
    pub async fn registry(&self) -> Result<RegistryReport, AdminError> {
        Ok(RegistryReport::from_published(&self.store.registries().await?))
    }

    /// Every name the operations accept: the store's jobs, their groups, the registered
    /// names, and the jobs the live nodes published (a job that has not run yet).
    pub async fn known(&self) -> Result<BTreeSet<String>, AdminError> {
        let mut names = self.registered.clone();
        for node in self.registry().await?.nodes {
            names.extend(node.jobs.into_iter().map(|j| j.name));
        }
        for j in self.store.jobs().await? {
            if let Some(g) = group_of(&j.job) {
                names.insert(g.to_owned());
            }
            names.insert(j.job);
        }
        Ok(names)
    }

    async fn check(&self, job: &str) -> Result<(), AdminError> {
        if self.known_at_once(job).await? {
            return Ok(());
        }
        let known = self.known().await?;
        if known.contains(job) {
            return Ok(());
        }
        // A partition of a known group is known.
        if group_of(job).is_some_and(|g| known.contains(g))
            && job.rsplit('/').next().is_some_and(|i| i.parse::<u32>().is_ok())
        {
            return Ok(());
        }
        Err(AdminError::UnknownJob {
            name: job.to_owned(),
            nearest: crate::suggest::nearest(job, known.iter().map(String::as_str)).map(str::to_owned),
        })
    }

    /// Whether `job` (or, for a partition `g/i`, its group `g`) is known without listing every
    /// job: a registered name, a job a live node published, or one the store has a control row
    /// or a record of. [`known`](Self::known) accepts every such name; it is read only when this
    /// answers no, for the error's nearest name. Listing every job costs what the store's
    /// `jobs()` costs (on etcd a walk of the record keys: 1.3 to 2.5 s at full retention on a
    /// busy machine, most of a `simba trigger` in the operator scenario; R10).
    async fn known_at_once(&self, job: &str) -> Result<bool, AdminError> {
        let partition = job.rsplit('/').next().is_some_and(|i| i.parse::<u32>().is_ok());
        let group = group_of(job).filter(|_| partition);
        let names: Vec<&str> = std::iter::once(job).chain(group).collect();
        if names.iter().any(|n| self.registered.contains(*n)) {
            return Ok(true);
        }
        let published = self.registry().await?;
        if published.nodes.iter().flat_map(|n| &n.jobs).any(|j| names.contains(&j.name.as_str())) {
            return Ok(true);
        }
        for name in names {
            if self.store.job(name).await?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// How a control change ended.
enum Settled<T> {
    /// The store answered.
    Answered(T),
    /// The answer was lost (the error) and reading the job back found the change.
    Confirmed(String),
}

/// `fut` within `left` (one try at least: a zero wait still sends the call, bounded by the
/// store's own timeouts).
async fn bounded<T>(
    left: Duration,
    fut: impl std::future::Future<Output = Result<T, BackendError>>,
) -> Result<T, BackendError> {
    if left.is_zero() {
        return fut.await;
    }
    match tokio::time::timeout(left, fut).await {
        Ok(r) => r,
        Err(_) => Err(BackendError::Unavailable { message: format!("no answer within {left:?}"), source: None }),
    }
}

/// Whether a failed control change may succeed when tried again.
fn retryable(e: &BackendError) -> bool {
    matches!(e, BackendError::Unavailable { .. })
}

/// Whether `state` shows a run-now request made at `at_ms`: pending at or after it, or taken
/// (the newest record is a manual slot at or after it).
fn made(state: &JobState, at_ms: i64) -> bool {
    state.trigger_pending_ms.is_some_and(|t| t >= at_ms)
        || state.last.as_ref().is_some_and(|r| r.kind == crate::job_store::SlotKind::Manual && r.slot_ms >= at_ms)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};

    use tokio::sync::broadcast;

    use super::*;
    use crate::backend::SessionId;
    use crate::backend::memory::MemoryBackend;
    use crate::job_store::{Claim, ClaimRequest, JobStore, SharedJobStore};

    /// How the wrapped store fails a control change.
    #[derive(Clone, Copy, PartialEq)]
    enum Fault {
        /// Refuses before doing anything (a SQLite file whose write lock is held).
        Busy,
        /// Does it, then loses the answer (a connection cut after the commit).
        AnswerLost,
    }

    /// A jobs store whose first `failures` control changes fail as `fault`, and whose reads
    /// fail while `reads_fail` is set.
    struct Flaky {
        inner: SharedJobStore,
        fault: Fault,
        failures: AtomicU32,
        calls: AtomicU32,
        reads_fail: Mutex<bool>,
    }

    impl Flaky {
        fn new(fault: Fault, failures: u32) -> Arc<Flaky> {
            let inner = MemoryBackend::new().job_store().expect("the memory backend has a jobs store");
            Arc::new(Flaky {
                inner,
                fault,
                failures: AtomicU32::new(failures),
                calls: AtomicU32::new(0),
                reads_fail: Mutex::new(false),
            })
        }

        fn err() -> BackendError {
            BackendError::Unavailable { message: "database is locked".into(), source: None }
        }

        /// Whether this call fails (and counts it).
        fn fails(&self) -> bool {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.failures.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
        }

        fn read_fails(&self) -> bool {
            *self.reads_fail.lock().expect("lock")
        }
    }

    impl JobStore for Flaky {
        async fn claim_run(&self, req: ClaimRequest<'_>) -> crate::backend::BackendResult<Claim> {
            self.inner.claim_run(req).await
        }
        async fn finish_run(&self, r: &RunRecord) -> crate::backend::BackendResult<bool> {
            self.inner.finish_run(r).await
        }
        async fn append(&self, r: &RunRecord) -> crate::backend::BackendResult<bool> {
            self.inner.append(r).await
        }
        async fn history(&self, job: &str, n: usize) -> crate::backend::BackendResult<Vec<RunRecord>> {
            self.inner.history(job, n).await
        }
        async fn job(&self, job: &str) -> crate::backend::BackendResult<Option<JobState>> {
            if self.read_fails() {
                return Err(Flaky::err());
            }
            self.inner.job(job).await
        }
        async fn jobs(&self) -> crate::backend::BackendResult<Vec<JobState>> {
            self.inner.jobs().await
        }
        async fn set_paused(&self, job: &str, paused: bool) -> crate::backend::BackendResult<bool> {
            match (self.fails(), self.fault) {
                (true, Fault::Busy) => Err(Flaky::err()),
                (true, Fault::AnswerLost) => {
                    self.inner.set_paused(job, paused).await?;
                    Err(Flaky::err())
                }
                (false, _) => self.inner.set_paused(job, paused).await,
            }
        }
        async fn trigger(&self, job: &str, at_ms: i64) -> crate::backend::BackendResult<u64> {
            match (self.fails(), self.fault) {
                (true, Fault::Busy) => Err(Flaky::err()),
                (true, Fault::AnswerLost) => {
                    self.inner.trigger(job, at_ms).await?;
                    Err(Flaky::err())
                }
                (false, _) => self.inner.trigger(job, at_ms).await,
            }
        }
        async fn control_version(&self) -> crate::backend::BackendResult<u64> {
            self.inner.control_version().await
        }
        fn subscribe_control(&self) -> Option<broadcast::Receiver<String>> {
            self.inner.subscribe_control()
        }
        async fn publish_registry(&self, s: &SessionId, r: &str) -> crate::backend::BackendResult<bool> {
            self.inner.publish_registry(s, r).await
        }
        async fn registries(&self) -> crate::backend::BackendResult<Vec<(SessionId, String)>> {
            self.inner.registries().await
        }
        fn retention(&self) -> usize {
            self.inner.retention()
        }
        fn keeping(&self, records: usize) -> SharedJobStore {
            self.inner.keeping(records)
        }
        fn describe(&self) -> String {
            "flaky".into()
        }
    }

    fn jobs(store: &Arc<Flaky>, wait: Duration) -> Jobs {
        let shared = SharedJobStore::from_arc(store.clone());
        Jobs::new(shared).with_registered(["report"]).with_wait(wait)
    }

    /// Operator's tool on a busy store: pause and run-now keep trying within their wait and
    /// succeed once the store answers; nothing is done twice.
    #[tokio::test(start_paused = true)]
    async fn control_changes_wait_out_a_busy_store() {
        let store = Flaky::new(Fault::Busy, 3);
        let t = jobs(&store, Duration::from_secs(5)).pause("report").await.expect("paused once the store answers");
        assert!(t.changed && t.paused && t.confirmed_after.is_none(), "{t:?}");
        assert_eq!(store.calls.load(Ordering::SeqCst), 4, "three refusals, then the change");
        let store = Flaky::new(Fault::Busy, 2);
        let r = jobs(&store, Duration::from_secs(5)).trigger("report").await.expect("requested");
        assert_eq!(r.id, Some(1), "one request, made by the try that got through: {r:?}");
    }

    /// A change that never got through within the wait says that nothing changed, and that
    /// running it again is safe.
    #[tokio::test(start_paused = true)]
    async fn a_busy_store_past_the_wait_says_nothing_changed() {
        let store = Flaky::new(Fault::Busy, u32::MAX);
        let e = jobs(&store, Duration::from_secs(2)).pause("report").await.expect_err("never got through");
        assert!(matches!(e, AdminError::NotApplied { action: "pause", .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.starts_with("nothing changed") && text.contains("safe to"), "{text}");
        assert!(store.calls.load(Ordering::SeqCst) > 3, "it kept trying for the wait");
        let e = jobs(&store, Duration::ZERO).trigger("report").await.expect_err("one try");
        assert!(matches!(e, AdminError::NotApplied { .. }), "{e:?}");
        assert_eq!(
            store.inner.job("report").await.expect("read").and_then(|s| s.trigger_pending_ms),
            None,
            "no request was recorded"
        );
    }

    /// A change whose answer was lost is confirmed by reading the job back: a pause is
    /// reported done, and a run-now request is not sent a second time.
    #[tokio::test(start_paused = true)]
    async fn a_lost_answer_is_confirmed_by_reading_back() {
        let store = Flaky::new(Fault::AnswerLost, 1);
        let t = jobs(&store, Duration::from_secs(5)).pause("report").await.expect("confirmed");
        assert!(t.paused && t.confirmed_after.as_deref().is_some_and(|e| e.contains("locked")), "{t:?}");
        assert_eq!(store.calls.load(Ordering::SeqCst), 1, "not sent again");
        let store = Flaky::new(Fault::AnswerLost, 1);
        let r = jobs(&store, Duration::from_secs(5)).trigger("report").await.expect("confirmed");
        assert_eq!((r.id, store.calls.load(Ordering::SeqCst)), (None, 1), "one request, not two: {r:?}");
        assert!(r.confirmed_after.is_some());
    }

    /// When the job cannot be read back either, the error says the outcome is unknown and
    /// how to find out.
    #[tokio::test(start_paused = true)]
    async fn an_unreadable_store_says_the_outcome_is_unknown() {
        let store = Flaky::new(Fault::AnswerLost, 1);
        *store.reads_fail.lock().expect("lock") = true;
        let e = jobs(&store, Duration::ZERO).resume("report").await.expect_err("unknown");
        assert!(matches!(e, AdminError::Unconfirmed { action: "resume", .. }), "{e:?}");
        assert!(e.to_string().contains("could not tell whether") && e.to_string().contains("simba jobs"), "{e}");
    }
}
