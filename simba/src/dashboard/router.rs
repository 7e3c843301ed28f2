//! The dashboard as an axum [`Router`] that a service mounts on its own port (rule O2), and
//! the one place that assembles it: the stand-alone listeners (`[dashboard] listen`,
//! `simba dashboard`) serve the same router.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio_util::sync::CancellationToken;

use super::auth::Control;
use super::config::{ActionToken, DashboardConfig, check_host};
use super::hub::Hub;
use super::jobs::JobsControl;
use super::schedules::ScheduleOps;
use super::source::{BackendSource, Source, registered};
use crate::admin::{Jobs, Schedules};
use crate::backend::{Backend, BackendUrl, SharedBackend};
use crate::{Error, Simba};

/// How long one read of the store may take.
const READ_TIMEOUT: Duration = Duration::from_secs(3);

type Signal = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The web dashboard as an axum [`Router`], to `nest` in a service's own app: pages, JSON API,
/// event streams, actions (with a token), probes (`/livez`, `/readyz`, `/healthz`) and, with
/// [`metrics`](DashboardBuilder::metrics), `/metrics`. Start with
/// [`RunningRuntime::dashboard`](crate::runtime::RunningRuntime::dashboard) in a service that
/// runs the runtime, or with [`Dashboard::builder`].
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use axum::{Router, routing::get};
/// use simba::dashboard::Dashboard;
///
/// let running = simba::Runtime::builder().start().await?;
/// let simba_ui = running
///     .dashboard()                               // this node's session, jobs and backend
///     .allowed_hosts(["simba.example.com"])      // the ingress's host name
///     .router()?;
/// let app = Router::new().route("/", get(|| async { "my service" })).nest("/simba", simba_ui);
/// let listener = tokio::net::TcpListener::bind("0.0.0.0:8080").await?;
/// axum::serve(listener, app).await?;
/// # Ok(()) }
/// ```
///
/// The pages find the prefix they are nested under from each request (the router above
/// serves `/simba/`, `/simba/jobs`, `/simba/readyz`, ...); when a proxy rewrites the path on
/// the way, say what the browser sees with [`mount_prefix`](DashboardBuilder::mount_prefix).
#[derive(Debug)]
pub struct Dashboard {
    _private: (),
}

impl Dashboard {
    /// A builder: give it a data source ([`client`](DashboardBuilder::client) or
    /// [`backend`](DashboardBuilder::backend); a runtime's is
    /// [`RunningRuntime::dashboard`](crate::runtime::RunningRuntime::dashboard)), then call
    /// [`router`](DashboardBuilder::router).
    pub fn builder() -> DashboardBuilder {
        DashboardBuilder::default()
    }
}

/// Where the dashboard's data comes from.
pub(crate) enum Origin {
    /// A node's client: its session is labelled and `/readyz` reports it; `jobs` are the
    /// registered jobs to show schedules of.
    Client { simba: Simba, url: BackendUrl, jobs: Vec<crate::job::JobSettings> },
    /// A backend alone (an operator's view): `/readyz` reports the last read.
    Backend { backend: SharedBackend, url: BackendUrl },
}

/// Builds the dashboard's [`Router`] ([`Dashboard`]).
#[must_use = "call .router() to build the router"]
#[derive(Default)]
pub struct DashboardBuilder {
    origin: Option<Origin>,
    prefix: Option<String>,
    hosts: Vec<String>,
    actions: Option<ActionToken>,
    shutdown: Option<Signal>,
    #[cfg(feature = "prometheus")]
    metrics: bool,
}

impl std::fmt::Debug for DashboardBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardBuilder")
            .field("prefix", &self.prefix)
            .field("allowed_hosts", &self.hosts)
            .field("actions", &self.actions)
            .finish_non_exhaustive()
    }
}

impl DashboardBuilder {
    /// Shows what a node sees: its session, the jobs it runs (their schedules and next fires)
    /// and its backend ([`RunningRuntime::dashboard`](crate::runtime::RunningRuntime::dashboard)).
    pub(crate) fn node(mut self, simba: Simba, url: BackendUrl, jobs: Vec<crate::job::JobSettings>) -> Self {
        self.origin = Some(Origin::Client { simba, url, jobs });
        self
    }

    /// Shows what a client built by hand sees; `url` is its backend's URL, shown redacted
    /// (`postgres://user:***@host/db`) and masked in every error text.
    pub fn client(mut self, simba: &Simba, url: &str) -> Self {
        self.origin = Some(Origin::Client { simba: simba.clone(), url: BackendUrl::new(url), jobs: Vec::new() });
        self
    }

    /// Shows a backend without running a node (what `simba dashboard` does); `/readyz` then
    /// says whether the last read of the backend succeeded.
    pub fn backend<B: Backend>(mut self, backend: B, url: &str) -> Self {
        self.origin = Some(Origin::Backend { backend: Arc::new(backend), url: BackendUrl::new(url) });
        self
    }

