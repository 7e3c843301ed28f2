//! The runtime behind [`run`]: reads `simba.toml`, opens ONE session, starts an
//! election per scheduled job and joins every partition group, runs until SIGINT or SIGTERM,
//! then hands everything over (H1) and closes the session (rule J4).

mod config;
mod jobs;
mod registry;
mod security;

use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use config::{
    DEFAULT_BACKEND_URL, DEFAULT_START_TIMEOUT, JobOverride, MAX_HISTORY_RETENTION, MAX_RETRY, RuntimeConfig,
};
pub use jobs::JobsHandle;
pub use registry::REGISTRY_CHECK_PERIOD;

use crate::job::{
    GroupSpec, JOB_POLICIES, JobPolicy, JobSettings, Misfire, PARTITIONED_JOBS, PartitionedJob, Recording, RunPolicy,
    SCHEDULED_JOBS, Schedule, ScheduledJob, Timer, node_name,
};
use crate::{ConfigError, Error, Simba};

/// Reads `simba.toml` (`SIMBA_CONFIG`, else `./simba.toml`, else the embedded default: SQLite
/// in `./simba.db`), applies `SIMBA_*` environment overrides, opens the session, runs every
/// job registered with `#[simba_scheduled]` / `#[simba_partitioned]` while this node holds its
/// term, and returns after SIGINT or SIGTERM once everything was handed over and the session
/// closed. A bad configuration is an error and nothing starts.
pub async fn run() -> Result<(), Error> {
    Runtime::builder().run().await
}

/// Programmatic control of the runtime: [`run`] is `Runtime::builder().run()`.
#[derive(Debug, Clone, Copy)]
pub struct Runtime;

impl Runtime {
    /// A builder that reads the configuration as [`run`] does and uses the link-time
    /// registry.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder {
            config: ConfigSource::Load,
            scheduled: Vec::new(),
            partitioned: Vec::new(),
            policies: Vec::new(),
            clock: crate::job::WallClock::System,
            registry: true,
            shutdown: None,
            backend: None,
            seed: None,
            node: None,
        }
    }
}

enum ConfigSource {
    Load,
    File(PathBuf),
    Given(Box<RuntimeConfig>),
}

type ShutdownFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
type MakeClient = Box<
    dyn FnOnce(crate::SimbaConfig, Option<u64>, Option<crate::backend::namespace::Namespace>) -> Result<Simba, Error>
        + Send,
>;

/// Configures and starts the runtime.
#[must_use]
pub struct RuntimeBuilder {
    config: ConfigSource,
    scheduled: Vec<ScheduledJob>,
    partitioned: Vec<PartitionedJob>,
    policies: Vec<JobPolicy>,
    clock: crate::job::WallClock,
    registry: bool,
    shutdown: Option<ShutdownFuture>,
    backend: Option<MakeClient>,
    seed: Option<u64>,
    node: Option<String>,
}

impl RuntimeBuilder {
    /// Names this node in run records and in its published registry (default: `SIMBA_NODE`,
    /// else `host:pid`), e.g. a Kubernetes pod name.
    pub fn node_name(mut self, name: impl Into<String>) -> Self {
        self.node = Some(name.into());
        self
    }

    /// Uses this backend instead of the configuration's `[backend] url` (for tests and for
    /// backends built in code).
    pub fn backend<B: crate::backend::Backend>(mut self, backend: B) -> Self {
        self.backend = Some(Box::new(move |config, seed, namespace| {
            let mut b = Simba::builder().backend(backend).config(config);
            if let Some(ns) = namespace {
                b = b.namespace(ns);
            }
            match seed {
                Some(s) => b.seed(s).build(),
                None => b.build(),
            }
        }));
        self
    }

