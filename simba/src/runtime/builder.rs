//! [`RuntimeBuilder`]: what the runtime runs (the configuration, the registered jobs, those
//! added by hand) and how it starts: plan, connect, serve, start every job.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use super::config::RuntimeConfig;
use super::connect::{MakeClient, connect, warn_transport};
use super::jobs::JobsHandle;
use super::plan::{Plan, plan};
use super::registry;
use super::running::{RunningRuntime, Servers, watch_control};
use super::schedules;
use super::signals::{ShutdownFuture, wait_for_shutdown};
use crate::Error;
use crate::backend::BackendUrl;
use crate::job::{
    Handler, JOB_POLICIES, JobPolicy, PARTITIONED_JOBS, PartitionedJob, SCHEDULED_JOBS, ScheduledJob, StateMap,
    node_name,
};

enum ConfigSource {
    Load,
    File(PathBuf),
    Given(Box<RuntimeConfig>),
}

/// Configures and starts the runtime.
#[must_use]
pub struct RuntimeBuilder {
    config: ConfigSource,
    scheduled: Vec<ScheduledJob>,
    partitioned: Vec<PartitionedJob>,
    handlers: Vec<Handler>,
    policies: Vec<JobPolicy>,
    clock: crate::job::WallClock,
    registry: bool,
    shutdown: Option<ShutdownFuture>,
    backend: Option<MakeClient>,
    default_backend_url: Option<String>,
    seed: Option<u64>,
    node: Option<String>,
    state: StateMap,
    alert_hook: Option<std::sync::Arc<crate::job::AlertFn>>,
    late_after: Option<std::time::Duration>,
}

impl RuntimeBuilder {
    /// A builder that reads the configuration as [`run`](super::run) does and uses the
    /// link-time registry ([`Runtime::builder`](super::Runtime::builder)).
    pub(super) fn new() -> Self {
        RuntimeBuilder {
            config: ConfigSource::Load,
            scheduled: Vec::new(),
            partitioned: Vec::new(),
            handlers: Vec::new(),
            policies: Vec::new(),
            clock: crate::job::WallClock::System,
            registry: true,
            shutdown: None,
            backend: None,
            default_backend_url: None,
            seed: None,
            node: None,
            state: StateMap::default(),
            alert_hook: None,
            late_after: None,
        }
    }

    /// Calls `hook` with each [`Alert`](crate::job::Alert): a run that failed after its last
    /// attempt, a slot missed, and (with [`alert_late_after`](Self::alert_late_after)) a run
    /// that started late, for every job of this runtime, code-defined or a schedule stored as
    /// data. Each is delivered once per slot, by the node whose record of it took effect in the
    /// store. The hook runs on the job's record writer: hand anything slow (a webhook, a pager)
    /// to a channel or a task of its own. A hook that panics is caught and logged.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), simba::Error> {
    /// use simba::Runtime;
    /// use simba::job::AlertKind;
    ///
    /// let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    /// tokio::spawn(async move {
    ///     while let Some(alert) = rx.recv().await {
    ///         let alert: simba::job::Alert = alert;
    ///         eprintln!("{} {} at {}: {:?}", alert.kind.as_str(), alert.job, alert.slot, alert.reason);
    ///     }
    /// });
    /// Runtime::builder()
    ///     .on_alert(move |a| {
    ///         if a.kind != AlertKind::Late || a.job.starts_with("billing") {
    ///             let _ = tx.send(a.clone());
    ///         }
    ///     })
    ///     .alert_late_after(std::time::Duration::from_secs(30))
    ///     .run()
    ///     .await
    /// # }
    /// ```
    pub fn on_alert(mut self, hook: impl Fn(&crate::job::Alert) + Send + Sync + 'static) -> Self {
        self.alert_hook = Some(std::sync::Arc::new(hook));
        self
    }

    /// With [`on_alert`](Self::on_alert): a run whose first attempt starts more than `after`
    /// past its slot raises a `late` alert (default: no `late` alerts).
    pub fn alert_late_after(mut self, after: std::time::Duration) -> Self {
        self.late_after = Some(after);
        self
    }

    /// Names this node in run records and in its published registry (default: `SIMBA_NODE`,
    /// else `host:pid`), e.g. a Kubernetes pod name.
    pub fn node_name(mut self, name: impl Into<String>) -> Self {
        self.node = Some(name.into());
        self
    }

    /// Uses this backend instead of the configuration's `[backend] url` (for tests and for
    /// backends built in code).
    pub fn backend<B: crate::backend::Backend>(mut self, backend: B) -> Self {
        self.backend = Some(Box::new(move |client: crate::SimbaBuilder| client.backend(backend).build()));
        self
    }

