//! A test kit for a service's own jobs (feature `testing`): the service's
//! `#[simba_scheduled]` / `#[simba_partitioned]` jobs run on the in-memory backend, on one or
//! several nodes in the test's process, under paused Tokio time, with a wall clock that
//! follows Tokio's (cron runs on paused time too). The test advances to a job's next slot,
//! injects what production does to a job (its term lost mid-run for each reason, a node
//! stalled past its lease, a takeover, a store outage), and asserts on the job's history.
//!
//! ```no_run
//! use simba::testing::{Loss, TestKit};
//! use simba::job_store::Outcome;
//!
//! #[simba::simba_scheduled(cron = "0 * * * * *")]
//! async fn report(_term: &simba::Term) -> Result<(), std::io::Error> {
//!     Ok(())
//! }
//!
//! #[tokio::test(start_paused = true)]
//! async fn report_runs_every_minute_and_survives_a_takeover() -> Result<(), simba::Error> {
//!     let kit = TestKit::builder().nodes(2).only(["report"]).start().await?;
//!     let slot = kit.advance_to_next_slot("report").await?;
//!     assert_eq!(kit.last("report").await?.map(|r| (r.slot_ms, r.outcome)), Some((slot.timestamp_millis(), Outcome::Ran)));
//!     kit.lose_term("report", Loss::TakenOver).await?;
//!     kit.advance_to_next_slot("report").await?;
//!     assert_eq!(kit.last("report").await?.map(|r| r.outcome), Some(Outcome::Ran));
//!     kit.shutdown().await;
//!     Ok(())
//! }
//! # fn main() {}
//! ```
//!
//! What the kit does not model: a process killed mid-run (in one process every node's tasks
//! live on; [`TestKit::stall_node`] is the nearest: its lease calls hang as a stopped
//! process's would), and the network between a node and its store (the in-memory store
//! answers at once or as the injected fault says).

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::admin::{AdminError, Jobs, Toggle};
use crate::backend::SessionId;
use crate::backend::memory::MemoryBackend;
use crate::job::{
    JOB_POLICIES, JobPolicy, PARTITIONED_JOBS, PartitionedJob, SCHEDULED_JOBS, Schedule, ScheduledJob, WallClock,
};
use crate::job_store::{RunRecord, SharedJobStore};
use crate::runtime::RunningRuntime;
use crate::tck::{Fault, FaultHandle, FaultyBackend};
use crate::{ConfigError, Error, Runtime, RuntimeConfig};

/// The kit's session timing unless [`TestKitBuilder::config_toml`] says otherwise: a 3 s
/// lease renewed every second, so that a failover takes a few seconds of (paused) time.
pub const DEFAULT_TOML: &str = "[session]\nlease_duration = \"3s\"\nrenew_interval = \"1s\"\n";

/// How long [`TestKit::advance_to_next_slot`] waits, after the slot, for its run to end.
pub const RUN_WAIT: Duration = Duration::from_secs(600);

/// How a term is lost ([`TestKit::lose_term`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Another client overwrote the lease in the store (revoke reason `TakenOver`).
    TakenOver,
    /// The store expired the holder's session (revoke reason `SessionExpired`): every term of
    /// that node ends, and it opens a new session.
    SessionExpired,
    /// The holder could not renew before its local deadline (revoke reason `DeadlinePassed`):
    /// its renewals hang for the lease duration, as a node cut off from the store sees it.
    DeadlinePassed,
}

/// Configures a [`TestKit`].
#[must_use]
pub struct TestKitBuilder {
    start: DateTime<Utc>,
    toml: String,
    nodes: usize,
    registry: bool,
    only: Option<BTreeSet<String>>,
    scheduled: Vec<ScheduledJob>,
    partitioned: Vec<PartitionedJob>,
    policies: Vec<JobPolicy>,
    state: crate::job::StateMap,
}

impl TestKitBuilder {
    /// The wall-clock time at the start (default 2026-01-01T00:00:00Z).
    pub fn starting_at(mut self, at: DateTime<Utc>) -> Self {
        self.start = at;
        self
    }

    /// The nodes' `simba.toml` (default [`DEFAULT_TOML`]); `[backend]` is ignored: the kit's
    /// nodes share one in-memory store.
    pub fn config_toml(mut self, toml: impl Into<String>) -> Self {
        self.toml = toml.into();
        self
    }

    /// How many nodes run the jobs (default 1).
    pub fn nodes(mut self, n: usize) -> Self {
        self.nodes = n;
        self
    }