    /// Takes the actions token and the allowed host names of a [`DashboardConfig`] (its
    /// `listen` is for the stand-alone listener and is not used here).
    pub fn config(mut self, config: &DashboardConfig) -> Self {
        self.actions = config.actions.clone();
        self.hosts = config.allowed_hosts.clone();
        self
    }

    /// Enables the actions (`POST api/jobs/JOB/{pause,resume,trigger}`), authorised by
    /// `Authorization: Bearer TOKEN`. Without it the dashboard is read-only.
    pub fn actions(mut self, token: ActionToken) -> Self {
        self.actions = Some(token);
        self
    }

    /// Host names accepted in the `Host` header besides IP literals and `localhost` (the
    /// default, which refuses DNS rebinding): the names an ingress or a proxy passes, such as
    /// `simba.example.com`. Exact names, any port; a request for another name gets 421. Each
    /// name is checked by [`router`](DashboardBuilder::router).
    pub fn allowed_hosts<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// The path prefix browsers reach the dashboard under, when it differs from the prefix
    /// the router is nested at (a proxy that rewrites paths). It starts with `/` (`"/ops/simba"`);
    /// without it, each request's own prefix is used.
    pub fn mount_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Also serves `/metrics` (Prometheus text), installing simba's Prometheus recorder as
    /// the process's `metrics` recorder (once; it fails when another one is installed).
    #[cfg(feature = "prometheus")]
    pub fn metrics(mut self) -> Self {
        self.metrics = true;
        self
    }

    /// Ends the event streams (and the reader) when `signal` completes: give it the signal
    /// that stops the service's server, so that a graceful shutdown does not wait for open
    /// pages. With a client or a runtime they also end when its session closes.
    pub fn shutdown_on(mut self, signal: impl Future<Output = ()> + Send + 'static) -> Self {
        self.shutdown = Some(Box::pin(signal));
        self
    }

    /// Checks the options and builds the router; its reader starts now (call it inside a Tokio
    /// runtime) and stops when the last clone of the router is dropped.
    pub fn router(self) -> Result<Router, Error> {
        let stop = CancellationToken::new();
        let (parts, options) = self.into_parts()?;
        assemble(parts, options, stop)
    }

    fn into_parts(self) -> Result<(Parts, Options), Error> {
        let prefix = self.prefix.map(|p| check_prefix(&p)).transpose().map_err(Error::invalid_config)?;
        let hosts = check_hosts(&self.hosts).map_err(Error::invalid_config)?;
        let Some(origin) = self.origin else {
            return Err(Error::invalid_config(
                "the dashboard has nothing to show: start from running.dashboard(), or call .client(&simba, url) \
                 or .backend(backend, url) before .router()",
            ));
        };
        let parts = Parts::of(origin, self.actions.is_some());
        #[cfg(feature = "prometheus")]
        let metrics = if self.metrics { Some(crate::metrics::recorder()?) } else { None };
        let options = Options {
            prefix,
            hosts,
            actions: self.actions,
            shutdown: self.shutdown,
            #[cfg(feature = "prometheus")]
            metrics,
        };
        Ok((parts, options))
    }
}

/// The checked mount prefix: `""` for `/`, else the path without its trailing `/`.
fn check_prefix(prefix: &str) -> Result<String, String> {
    if !prefix.starts_with('/') {
        return Err(format!(
            "dashboard mount prefix {prefix:?}: start it with `/` (e.g. \"/{}\"), the path browsers see",
            prefix.trim_start_matches('/')
        ));
    }
    if let Some(c) = prefix.chars().find(|c| c.is_whitespace() || c.is_control() || "?#\"'<>\\".contains(*c)) {
        return Err(format!("dashboard mount prefix {prefix:?}: {c:?} cannot be in a path prefix"));
    }
    Ok(prefix.trim_end_matches('/').to_owned())
}

fn check_hosts(hosts: &[String]) -> Result<Vec<String>, String> {
    hosts.iter().map(|h| check_host(h)).collect()
}

/// What the router shows and acts on.
pub(crate) struct Parts {
    pub(crate) source: Arc<dyn Source>,
    pub(crate) control: Option<Arc<dyn Control>>,
    /// The schedules pages' store (and its actions).
    pub(crate) schedules: Arc<ScheduleOps>,
    /// The node's client, for `/readyz`.
    pub(crate) session: Option<Simba>,
}

