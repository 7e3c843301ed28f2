//! The runtime's own HTTP endpoint (feature `prometheus`): `GET /metrics` in the Prometheus
//! text format and the probes `GET /livez`, `/readyz` and `/healthz` (the alias of `/readyz`,
//! rule O1; [`crate::probe`] answers them, as it does for the dashboard's router), on one
//! plain TCP listener. A minimal HTTP/1.1 server (one
//! request per connection) keeps hyper out of the dependency tree.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::probe::{self, Probe};
use crate::{Error, Simba};

/// Histogram buckets, in seconds: from 1 ms (a local renewal) to 60 s (a long job).
const BUCKETS: [f64; 14] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0];

/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

static RECORDER: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();

/// Installs the Prometheus recorder as the process's `metrics` recorder, once; later calls
/// reuse it. The runtime calls it before it opens its session, so that no early value is
/// lost (a recorder installed later misses what was recorded before).
pub(crate) fn recorder() -> Result<PrometheusHandle, Error> {
    let r = RECORDER.get_or_init(|| {
        let builder = PrometheusBuilder::new().set_buckets(&BUCKETS).map_err(|e| e.to_string())?;
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

/// Installs the Prometheus recorder (once per process) and serves `/metrics`, `/livez`,
/// `/readyz` and `/healthz` for `simba`'s session on `addr`.
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
    let client = simba.clone();
    let token = stop.clone();
    let task = tokio::spawn(async move {
        loop {
            let (conn, _) = tokio::select! {
                _ = token.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!(error = %e, "metrics endpoint: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let (handle, client) = (handle.clone(), client.clone());
            tokio::spawn(async move {
                if let Err(e) = respond(conn, &handle, &client).await {
                    tracing::debug!(error = %e, "metrics endpoint: request failed");
                }
            });
        }
    });
    tracing::info!(%addr, "serving /metrics, /livez, /readyz and /healthz");
    Ok(MetricsServer { addr, stop, task })
}

async fn respond(mut conn: TcpStream, handle: &PrometheusHandle, simba: &Simba) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
        let n = match tokio::time::timeout(READ_TIMEOUT, conn.read(&mut chunk)).await {
            Ok(r) => r?,
            Err(_) => return Ok(()),
        };
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let mut parts = head.lines().next().unwrap_or_default().split_whitespace();
    let (method, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let path = path.split('?').next().unwrap_or_default();
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => {
            handle.run_upkeep();
            ("200 OK", "text/plain; version=0.0.4", handle.render())
        }
        ("GET", path) => match Probe::at(path) {
            Some(probe) => {
                let answer = probe::answer(probe, simba.session_status());
                let code = if answer.ok { "200 OK" } else { "503 Service Unavailable" };
                (code, "text/plain; charset=utf-8", answer.body)
            }
            None => ("404 Not Found", "text/plain; charset=utf-8", probe::not_found(path, "; metrics: /metrics")),
        },
        _ => ("405 Method Not Allowed", "text/plain", "only GET\n".to_owned()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(response.as_bytes()).await?;
    conn.shutdown().await
}
