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

mod backfill;
mod schedules;

use crate::job_store::{JobState, RunRecord, SharedJobStore, group_of};
pub use backfill::{Backfill, BackfillAsk};
pub use schedules::{MAX_FIRES, MAX_PAGE, Page, ScheduleError, Schedules, TriggerOptions};

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
    /// A pause or resume did not reach the store within the wait, and reading the job back
    /// showed that nothing changed: running the command again is safe.
    #[error(
        "nothing changed: could not {action} `{job}` within {waited:?} ({error}); run it again (it is safe to \
         repeat), or give it longer (`--timeout`)"
    )]
    NotApplied {
        /// The job as given.
        job: String,
        /// `pause` or `resume`.
        action: &'static str,
        /// How long the operation kept trying.
        waited: Duration,
        /// The last error of the store.
        error: BackendError,
    },
    /// A pause or resume failed in a way that hides whether the store took it, and the job
    /// could not be read back to tell (a run-now request says
    /// [`TriggerUnconfirmed`](Self::TriggerUnconfirmed) instead).
    #[error(
        "could not tell whether the attempt to {action} `{job}` took effect: {error}; then reading the job back failed: \
         {read_back}. `simba jobs` shows its state once the store answers (pause and resume are safe to repeat)"
    )]
    Unconfirmed {
        /// The job as given.
        job: String,
        /// `pause` or `resume`.
        action: &'static str,
        /// The error of the operation.
        error: BackendError,
        /// Why reading the job back failed.
        read_back: String,
    },
    /// A run-now request failed in a way that hides whether the store made it. Its key makes
    /// a repeat safe: the store makes at most one request per key (R3).
    #[error(
        "could not tell whether the run-now request `{key}` of `{job}` was made: {error}; repeat it with the same \
         key (`simba trigger {job} --request-key {key}`): a request runs at most once per key"
    )]
    TriggerUnconfirmed {
        /// The job as given.
        job: String,
        /// The request's key.
        key: String,
        /// The last error of the store.
        error: BackendError,
    },
    /// A run-now request's key is not a [`valid_request_key`](crate::job_store::valid_request_key).
    #[error("invalid request key {key:?}: use 1 to 64 ASCII letters, digits or -_.:")]
    InvalidRequestKey {
        /// The key as given.
        key: String,
    },
    /// The job has [`MAX_PENDING_REQUESTS`](crate::job_store::MAX_PENDING_REQUESTS) run-now
    /// requests waiting already, or [`MAX_PENDING_PAYLOADS`](crate::job_store::MAX_PENDING_PAYLOADS)
    /// with a payload for a request with one: nothing was requested.
    #[error(
        "nothing requested: `{job}` has {pending} run-now requests waiting, the most a job keeps ({} in all, {} \
         with a payload); wait until its holder takes one (`simba jobs` shows it), or check that a node runs `{job}`",
        crate::job_store::MAX_PENDING_REQUESTS,
        crate::job_store::MAX_PENDING_PAYLOADS
    )]
    TooManyRequests {
        /// The job as given.
        job: String,
        /// How many requests wait.
        pending: usize,
    },
    /// A backfill was refused before anything was stored (rule J16): the reason says what is
    /// wrong and what to do.
    #[error("cannot backfill `{job}`: {reason}")]
    Backfill {
        /// The job as given.
        job: String,
        /// Why.
        reason: String,
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
    /// The request's key: the one given, or the one generated ([`new_request_key`]). The run's
    /// record names it (`simba history`).
    pub key: String,
    /// The request's id (strictly increasing per job).
    pub id: u64,
    /// The request's manual slot, unix milliseconds (the instant its run's record names).
    pub slot_ms: i64,
    /// Whether the request was made before, by an earlier call with this key (a repeat, or a
    /// retry after a lost answer): nothing new was requested.
    pub known: bool,
    /// Set when a try failed (the error) and a later try with the same key was answered.
    pub retried_after: Option<String>,
}