    /// Runs only these of the registered jobs (default: every job the binary registers).
    pub fn only<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Self {
        self.only = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Runs none of the registered jobs; only those added with [`job`](Self::job) and
    /// [`partitioned`](Self::partitioned).
    pub fn without_registry(mut self) -> Self {
        self.registry = false;
        self
    }

    /// Adds a job written by hand.
    pub fn job(mut self, job: ScheduledJob) -> Self {
        self.scheduled.push(job);
        self
    }

    /// Adds a partitioned job written by hand.
    pub fn partitioned(mut self, job: PartitionedJob) -> Self {
        self.partitioned.push(job);
        self
    }

    /// Sets the retry and timeout options of a job added by hand.
    pub fn policy(mut self, policy: JobPolicy) -> Self {
        self.policies.push(policy);
        self
    }

    /// Gives the jobs `value` as the application's state of type `T`, as
    /// [`RuntimeBuilder::state`](crate::RuntimeBuilder::state) does (every node gets it).
    pub fn state<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.state.insert(value);
        self
    }

    /// Starts the nodes and waits until each has a live session. Errors: Tokio's clock is not
    /// paused (`#[tokio::test(start_paused = true)]`), a name in [`only`](Self::only) that no
    /// job has, no node, or the configuration's own errors.
    pub async fn start(self) -> Result<TestKit, Error> {
        ensure_paused_time().await?;
        if self.nodes == 0 {
            return Err(ConfigError::new("the test kit needs at least one node: nodes(1) or more")
                .with_key("nodes")
                .into());
        }
        let config = RuntimeConfig::from_toml_str(&self.toml, "the test kit's configuration", Vec::new())?;
        let mut scheduled = self.scheduled;
        let mut partitioned = self.partitioned;
        let mut policies = self.policies;
        if self.registry {
            scheduled.extend(SCHEDULED_JOBS.iter().cloned());
            partitioned.extend(PARTITIONED_JOBS.iter().cloned());
            policies.extend(JOB_POLICIES.iter().copied());
        }
        if let Some(only) = &self.only {
            let known: BTreeSet<&str> =
                scheduled.iter().map(|j| &*j.name).chain(partitioned.iter().map(|j| &*j.name)).collect();
            if let Some(missing) = only.iter().find(|n| !known.contains(n.as_str())) {
                let hint = crate::suggest::nearest(missing, known.iter().copied())
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_default();
                return Err(ConfigError::new(format!(
                    "the test kit was asked to run `{missing}`, which no job is named{hint}; jobs: {}",
                    known.into_iter().collect::<Vec<_>>().join(", ")
                ))
                .with_key("only")
                .into());
            }
            scheduled.retain(|j| only.contains(&*j.name));
            partitioned.retain(|j| only.contains(&*j.name));
            policies.retain(|p| only.contains(p.name));
        }
        let store = MemoryBackend::new();
        let clock = WallClock::follow_tokio_from(self.start);
        let mut nodes = Vec::with_capacity(self.nodes);
        for i in 0..self.nodes {
            let (backend, faults) = FaultyBackend::new(store.clone());
            let mut b = Runtime::builder()
                .config(config.clone())
                .without_registry()
                .backend(backend.with_job_store())
                .seed(i as u64 + 1)
                .wall_clock(clock)
                .with_state_map(self.state.clone());
            for j in &scheduled {
                b = b.job(j.clone());
            }
            for j in &partitioned {
                b = b.partitioned(j.clone());
            }
            for p in &policies {
                b = b.policy(*p);
            }
            let runtime = b.start().await?;
            runtime.simba().live().await?;
            nodes.push(Some(Node { runtime, faults }));
        }
        let jobs_store: SharedJobStore = crate::job_store::SharedJobStore::new(store.jobs());
        let jobs = Jobs::new(jobs_store.clone())
            .with_registered(scheduled.iter().map(|j| &*j.name).chain(partitioned.iter().map(|j| &*j.name)));
        Ok(TestKit { store, jobs_store, jobs, clock, config, scheduled, partitioned, nodes })
    }
}

/// Fails unless Tokio's clock is paused: a sleep of an hour of Tokio time must take no real
/// time (it auto-advances while the runtime is idle).
async fn ensure_paused_time() -> Result<(), Error> {
    let real = std::time::Instant::now();
    let _ = tokio::time::timeout(Duration::from_millis(200), std::future::pending::<()>()).await;
    if real.elapsed() >= Duration::from_millis(150) {
        return Err(Error::invalid_config(
            "the test kit runs on paused Tokio time: write #[tokio::test(start_paused = true)] \
             (tokio's `test-util` feature)",
        ));
    }
    Ok(())
}

struct Node {
    runtime: RunningRuntime,
    faults: FaultHandle,
}

/// Nodes running a service's jobs on one in-memory store, under paused Tokio time.
pub struct TestKit {
    store: MemoryBackend,
    jobs_store: SharedJobStore,
    jobs: Jobs,
    clock: WallClock,
    config: RuntimeConfig,
    scheduled: Vec<ScheduledJob>,
    partitioned: Vec<PartitionedJob>,
    /// `None` once stopped.
    nodes: Vec<Option<Node>>,
}