    /// Seeds the candidates' retry jitter, for reproducible tests.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Reads this file instead of `SIMBA_CONFIG` / `./simba.toml` (overrides still apply).
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config = ConfigSource::File(path.into());
        self
    }

    /// Uses this configuration as it is.
    pub fn config(mut self, config: RuntimeConfig) -> Self {
        self.config = ConfigSource::Given(Box::new(config));
        self
    }

    /// Adds a scheduled job written by hand.
    pub fn job(mut self, job: ScheduledJob) -> Self {
        self.scheduled.push(job);
        self
    }

    /// Adds a partitioned job written by hand.
    pub fn partitioned(mut self, job: PartitionedJob) -> Self {
        self.partitioned.push(job);
        self
    }

    /// Sets the retry and timeout options of a job added by hand (the macros register them
    /// for theirs); `[jobs.NAME]` keys still override them.
    pub fn policy(mut self, policy: JobPolicy) -> Self {
        self.policies.push(policy);
        self
    }

    /// Computes cron slots and records on this wall clock instead of the system's (tests on
    /// paused Tokio time: [`WallClock::follow_tokio_from`](crate::job::WallClock::follow_tokio_from)).
    pub fn wall_clock(mut self, clock: crate::job::WallClock) -> Self {
        self.clock = clock;
        self
    }

    /// Ignores the jobs registered by the macros; runs only those added to the builder.
    pub fn without_registry(mut self) -> Self {
        self.registry = false;
        self
    }

    /// Shuts down when `signal` completes instead of on SIGINT / SIGTERM.
    pub fn shutdown_on(mut self, signal: impl Future<Output = ()> + Send + 'static) -> Self {
        self.shutdown = Some(Box::pin(signal));
        self
    }

    /// Validates everything, connects, and starts every job; returns a handle to stop them.
    pub async fn start(self) -> Result<RunningRuntime, Error> {
        let config = self.config.load()?;
        let mut scheduled = self.scheduled;
        let mut partitioned = self.partitioned;
        let mut policies = self.policies;
        if self.registry {
            scheduled.extend(SCHEDULED_JOBS.iter().cloned());
            partitioned.extend(PARTITIONED_JOBS.iter().cloned());
            policies.extend(JOB_POLICIES.iter().copied());
        }
        let plan = plan(&config, &scheduled, &partitioned, &policies)?;
        #[cfg(feature = "prometheus")]
        if config.metrics_listen.is_some() {
            crate::metrics::recorder()?;
        }
        let simba = connect(self.backend, self.seed, &config).await?;
        #[cfg(feature = "prometheus")]
        let metrics = match config.metrics_listen {
            Some(addr) => match crate::metrics::serve(addr, &simba).await {
                Ok(m) => Some(m),
                Err(e) => {
                    simba.close().await;
                    return Err(e);
                }
            },
            None => None,
        };
        #[cfg(feature = "dashboard")]
        let dashboard = match crate::dashboard::start_for_runtime(&simba, &config, &scheduled, &partitioned).await {
            Ok(d) => d,
            Err(e) => {
                simba.close().await;
                return Err(e);
            }
        };
        tracing::info!(
            config = %config.source,
            backend = %redact(&config.backend_url),
            namespace = config.namespace.as_ref().map_or("(default)", |n| n.as_str()),
            jobs = plan.jobs.len(),
            groups = plan.groups.len(),
            "simba runtime starting"
        );
        let store = simba.job_store().map(|s| match config.history_retention {
            Some(records) => s.keeping(records),
            None => s,
        });
        let (control_stop, control) = watch_control(&simba, store.as_ref());
        let node = self.node.map_or_else(node_name, Into::into);
        let jobs = JobsHandle::new(simba.clone(), config, policies, store.clone(), control, node, self.clock);
        for job in plan.jobs {
            if let Err(e) = jobs.start_scheduled(job) {
                // Nothing half-started: what did start is handed over, the session closed.
                jobs.stop_all().await;
                control_stop.cancel();
                simba.close().await;
                return Err(e);
            }
        }
        for g in plan.groups {
            jobs.start_group(g);
        }
        let registry = registry::start(&simba, store.as_ref(), &jobs, control_stop.clone());
        Ok(RunningRuntime {
            simba,
            jobs,
            registry,
            control_stop,
            shutdown: self.shutdown,
            #[cfg(feature = "prometheus")]
            metrics,
            #[cfg(feature = "dashboard")]
            dashboard,
        })
    }

    /// [`start`](RuntimeBuilder::start), then wait for SIGINT / SIGTERM (or the
    /// [`shutdown_on`](RuntimeBuilder::shutdown_on) signal), then
    /// [`shutdown`](RunningRuntime::shutdown).
    pub async fn run(self) -> Result<(), Error> {
        let mut running = self.start().await?;
        match running.shutdown.take() {
            Some(signal) => signal.await,
            None => wait_for_signal().await,
        }
        tracing::info!("shutting down: handing every job over");
        running.shutdown().await;
        Ok(())
    }
}