impl Requested {
    /// What the operator is told about the request (the `simba trigger` line, the dashboard's
    /// answer).
    pub fn message(&self, job: &str) -> String {
        let key = &self.key;
        if self.known {
            return format!(
                "run of `{job}` already requested with key `{key}` (request {}): nothing new requested; the \
                 request runs once (`simba history {job}` names its run once it started)",
                self.id
            );
        }
        format!(
            "run of `{job}` requested (key `{key}`, request {}): the node holding its term runs it at once where the \
             store broadcasts, within one renewal interval elsewhere, or the next holder does; repeating it with \
             `--request-key {key}` is safe",
            self.id
        )
    }
}

/// A new request key, as the tool and the dashboard generate one when the operator gives none:
/// `r-` and 16 random hexadecimal digits (a [`valid_request_key`](crate::job_store::valid_request_key)).
pub fn new_request_key() -> String {
    format!("r-{:016x}", rand::random::<u64>())
}

/// Refuses a run-now request key given by an operator that would read as a backfill's plan
/// (rule J16): the holder would walk it as a backfill.
pub(crate) fn not_a_backfill_key(job: &str, key: Option<&str>) -> Result<(), AdminError> {
    match key.filter(|k| k.starts_with(simba_core::backfill::BACKFILL_KEY_PREFIX)) {
        Some(k) => Err(AdminError::Backfill {
            job: job.to_owned(),
            reason: format!(
                "the request key `{k}` is a backfill's (it starts with `backfill:`): use another key for a run now, or `simba backfill` for a backfill"
            ),
        }),
        None => Ok(()),
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

    /// Asks the holder of `job`'s term to run it once now (recorded as a `manual` slot naming
    /// the request's key); if nobody holds it, the next holder runs it. The key is generated
    /// ([`new_request_key`]) and answered; [`trigger_keyed`](Self::trigger_keyed) takes one.
    pub async fn trigger(&self, job: &str) -> Result<Requested, AdminError> {
        self.trigger_at(job, None, chrono::Utc::now()).await
    }

    /// [`trigger`](Self::trigger) with the request's key given (`None`: generated): the same
    /// key again is the same request, whether it is still pending or already ran (R3).
    pub async fn trigger_keyed(&self, job: &str, key: Option<&str>) -> Result<Requested, AdminError> {
        self.trigger_at(job, key, chrono::Utc::now()).await
    }

    /// [`trigger_keyed`](Self::trigger_keyed) with the request's time given (the manual slot's
    /// instant): for a wall clock that is not the system's, as in `simba::testing`.
    ///
    /// A try that fails while the store is unavailable is tried again with the same key within
    /// the wait: the store makes at most one request per key, so a lost answer never makes a
    /// second run. When no try is answered, [`AdminError::TriggerUnconfirmed`] names the key
    /// to repeat it with.
    pub async fn trigger_at(
        &self,
        job: &str,
        key: Option<&str>,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Requested, AdminError> {
        not_a_backfill_key(job, key)?;
        self.check(job).await?;
        self.request(job, key, None, at).await
    }

    /// The run-now request of `job` (known to exist) with `key` (`None`: generated) and an
    /// optional payload override, tried again with its key while the store is unavailable
    /// within the wait ([`trigger_at`](Self::trigger_at)).
    pub(crate) async fn request(
        &self,
        job: &str,
        key: Option<&str>,
        payload: Option<&str>,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Requested, AdminError> {
        let key = key.map_or_else(new_request_key, str::to_owned);
        if !crate::job_store::valid_request_key(&key) {
            return Err(AdminError::InvalidRequestKey { key });
        }
        let at_ms = at.timestamp_millis();
        let mut ask = crate::job_store::Trigger::new(&key, at_ms);
        ask.payload = payload;
        let deadline = Instant::now() + self.wait;
        let mut pause = Duration::from_millis(20);
        let mut failed: Option<String> = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let error = match bounded(left, self.store.trigger_with(job, ask)).await {
                Ok(answer) => return requested(job, key, answer, failed),
                Err(e) => e,
            };
            if !retryable(&error) || Instant::now() + pause >= deadline {
                return Err(AdminError::TriggerUnconfirmed { job: job.to_owned(), key, error });
            }
            tracing::debug!(job, key, %error, "the jobs store is unavailable; trying the request again with its key");
            failed = Some(error.to_string());
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_CAP);
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

/// What a run-now request with `key` answered, as the operator is told it.
fn requested(
    job: &str,
    key: String,
    answer: crate::job_store::Triggered,
    retried_after: Option<String>,
) -> Result<Requested, AdminError> {
    use crate::job_store::Triggered;
    let (request, known) = match answer {
        Triggered::Requested(r) => (r, false),
        Triggered::Known(r) => (r, true),
        Triggered::Full { pending } => return Err(AdminError::TooManyRequests { job: job.to_owned(), pending }),
    };
    let id = request.id.unsigned_abs();
    tracing::info!(job, key, id, known, "run requested");
    Ok(Requested { key, id, slot_ms: request.slot_ms, known, retried_after })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};

    use tokio::sync::broadcast;

    use super::*;
    use crate::backend::SessionId;
    use crate::backend::memory::MemoryBackend;
    use crate::job_store::{Claim, ClaimRequest, JobStore, SharedJobStore, SlotKind, Triggered};

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
        async fn trigger(
            &self,
            job: &str,
            ask: crate::job_store::Trigger<'_>,
        ) -> crate::backend::BackendResult<Triggered> {
            match (self.fails(), self.fault) {
                (true, Fault::Busy) => Err(Flaky::err()),
                (true, Fault::AnswerLost) => {
                    self.inner.trigger_with(job, ask).await?;
                    Err(Flaky::err())
                }
                (false, _) => self.inner.trigger_with(job, ask).await,
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
        assert_eq!((r.id, r.known), (1, false), "one request, made by the try that got through: {r:?}");
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
        let AdminError::TriggerUnconfirmed { key, .. } = &e else { panic!("{e:?}") };
        assert!(e.to_string().contains(&format!("--request-key {key}")), "the key to repeat it with: {e}");
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
    }

    /// R3: a run-now request whose answer was lost is tried again with its key: the store
    /// answers the request the first try made, and one run follows, not two. A repeat with the
    /// key after the run is still that request.
    #[tokio::test(start_paused = true)]
    async fn r3_a_lost_trigger_answer_is_retried_with_its_key_and_runs_once() {
        let backend = MemoryBackend::new();
        let store = Arc::new(Flaky {
            inner: backend.job_store().expect("memory has a jobs store"),
            fault: Fault::AnswerLost,
            failures: AtomicU32::new(1),
            calls: AtomicU32::new(0),
            reads_fail: Mutex::new(false),
        });
        let r = jobs(&store, Duration::from_secs(5)).trigger("report").await.expect("answered on the retry");
        assert!(r.known && r.retried_after.is_some(), "the retry found the first try's request: {r:?}");
        assert_eq!(store.calls.load(Ordering::SeqCst), 2);
        let session = backend.open_session(Duration::from_secs(30)).await.expect("session").id;
        let crate::backend::Acquire::Won(token) = backend.acquire(&session, "report").await.expect("acquire") else {
            panic!("a free lease")
        };
        let claim = ClaimRequest {
            session: &session,
            lease: "report",
            token,
            job: "report",
            slot_ms: 0,
            kind: SlotKind::Manual,
            node: "n",
            started_ms: 1,
            attempts: 1,
        };
        let Claim::Claimed(rec) = store.inner.claim_run(claim).await.expect("claim") else { panic!("one request") };
        assert_eq!(rec.request_key.as_deref(), Some(r.key.as_str()), "the run names the request");
        assert_eq!(store.inner.claim_run(claim).await.expect("claim"), Claim::AlreadyClaimed, "one run, not two");
        let again = jobs(&store, Duration::ZERO).trigger_keyed("report", Some(&r.key)).await.expect("repeat");
        assert!(again.known && again.id == r.id, "{again:?}");
        assert_eq!(store.inner.claim_run(claim).await.expect("claim"), Claim::AlreadyClaimed, "still one run");
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