impl TestKit {
    /// A builder with the defaults: one node, every registered job, [`DEFAULT_TOML`],
    /// starting at 2026-01-01T00:00:00Z.
    pub fn builder() -> TestKitBuilder {
        TestKitBuilder {
            start: DateTime::from_timestamp(1_767_225_600, 0).unwrap_or_default(),
            toml: DEFAULT_TOML.to_owned(),
            nodes: 1,
            registry: true,
            only: None,
            scheduled: Vec::new(),
            partitioned: Vec::new(),
            policies: Vec::new(),
            state: Default::default(),
        }
    }

    /// The nodes' wall clock, now.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// The shared in-memory store (for what the kit does not wrap).
    pub fn store(&self) -> &MemoryBackend {
        &self.store
    }

    /// Job control and history on the store, as an operator's `simba` would.
    pub fn jobs(&self) -> &Jobs {
        &self.jobs
    }

    /// Lets `d` of Tokio time pass (instantly, on paused time); the nodes run meanwhile.
    pub async fn advance(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }

    /// Advances to the next slot of scheduled job `job` (a cron instant strictly after now;
    /// for a fixed rate, one period), then until the run of that slot has ended (its record
    /// is no longer `running`, at most [`RUN_WAIT`]), and returns the slot's wall-clock time.
    /// Errors: no such scheduled job, or a cron expression with no next slot.
    pub async fn advance_to_next_slot(&self, job: &str) -> Result<DateTime<Utc>, Error> {
        let spec = self.schedule(job)?;
        let slot = match spec {
            Schedule::FixedRate(period) => {
                self.advance(period).await;
                return Ok(self.now());
            }
            Schedule::Cron { expr, time_zone } => {
                let cron = crate::job::parse_cron(&expr)
                    .map_err(|m| ConfigError::new(m).with_key(format!("jobs.{job}.cron")))?;
                let tz = match time_zone {
                    Some(z) => crate::job::parse_time_zone(&z)
                        .map_err(|m| ConfigError::new(m).with_key(format!("jobs.{job}.time_zone")))?,
                    None => chrono_tz::Tz::UTC,
                };
                crate::job::next_slot(&cron, tz, self.now())
                    .ok_or_else(|| Error::invalid_config(format!("`{job}`'s cron {expr:?} has no next slot")))?
            }
        };
        let wait = (slot - self.now()).to_std().unwrap_or_default();
        self.advance(wait + Duration::from_millis(1)).await;
        let deadline = tokio::time::Instant::now() + RUN_WAIT;
        let step = Duration::from_millis(10);
        while tokio::time::Instant::now() < deadline {
            let ran = self
                .history(job)
                .await?
                .into_iter()
                .any(|r| r.slot_ms == slot.timestamp_millis() && r.outcome != crate::job_store::Outcome::Running);
            if ran {
                break;
            }
            self.advance(step).await;
        }
        Ok(slot)
    }

    /// The effective schedule of scheduled job `job` (the code's, or `[jobs.NAME]`'s).
    fn schedule(&self, job: &str) -> Result<Schedule, Error> {
        let j = self.scheduled.iter().find(|j| &*j.name == job).ok_or_else(|| self.unknown(job, "scheduled job"))?;
        Ok(self.config.jobs.get(job).and_then(|o| o.schedule.clone()).unwrap_or_else(|| j.schedule.clone()))
    }

    fn unknown(&self, job: &str, what: &str) -> Error {
        let names: Vec<&str> =
            self.scheduled.iter().map(|j| &*j.name).chain(self.partitioned.iter().map(|j| &*j.name)).collect();
        let hint = crate::suggest::nearest(job, names.iter().copied())
            .map(|s| format!(" (did you mean `{s}`?)"))
            .unwrap_or_default();
        Error::invalid_config(format!("the test kit runs no {what} named `{job}`{hint}; jobs: {}", names.join(", ")))
    }

    /// The lease that guards `job` (a scheduled job's, or partition `g/i`'s `g.i`).
    fn lease_of(&self, job: &str) -> Result<String, Error> {
        if let Some(j) = self.scheduled.iter().find(|j| &*j.name == job) {
            return Ok(j.lease.to_string());
        }
        if let Some((name, i)) = job.split_once('/')
            && let Some(p) = self.partitioned.iter().find(|p| p.name == name)
            && i.parse::<u32>().is_ok_and(|i| i < p.partitions)
        {
            return Ok(format!("{}.{i}", p.group));
        }
        Err(self.unknown(job, "job (or partition `job/i`)"))
    }

    /// `job`'s records, oldest first (a partition's as `job/i`).
    pub async fn history(&self, job: &str) -> Result<Vec<RunRecord>, Error> {
        let mut h = self.jobs_store.history(job, self.jobs_store.retention()).await.map_err(store_error)?;
        h.reverse();
        Ok(h)
    }