/// The runtime's one client: built by the builder's backend, or connected to `[backend] url`.
async fn connect(backend: Option<MakeClient>, seed: Option<u64>, config: &RuntimeConfig) -> Result<Simba, Error> {
    match backend {
        Some(make) => make(config.session, seed, config.namespace.clone()),
        None => {
            connect_within(config, || Simba::connect_in(&config.backend_url, config.namespace.clone(), config.session))
                .await
        }
    }
}

/// Whether `e` is a backend that could not be reached (worth another try), as opposed to one
/// that answered how it is misconfigured, or a configuration error.
fn unavailable(e: &Error) -> bool {
    matches!(e, Error::Backend { source: crate::backend::BackendError::Unavailable { .. }, .. })
}

/// `attempt` until it succeeds, fails for a reason other than an unavailable backend, or
/// `[backend] start_timeout` has passed since the first try. Between tries it waits the
/// session's backoff: `min_backoff`, doubling up to `renew_interval` (as a session that
/// cannot open does). A node started while its database restarts waits for it instead of
/// exiting, which would leave its jobs without this node until someone restarts it.
async fn connect_within<F, Fut>(config: &RuntimeConfig, mut attempt: F) -> Result<Simba, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Simba, Error>>,
{
    use crate::engine::session::error_chain;
    let url = redact(&config.backend_url);
    let started = tokio::time::Instant::now();
    let mut backoff = config.session.min_backoff();
    let mut tries = 1u32;
    loop {
        let e = match attempt().await {
            Ok(simba) => {
                if tries > 1 {
                    tracing::info!(url = %url, tries, waited = ?started.elapsed(), "the backend is reachable");
                }
                return Ok(simba);
            }
            Err(e) => e,
        };
        let waited = started.elapsed();
        if !unavailable(&e) {
            tracing::error!(url = %url, error = %error_chain(&e), "cannot connect to the backend");
            return Err(e);
        }
        if waited >= config.start_timeout {
            tracing::error!(
                url = %url, error = %error_chain(&e), tries, waited = ?waited, start_timeout = ?config.start_timeout,
                "cannot connect to the backend: still unavailable when [backend] start_timeout ran out; check that the \
                 server is up and reachable from here, or raise start_timeout to wait longer"
            );
            return Err(e);
        }
        let wait = backoff.min(config.start_timeout - waited);
        tracing::warn!(
            url = %url, error = %error_chain(&e), tries, retry_in = ?wait, start_timeout = ?config.start_timeout,
            "the backend is unavailable; trying again until [backend] start_timeout runs out"
        );
        tokio::time::sleep(wait).await;
        backoff = config.session.next_open_backoff(backoff);
        tries += 1;
    }
}

/// A started runtime.
pub struct RunningRuntime {
    simba: Simba,
    jobs: JobsHandle,
    registry: registry::RegistryWatch,
    control_stop: CancellationToken,
    shutdown: Option<ShutdownFuture>,
    #[cfg(feature = "prometheus")]
    metrics: Option<crate::metrics::MetricsServer>,
    #[cfg(feature = "dashboard")]
    dashboard: Option<crate::dashboard::DashboardServer>,
}

impl RunningRuntime {
    /// The client the runtime uses (its one session).
    pub fn simba(&self) -> &Simba {
        &self.simba
    }

