//! The runtime's own HTTP endpoint (feature `prometheus`): `GET /metrics` in the Prometheus
//! text format and the probes `GET /livez`, `/readyz` and `/healthz` (the alias of `/readyz`,
//! rule O1; [`crate::probe`] answers them, as it does for the dashboard's router), served by
//! axum, the dashboard's HTTP stack. Each connection lives at most [`REQUEST_DEADLINE`] from
//! its accept to the last byte of its answer, and at most [`MAX_CONNECTIONS`] are open; one
//! more closes the oldest (rule O8, `crate::listener`).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{MetricsSettings, names};
use crate::listener::{Bounded, Limits};
use crate::probe::{self, Probe};
use crate::{Error, Simba};

/// Buckets of the renewal histogram, in seconds: 1 ms (a local store) to 60 s.
const RENEWAL_BUCKETS: [f64; 14] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0];

/// Buckets of the job histograms (duration, lateness), in seconds: 1 ms to a day, so that a
/// job of hours lands in a bucket of its own instead of the overflow (rule O6).
pub(crate) const JOB_BUCKETS: [f64; 23] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0,
    3600.0, 7200.0, 14400.0, 43200.0, 86400.0,
];

/// How long one connection of the endpoint may live, from its accept to the last byte of
/// its answer (rule O8): a scrape takes milliseconds; Prometheus's own scrape timeout is
/// 10 s by default.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// How many connections the endpoint keeps open at once (rule O8); one more closes the
/// oldest. Its descriptors are the process's, which the backend's connections need too.
pub const MAX_CONNECTIONS: usize = 64;

static RECORDER: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();

/// The exporter's settings for Simba's recorder: the buckets of Simba's own histograms by
/// name (the application's keep the exporter's defaults, rule O6) and the idle timeout of
/// counters and histograms (rule O5).
pub(crate) fn builder(settings: &MetricsSettings) -> Result<PrometheusBuilder, BuildError> {
    let job = |name: &str| Matcher::Full(name.to_owned());
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(job(names::RENEWAL_DURATION), &RENEWAL_BUCKETS)?
        .set_buckets_for_metric(job(names::JOB_DURATION), &JOB_BUCKETS)?
        .set_buckets_for_metric(job(names::JOB_LATENESS), &JOB_BUCKETS)?;
    // Gauges state a current value (the session, partitions held): they stay.
    Ok(builder.idle_timeout(MetricKindMask::COUNTER | MetricKindMask::HISTOGRAM, settings.idle_timeout))
}

/// [`recorder_with`] the default settings (a dashboard asked to serve `/metrics`).
pub(crate) fn recorder() -> Result<PrometheusHandle, Error> {
    recorder_with(&MetricsSettings::default())
}

/// Installs the Prometheus recorder as the process's `metrics` recorder, once, with
/// `settings`; later calls reuse it (and its settings). The runtime calls it before it opens
/// its session, so that no early value is lost (a recorder installed later misses what was
/// recorded before).
pub(crate) fn recorder_with(settings: &MetricsSettings) -> Result<PrometheusHandle, Error> {
    let r = RECORDER.get_or_init(|| {
        let builder = builder(settings).map_err(|e| e.to_string())?;
        builder.install_recorder().map_err(|e| e.to_string())
    });
    r.clone().map_err(|e| {
        crate::ConfigError::at_key(
            "metrics.listen",
            format!(
                "cannot install the Prometheus recorder: {e} (another metrics recorder is installed? \
                 then remove [metrics] listen and export with that one)"
            ),
        )
        .into()
    })
}

/// A running `/metrics` + probes endpoint; stops when [`stop`](MetricsServer::stop) is
/// called or it is dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl MetricsServer {
    /// The address it listens on (the real port when `listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops listening.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = (&mut { self }.task).await;
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Installs the Prometheus recorder (once per process, default settings when not installed
/// yet) and serves `/metrics`, `/livez`, `/readyz` and `/healthz` for `simba`'s session on
/// `addr`.
pub async fn serve(addr: SocketAddr, simba: &Simba) -> Result<MetricsServer, Error> {
    let handle = recorder()?;
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        Error::from(crate::ConfigError::at_key(
            "metrics.listen",
            format!("cannot listen on {addr}: {e} (is the port in use?)"),
        ))
    })?;
    let addr = listener.local_addr().unwrap_or(addr);
    let stop = CancellationToken::new();
    let bounded = Bounded::new(listener, Limits::whole_exchange(REQUEST_DEADLINE, MAX_CONNECTIONS), stop.clone());
    let app = router(Arc::new(Endpoint { handle, simba: simba.clone() }));
    let served = axum::serve(bounded, app).with_graceful_shutdown(stop.clone().cancelled_owned());
    let task = tokio::spawn(async move {
        if let Err(e) = served.await {
            tracing::warn!(error = %e, "metrics endpoint stopped");
        }
    });
    tracing::info!(%addr, "serving /metrics, /livez, /readyz and /healthz");
    Ok(MetricsServer { addr, stop, task })
}

/// What the handlers share.
struct Endpoint {
    handle: PrometheusHandle,
    simba: Simba,
}

type Shared = State<Arc<Endpoint>>;

fn router(endpoint: Arc<Endpoint>) -> Router {
    Router::new().route("/metrics", get(metrics)).fallback(other).with_state(endpoint)
}

async fn metrics(State(ep): Shared) -> Response {
    ep.handle.run_upkeep();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], ep.handle.render()).into_response()
}

fn answer(ep: &Endpoint, which: Probe) -> Response {
    let answer = probe::answer(which, ep.simba.session_status());
    let code = if answer.ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let mut res = (code, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], answer.body).into_response();
    res.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

/// A probe ([`Probe::at`]), a path that is not served (404 naming the paths), or a method
/// other than GET (405).
async fn other(State(ep): Shared, method: Method, uri: Uri) -> Response {
    if method != Method::GET {
        return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "GET")], "only GET\n").into_response();
    }
    if let Some(which) = Probe::at(uri.path()) {
        return answer(&ep, which);
    }
    let body = probe::not_found(uri.path(), "; metrics: /metrics");
    (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}