impl Parts {
    /// The source of `origin`, and its job control when `actions` are on and the backend has a
    /// jobs store.
    pub(crate) fn of(origin: Origin, actions: bool) -> Parts {
        match origin {
            Origin::Client { simba, url, jobs } => {
                let registry = registered(&jobs);
                let names: Vec<String> = registry.iter().map(|r| r.name.clone()).collect();
                let control = actions
                    .then(|| Jobs::for_client(&simba))
                    .flatten()
                    .map(|j| Arc::new(JobsControl::new(j.with_registered(names), url.secrets())) as Arc<dyn Control>);
                let backend = Arc::clone(&simba.shared.backend);
                let schedules = ScheduleOps::new(Schedules::for_client(&simba), simba.job_store(), url.secrets());
                let source =
                    BackendSource::new(backend, &url, READ_TIMEOUT, Some(simba.clone())).with_registry(registry);
                Parts { source: Arc::new(source), control, schedules: Arc::new(schedules), session: Some(simba) }
            }
            Origin::Backend { backend, url } => {
                let control = actions
                    .then(|| backend.job_store().map(Jobs::new))
                    .flatten()
                    .map(|j| Arc::new(JobsControl::new(j, url.secrets())) as Arc<dyn Control>);
                let schedules = ScheduleOps::new(schedules_of(&backend), backend.job_store(), url.secrets());
                let source = BackendSource::new(backend, &url, READ_TIMEOUT, None);
                Parts { source: Arc::new(source), control, schedules: Arc::new(schedules), session: None }
            }
        }
    }
}

/// The schedule operations of `backend` (with its jobs store, for run now), or why it has none.
fn schedules_of(backend: &SharedBackend) -> Result<Schedules, crate::admin::ScheduleError> {
    let Some(store) = backend.schedule_store() else {
        return Err(crate::admin::ScheduleError::Unsupported { store: backend.describe() });
    };
    let api = Schedules::new(store);
    Ok(match backend.job_store() {
        Some(jobs) => api.with_jobs(Jobs::new(jobs)),
        None => api,
    })
}

/// How the router behaves.
#[derive(Default)]
pub(crate) struct Options {
    pub(crate) prefix: Option<String>,
    pub(crate) hosts: Vec<String>,
    pub(crate) actions: Option<ActionToken>,
    pub(crate) shutdown: Option<Signal>,
    #[cfg(feature = "prometheus")]
    pub(crate) metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
}

impl Options {
    /// The options of a stand-alone listener configured by `config`.
    pub(crate) fn of_config(config: &DashboardConfig) -> Options {
        Options { actions: config.actions.clone(), hosts: config.allowed_hosts.clone(), ..Options::default() }
    }
}

/// Starts the reader and builds the router; `stop` ends the reader and the event streams
/// (and is cancelled when the last clone of the router is dropped).
pub(crate) fn assemble(parts: Parts, options: Options, stop: CancellationToken) -> Result<Router, Error> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(Error::invalid_config(
            "build the dashboard's router inside a Tokio runtime (its reader is a task): call it from async code",
        ));
    }
    let hub = Hub::new(parts.source.describe(), options.actions.is_some());
    tokio::spawn(Arc::clone(&hub).run(parts.source, stop.clone()));
    if let Some(signal) = options.shutdown {
        tokio::spawn(cancel_when(signal, stop.clone()));
    }
    if let Some(simba) = &parts.session {
        let closed = simba.shared.shutdown.clone();
        tokio::spawn(cancel_when(Box::pin(async move { closed.cancelled_owned().await }), stop.clone()));
    }
    let app = super::http::App {
        hub,
        token: options.actions,
        control: parts.control,
        schedules: parts.schedules,
        stop: stop.clone(),
        prefix: options.prefix,
        hosts: options.hosts,
        session: parts.session,
        #[cfg(feature = "prometheus")]
        metrics: options.metrics,
        _stop_on_drop: stop.drop_guard(),
    };
    Ok(super::http::router(Arc::new(app)))
}

/// Cancels `stop` when `signal` completes (and returns early when `stop` is cancelled first,
/// so that the task does not outlive the router).
async fn cancel_when(signal: Signal, stop: CancellationToken) {
    tokio::select! {
        () = signal => stop.cancel(),
        () = stop.cancelled() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn o2_a_prefix_starts_with_a_slash() {
        assert_eq!(check_prefix("/simba"), Ok("/simba".to_owned()));
        assert_eq!(check_prefix("/simba/"), Ok("/simba".to_owned()));
        assert_eq!(check_prefix("/"), Ok(String::new()));
        assert_eq!(check_prefix("/ops/simba"), Ok("/ops/simba".to_owned()));
        let e = check_prefix("simba").expect_err("no slash");
        assert!(e.contains("start it with `/`") && e.contains("\"/simba\""), "{e}");
        let e = check_prefix("/a b").expect_err("space");
        assert!(e.contains("cannot be in a path prefix"), "{e}");
        assert!(check_prefix("/x?y").is_err() && check_prefix("").is_err());
    }
}
