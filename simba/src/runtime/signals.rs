//! When the runtime stops: SIGINT or SIGTERM, or the builder's own signal.

use std::future::Future;
use std::pin::Pin;

/// The builder's [`shutdown_on`](super::RuntimeBuilder::shutdown_on) signal.
pub(super) type ShutdownFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Waits for `signal` when there is one, else for SIGINT or SIGTERM.
pub(super) async fn wait_for_shutdown(signal: Option<ShutdownFuture>) {
    match signal {
        Some(signal) => signal.await,
        None => wait_for_signal().await,
    }
}

/// SIGINT (Ctrl-C) or, on Unix, SIGTERM.
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