    /// Where `/metrics` and `/healthz` are served, when `[metrics] listen` is set (feature
    /// `prometheus`).
    #[cfg(feature = "prometheus")]
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics.as_ref().map(crate::metrics::MetricsServer::local_addr)
    }

    /// Where the dashboard is served, when `[dashboard] listen` is set (feature `dashboard`).
    #[cfg(feature = "dashboard")]
    pub fn dashboard_addr(&self) -> Option<std::net::SocketAddr> {
        self.dashboard.as_ref().map(crate::dashboard::DashboardServer::local_addr)
    }

    /// The handle that adds and removes jobs on this node while it runs (issue 12 item 7).
    pub fn jobs(&self) -> JobsHandle {
        self.jobs.clone()
    }

    /// The last comparison this node made of the live nodes' published job registries
    /// (issue 12 item 5; made after each publish and every [`REGISTRY_CHECK_PERIOD`]); `None`
    /// before the first one, or without a jobs store.
    pub fn registry_report(&self) -> Option<crate::job::RegistryReport> {
        self.registry.get()
    }

    /// Hands every job and partition over in the H1 order, then closes the session.
    pub async fn shutdown(self) {
        self.jobs.stop_all().await;
        // The runs just ended wrote their end records; the session stays open until the store
        // took them (or the bound passed), so a graceful stop loses no history.
        self.jobs.flush_records(RECORDS_AT_STOP).await;
        self.control_stop.cancel();
        self.simba.close().await;
        #[cfg(feature = "prometheus")]
        if let Some(m) = self.metrics {
            m.stop().await;
        }
        #[cfg(feature = "dashboard")]
        if let Some(d) = self.dashboard {
            d.stop().await;
        }
    }
}

impl std::fmt::Debug for RunningRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningRuntime").field("simba", &self.simba).finish_non_exhaustive()
    }
}

