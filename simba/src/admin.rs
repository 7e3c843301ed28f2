//! Operating jobs from a service's own code (issue 12 item 4): the operations of `simba jobs`,
//! `simba history`, `simba pause`, `simba resume` and `simba trigger`, for an admin endpoint.
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

use crate::backend::{Backend, BackendError};
use crate::job::RegistryReport;
use crate::job_store::{JobState, RunRecord, SharedJobStore, group_of};

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
}

/// What a pause or resume did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Toggle {
    /// Whether the state changed (`false`: it was already paused, or already running).
    pub changed: bool,
    /// The state now.
    pub paused: bool,
}

/// The jobs of one store: list, history, pause, resume, run now.
#[derive(Clone)]
pub struct Jobs {
    store: SharedJobStore,
    registered: BTreeSet<String>,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs").field("store", &self.store.describe()).finish_non_exhaustive()
    }
}

impl Jobs {
    /// The operations on `store`.
    pub fn new(store: SharedJobStore) -> Self {
        Jobs { store, registered: BTreeSet::new() }
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
    pub fn with_registered<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Self {
        self.registered.extend(names.into_iter().map(Into::into));
        self
    }

    /// The registry of this binary (`#[simba_scheduled]` / `#[simba_partitioned]`) as
    /// registered names.
    pub fn with_linked_registry(self) -> Self {
        let names = crate::job::SCHEDULED_JOBS
            .iter()
            .map(|j| j.name)
            .chain(crate::job::PARTITIONED_JOBS.iter().map(|j| j.name))
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
        self.check(job).await?;
        let was = self.store.set_paused(job, true).await?;
        if !was {
            tracing::info!(job, "job paused");
        }
        Ok(Toggle { changed: !was, paused: true })
    }

    /// Resumes `job`.
    pub async fn resume(&self, job: &str) -> Result<Toggle, AdminError> {
        self.check(job).await?;
        let was = self.store.set_paused(job, false).await?;
        if was {
            tracing::info!(job, "job resumed");
        }
        Ok(Toggle { changed: was, paused: false })
    }

    /// Asks the holder of `job`'s term to run it once now (recorded as a `manual` slot); if
    /// nobody holds it, the next holder runs it. Returns the request's id.
    pub async fn trigger(&self, job: &str) -> Result<u64, AdminError> {
        self.trigger_at(job, chrono::Utc::now()).await
    }

    /// [`trigger`](Self::trigger) with the request's time given (the manual slot's instant):
    /// for a wall clock that is not the system's, as in `simba::testing`.
    pub async fn trigger_at(&self, job: &str, at: chrono::DateTime<chrono::Utc>) -> Result<u64, AdminError> {
        self.check(job).await?;
        let id = self.store.trigger(job, at.timestamp_millis()).await?;
        tracing::info!(job, id, "run requested");
        Ok(id)
    }

    /// What the live nodes published about the jobs they run, compared (issue 12 item 5): the
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
}
