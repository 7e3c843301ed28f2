//! `simba dashboard`: the runtime's web dashboard, served by the tool for an operator who
//! runs no node (ADR 0010).

use std::io::Write;
use std::net::SocketAddr;

use simba::RuntimeConfig;
use simba::backend::{Backend, BackendUrl};
use simba::dashboard::DashboardConfig;

#[cfg(feature = "dashboard")]
use crate::output::EXIT_OK;
use crate::output::Failure;

/// The dashboard's settings: the configuration's `[dashboard]` table (actions and token),
/// with `--listen` in place of its address.
pub(super) fn settings(config: &RuntimeConfig, listen: Option<SocketAddr>) -> Result<DashboardConfig, Failure> {
    match (listen, &config.dashboard) {
        (Some(addr), Some(d)) => {
            let mut d = d.clone();
            d.listen = addr;
            Ok(d)
        }
        (Some(addr), None) => Ok(DashboardConfig::new(addr)),
        (None, Some(d)) => Ok(d.clone()),
        (None, None) => Err(Failure::usage(format!(
            "dashboard: say where to listen: --listen 127.0.0.1:9465 (or [dashboard] listen in {})",
            config.source
        ))),
    }
}

/// Serves until Ctrl-C. `raw_url` is the configured URL (the dashboard redacts it itself),
/// `url` the same parsed, for this tool's own line.
#[cfg(feature = "dashboard")]
pub(super) async fn serve(
    backend: impl Backend,
    raw_url: &str,
    url: &BackendUrl,
    settings: &DashboardConfig,
    out: &mut (dyn Write + Send),
) -> Result<u8, Failure> {
    // Listening failed (the address is taken, or not this machine's): refused, not a usage error.
    let server =
        simba::dashboard::serve(backend, raw_url, settings).await.map_err(|e| Failure::refused(e.to_string()))?;
    let mode = if settings.actions.is_some() { "actions on" } else { "read-only" };
    let _ =
        writeln!(out, "serving the dashboard of {} on http://{}/ ({mode}); Ctrl-C stops it", url, server.local_addr());
    let _ = out.flush();
    let _ = tokio::signal::ctrl_c().await;
    server.stop().await;
    Ok(EXIT_OK)
}

/// A build without the `dashboard` feature says how to get one.
#[cfg(not(feature = "dashboard"))]
pub(super) async fn serve(
    _: impl Backend,
    _: &str,
    _: &BackendUrl,
    _: &DashboardConfig,
    _: &mut (dyn Write + Send),
) -> Result<u8, Failure> {
    Err(Failure::usage(
        "this build of simba has no dashboard: install simba-sched-cli with its default features \
         (or `--features dashboard`)",
    ))
}