/// Watches the jobs store's control (pause, resume, run now) for the whole node: one
/// `control_version` call per renewal interval, and at once on a broadcast; every job's
/// scheduler hears a move of `tx` (issue 12 item 2).
async fn control_loop(
    store: crate::job_store::SharedJobStore,
    every: std::time::Duration,
    tx: tokio::sync::watch::Sender<u64>,
    stop: CancellationToken,
) {
    let mut sub = store.subscribe_control();
    let mut last = store.control_version().await.ok();
    loop {
        let broadcast = async {
            match sub.as_mut() {
                Some(rx) => rx.recv().await.map(|_| ()).or_else(|e| match e {
                    tokio::sync::broadcast::error::RecvError::Lagged(_) => Ok(()),
                    tokio::sync::broadcast::error::RecvError::Closed => Err(()),
                }),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            r = broadcast => {
                match r {
                    Ok(()) => tx.send_modify(|v| *v += 1),
                    Err(()) => sub = None,
                }
                continue;
            }
            _ = tokio::time::sleep(every) => {}
        }
        match store.control_version().await {
            Ok(v) if Some(v) != last => {
                last = Some(v);
                tx.send_modify(|x| *x += 1);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "cannot read the jobs control version; trying again"),
        }
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

struct PlannedJob {
    name: String,
    lease: String,
    timer: Timer,
    misfire: Misfire,
    policy: RunPolicy,
    run: crate::job::ScheduledFn,
    /// What the node publishes about it (item 5).
    settings: JobSettings,
}

/// A partitioned job checked against the configuration, with what the node publishes about it.
struct PlannedGroup {
    spec: GroupSpec,
    settings: JobSettings,
}

struct Plan {
    jobs: Vec<PlannedJob>,
    groups: Vec<PlannedGroup>,
}

/// Checks jobs against the configuration before anything starts (J4, J7).
fn plan(
    config: &RuntimeConfig,
    scheduled: &[ScheduledJob],
    partitioned: &[PartitionedJob],
    policies: &[JobPolicy],
) -> Result<Plan, Error> {
    let mut names = BTreeSet::new();
    for n in scheduled.iter().map(|j| j.name).chain(partitioned.iter().map(|j| j.name)) {
        if !names.insert(n) {
            return Err(ConfigError::new(format!(
                "two jobs are named `{n}`: job names must be unique in a binary (rename one function, or give it another name)"
            ))
            .into());
        }
    }
    for name in config.jobs.keys() {
        if !names.contains(name.as_str()) {
            let known: Vec<&str> = names.iter().copied().collect();
            return Err(config_error(
                config,
                Some(&format!("jobs.{name}")),
                format!(
                    "[jobs.{name}] names no registered job; registered jobs: {} (is the crate that defines it linked? add `use that_crate as _;` to the binary)",
                    if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                ),
            ));
        }
    }
    let mut leases = BTreeSet::new();
    let mut jobs = Vec::new();
    for j in scheduled {
        let Some(job) = plan_scheduled(config, j, policies)? else { continue };
        if !leases.insert(j.lease.to_owned()) {
            let key = format!("jobs.{}.lease", j.name);
            return Err(config_error(
                config,
                Some(&key),
                format!("two jobs use the lease `{}`: give one of them another `lease`", j.lease),
            ));
        }
        jobs.push(job);
    }
    let mut groups = Vec::new();
    for j in partitioned {
        groups.extend(plan_group(config, j, policies)?);
    }
    for p in policies {
        if !names.contains(p.name) {
            return Err(ConfigError::new(format!(
                "retry/timeout options are set for `{}`, which names no job: add the job, or fix the name",
                p.name
            ))
            .with_key(format!("jobs.{}", p.name))
            .into());
        }
    }
    Ok(Plan { jobs, groups })
}

/// Checks scheduled job `j` against the configuration: `None` when `[jobs.NAME] enabled =
/// false` disables it.
fn plan_scheduled(
    config: &RuntimeConfig,
    j: &ScheduledJob,
    policies: &[JobPolicy],
) -> Result<Option<PlannedJob>, Error> {
    let key = |leaf: &str| format!("jobs.{}.{leaf}", j.name);
    let o = config.jobs.get(j.name).cloned().unwrap_or_default();
    if o.partitions.is_some() {
        let reason = format!("`{}` is a scheduled job, not a partitioned one", j.name);
        let e = ConfigError::at_key(key("partitions"), reason).with_file(config.source.as_str());
        return Err(config.locate(e, &key("partitions")).into());
    }
    if o.enabled == Some(false) {
        tracing::info!(job = j.name, "disabled by the configuration");
        return Ok(None);
    }
    crate::validate_name(j.lease)?;
    fits_namespace(config, j.name, j.lease, j.name)?;
    let spec = o.schedule.clone().unwrap_or_else(|| j.schedule.clone());
    let timer = Timer::new(&spec).map_err(|m| schedule_error(config, j.name, &spec, m))?;
    let (misfire, policy) = (o.misfire.unwrap_or(j.misfire), policy_of(j.name, policies, &o));
    Ok(Some(PlannedJob {
        name: j.name.to_owned(),
        lease: j.lease.to_owned(),
        timer,
        misfire,
        policy,
        run: j.run,
        settings: JobSettings::scheduled(j.name, j.lease, &spec, misfire, &policy),
    }))
}

/// Checks partitioned job `j` against the configuration: `None` when disabled. Its
/// recording is completed by the runtime (store, node, clock).
fn plan_group(
    config: &RuntimeConfig,
    j: &PartitionedJob,
    policies: &[JobPolicy],
) -> Result<Option<PlannedGroup>, Error> {
    let o = config.jobs.get(j.name).cloned().unwrap_or_default();
    if o.enabled == Some(false) {
        tracing::info!(job = j.name, "disabled by the configuration");
        return Ok(None);
    }
    let partitions = o.partitions.unwrap_or(j.partitions);
    if partitions == 0 {
        let key = format!("jobs.{}.partitions", j.name);
        return Err(config_error(config, Some(&key), format!("[jobs.{}] partitions must be at least 1", j.name)));
    }
    crate::validate_name(&format!("{}.{}", j.group, partitions - 1))?;
    fits_namespace(
        config,
        j.name,
        &format!("{}.{}", j.group, partitions - 1),
        &format!("{}/{}", j.name, partitions - 1),
    )?;
    let spec = o.schedule.clone().or_else(|| j.schedule.clone());
    let timer = match &spec {
        Some(s) => Some(Timer::new(s).map_err(|m| schedule_error(config, j.name, s, m))?),
        None => None,
    };
    let (misfire, policy) = (o.misfire.unwrap_or(j.misfire), policy_of(j.name, policies, &o));
    let settings = JobSettings::partitioned(j.name, j.group, partitions, spec.as_ref(), misfire, &policy);
    let spec = GroupSpec {
        job: j.name.into(),
        group: j.group.into(),
        partitions,
        timer,
        misfire,
        run: j.run,
        recording: Recording {
            metric: j.name.into(),
            job: j.name.into(),
            store: None,
            node: "".into(),
            policy,
            control: None,
            clock: crate::job::WallClock::System,
            writer: Default::default(),
        },
    };
    Ok(Some(PlannedGroup { spec, settings }))
}

/// How long a graceful stop waits for the jobs' last records to reach the store.
const RECORDS_AT_STOP: std::time::Duration = std::time::Duration::from_secs(5);

/// In a namespace, the names the store keeps are longer (`namespace~name`): refuses a job
/// whose longest lease or job name would not fit, at start, rather than at its first call.
fn fits_namespace(config: &RuntimeConfig, job: &str, lease: &str, record: &str) -> Result<(), Error> {
    use crate::backend::namespace::{MAX_STORED_JOB_LEN, MAX_STORED_NAME_LEN};
    let Some(ns) = &config.namespace else { return Ok(()) };
    for (what, name, limit) in [("lease", lease, MAX_STORED_NAME_LEN), ("history name", record, MAX_STORED_JOB_LEN)] {
        let stored = ns.map(name);
        let len = stored.chars().count();
        if len > limit {
            return Err(config_error(
                config,
                Some("backend.namespace"),
                format!(
                    "job `{job}`: in namespace `{ns}` its {what} `{name}` is stored as `{stored}`, {len} characters, \
                     more than the {limit} every backend keeps: use a shorter namespace or job name"
                ),
            ));
        }
    }
    Ok(())
}

/// An error of the configuration `config` (named as its file) about `key`, where `msg` says
/// where itself; the key's line in the file, or the variable that set it, as fields.
fn config_error(config: &RuntimeConfig, key: Option<&str>, msg: String) -> Error {
    let e = ConfigError::new(msg).with_file(config.source.as_str());
    match key {
        Some(k) => config.locate(e.with_key(k), k).into(),
        None => e.into(),
    }
}

/// A schedule the scheduler refused (`simba.toml` checks its own; this one is the code's, or
/// one set in a [`RuntimeConfig`] built by hand): its key is `jobs.NAME.cron` or
/// `jobs.NAME.fixed_rate`.
fn schedule_error(config: &RuntimeConfig, job: &str, spec: &Schedule, msg: String) -> Error {
    let leaf = match spec {
        Schedule::Cron { .. } => "cron",
        Schedule::FixedRate(_) => "fixed_rate",
    };
    let key = format!("jobs.{job}.{leaf}");
    config_error(config, Some(&key), format!("[jobs.{job}]: {msg}"))
}

/// The retry and timeout options of job `name`: the macro's (or the builder's), then the
/// `[jobs.NAME]` keys.
fn policy_of(name: &str, policies: &[JobPolicy], o: &JobOverride) -> RunPolicy {
    let mut p = RunPolicy::default();
    if let Some(reg) = policies.iter().rev().find(|p| p.name == name) {
        p.attempts = reg.retry.saturating_add(1);
        p.backoff = reg.backoff.unwrap_or(p.backoff);
        p.timeout = reg.timeout;
    }
    if let Some(r) = o.retry {
        p.attempts = r.saturating_add(1);
    }
    p.backoff = o.backoff.unwrap_or(p.backoff);
    p.timeout = o.timeout.or(p.timeout);
    p
}

/// `url` with every secret masked as `***`, for logs, errors and any output: the password
/// of the userinfo (`postgres://user:***@host/db`, `zk://digest:***@host`) and the values
/// of secret query parameters (`password=`, `sslpassword=`, `auth=`, `token=`, ...).
pub fn redact(url: &str) -> String {
    crate::secret::redact_url(url)
}

impl ConfigSource {
    /// The configuration this source names: `simba.toml` (or `SIMBA_CONFIG`), a file, or one
    /// given.
    fn load(self) -> Result<RuntimeConfig, Error> {
        match self {
            ConfigSource::Load => RuntimeConfig::load(),
            ConfigSource::File(p) => RuntimeConfig::load_file(&p),
            ConfigSource::Given(c) => Ok(*c),
        }
    }
}

/// Starts the loop that follows the jobs store's control version (pause, resume, run now)
/// once per renewal interval; returns its stop token and the version's receiver (none without
/// a store).
fn watch_control(
    simba: &Simba,
    store: Option<&crate::job_store::SharedJobStore>,
) -> (CancellationToken, Option<tokio::sync::watch::Receiver<u64>>) {
    let stop = CancellationToken::new();
    let control = store.map(|s| {
        let (tx, rx) = tokio::sync::watch::channel(0u64);
        let every = simba.config().renew_interval();
        tokio::spawn(control_loop(Arc::clone(s), every, tx, stop.clone()));
        rx
    });
    (stop, control)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop(_t: crate::Term) -> crate::job::JobFuture {
        crate::job::job_future(async {})
    }

    /// Issue 12 item 6: in a namespace, a job whose stored lease or history name would be too
    /// long for the store is refused at start (nothing starts), naming the stored name.
    #[test]
    fn item6_a_name_too_long_in_its_namespace_is_refused_at_start() {
        let ns = "n".repeat(100);
        let toml = format!("[backend]\nnamespace = \"{ns}\"\n");
        let config = RuntimeConfig::from_toml_str(&toml, "simba.toml", Vec::new()).expect("config");
        let job = |name: &'static str| ScheduledJob {
            name,
            lease: name,
            schedule: Schedule::FixedRate(std::time::Duration::from_secs(1)),
            misfire: Misfire::Skip,
            run: noop,
        };
        assert!(plan(&config, &[job("short")], &[], &[]).is_ok());
        let long = "l".repeat(30);
        let long: &'static str = long.leak();
        let e = plan(&config, &[job(long)], &[], &[]).err().expect("refused").to_string();
        assert!(e.contains("is stored as") && e.contains("131 characters, more than the 128"), "{e}");
        let group = PartitionedJob {
            name: "g",
            group: "gggggggggggggggggggggggggggggg",
            partitions: 100,
            schedule: None,
            misfire: Misfire::Skip,
            run: |_t, _i| crate::job::job_future(async {}),
        };
        assert!(
            plan(&config, &[], &[group], &[])
                .is_err_and(|e| e.to_string().contains("`gggggggggggggggggggggggggggggg.99`"))
        );
    }

    /// Issue 13 item 6: the errors found once the jobs are known carry the key's line in the
    /// file (or the variable that set it) as a field, like the errors of the file itself.
    #[test]
    fn item13_6_plan_errors_carry_the_line_of_their_key() {
        let fields = |e: Error| match e {
            Error::InvalidConfig(c) => c,
            other => panic!("not a configuration error: {other:?}"),
        };
        let job = ScheduledJob {
            name: "report",
            lease: "report",
            schedule: Schedule::FixedRate(std::time::Duration::from_secs(1)),
            misfire: Misfire::Skip,
            run: noop,
        };
        let text = "[session]\nlease_duration = \"15s\"\n\n[jobs.repotr]\nenabled = true\n";
        let config = RuntimeConfig::from_toml_str(text, "simba.toml", Vec::new()).expect("config");
        let c = fields(plan(&config, std::slice::from_ref(&job), &[], &[]).err().expect("unknown job"));
        assert_eq!((c.file(), c.line(), c.key()), (Some("simba.toml"), Some(4), Some("jobs.repotr")), "{c}");
        assert!(c.reason().contains("names no registered job; registered jobs: report"), "{c}");
        let text = "[jobs.report]\n# a partitioned job's option\npartitions = 4\n";
        let config = RuntimeConfig::from_toml_str(text, "simba.toml", Vec::new()).expect("config");
        let c = fields(plan(&config, std::slice::from_ref(&job), &[], &[]).err().expect("not partitioned"));
        assert_eq!((c.line(), c.key()), (Some(3), Some("jobs.report.partitions")), "{c}");
        assert!(c.to_string().starts_with("simba.toml: line 3, [jobs.report] partitions: "), "{c}");
        // Set by a variable: the variable, not a line.
        let over = vec![("SIMBA_BACKEND__NAMESPACE".to_owned(), "n".repeat(100))];
        let config =
            RuntimeConfig::from_toml_str("[backend]\nnamespace = \"x\"\n", "simba.toml", over).expect("config");
        let long: &'static str = "l".repeat(30).leak();
        let c = fields(
            plan(&config, &[ScheduledJob { name: long, lease: long, ..job.clone() }], &[], &[]).err().expect("long"),
        );
        assert_eq!(
            (c.line(), c.key(), c.env_var()),
            (None, Some("backend.namespace"), Some("SIMBA_BACKEND__NAMESPACE")),
            "{c}"
        );
        // A key the file does not have (the schedule is the code's): no line.
        let bad = ScheduledJob { schedule: Schedule::cron("not a cron"), ..job };
        let c = fields(plan(&RuntimeConfig::default(), &[bad], &[], &[]).err().expect("bad cron"));
        assert_eq!((c.line(), c.key(), c.env_var()), (None, Some("jobs.report.cron"), None), "{c}");
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact("redis://:hunter2@db:6379"), "redis://:***@db:6379");
        assert_eq!(redact("postgres://u:p@h/d"), "postgres://u:***@h/d");
        assert_eq!(redact("sqlite://simba.db"), "sqlite://simba.db");
    }

    /// A backend that answers `Unavailable` for the first `down` tries: the start's connect
    /// retries it on the session's backoff (100 ms doubling up to the 400 ms renewal interval
    /// here) until `[backend] start_timeout`, on paused time.
    async fn connect_after(down: u32, start_timeout: &str) -> (Result<Simba, Error>, u32, std::time::Duration) {
        let text = format!(
            "[backend]\nurl = \"memory://\"\nstart_timeout = \"{start_timeout}\"\n\n\
             [session]\nlease_duration = \"2s\"\nrenew_interval = \"400ms\"\n"
        );
        let config = RuntimeConfig::from_toml_str(&text, "simba.toml", Vec::new()).expect("config");
        let tries = std::sync::atomic::AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let r = connect_within(&config, || async {
            if tries.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < down {
                return Err(Error::Backend {
                    op: "connect",
                    name: None,
                    source: crate::backend::BackendError::Unavailable { message: "refused".into(), source: None },
                });
            }
            Simba::connect_in(&config.backend_url, None, config.session).await
        })
        .await;
        (r, tries.into_inner(), started.elapsed())
    }

    /// A node started while its backend restarts waits for it: three refusals, then the
    /// fourth try connects after 100 + 200 + 400 ms.
    #[tokio::test(start_paused = true)]
    async fn start_waits_for_an_unavailable_backend() {
        let (r, tries, waited) = connect_after(3, "60s").await;
        assert!(r.is_ok(), "{:?}", r.err());
        assert_eq!((tries, waited), (4, std::time::Duration::from_millis(700)));
    }

    /// Still unavailable when `start_timeout` runs out: the last error, at the timeout (100 +
    /// 200 + 400 + 300 ms, the last wait cut to what was left), after five tries.
    #[tokio::test(start_paused = true)]
    async fn start_gives_up_at_start_timeout() {
        let (r, tries, waited) = connect_after(u32::MAX, "1s").await;
        let e = r.expect_err("unavailable to the end");
        assert!(unavailable(&e), "{e}");
        assert_eq!((tries, waited), (5, std::time::Duration::from_secs(1)));
        let (r, tries, waited) = connect_after(u32::MAX, "0s").await;
        assert!(r.is_err());
        assert_eq!((tries, waited), (1, std::time::Duration::ZERO), "0s: one try");
    }

    /// A misconfigured backend (or any other error) fails at once: waiting cannot fix it.
    #[tokio::test(start_paused = true)]
    async fn start_fails_at_once_on_a_misconfigured_backend() {
        let config = RuntimeConfig::default();
        let tries = std::sync::atomic::AtomicU32::new(0);
        let r = connect_within(&config, || async {
            tries.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err(Error::Backend {
                op: "connect",
                name: None,
                source: crate::backend::BackendError::Misconfigured("password authentication failed".into()),
            })
        })
        .await;
        assert!(r.is_err());
        assert_eq!(tries.into_inner(), 1);
    }

    #[test]
    fn start_timeout_is_read_and_checked() {
        assert_eq!(RuntimeConfig::default().start_timeout, DEFAULT_START_TIMEOUT);
        let c = RuntimeConfig::from_toml_str("[backend]\nstart_timeout = \"5m\"\n", "simba.toml", Vec::new())
            .expect("valid");
        assert_eq!(c.start_timeout, std::time::Duration::from_secs(300));
        let over = vec![("SIMBA_BACKEND__START_TIMEOUT".to_owned(), "2s".to_owned())];
        let c = RuntimeConfig::from_toml_str("", "simba.toml", over).expect("valid");
        assert_eq!(c.start_timeout, std::time::Duration::from_secs(2));
        let e = RuntimeConfig::from_toml_str("[backend]\nstart_timeout = \"soon\"\n", "simba.toml", Vec::new())
            .expect_err("not a duration")
            .to_string();
        assert!(e.contains("start_timeout") && e.contains("invalid duration \"soon\""), "{e}");
    }
}