    /// Uses `url` when the configuration names no backend (no `[backend] url`, no
    /// `SIMBA_BACKEND__URL`), where the start would otherwise refuse (rule J4). For examples
    /// and single-host tools that choose their store in code, as the quickstart does with
    /// `sqlite://simba.db`: a service deployed on several hosts should not set it, since each
    /// host started without configuration would then keep its own store and run every job. The
    /// start logs a warning when it uses `url`.
    pub fn default_backend_url(mut self, url: impl Into<String>) -> Self {
        self.default_backend_url = Some(url.into());
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

    /// Gives the jobs `value` as the application's state of type `T`: a job takes it as a
    /// parameter, [`State<T>`](crate::State) (a database pool, an HTTP client, an `Arc` of the
    /// application's own struct; cloned into each run). One value per type; a job that takes
    /// a type not given here is refused at start, before any job runs.
    ///
    /// ```no_run
    /// use simba::{Runtime, State, Term};
    ///
    /// #[derive(Clone)]
    /// struct Db(std::sync::Arc<String>);
    ///
    /// #[simba::simba_scheduled(fixed_rate = "10s")]
    /// async fn sweep(term: &Term, State(db): State<Db>) -> Result<(), simba::Error> {
    ///     term.ensure_valid(std::time::Duration::from_secs(1))?;
    ///     let _ = db.0.len();
    ///     Ok(())
    /// }
    ///
    /// # async fn start() -> Result<(), simba::Error> {
    /// Runtime::builder().state(Db(std::sync::Arc::new("postgres://...".into()))).run().await
    /// # }
    /// ```
    pub fn state<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.state.insert(value);
        self
    }

