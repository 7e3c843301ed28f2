//! Two waits the slot loops share: until an optional instant, and until an optional watch
//! moves. Each never completes when there is nothing to wait for, so it can sit in a
//! `tokio::select!` beside the branches that can.

use tokio::sync::watch;
use tokio::time::Instant;

/// Sleeps until `at` (the monotonic clock), or forever without one.
pub(super) async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Waits until `rx` moves; forever without one, or once its sender is gone.
pub(super) async fn moved<T>(rx: Option<&mut watch::Receiver<T>>) {
    if let Some(rx) = rx
        && rx.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}
