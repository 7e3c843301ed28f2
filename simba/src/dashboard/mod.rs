//! The web dashboard (feature `dashboard`, ADR 0010): sessions, leases with their token
//! history, and each group's partition map, live in a browser.
//!
//! Served two ways by one implementation: by the runtime when `simba.toml` has
//! `[dashboard] listen = "127.0.0.1:9465"`, and by `simba dashboard --listen 127.0.0.1:9465`
//! (the `simba-sched-cli` tool) for an operator who runs no node; [`serve`] does the same from code.
//! Nothing listens unless asked, and only on an explicit IP address. Pages are rendered on the
//! server with every value HTML-escaped; a small embedded script patches them from a
//! server-sent event stream, so a change shows within a second. The assets are compiled into
//! the binary: no CDN, no request leaves the machine.
//!
//! The jobs pages (`/jobs`, `/jobs/{job}`) show each job's schedule, next fire, pause state,
//! holder and last outcomes from the backend's jobs store ([`crate::job_store`]). With
//! `[dashboard] actions = true`, `POST /api/jobs/{job}/{pause,resume,trigger}` requests
//! carrying `Authorization: Bearer TOKEN` (the token of `token_file`) pause, resume or run a
//! job through [`crate::admin::Jobs`]; a backend without a jobs store answers them 501.
//!
//! The schedules pages (`/schedules`, `/schedules/{id}`) list the schedules stored as data
//! ([`crate::schedule_store`]) a page at a time, with a search by id prefix and handler, and
//! show one schedule's definition, next fires, history and audit trail; with actions on,
//! `POST /api/schedules/{id}/{pause,resume,trigger}` pause (with a note), resume and run it
//! now through [`crate::admin::Schedules`], recorded in the audit trail as `dashboard`.
//!
//! Inside a service (rules O1 to O3), the same dashboard is an axum router to nest under any
//! prefix on the service's own port:
//! [`RunningRuntime::dashboard`](crate::runtime::RunningRuntime::dashboard) or
//! `Dashboard::builder()`, then `.router()`. Its pages link relative to a `<base>` built from
//! the prefix; `allowed_hosts` lets an ingress's host name through; `/livez`, `/readyz` and
//! `/healthz` are its probes.

mod config;

pub use config::{ActionToken, DashboardConfig, MIN_TOKEN_LEN, parse_listen};
pub(crate) use config::{DashboardTable, resolve};
#[cfg(feature = "dashboard")]
pub use router::{Dashboard, DashboardBuilder};

#[cfg(feature = "dashboard")]
mod auth;
#[cfg(feature = "dashboard")]
mod history;
#[cfg(feature = "dashboard")]
mod http;
#[cfg(feature = "dashboard")]
mod hub;
#[cfg(feature = "dashboard")]
pub(crate) mod jobs;
#[cfg(feature = "dashboard")]
mod model;
#[cfg(feature = "dashboard")]
mod pages;
#[cfg(feature = "dashboard")]
mod router;
#[cfg(feature = "dashboard")]
mod schedule_pages;
#[cfg(all(test, feature = "dashboard"))]
mod schedule_tests;
#[cfg(feature = "dashboard")]
mod schedules;
#[cfg(feature = "dashboard")]
mod source;
#[cfg(all(test, feature = "dashboard"))]
mod tests;
#[cfg(feature = "dashboard")]
mod text;

#[cfg(feature = "dashboard")]
pub(crate) use server::start_for_runtime;
#[cfg(feature = "dashboard")]
pub use server::{DashboardServer, HEAD_DEADLINE, MAX_CONNECTIONS, serve};

#[cfg(feature = "dashboard")]
mod server {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::task::JoinHandle;
    use tokio_util::sync::CancellationToken;

    use super::DashboardConfig;
    #[cfg(test)]
    use super::auth::Control;
    use super::router::{Options, Origin, Parts, assemble};
    #[cfg(test)]
    use super::source::Source;
    use crate::backend::{Backend, BackendUrl, SharedBackend};
    use crate::job::JobSettings;
    use crate::listener::{Bounded, Limits};
    use crate::{Error, Simba};

    /// How long [`DashboardServer::stop`] waits for open connections.
    const STOP_GRACE: Duration = Duration::from_secs(2);

