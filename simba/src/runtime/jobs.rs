//! Jobs added and removed while the runtime runs: the runtime's set of
//! running jobs, behind a handle that the runtime itself uses to start and stop them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::config::RuntimeConfig;
use super::plan::{PlannedGroup, PlannedJob, plan_group, plan_scheduled};
use std::time::Duration;

use crate::job::{
    Alerts, GroupSpec, Handler, JobPolicy, JobSettings, Misfire, PartitionedJob, Pending, Policies, Recording,
    RunPolicy, SCHEDULES_GROUP, ScheduledJob, Shards, StateMap, WallClock, Writer, run_group, run_scheduled,
};
use crate::job_store::SharedJobStore;
use crate::schedule_store::SharedScheduleStore;
use crate::{ConfigError, Election, Error, Simba, Term};

/// How many records of the node's schedules are written at once (on as many lanes of one
/// writer, each schedule's records in order on its own lane): every schedule of the node
/// shares the writer, and one write at a time (two round trips and a commit on most stores)
/// held a node to about 100 records a second on etcd, MariaDB and SQLite.
const SCHEDULE_WRITER_LANES: usize = 8;
/// The schedule-slot claims one node has in flight at once, on every store: on etcd, a node's
/// claims beyond about this many at once waited longer in the server than their call timeout
/// (P14, 1,000 claims a second); on PostgreSQL a bound of 768 (three batches) measured worse
/// (p99 1,029 ms against 524 ms at 2,500 a second).
const SCHEDULE_CLAIMS_IN_FLIGHT: usize = 32;

/// Adds and removes scheduled and partitioned jobs on this node while the runtime runs, from
/// [`RunningRuntime::jobs`](super::RunningRuntime::jobs). Cheap to clone.
///
/// A job added here runs on this node only, under the same rules as one registered at start:
/// an election on its lease (or a membership of its group), its `[jobs.NAME]` keys and its
/// retry and timeout options (given to the builder or by the macro) when it has any, history
/// and control in the jobs store. Other nodes run it only once they add it too; until then
/// the cluster disagrees about it, and only the nodes that have it hold its lease. Removing a
/// job hands it over as a shutdown does (H1: the run in flight is cancelled and awaited, then
/// the lease is released), so another node that has the job takes it at once.
///
/// A job made at run time can own its name and capture what it needs
/// ([`ScheduledJob::from_closure`](crate::job::ScheduledJob::from_closure)).
#[derive(Clone)]
pub struct JobsHandle {
    inner: Arc<Inner>,
}

struct Inner {
    simba: Simba,
    config: RuntimeConfig,
    policies: Vec<JobPolicy>,
    store: Option<SharedJobStore>,
    control: Option<watch::Receiver<u64>>,
    node: Arc<str>,
    clock: WallClock,
    /// The application's state the jobs take ([`State<T>`](crate::State)).
    state: Arc<StateMap>,
    /// The application's alert hook, if it registered one.
    alerts: Option<Alerts>,
    running: Mutex<BTreeMap<String, Running>>,
    /// The handlers of schedules stored as data this node runs (published in its registry).
    handlers: Mutex<Vec<String>>,
    /// Moves whenever a job starts or stops, so that the node publishes its registry again.
    changed: watch::Sender<u64>,
    /// The records the jobs' writers still hold, which a graceful stop waits for.
    pending: Arc<Pending>,
}

enum Running {
    Scheduled { lease: String, election: Election, settings: JobSettings },
    Group { group: String, partitions: u32, stop: CancellationToken, task: JoinHandle<()>, settings: JobSettings },
}

impl Running {
    /// Whether this job uses lease `lease`, or a lease of group `group` when one is given.
    fn uses(&self, lease: &str, group: Option<&str>) -> bool {
        match self {
            Running::Scheduled { lease: l, .. } => {
                l == lease || group.is_some_and(|g| l.strip_prefix(g).is_some_and(|r| r.starts_with('.')))
            }
            Running::Group { group: g, partitions, .. } => {
                group == Some(g.as_str())
                    || lease
                        .strip_prefix(g.as_str())
                        .and_then(|r| r.strip_prefix('.'))
                        .is_some_and(|i| i.parse::<u32>().is_ok_and(|i| i < *partitions))
            }
        }
    }
}

