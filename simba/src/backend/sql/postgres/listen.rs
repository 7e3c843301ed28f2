//! The release listener of the PostgreSQL backend: one task per backend instance that
//! `LISTEN`s on a connection of its own and forwards every notified name, reconnecting with
//! backoff when the connection fails, until the backend's last clone is dropped.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;

use super::RELEASE_CHANNEL;
use crate::backend::sql::server::CONNECT_TIMEOUT;

/// Backoff of the release listener between reconnection attempts.
const LISTEN_BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// The release listener: `LISTEN`s on a connection of its own and forwards every notified
/// name, reconnecting with backoff when the connection fails, until `stop` is cancelled.
pub(super) async fn forward_releases(
    options: PgConnectOptions,
    releases: broadcast::Sender<String>,
    stop: CancellationToken,
    description: Arc<str>,
    ready: oneshot::Sender<()>,
) {
    // A pool of one connection of its own: the listener holds it for ever.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(CONNECT_TIMEOUT)
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy_with(options);
    let mut ready = Some(ready);
    let mut backoff = LISTEN_BACKOFF.0;
    loop {
        let Err(error) = tokio::select! {
            _ = stop.cancelled() => return,
            r = listen(&pool, &releases, &description, &mut ready, &mut backoff) => r,
        };
        tracing::warn!(backend = %description, error = %error, retry_in = ?backoff, "release listener failed; reconnecting");
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(LISTEN_BACKOFF.1);
    }
}

/// One connection's life of the release listener: returns only when it fails.
async fn listen(
    pool: &PgPool,
    releases: &broadcast::Sender<String>,
    description: &str,
    ready: &mut Option<oneshot::Sender<()>>,
    backoff: &mut Duration,
) -> Result<Infallible, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(RELEASE_CHANNEL).await?;
    tracing::debug!(backend = %description, channel = RELEASE_CHANNEL, "listening for releases");
    if let Some(ready) = ready.take() {
        let _ = ready.send(());
    }
    *backoff = LISTEN_BACKOFF.0;
    loop {
        // `recv` reconnects by itself after a lost connection when it can.
        let notification = listener.recv().await?;
        let _ = releases.send(notification.payload().to_owned());
    }
}