    /// `job`'s newest record.
    pub async fn last(&self, job: &str) -> Result<Option<RunRecord>, Error> {
        Ok(self.history(job).await?.pop())
    }

    /// The index of the node holding `job`'s term, if one does.
    pub fn holder(&self, job: &str) -> Result<Option<usize>, Error> {
        let lease = self.lease_of(job)?;
        let Some((Some(session), _)) = self.store.holder(&lease) else { return Ok(None) };
        Ok(self.node_of(&session))
    }

    fn node_of(&self, session: &SessionId) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.as_ref().is_some_and(|n| n.runtime.simba().session_id().as_ref() == Some(session)))
    }

    /// Ends the current term of `job` (its holder's; an error if none holds it) in the way
    /// `how` says, and lets the nodes see it (one renewal interval for a takeover or an
    /// expiry; the lease duration while renewals hang).
    pub async fn lose_term(&self, job: &str, how: Loss) -> Result<(), Error> {
        let lease = self.lease_of(job)?;
        let Some((Some(session), _)) = self.store.holder(&lease) else {
            return Err(Error::invalid_config(format!("no node holds `{job}`'s term (lease `{lease}`) to lose it")));
        };
        let renew = self.config.session.renew_interval();
        match how {
            Loss::TakenOver => {
                self.store.force_holder(&lease, None);
                self.advance(renew + renew / 2).await;
            }
            Loss::SessionExpired => {
                self.store.expire_session(&session);
                self.advance(renew + renew / 2).await;
            }
            Loss::DeadlinePassed => {
                let i = self
                    .node_of(&session)
                    .ok_or_else(|| Error::invalid_config(format!("`{job}`'s holder is no kit node")))?;
                self.stall_node(i, self.config.session.lease_duration()).await?;
            }
        }
        Ok(())
    }

    /// Node `i`'s lease calls hang for `d` (its keep-alives, acquisitions and releases never
    /// answer, as a stopped process's or a black-holed link's), then answer again. Past the
    /// lease duration its terms end (`DeadlinePassed`) and another node takes over.
    pub async fn stall_node(&self, i: usize, d: Duration) -> Result<(), Error> {
        let node = self.node(i)?;
        node.faults.set_all(Fault::Hang);
        self.advance(d).await;
        node.faults.clear();
        Ok(())
    }

    /// Every node's lease calls fail for `d` (the store is down), then succeed again.
    pub async fn outage(&self, d: Duration) {
        for n in self.nodes.iter().flatten() {
            n.faults.set_all(Fault::Fail);
        }
        self.advance(d).await;
        for n in self.nodes.iter().flatten() {
            n.faults.clear();
        }
    }

    fn node(&self, i: usize) -> Result<&Node, Error> {
        match self.nodes.get(i) {
            Some(Some(n)) => Ok(n),
            Some(None) => Err(Error::invalid_config(format!("node {i} of the test kit was stopped"))),
            None => Err(Error::invalid_config(format!("the test kit has {} node(s): no node {i}", self.nodes.len()))),
        }
    }

    /// Stops node `i` gracefully, as a deploy does: its terms end with `Stopped` (a run in
    /// flight is cancelled), it hands its leases over and closes its session; the other
    /// nodes take over at once.
    pub async fn stop_node(&mut self, i: usize) -> Result<(), Error> {
        self.node(i)?;
        if let Some(n) = self.nodes.get_mut(i).and_then(Option::take) {
            n.runtime.shutdown().await;
        }
        Ok(())
    }

    /// Pauses `job` cluster-wide (as `simba pause JOB`).
    pub async fn pause(&self, job: &str) -> Result<Toggle, Error> {
        self.jobs.pause(job).await.map_err(admin_error)
    }

    /// Resumes `job` (as `simba resume JOB`).
    pub async fn resume(&self, job: &str) -> Result<Toggle, Error> {
        self.jobs.resume(job).await.map_err(admin_error)
    }

    /// Asks the holder of `job` to run it now (as `simba trigger JOB`); answers the request's
    /// id (its key is generated).
    pub async fn trigger(&self, job: &str) -> Result<u64, Error> {
        Ok(self.jobs.trigger_at(job, None, self.now()).await.map_err(admin_error)?.id)
    }

    /// Stops every node gracefully (handover, session closed).
    pub async fn shutdown(self) {
        for n in self.nodes.into_iter().flatten() {
            n.runtime.shutdown().await;
        }
    }
}

fn store_error(e: crate::backend::BackendError) -> Error {
    Error::Backend { op: "read the jobs store", name: None, source: e }
}

fn admin_error(e: AdminError) -> Error {
    Error::invalid_config(e.to_string())
}