impl JobsHandle {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        simba: Simba,
        config: RuntimeConfig,
        policies: Vec<JobPolicy>,
        store: Option<SharedJobStore>,
        control: Option<watch::Receiver<u64>>,
        node: Arc<str>,
        clock: WallClock,
        (state, alerts): (Arc<StateMap>, Option<Alerts>),
    ) -> Self {
        let (changed, _) = watch::channel(0);
        let inner = Inner {
            simba,
            config,
            policies,
            store,
            control,
            node,
            clock,
            state,
            alerts,
            running: Mutex::default(),
            handlers: Mutex::default(),
            changed,
            pending: Arc::default(),
        };
        JobsHandle { inner: Arc::new(inner) }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Running>> {
        self.inner.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn recording(&self, name: &str, policy: RunPolicy) -> Recording {
        let i = &self.inner;
        Recording {
            metric: name.into(),
            job: name.into(),
            store: i.store.clone(),
            node: Arc::clone(&i.node),
            policy,
            control: i.control.clone(),
            clock: i.clock,
            writer: Writer::counted(Arc::clone(&i.pending), i.alerts.clone()),
            state: Arc::clone(&i.state),
            claims: None,
        }
    }

    /// Starts a planned scheduled job (the runtime's start, and [`add`](Self::add)).
    pub(super) fn start_scheduled(&self, job: PlannedJob) -> Result<(), Error> {
        let mut running = self.running();
        self.start_scheduled_in(&mut running, job)
    }

    /// [`start_scheduled`](Self::start_scheduled) under the lock of the running jobs, so that
    /// a check and the start it allows are one step.
    fn start_scheduled_in(&self, running: &mut BTreeMap<String, Running>, job: PlannedJob) -> Result<(), Error> {
        let election = self.inner.simba.election(job.lease.clone());
        let simba = self.inner.simba.clone();
        // Named in code, so bounded: its terms carry the lease name (rule O4).
        simba.shared.lease_metrics.declare(&job.lease, crate::metrics::LeaseKind::Job);
        let run = job.run;
        let rec = self.recording(&job.name, job.policy);
        let (timer, misfire, policies) = (job.timer, job.misfire, job.policies);
        election.run_while_leader(move |term: Term| {
            let run = run.clone();
            run_scheduled(simba.clone(), rec.clone(), timer.clone(), (misfire, policies), term, move |t| run(t))
        })?;
        running.insert(job.name, Running::Scheduled { lease: job.lease, election, settings: job.settings });
        self.inner.changed.send_modify(|v| *v += 1);
        Ok(())
    }

    /// Starts a planned partition group (the runtime's start, and
    /// [`add_partitioned`](Self::add_partitioned)).
    pub(super) fn start_group(&self, g: PlannedGroup) {
        let mut running = self.running();
        self.start_group_in(&mut running, g);
    }

    fn start_group_in(&self, running: &mut BTreeMap<String, Running>, planned: PlannedGroup) {
        let PlannedGroup { spec: mut g, settings } = planned;
        g.recording = self.recording(&g.job, g.recording.policy);
        let (name, group, partitions) = (g.job.to_string(), g.group.to_string(), g.partitions);
        let stop = CancellationToken::new();
        let task = tokio::spawn(run_group(self.inner.simba.clone(), g, stop.clone()));
        running.insert(name, Running::Group { group, partitions, stop, task, settings });
        self.inner.changed.send_modify(|v| *v += 1);
    }

    /// Starts the built-in group `simba.schedules` (ADR 0020): `partitions` partitions whose
    /// holders run the schedules of `store` with `handlers`; published as a partitioned job of
    /// that name, so the registry check shows a node that does not run schedules.
    pub(super) fn start_schedules(&self, store: SharedScheduleStore, handlers: Vec<Handler>, partitions: u32) {
        let policy = RunPolicy::default();
        let mut recording = self.recording(SCHEDULES_GROUP, policy);
        recording.writer = recording.writer.lanes(SCHEDULE_WRITER_LANES);
        // The claims of the node's schedules in flight at once: a store slower than the
        // schedules' rate must not get every due claim at once (on etcd, 2,500 a second on one
        // HTTP/2 connection timed out together, and the streams cancelled made the client close
        // the connection, the sessions' renewals with it); the others wait on the node until
        // their call timeout, then their slots are recorded `missed`, never sent.
        recording.claims = Some(Arc::new(tokio::sync::Semaphore::new(SCHEDULE_CLAIMS_IN_FLIGHT)));
        *self.inner.handlers.lock().unwrap_or_else(PoisonError::into_inner) =
            handlers.iter().map(|h| h.name.to_string()).collect();
        let shards = Shards::new(self.inner.simba.clone(), store, handlers, recording.clone());
        let spec = GroupSpec {
            job: SCHEDULES_GROUP.into(),
            group: SCHEDULES_GROUP.into(),
            partitions,
            timer: None,
            misfire: Misfire::Skip,
            policies: Policies::new(),
            run: shards.worker(),
            recording,
        };
        let settings =
            JobSettings::partitioned(SCHEDULES_GROUP, SCHEDULES_GROUP, partitions, None, Misfire::Skip, &policy);
        self.start_group(PlannedGroup { spec, settings });
    }

    /// The configuration the jobs were planned with.
    pub(super) fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// The client the jobs run on.
    pub(super) fn simba(&self) -> &Simba {
        &self.inner.simba
    }

    /// The effective settings of every job running on this node (what it publishes, item 5).
    pub fn settings(&self) -> Vec<JobSettings> {
        self.running()
            .values()
            .map(|r| match r {
                Running::Scheduled { settings, .. } | Running::Group { settings, .. } => settings.clone(),
            })
            .collect()
    }

    /// A receiver that sees a change whenever a job starts or stops on this node.
    pub(super) fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    /// The names of the handlers this node runs schedules with (none before they start).
    pub(super) fn handler_names(&self) -> Vec<String> {
        self.inner.handlers.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The wall clock the jobs' slots are computed on.
    pub(super) fn clock(&self) -> WallClock {
        self.inner.clock
    }

    /// The node's name, as its history records and its registry show it.
    pub(super) fn node(&self) -> Arc<str> {
        Arc::clone(&self.inner.node)
    }

    /// The names of the jobs running on this node (registered at start or added), sorted.
    pub fn names(&self) -> Vec<String> {
        self.running().keys().cloned().collect()
    }

    /// Refuses a job whose name or lease (or group) is taken on this node.
    fn check_free(
        running: &BTreeMap<String, Running>,
        name: &str,
        lease: &str,
        group: Option<&str>,
    ) -> Result<(), Error> {
        if running.contains_key(name) {
            return Err(Error::invalid_config(format!(
                "a job named `{name}` already runs on this node: remove it first, or give the new one another name"
            )));
        }
        if let Some((other, _)) = running.iter().find(|(_, r)| r.uses(lease, group)) {
            let what = group.map_or_else(|| format!("lease `{lease}`"), |g| format!("group `{g}`"));
            return Err(Error::invalid_config(format!(
                "job `{other}` already uses {what} on this node: give the new job another one"
            )));
        }
        Ok(())
    }

    /// Starts scheduled job `job` on this node now. Refused, with nothing started, when a
    /// running job has the same name or lease, when the job is disabled by `[jobs.NAME]
    /// enabled = false`, or when its settings are invalid (the same checks as at start).
    pub fn add(&self, job: ScheduledJob) -> Result<(), Error> {
        let Some(planned) = plan_scheduled(&self.inner.config, &job, &self.inner.policies)? else {
            return Err(self.disabled(&job.name));
        };
        self.inner.state.check(&job.name, job.needs).map_err(Error::invalid_config)?;
        let mut running = self.running();
        Self::check_free(&running, &job.name, &job.lease, None)?;
        self.start_scheduled_in(&mut running, planned)?;
        tracing::info!(job = %job.name, lease = %job.lease, "job added at run time");
        Ok(())
    }

    fn disabled(&self, name: &str) -> Error {
        ConfigError::new(format!("[jobs.{name}] enabled = false: the job is disabled on this node"))
            .with_file(self.inner.config.source.as_str())
            .with_key(format!("jobs.{name}.enabled"))
            .into()
    }

    /// Joins partitioned job `job`'s group on this node now. Refused like [`add`](Self::add).
    pub fn add_partitioned(&self, job: PartitionedJob) -> Result<(), Error> {
        let Some(planned) = plan_group(&self.inner.config, &job, &self.inner.policies)? else {
            return Err(self.disabled(&job.name));
        };
        self.inner.state.check(&job.name, job.needs).map_err(Error::invalid_config)?;
        let mut running = self.running();
        // The group itself, or any of its partition leases.
        Self::check_free(&running, &job.name, &format!("{}.0", job.group), Some(&job.group))?;
        tracing::info!(
            job = %job.name,
            group = %job.group,
            partitions = planned.spec.partitions,
            "partitioned job added at run time"
        );
        self.start_group_in(&mut running, planned);
        Ok(())
    }

    /// Stops job `name` on this node and hands it over (H1): a scheduled job's election stops
    /// (its run is cancelled and awaited, then its lease released); a partitioned job's
    /// workers stop and the node leaves the group. Returns once that is done. An unknown name
    /// is an error naming the nearest running job.
    pub async fn remove(&self, name: &str) -> Result<(), Error> {
        let taken = self.running().remove(name);
        match taken {
            Some(r) => {
                if let Running::Scheduled { lease, .. } = &r {
                    self.inner.simba.shared.lease_metrics.forget(lease);
                }
                self.inner.changed.send_modify(|v| *v += 1);
                stop(r).await;
                tracing::info!(job = name, "job removed at run time");
                Ok(())
            }
            None => {
                let names = self.names();
                let nearest = crate::suggest::nearest(name, names.iter().map(String::as_str));
                Err(Error::invalid_config(format!(
                    "no job named `{name}` runs on this node{}",
                    match nearest {
                        Some(n) => format!(" (did you mean `{n}`?)"),
                        None if names.is_empty() => String::from(" (none runs)"),
                        None => format!("; running: {}", names.join(", ")),
                    }
                )))
            }
        }
    }

    /// Stops every job in the H1 order of a shutdown: groups first, then elections.
    pub(super) async fn stop_all(&self) {
        let all = std::mem::take(&mut *self.running());
        let (groups, elections): (Vec<_>, Vec<_>) = all.into_values().partition(|r| matches!(r, Running::Group { .. }));
        for r in &groups {
            if let Running::Group { stop, .. } = r {
                stop.cancel();
            }
        }
        futures_util::future::join_all(groups.into_iter().map(stop)).await;
        futures_util::future::join_all(elections.into_iter().map(stop)).await;
    }

    /// Waits, for at most `limit`, until the jobs' writers have written (or given up) every
    /// record handed to them: the end records of the runs a stop just ended would otherwise
    /// die with the process. Records still held then are named in a warning.
    pub(super) async fn flush_records(&self, limit: Duration) {
        let left = self.inner.pending.drained(limit).await;
        if left > 0 {
            tracing::warn!(records = left, waited = ?limit, "stopping with job records the store has not taken; the history lacks them");
        }
    }
}

async fn stop(r: Running) {
    match r {
        Running::Scheduled { election, .. } => election.stop().await,
        Running::Group { stop, task, .. } => {
            stop.cancel();
            let _ = task.await;
        }
    }
}

impl std::fmt::Debug for JobsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobsHandle").field("jobs", &self.names()).finish()
    }
}
