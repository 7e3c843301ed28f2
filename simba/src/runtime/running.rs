//! The started runtime: its handle ([`RunningRuntime`]), the servers beside the jobs, the
//! loop that follows the jobs store's control, and the graceful stop.

use tokio_util::sync::CancellationToken;

use super::config::RuntimeConfig;
use super::jobs::JobsHandle;
use super::plan::Plan;
use super::registry::RegistryWatch;
use super::signals::ShutdownFuture;
use crate::{Error, Simba};

/// A started runtime.
pub struct RunningRuntime {
    pub(super) simba: Simba,
    pub(super) jobs: JobsHandle,
    pub(super) registry: RegistryWatch,
    pub(super) control_stop: CancellationToken,
    pub(super) shutdown: Option<ShutdownFuture>,
    pub(super) servers: Servers,
    /// The names of the handlers this node has (schedules stored as data).
    pub(super) handler_names: Vec<String>,
}

impl RunningRuntime {
    /// The client the runtime uses (its one session).
    pub fn simba(&self) -> &Simba {
        &self.simba
    }

    /// Where `/metrics` and the probes (`/livez`, `/readyz`, `/healthz`) are served, when `[metrics] listen` is set (feature
    /// `prometheus`).
    #[cfg(feature = "prometheus")]
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.servers.metrics.as_ref().map(crate::metrics::MetricsServer::local_addr)
    }

    /// This node's web dashboard as an axum router to nest in the service's own app (feature
    /// `dashboard`): its session (labelled, and reported by `/readyz`), the jobs it runs, its
    /// backend. Finish it with [`router`](crate::dashboard::DashboardBuilder::router); see
    /// [`Dashboard`](crate::dashboard::Dashboard).
    #[cfg(feature = "dashboard")]
    pub fn dashboard(&self) -> crate::dashboard::DashboardBuilder {
        let url = self.servers.url.clone();
        crate::dashboard::Dashboard::builder().node(self.simba.clone(), url, self.jobs.settings())
    }

    /// Where the dashboard is served, when `[dashboard] listen` is set (feature `dashboard`).
    #[cfg(feature = "dashboard")]
    pub fn dashboard_addr(&self) -> Option<std::net::SocketAddr> {
        self.servers.dashboard.as_ref().map(crate::dashboard::DashboardServer::local_addr)
    }

    /// The operators' API of schedules stored as data (ADR 0020) on this node's store, in its
    /// namespace, with its `[schedules] partitions`, refusing a create or an edit that names
    /// a handler this node does not have (rule A3: the node knows its handlers).
    pub fn schedules(&self) -> Result<crate::admin::Schedules, crate::admin::ScheduleError> {
        let api = crate::admin::Schedules::for_client(&self.simba)?;
        Ok(api
            .with_partitions(self.jobs.config().schedule_partitions)?
            .with_handlers(self.handler_names.iter().cloned())
            .with_wall_clock(self.jobs.clock()))
    }

    /// The handle that adds and removes jobs on this node while it runs.
    pub fn jobs(&self) -> JobsHandle {
        self.jobs.clone()
    }

    /// The last comparison this node made of the live nodes' published job registries
    /// (made after each publish and every [`REGISTRY_CHECK_PERIOD`](super::REGISTRY_CHECK_PERIOD)); `None`
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
        self.servers.stop().await;
    }
}

impl std::fmt::Debug for RunningRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningRuntime").field("simba", &self.simba).finish_non_exhaustive()
    }
}

/// The servers the runtime runs beside its jobs, each when the configuration asks for it:
/// `/metrics` (feature `prometheus`) and the dashboard (feature `dashboard`).
pub(super) struct Servers {
    #[cfg(feature = "prometheus")]
    metrics: Option<crate::metrics::MetricsServer>,
    #[cfg(feature = "dashboard")]
    dashboard: Option<crate::dashboard::DashboardServer>,
    /// The backend's URL, for a dashboard a service builds from the runtime.
    #[cfg(feature = "dashboard")]
    url: crate::backend::BackendUrl,
}

impl Servers {
    /// Starts what `config` asks for; the dashboard shows the jobs of `plan` (as the
    /// configuration overrides them). On an error, what did start is dropped (it stops).
    #[cfg_attr(not(all(feature = "prometheus", feature = "dashboard")), allow(unused_variables))]
    pub(super) async fn start(
        simba: &Simba,
        config: &RuntimeConfig,
        url: &crate::backend::BackendUrl,
        plan: &Plan,
    ) -> Result<Self, Error> {
        #[cfg(feature = "prometheus")]
        let metrics = match config.metrics_listen {
            Some(addr) => Some(crate::metrics::serve(addr, simba).await?),
            None => None,
        };
        #[cfg(feature = "dashboard")]
        let dashboard = match &config.dashboard {
            Some(d) => {
                let jobs = plan.settings();
                Some(crate::dashboard::start_for_runtime(simba, d, url, &jobs).await?)
            }
            None => None,
        };
        Ok(Servers {
            #[cfg(feature = "prometheus")]
            metrics,
            #[cfg(feature = "dashboard")]
            dashboard,
            #[cfg(feature = "dashboard")]
            url: url.clone(),
        })
    }

    /// Stops them, after the session closed.
    async fn stop(self) {
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

/// How long a graceful stop waits for the jobs' last records to reach the store.
const RECORDS_AT_STOP: std::time::Duration = std::time::Duration::from_secs(5);

/// Starts the loop that follows the jobs store's control version (pause, resume, run now)
/// once per renewal interval; returns its stop token and the version's receiver (none without
/// a store).
pub(super) fn watch_control(
    simba: &Simba,
    store: Option<&crate::job_store::SharedJobStore>,
) -> (CancellationToken, Option<tokio::sync::watch::Receiver<u64>>) {
    let stop = CancellationToken::new();
    let control = store.map(|s| {
        let (tx, rx) = tokio::sync::watch::channel(0u64);
        let every = simba.config().renew_interval();
        tokio::spawn(control_loop(s.clone(), every, tx, stop.clone()));
        rx
    });
    (stop, control)
}

/// Watches the jobs store's control (pause, resume, run now) for the whole node: one
/// `control_version` call per renewal interval, and at once on a broadcast; every job's
/// scheduler hears a move of `tx`.
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