    /// How long a connection to the dashboard's own listener may take, from its accept to the
    /// first byte of its answer (rule O12): a browser sends its request head at once; a client
    /// that dribbles it is closed. Once answered, a page's event stream stays open.
    pub const HEAD_DEADLINE: Duration = Duration::from_secs(10);

    /// At most this many connections to the dashboard's own listener are open; one more closes
    /// the oldest (rule O12). A page holds one event stream and a request or two.
    pub const MAX_CONNECTIONS: usize = 64;

    /// A running dashboard; stops when [`stop`](DashboardServer::stop) is called or it is
    /// dropped.
    #[derive(Debug)]
    pub struct DashboardServer {
        addr: SocketAddr,
        stop: CancellationToken,
        task: JoinHandle<()>,
    }

    impl DashboardServer {
        /// The address it listens on (the real port when `listen` asked for port 0).
        pub fn local_addr(&self) -> SocketAddr {
            self.addr
        }

        /// Stops listening, ends the event streams and waits (briefly) for open requests.
        pub async fn stop(self) {
            self.stop.cancel();
            let mut me = self;
            if tokio::time::timeout(STOP_GRACE, &mut me.task).await.is_err() {
                me.task.abort();
            }
        }
    }

    impl Drop for DashboardServer {
        fn drop(&mut self) {
            self.stop.cancel();
        }
    }

    /// Serves the dashboard of `backend` as configured. `url` is what the pages name as the
    /// data's origin: it is shown redacted (`postgres://user:***@host/db`), and its secrets are
    /// masked in every error text.
    pub async fn serve<B: Backend>(backend: B, url: &str, config: &DashboardConfig) -> Result<DashboardServer, Error> {
        serve_backend(Arc::new(backend), &BackendUrl::new(url), config).await
    }

    pub(crate) async fn serve_backend(
        backend: SharedBackend,
        url: &BackendUrl,
        config: &DashboardConfig,
    ) -> Result<DashboardServer, Error> {
        let parts = Parts::of(Origin::Backend { backend, url: url.clone() }, config.actions.is_some());
        listen(parts, config).await
    }

    /// The runtime's dashboard (`[dashboard]` of its configuration): its own session is
    /// labelled, and the jobs it runs show their schedules. `jobs` is the runtime's plan, as
    /// the configuration overrides it (disabled jobs left out); `url` is its backend's.
    pub(crate) async fn start_for_runtime(
        simba: &Simba,
        config: &DashboardConfig,
        url: &BackendUrl,
        jobs: &[JobSettings],
    ) -> Result<DashboardServer, Error> {
        let origin = Origin::Client { simba: simba.clone(), url: url.clone(), jobs: jobs.to_vec() };
        listen(Parts::of(origin, config.actions.is_some()), config).await
    }

    /// The stand-alone listener, for tests that bring their own source.
    #[cfg(test)]
    pub(crate) async fn start(
        source: Arc<dyn Source>,
        control: Option<Arc<dyn Control>>,
        config: &DashboardConfig,
    ) -> Result<DashboardServer, Error> {
        let schedules = Arc::new(super::schedules::ScheduleOps::none());
        listen(Parts { source, control, schedules, session: None }, config).await
    }

    /// Binds `config.listen` and serves the router of `parts` there (the router a service
    /// mounts, with the same guards).
    async fn listen(parts: Parts, config: &DashboardConfig) -> Result<DashboardServer, Error> {
        let addr = config.listen;
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            Error::from(crate::ConfigError::at_key(
                "dashboard.listen",
                format!("cannot listen on {addr}: {e} (is the port in use?)"),
            ))
        })?;
        let addr = listener.local_addr().unwrap_or(addr);
        let stop = CancellationToken::new();
        let router = assemble(parts, Options::of_config(config), stop.clone())?;
        let shutdown = stop.clone();
        let task = tokio::spawn(async move {
            let bounded =
                Bounded::new(listener, Limits::request_head(HEAD_DEADLINE, MAX_CONNECTIONS), shutdown.clone());
            let served = axum::serve(bounded, router).with_graceful_shutdown(shutdown.cancelled_owned()).await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "dashboard: the server stopped");
            }
        });
        tracing::info!(%addr, actions = config.actions.is_some(), "serving the dashboard");
        Ok(DashboardServer { addr, stop, task })
    }
}