    /// Gives the jobs every value of `state` (the test kit's nodes share one set of values).
    #[cfg(feature = "testing")]
    pub(crate) fn with_state_map(mut self, state: StateMap) -> Self {
        self.state = state;
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

    /// Adds a handler written by hand (or made at runtime, [`Handler::from_closure`]): the code
    /// schedules stored as data name (ADR 0020), beside those `#[simba_handler]` registers. A
    /// node with at least one handler runs the schedules of the partitions of
    /// `simba.schedules` it holds.
    pub fn handler(mut self, handler: Handler) -> Self {
        self.handlers.push(handler);
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
        let mut config = self.config.load()?;
        // Before anything is planned, connected or created (a SQLite file), J4.
        if self.backend.is_none() {
            name_backend(&mut config, self.default_backend_url)?;
        }
        let (scheduled, partitioned, policies) = if self.registry {
            let scheduled = self.scheduled.into_iter().chain(SCHEDULED_JOBS.iter().cloned()).collect();
            let partitioned = self.partitioned.into_iter().chain(PARTITIONED_JOBS.iter().cloned()).collect();
            (scheduled, partitioned, self.policies.into_iter().chain(JOB_POLICIES.iter().copied()).collect())
        } else {
            (self.scheduled, self.partitioned, self.policies)
        };
        let plan = plan(&config, &scheduled, &partitioned, &policies)?;
        let handlers = schedules::collect(self.registry, self.handlers)?;
        check_state(&self.state, &plan, &scheduled, &partitioned)?;
        schedules::check_state(&self.state, &handlers)?;
        #[cfg(feature = "prometheus")]
        if config.metrics_listen.is_some() {
            crate::metrics::recorder_with(&config.metrics)?;
        }
        // Parsed once: the connection, the dashboard and the log line share it.
        let url = BackendUrl::new(config.backend_url.as_str());
        warn_transport(&config, self.backend.is_none().then_some(&url));
        // Before connecting: a webhook that cannot make its TLS client leaves nothing started.
        let alerts = alert_hook(self.alert_hook, &config.alerts)?
            .map(|h| crate::job::Alerts::new(h, self.late_after.or(config.alerts.late_after)));
        let simba = connect(self.backend, self.seed, &config, &url).await?;
        let servers = match Servers::start(&simba, &config, &url, &plan).await {
            Ok(s) => s,
            Err(e) => {
                simba.close().await;
                return Err(e);
            }
        };
        tracing::info!(
            config = %config.source,
            backend = %url,
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
        let state = Arc::new(self.state);
        let parts = (state, alerts);
        let jobs = JobsHandle::new(simba.clone(), config, policies, store.clone(), control, node, self.clock, parts);
        let handler_names = handlers.iter().map(|h| h.name.to_string()).collect();
        let started = match start_jobs(&jobs, plan).await {
            Ok(()) => schedules::start(&jobs, handlers).await,
            Err(e) => Err(e),
        };
        if let Err(e) = started {
            jobs.stop_all().await;
            control_stop.cancel();
            simba.close().await;
            return Err(e);
        }
        let registry = registry::start(&simba, store.as_ref(), &jobs, control_stop.clone());
        Ok(RunningRuntime { simba, jobs, registry, control_stop, shutdown: self.shutdown, servers, handler_names })
    }

    /// [`start`](RuntimeBuilder::start), then wait for SIGINT / SIGTERM (or the
    /// [`shutdown_on`](RuntimeBuilder::shutdown_on) signal), then
    /// [`shutdown`](RunningRuntime::shutdown).
    pub async fn run(self) -> Result<(), Error> {
        let mut running = self.start().await?;
        wait_for_shutdown(running.shutdown.take()).await;
        tracing::info!("shutting down: handing every job over");
        running.shutdown().await;
        Ok(())
    }
}

/// Makes sure `config` names a backend (the builder was given none in code): a node that names
/// none must not run alone unannounced (J4), so it refuses, unless the application chose a
/// `default` in code, which it uses with a warning.
fn name_backend(config: &mut RuntimeConfig, default: Option<String>) -> Result<(), Error> {
    if !config.backend_url.is_empty() {
        return Ok(());
    }
    let Some(url) = default else { return config.require_backend() };
    tracing::warn!(
        config = %config.source, backend = %crate::secret::redact_url(&url),
        "no backend configured: using the application's default; nodes on other hosts do not share it (name one \
         with [backend] url or SIMBA_BACKEND__URL)"
    );
    config.backend_url = url;
    Ok(())
}

/// Refuses to start when a job the plan runs takes a [`State<T>`](crate::State) whose type
/// was not given (or a type was given twice): before anything connects or starts.
fn check_state(
    state: &StateMap,
    plan: &Plan,
    scheduled: &[ScheduledJob],
    partitioned: &[PartitionedJob],
) -> Result<(), Error> {
    let planned =
        |name: &str| plan.jobs.iter().any(|j| j.name == name) || plan.groups.iter().any(|g| &*g.spec.job == name);
    let needs = scheduled.iter().map(|j| (&j.name, j.needs)).chain(partitioned.iter().map(|j| (&j.name, j.needs)));
    for (name, needs) in needs.filter(|(name, _)| planned(name)) {
        state.check(name, needs).map_err(Error::invalid_config)?;
    }
    state.check("", &[]).map_err(Error::invalid_config)
}

/// Starts every planned job and group; when one cannot start, hands over what did (nothing
/// stays half-started) and returns its error.
async fn start_jobs(jobs: &JobsHandle, plan: Plan) -> Result<(), Error> {
    for job in plan.jobs {
        if let Err(e) = jobs.start_scheduled(job) {
            jobs.stop_all().await;
            return Err(e);
        }
    }
    for g in plan.groups {
        jobs.start_group(g);
    }
    Ok(())
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

/// The runtime's alert hook: the application's (`on_alert`), and with `[alerts] webhook` a
/// second one that queues each alert for the webhook (R13); `None` when there is neither.
fn alert_hook(
    app: Option<Arc<crate::job::AlertFn>>,
    settings: &super::AlertSettings,
) -> Result<Option<Arc<crate::job::AlertFn>>, Error> {
    #[cfg(feature = "webhook")]
    if let Some(url) = &settings.webhook {
        let ca = settings.webhook_ca_file.as_deref();
        let webhook = crate::job::webhook::Webhook::start(url, settings.webhook_timeout, ca)
            .map_err(|e| Error::from(crate::ConfigError::new(format!("[alerts] webhook: {e}"))))?;
        if !url.is_local() && url.expose().starts_with("http://") {
            tracing::warn!(url = %url, "the alert webhook is plain HTTP to another machine: its alerts and its URL's token cross the network unencrypted; use https");
        }
        tracing::info!(url = %url, "alerts are POSTed to the webhook");
        let hook: Arc<crate::job::AlertFn> = match app {
            // The webhook's first: an application hook that panics does not cost it the alert.
            Some(app) => Arc::new(move |a: &crate::job::Alert| {
                webhook.queue(a);
                app(a);
            }),
            None => Arc::new(move |a: &crate::job::Alert| webhook.queue(a)),
        };
        return Ok(Some(hook));
    }
    #[cfg(not(feature = "webhook"))]
    let _ = settings;
    Ok(app)
}
