//! `simba dashboard`: the runtime's web dashboard, served by the tool for an operator who
//! runs no node (ADR 0010).

use std::io::Write;
use std::net::SocketAddr;

use crate::RuntimeConfig;
use crate::backend::{BackendUrl, SharedBackend};
use crate::dashboard::DashboardConfig;

/// The dashboard's settings: the configuration's `[dashboard]` table (actions and token),
/// with `--listen` in place of its address.
pub(super) fn settings(config: &RuntimeConfig, listen: Option<SocketAddr>) -> Result<DashboardConfig, String> {
    match (listen, &config.dashboard) {
        (Some(addr), Some(d)) => {
            let mut d = d.clone();
            d.listen = addr;
            Ok(d)
        }
        (Some(addr), None) => Ok(DashboardConfig::new(addr)),
        (None, Some(d)) => Ok(d.clone()),
        (None, None) => Err(format!(
            "dashboard: say where to listen: --listen 127.0.0.1:9465 (or [dashboard] listen in {})",
            config.source
        )),
    }
}

/// Serves until Ctrl-C.
pub(super) async fn serve(
    backend: SharedBackend,
    url: &BackendUrl,
    settings: &DashboardConfig,
    out: &mut (dyn Write + Send),
) -> Result<u8, String> {
    let server = crate::dashboard::serve_backend(backend, url, settings).await.map_err(|e| e.to_string())?;
    let mode = if settings.actions.is_some() { "actions on" } else { "read-only" };
    let _ =
        writeln!(out, "serving the dashboard of {} on http://{}/ ({mode}); Ctrl-C stops it", url, server.local_addr());
    let _ = out.flush();
    let _ = tokio::signal::ctrl_c().await;
    server.stop().await;
    Ok(super::EXIT_OK)
}
